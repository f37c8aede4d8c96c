// Package webdriver drives a browser through chromedriver with the W3C
// WebDriver protocol (JSON over HTTP), for tests of the status page.
//
// The handful of commands a page test needs (new session, navigate, find
// elements, element text, screenshot) is a small HTTP client, so this
// beats a browser-automation dependency (chromedp and its CDP bindings)
// that would be many times the size of what it replaces.
package webdriver

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"time"
)

// Driver is a running chromedriver.
type Driver struct {
	cmd  *exec.Cmd
	base string
	hc   *http.Client
}

// Start runs chromedriver on a free loopback port and waits until it
// reports ready.
func Start(ctx context.Context, chromedriver string) (*Driver, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(chromedriver, "--port="+strconv.Itoa(port), "--allowed-ips=127.0.0.1")
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", chromedriver, err)
	}
	d := &Driver{cmd: cmd, base: fmt.Sprintf("http://127.0.0.1:%d", port), hc: &http.Client{Timeout: 60 * time.Second}}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		var st struct {
			Ready bool `json:"ready"`
		}
		if err := d.do(ctx, "GET", "/status", nil, &st); err == nil && st.Ready {
			return d, nil
		}
		select {
		case err := <-exited:
			return nil, fmt.Errorf("chromedriver exited before ready: %v", err)
		case <-deadline.C:
			d.Stop()
			return nil, errors.New("chromedriver not ready after 30s")
		case <-ctx.Done():
			d.Stop()
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

// Stop kills chromedriver (sessions should be closed first).
func (d *Driver) Stop() {
	if d.cmd.Process != nil {
		_ = d.cmd.Process.Kill()
	}
}

// do sends one command; a WebDriver error ({"value":{"error":..}}) is
// returned as an error naming the command.
func (d *Driver) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, d.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var env struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return fmt.Errorf("%s %s: HTTP %d: %.200s", method, path, resp.StatusCode, raw)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error   string `json:"error"`
			Message string `json:"message"`
		}
		_ = json.Unmarshal(env.Value, &e)
		return fmt.Errorf("%s %s: %s: %s", method, path, e.Error, e.Message)
	}
	if out != nil {
		return json.Unmarshal(env.Value, out)
	}
	return nil
}

// Session is one browser.
type Session struct {
	d  *Driver
	id string
}

// NewSession starts headless Chromium (binary chrome) with a fresh profile
// in userDataDir and no network of its own (no updates, no sync).
func (d *Driver) NewSession(ctx context.Context, chrome, userDataDir string, width, height int) (*Session, error) {
	caps := map[string]any{"capabilities": map[string]any{"alwaysMatch": map[string]any{
		"browserName": "chrome",
		"goog:chromeOptions": map[string]any{
			"binary": chrome,
			"args": []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
				"--disable-component-update", "--no-first-run", "--disable-dev-shm-usage",
				"--user-data-dir=" + userDataDir, fmt.Sprintf("--window-size=%d,%d", width, height)},
		},
	}}}
	var out struct {
		SessionID string `json:"sessionId"`
	}
	if err := d.do(ctx, "POST", "/session", caps, &out); err != nil {
		return nil, fmt.Errorf("new session: %w", err)
	}
	return &Session{d: d, id: out.SessionID}, nil
}

func (s *Session) path(p string) string { return "/session/" + s.id + p }

// Navigate loads url and waits for the document to load.
func (s *Session) Navigate(ctx context.Context, url string) error {
	return s.d.do(ctx, "POST", s.path("/url"), map[string]string{"url": url}, nil)
}

// Texts returns the rendered text of every element matching css, in
// document order.
func (s *Session) Texts(ctx context.Context, css string) ([]string, error) {
	var els []map[string]string
	if err := s.d.do(ctx, "POST", s.path("/elements"), map[string]string{"using": "css selector", "value": css}, &els); err != nil {
		return nil, err
	}
	out := make([]string, 0, len(els))
	for _, e := range els {
		var id string
		for _, v := range e { // the key is the W3C element identifier constant
			id = v
		}
		var txt string
		if err := s.d.do(ctx, "GET", s.path("/element/"+id+"/text"), nil, &txt); err != nil {
			return nil, err
		}
		out = append(out, txt)
	}
	return out, nil
}

// Screenshot returns a PNG of the viewport.
func (s *Session) Screenshot(ctx context.Context) ([]byte, error) {
	var b64 string
	if err := s.d.do(ctx, "GET", s.path("/screenshot"), nil, &b64); err != nil {
		return nil, err
	}
	return base64.StdEncoding.DecodeString(b64)
}

// Close ends the session (and the browser).
func (s *Session) Close(ctx context.Context) error {
	return s.d.do(ctx, "DELETE", s.path(""), nil, nil)
}
