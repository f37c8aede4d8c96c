// Package faultproxy is an HTTP reverse proxy whose faults a test scripts:
// between cdc-sink and an object store (or any HTTP service) it can drop the
// response of a request the server did apply (an ambiguous outcome), answer
// with an error status instead of forwarding (503 bursts), reset the
// connection part-way through an upload, or add latency. Rules match by
// method, URL and the object a request addresses, and fire a bounded number
// of times, so tests stay deterministic.
//
// The object is what lets one rule serve every store: S3 and Azure name it
// in the path, GCS's JSON API in the name= query parameter of an upload
// (POST /upload/storage/v1/b/BUCKET/o?uploadType=multipart&name=KEY) and,
// for the later requests of a resumable upload, only through the session
// (upload_id=) the first request opened; the proxy remembers those.
package faultproxy

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Action is what a matching rule does to a request.
type Action int

const (
	// DropResponse forwards the request (the server applies it) and then
	// closes the client connection without a response.
	DropResponse Action = iota + 1
	// Status answers with Rule.Status without forwarding.
	Status
	// ResetMidBody reads Rule.AfterBytes of the request body, then closes the
	// connection (nothing is forwarded).
	ResetMidBody
	// Delay waits Rule.Delay, then forwards.
	Delay
)

// Rule is one scripted fault.
type Rule struct {
	Method     string         // "" matches every method
	Path       *regexp.Regexp // nil matches every path (URL path and raw query)
	Object     *regexp.Regexp // nil matches every request; else the object addressed (see Object)
	Action     Action
	Status     int           // Status
	AfterBytes int64         // ResetMidBody
	Delay      time.Duration // Delay
	Skip       int           // let this many matching requests through first
	Times      int           // fire this many times (0: every time)

	seen, fired int
}

// Proxy forwards to one target and applies the rules (first match wins).
type Proxy struct {
	URL string // http://127.0.0.1:port

	srv    *httptest.Server
	rp     *httputil.ReverseProxy
	mu     sync.Mutex
	rules  []*Rule
	fired  int
	counts map[Action]int
	// GCS resumable upload sessions: upload_id → bucket/object
	sessions map[string]string
}

// New starts a proxy on a loopback port in front of target (http://host:port).
func New(target string, rules ...Rule) (*Proxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	p := &Proxy{rp: httputil.NewSingleHostReverseProxy(u), counts: map[Action]int{}, sessions: map[string]string{}}
	p.rp.ModifyResponse = p.remember
	for _, r := range rules {
		p.Add(r)
	}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	p.URL = p.srv.URL
	return p, nil
}

// Add appends a rule.
func (p *Proxy) Add(r Rule) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r.seen, r.fired = 0, 0
	p.rules = append(p.rules, &r)
}

// Reset removes every rule.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = nil
}

// Fired is the number of faults applied so far (per action).
func (p *Proxy) Fired() (total int, byAction map[Action]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := make(map[Action]int, len(p.counts))
	for k, v := range p.counts {
		m[k] = v
	}
	return p.fired, m
}

// Close stops the proxy.
func (p *Proxy) Close() { p.srv.Close() }

// gcsPrefixes are the GCS JSON API's paths that name an object after /o/.
var gcsPrefixes = []string{"/upload/storage/v1/b/", "/download/storage/v1/b/", "/storage/v1/b/"}

// Object returns the object a request addresses, as "bucket/key" (decoded):
// for S3 and Azure (and the GCS XML API) the URL path without its leading
// slash (Azurite's paths start with the account: "account/container/blob");
// for the GCS JSON API the bucket and the object from the path or from the
// upload's name= parameter, or from the resumable session of upload_id=.
// "" when the request names no object (a listing, a bucket).
func (p *Proxy) Object(r *http.Request) string {
	for _, pre := range gcsPrefixes {
		rest, ok := strings.CutPrefix(r.URL.Path, pre)
		if !ok {
			continue
		}
		bucket, obj, _ := strings.Cut(rest, "/o")
		q := r.URL.Query()
		switch {
		case strings.HasPrefix(obj, "/"): // …/b/BUCKET/o/OBJECT
			return bucket + "/" + obj[1:]
		case q.Get("name") != "":
			return bucket + "/" + q.Get("name")
		case q.Get("upload_id") != "":
			p.mu.Lock()
			defer p.mu.Unlock()
			return p.sessions[q.Get("upload_id")]
		}
		return ""
	}
	return strings.TrimPrefix(r.URL.Path, "/")
}

// remember records the object of a GCS resumable upload session, named only
// by the Location (upload_id=) of the response that opened it.
func (p *Proxy) remember(resp *http.Response) error {
	r := resp.Request
	if r == nil || r.Method != http.MethodPost || r.URL.Query().Get("uploadType") != "resumable" {
		return nil
	}
	obj := p.Object(r)
	loc, err := url.Parse(resp.Header.Get("Location"))
	if obj == "" || err != nil {
		return nil
	}
	if id := loc.Query().Get("upload_id"); id != "" {
		p.mu.Lock()
		p.sessions[id] = obj
		p.mu.Unlock()
	}
	return nil
}

func (p *Proxy) match(r *http.Request) *Rule {
	obj := p.Object(r) // before taking the lock: Object takes it for sessions
	p.mu.Lock()
	defer p.mu.Unlock()
	target := r.URL.Path
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	for _, rule := range p.rules {
		if rule.Method != "" && rule.Method != r.Method {
			continue
		}
		if rule.Path != nil && !rule.Path.MatchString(target) {
			continue
		}
		if rule.Object != nil && (obj == "" || !rule.Object.MatchString(obj)) {
			continue
		}
		if rule.Times > 0 && rule.fired >= rule.Times {
			continue
		}
		rule.seen++
		if rule.seen <= rule.Skip {
			return nil
		}
		rule.fired++
		p.fired++
		p.counts[rule.Action]++
		return rule
	}
	return nil
}

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	rule := p.match(r)
	if rule == nil {
		p.rp.ServeHTTP(w, r)
		return
	}
	switch rule.Action {
	case Status:
		_, _ = io.Copy(io.Discard, r.Body)
		if isGCSJSON(r) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(rule.Status)
			_, _ = io.WriteString(w, `{"error":{"code":`+strconv.Itoa(rule.Status)+`,"message":"injected by faultproxy"}}`)
			return
		}
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(rule.Status)
		_, _ = io.WriteString(w, "<Error><Code>SlowDown</Code><Message>injected by faultproxy</Message></Error>")
	case Delay:
		select {
		case <-time.After(rule.Delay):
		case <-r.Context().Done():
			return
		}
		p.rp.ServeHTTP(w, r)
	case ResetMidBody:
		_, _ = io.CopyN(io.Discard, r.Body, rule.AfterBytes)
		hangUp(w)
	case DropResponse:
		rec := httptest.NewRecorder()
		p.rp.ServeHTTP(rec, r) // the server applies the request…
		hangUp(w)              // …and the client never hears about it
	}
}

// hangUp closes the client connection without writing a response.
func hangUp(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic("faultproxy: response writer cannot hijack")
	}
	c, _, err := hj.Hijack()
	if err != nil {
		return
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // RST, like a dropped connection
	}
	_ = c.Close()
}

func isGCSJSON(r *http.Request) bool {
	for _, pre := range gcsPrefixes {
		if strings.HasPrefix(r.URL.Path, pre) {
			return true
		}
	}
	return false
}
