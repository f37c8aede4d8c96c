package status

// The page and its JSON, served on the sink's HTTP listener.

import (
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
)

//go:embed assets
var assets embed.FS

// Handler serves the status page at "/" (exactly), its assets under
// /assets/ and the JSON at /status.json. Read-only: every other method is
// refused.
func (r *Recorder) Handler() http.Handler {
	sub, _ := fs.Sub(assets, "assets")
	files := http.FileServerFS(sub)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, req, sub, "index.html")
	})
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", files))
	mux.HandleFunc("GET /status.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(r.Snapshot())
	})
	return mux
}
