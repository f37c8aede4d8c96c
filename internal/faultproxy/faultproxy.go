// Package faultproxy is an HTTP reverse proxy whose faults a test scripts:
// between cdc-sink and an object store (or any HTTP service) it can drop the
// response of a request the server did apply (an ambiguous outcome), answer
// with an error status instead of forwarding (503 bursts), reset the
// connection part-way through an upload, or add latency. Rules match by
// method and path and fire a bounded number of times, so tests stay
// deterministic.
package faultproxy

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
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
}

// New starts a proxy on a loopback port in front of target (http://host:port).
func New(target string, rules ...Rule) (*Proxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	p := &Proxy{rp: httputil.NewSingleHostReverseProxy(u), counts: map[Action]int{}}
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

func (p *Proxy) match(r *http.Request) *Rule {
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
