package faultproxy

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// a tiny object store: PUT stores, GET returns
type store struct {
	mu   sync.Mutex
	objs map[string]string
	puts int
}

func (s *store) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.Method {
	case http.MethodPut:
		b, _ := io.ReadAll(r.Body)
		s.objs[r.URL.Path] = string(b)
		s.puts++
	case http.MethodGet:
		v, ok := s.objs[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = io.WriteString(w, v)
	}
}

// get reads an object under the lock. The test's reads follow the server's
// writes only through the network (the proxy answers after the server has),
// which the race detector does not see as synchronisation: reading the map
// directly was a data race it reported in one CI run.
func (s *store) get(path string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.objs[path]
	return v, ok
}

func TestProxyFaults(t *testing.T) {
	st := &store{objs: map[string]string{}}
	backend := httptest.NewServer(st)
	defer backend.Close()
	p, err := New(backend.URL,
		Rule{Method: http.MethodPut, Path: regexp.MustCompile(`^/log/`), Action: DropResponse, Times: 1},
		Rule{Method: http.MethodGet, Action: Status, Status: 503, Skip: 1, Times: 2},
		Rule{Method: http.MethodPut, Path: regexp.MustCompile(`^/big`), Action: ResetMidBody, AfterBytes: 1000, Times: 1},
		Rule{Method: http.MethodPut, Path: regexp.MustCompile(`^/slow`), Action: Delay, Delay: 50 * time.Millisecond, Times: 1},
	)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := &http.Client{Timeout: 5 * time.Second}
	put := func(path, body string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPut, p.URL+path, strings.NewReader(body))
		return c.Do(req)
	}

	// dropped response: the client sees an error, the server has the object
	if _, err := put("/log/0001.json", "commit"); err == nil {
		t.Fatal("dropped response: want a client error")
	}
	if v, _ := st.get("/log/0001.json"); v != "commit" {
		t.Fatalf("dropped response: server did not apply the PUT: %q", v)
	}
	// GETs: first passes, next two 503, then pass
	var codes []int
	for range 4 {
		resp, err := c.Get(p.URL + "/log/0001.json")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
	}
	if want := []int{200, 503, 503, 200}; !equal(codes, want) {
		t.Fatalf("GET codes %v, want %v", codes, want)
	}
	// reset mid-upload: nothing stored
	if _, err := put("/big", string(bytes.Repeat([]byte("x"), 1<<20))); err == nil {
		t.Fatal("reset mid-body: want a client error")
	}
	if _, ok := st.get("/big"); ok {
		t.Fatal("reset mid-body: the upload reached the server")
	}
	// delay: forwarded after the delay
	t0 := time.Now()
	resp, err := put("/slow", "s")
	if v, _ := st.get("/slow"); err != nil || resp.StatusCode != 200 || v != "s" {
		t.Fatalf("delayed PUT: %v %v", resp, err)
	}
	if d := time.Since(t0); d < 50*time.Millisecond {
		t.Fatalf("delayed PUT took %s, want ≥ 50ms", d)
	}
	total, by := p.Fired()
	if total != 5 || by[DropResponse] != 1 || by[Status] != 2 || by[ResetMidBody] != 1 || by[Delay] != 1 {
		t.Fatalf("fired %d %v", total, by)
	}
	// rules exhausted: everything passes
	if resp, err := put("/log/0002.json", "c2"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("after the rules: %v %v", resp, err)
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestObject(t *testing.T) {
	p := &Proxy{sessions: map[string]string{"sess-1": "bkt/lake/t/part-1.parquet"}}
	for _, c := range []struct{ method, url, want string }{
		{"PUT", "/lake/t/_delta_log/00000000000000000002.json?x-id=PutObject", "lake/t/_delta_log/00000000000000000002.json"}, // S3 path style
		{"PUT", "/devstoreaccount1/lake/t/part-1.parquet?comp=block&blockid=AA", "devstoreaccount1/lake/t/part-1.parquet"},    // Azurite
		{"POST", "/upload/storage/v1/b/bkt/o?alt=json&name=lake%2Ft%2F_delta_log%2F00000000000000000002.json&uploadType=multipart", "bkt/lake/t/_delta_log/00000000000000000002.json"},
		{"PUT", "/upload/storage/v1/b/bkt/o?uploadType=resumable&upload_id=sess-1", "bkt/lake/t/part-1.parquet"},
		{"PUT", "/upload/storage/v1/b/bkt/o?uploadType=resumable&upload_id=unknown", ""},
		{"GET", "/download/storage/v1/b/bkt/o/lake%2Ft%2F_delta_log%2F00000000000000000001.json?alt=media", "bkt/lake/t/_delta_log/00000000000000000001.json"},
		{"GET", "/storage/v1/b/bkt/o/lake%2Ft%2Fx?alt=json", "bkt/lake/t/x"},
		{"GET", "/storage/v1/b/bkt/o?prefix=lake%2Ft%2F_delta_log%2F", ""}, // a listing
	} {
		r := httptest.NewRequest(c.method, c.url, nil)
		if got := p.Object(r); got != c.want {
			t.Errorf("%s %s: object %q, want %q", c.method, c.url, got, c.want)
		}
	}
}

// A fake GCS resumable upload: the POST that opens the session names the
// object; the PUTs that carry the data name only the session, and a rule
// on the object still matches them.
func TestGCSResumableSession(t *testing.T) {
	var mu sync.Mutex
	got := map[string]int{}
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case r.Method == http.MethodPost && r.URL.Query().Get("uploadType") == "resumable":
			w.Header().Set("Location", "http://"+r.Host+"/upload/storage/v1/b/bkt/o?uploadType=resumable&upload_id=s-"+r.URL.Query().Get("name"))
		case r.Method == http.MethodPut:
			got[r.URL.Query().Get("upload_id")]++
		}
	}))
	defer backend.Close()
	p, err := New(backend.URL, Rule{Method: http.MethodPut, Object: regexp.MustCompile(`\.parquet$`), Action: Status, Status: 503, Times: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	do := func(method, u string) int {
		t.Helper()
		req, _ := http.NewRequest(method, p.URL+u, strings.NewReader("chunk"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, name := range []string{"lake%2F00.json", "lake%2Fpart-1.parquet"} {
		if code := do(http.MethodPost, "/upload/storage/v1/b/bkt/o?uploadType=resumable&name="+name); code != 200 {
			t.Fatalf("open session %s: HTTP %d", name, code)
		}
	}
	codes := []int{
		do(http.MethodPut, "/upload/storage/v1/b/bkt/o?uploadType=resumable&upload_id=s-lake/00.json"),
		do(http.MethodPut, "/upload/storage/v1/b/bkt/o?uploadType=resumable&upload_id=s-lake/part-1.parquet"),
		do(http.MethodPut, "/upload/storage/v1/b/bkt/o?uploadType=resumable&upload_id=s-lake/part-1.parquet"),
	}
	if want := []int{200, 503, 200}; !equal(codes, want) {
		t.Fatalf("chunk PUTs answered %v, want %v (the 503 on the parquet session only)", codes, want)
	}
	if got["s-lake/00.json"] != 1 || got["s-lake/part-1.parquet"] != 1 {
		t.Fatalf("backend received %v", got)
	}
}
