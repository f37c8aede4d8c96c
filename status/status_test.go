package status

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/pipeline"
	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/cdcsink/cdc-sink/source"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestRecorderSeries(t *testing.T) {
	c := &clock{time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	r := NewRecorder("s", Options{Now: c.now})
	batch := func(records int, ms int64, latency time.Duration) {
		r.BatchDone(&pipeline.Report{Records: records, DurationMs: ms, MaxSourceTsUs: c.t.Add(-latency).UnixMicro(),
			Tables: []pipeline.TableReport{{Table: "t", Result: &merge.Result{Committed: true, Version: 3, BatchID: 7, Inserted: records}}}})
	}
	// Two hours ago (outside the window), then 100 batches in one step,
	// then one in the next step.
	c.t = c.t.Add(-2 * time.Hour)
	batch(5, 1, time.Second)
	c.t = c.t.Add(2 * time.Hour)
	for i := 1; i <= 100; i++ {
		batch(10, int64(i), time.Duration(i)*time.Second)
	}
	c.t = c.t.Add(10 * time.Second)
	batch(30, 5, 0)
	s := r.Snapshot()
	if len(s.Series) != 2 {
		t.Fatalf("series %+v: want 2 points (the old batch is outside the hour)", s.Series)
	}
	p := s.Series[0]
	want := Point{T: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC), Batches: 100, RecordsPerSec: 100,
		BatchMsP50: 50, BatchMsP95: 95, LatencyP50: 50, LatencyP95: 95, LatencyP99: 99}
	if p != want {
		t.Fatalf("point %+v, want %+v", p, want)
	}
	if s.Series[1].RecordsPerSec != 3 || s.Totals.Records != 1035 || s.Totals.Batches != 102 || s.Totals.Inserted != 1035 {
		t.Fatalf("second point %+v, totals %+v", s.Series[1], s.Totals)
	}
	if len(s.Tables) != 1 || s.Tables[0].Version != 3 || s.Tables[0].BatchID != 7 || !s.Tables[0].LastCommit.Equal(c.t) {
		t.Fatalf("tables %+v", s.Tables)
	}
	// After an hour without batches the charts are empty again.
	c.t = c.t.Add(time.Hour)
	if s := r.Snapshot(); len(s.Series) != 0 {
		t.Fatalf("series after an idle hour: %+v", s.Series)
	}
}

// Percentiles stay within the sampled values once the reservoir is full.
func TestRecorderReservoir(t *testing.T) {
	c := &clock{time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	r := NewRecorder("s", Options{Now: c.now})
	for i := 0; i < 5000; i++ {
		r.BatchDone(&pipeline.Report{Records: 1, DurationMs: int64(i % 100)})
	}
	p := r.Snapshot().Series[0]
	if p.Batches != 5000 || p.BatchMsP50 < 40 || p.BatchMsP50 > 60 || p.BatchMsP95 < 88 || p.BatchMsP95 > 99 {
		t.Fatalf("point %+v: p50 ~50, p95 ~95 expected", p)
	}
}

func TestRecorderHealthAndQuarantine(t *testing.T) {
	for _, show := range []bool{false, true} {
		r := NewRecorder("s", Options{ShowValues: show, Newest: 2})
		r.SetReady(true)
		r.Failed(errors.New("commit: connect to s3://user:secret@host failed"))
		r.Failed(errors.New("again"))
		rec := &source.Record{Topic: "a.b.c", Partition: 1, Offset: 9, Key: []byte("k"), Value: []byte("v")}
		r.Quarantined([]quarantine.Entry{{Record: rec, Reason: quarantine.MalformedJSON, Message: "m1"},
			{Record: rec, Reason: quarantine.RuleViolation, Rule: "positive_amount", Message: "r1"},
			{Record: rec, Reason: quarantine.RuleViolation, Rule: "known_status", Message: "r2"},
			{Record: rec, Reason: quarantine.RuleViolation, Rule: "positive_amount", Message: "r3"},
			{Record: rec, Reason: quarantine.MalformedJSON, Message: "m2"}, {Record: rec, Reason: quarantine.MalformedAvro, Message: "m3"}})
		r.SetOffset("t", "a.b.c", 1, 10)
		r.SetLag("a.b.c", 1, 4)
		s := r.Snapshot()
		if !s.Health.Ready || s.Health.ConsecutiveFailures != 2 || s.Health.LastError != "again" {
			t.Fatalf("health %+v", s.Health)
		}
		if s.Quarantine.ByReason["malformed_json"] != 2 || s.Quarantine.ByReason["malformed_avro"] != 1 || s.Quarantine.ByReason["rule_violation"] != 3 ||
			len(s.Quarantine.Newest) != 2 || s.Quarantine.Newest[0].Message != "m3" || s.Quarantine.Newest[1].Message != "m2" {
			t.Fatalf("quarantine %+v", s.Quarantine)
		}
		// only rule violations are counted by rule
		if len(s.Quarantine.ByRule) != 2 || s.Quarantine.ByRule["positive_amount"] != 2 || s.Quarantine.ByRule["known_status"] != 1 {
			t.Fatalf("by rule %+v", s.Quarantine.ByRule)
		}
		r.Quarantined([]quarantine.Entry{{Record: rec, Reason: quarantine.RuleViolation, Rule: "known_status", Message: "r4"}})
		if n := r.Snapshot().Quarantine; n.ByRule["known_status"] != 2 || n.Newest[0].Rule != "known_status" || n.Newest[1].Rule != "" {
			t.Fatalf("after one more violation: %+v", n)
		}
		if got := s.Quarantine.Newest[0].Value != nil; got != show {
			t.Fatalf("ShowValues=%v: value shown %v", show, got)
		}
		if len(s.Partitions) != 1 || s.Partitions[0] != (Partition{Topic: "a.b.c", Partition: 1, Offset: 10, Lag: 4, Table: "t"}) {
			t.Fatalf("partitions %+v", s.Partitions)
		}
		r.BatchDone(&pipeline.Report{})
		if h := r.Snapshot().Health; h.ConsecutiveFailures != 0 || h.LastError != "" {
			t.Fatalf("after a good batch: %+v", h)
		}
	}
	r := NewRecorder("s", Options{})
	r.Failed(errors.New("connect to postgres://dbz:hunter2@db/x"))
	if e := r.Snapshot().Health.LastError; strings.Contains(e, "hunter2") {
		t.Fatalf("password in the last error: %s", e)
	}
}

func TestHandler(t *testing.T) {
	r := NewRecorder("demo", Options{})
	h := r.Handler()
	for _, tc := range []struct {
		method, path string
		code         int
		ctype, body  string
	}{
		{"GET", "/", 200, "text/html", `<script src="assets/app.js">`},
		{"GET", "/", 200, "text/html", `<tbody id="rules">`},
		{"GET", "/assets/app.js", 200, "javascript", "quarantine.byRule"},
		{"GET", "/assets/app.js", 200, "javascript", "status.json"},
		{"GET", "/assets/style.css", 200, "text/css", "font"},
		{"GET", "/status.json", 200, "application/json", `"sink":"demo"`},
		{"GET", "/status.json", 200, "application/json", `"byRule":{}`},
		{"GET", "/nope", 404, "", ""},
		{"POST", "/status.json", 405, "", ""},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
		if rec.Code != tc.code || !strings.Contains(rec.Header().Get("Content-Type"), tc.ctype) || !strings.Contains(rec.Body.String(), tc.body) {
			t.Errorf("%s %s: %d %q\n%.200s", tc.method, tc.path, rec.Code, rec.Header().Get("Content-Type"), rec.Body.String())
		}
	}
	// The page references nothing off the host (works offline, no CDN).
	for _, f := range []string{"index.html", "app.js", "style.css"} {
		b, err := assets.ReadFile("assets/" + f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "//") && strings.Contains(string(b), "https://") {
			t.Errorf("%s references an external URL", f)
		}
	}
	var s Status
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/status.json", nil))
	if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil || s.Tables == nil || s.Series == nil {
		t.Fatalf("status.json: %v %+v", err, s)
	}
}
