package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// /debug/pprof/ is served only when http.pprof is on.
func TestPprofOptIn(t *testing.T) {
	for _, on := range []bool{false, true} {
		m := newMetrics("s")
		m.pprof = on
		rec := httptest.NewRecorder()
		m.handler().ServeHTTP(rec, httptest.NewRequest("GET", "/debug/pprof/", nil))
		if got := rec.Code == http.StatusOK; got != on {
			t.Fatalf("pprof=%v: GET /debug/pprof/ = %d", on, rec.Code)
		}
	}
}
