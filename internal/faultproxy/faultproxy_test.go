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
	if st.objs["/log/0001.json"] != "commit" {
		t.Fatalf("dropped response: server did not apply the PUT: %v", st.objs)
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
	if _, ok := st.objs["/big"]; ok {
		t.Fatal("reset mid-body: the upload reached the server")
	}
	// delay: forwarded after the delay
	t0 := time.Now()
	resp, err := put("/slow", "s")
	if err != nil || resp.StatusCode != 200 || st.objs["/slow"] != "s" {
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
