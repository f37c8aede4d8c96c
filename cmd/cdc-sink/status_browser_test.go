package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cdcsink/cdc-sink/internal/deltacheck"
	"github.com/cdcsink/cdc-sink/internal/webdriver"
	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/cdcsink/cdc-sink/source"
	"github.com/cdcsink/cdc-sink/status"
)

// browserTools finds chromium and chromedriver. Without them the test is
// skipped locally and fails under CI=true (it must run there).
func browserTools(t *testing.T) (chrome, driver string) {
	t.Helper()
	var missing []string
	for _, name := range []string{"chromium", "chromedriver"} {
		p, err := exec.LookPath(name)
		if err != nil {
			missing = append(missing, name)
			continue
		}
		if name == "chromium" {
			chrome = p
		} else {
			driver = p
		}
	}
	if len(missing) > 0 {
		msg := fmt.Sprintf("%s not installed (apt-get install -y --no-install-recommends chromium chromium-driver)", strings.Join(missing, ", "))
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return chrome, driver
}

// The status page of a running sink, loaded in headless Chromium, shows the
// numbers /progress reports and the table holds: totals, table version and
// batch, live rows, per-partition offsets and lag, quarantine counts.
// CDC_SINK_UPDATE_SCREENSHOT=1 refreshes docs/status-page.png.
func TestStatusPageInBrowser(t *testing.T) {
	chrome, driver := browserTools(t)
	s := testStream(31, 900, 200, 2, 4)
	const sink = "status-page"
	_, brokers := newKfake(t, 2, sink+".quarantine")
	if err := newProducer(t, brokers).produce(s.Records); err != nil {
		t.Fatal(err)
	}
	lake := t.TempDir()
	dir := tableDir(lake)
	r := startSink(t, "sink", testConfig(brokers, lake, sink), runHooks{})
	end := endOffsets(s)
	waitUntil(t, 2*time.Minute, "the table to reach the end offsets", func() bool { return caughtUp(t, dir, sink, end) })
	live := len(deltacheck.ReadDeltaRS(t, dir, "NOT _cdc_deleted").Rows)
	if live != s.Counts().LiveKeys {
		t.Fatalf("delta-rs reads %d live rows, the model has %d", live, s.Counts().LiveKeys)
	}
	var p progressJSON
	var st status.Status
	// rows are counted at most every second or so while batches run, and
	// exactly once the sink is idle (tableSet.observeIdle)
	waitUntil(t, time.Minute, "/progress to report the last commit and status.json the table's rows", func() bool {
		p = progressOf(t, r.addr)
		tp, ok := p.Tables[dir]
		if !ok || tp.Version != diskVersion(dir) {
			return false
		}
		code, out, _ := runCLI(t, "status", "--url", "http://"+r.addr, "--json")
		st = status.Status{}
		return code == 0 && json.Unmarshal([]byte(out), &st) == nil && len(st.Tables) == 1 && st.Tables[0].Live == int64(live)
	})
	num := func(n int64) string { // what the page prints (en-US grouping)
		s := strconv.FormatInt(n, 10)
		for i := len(s) - 3; i > 0; i -= 3 {
			s = s[:i] + "," + s[i:]
		}
		return s
	}
	want := map[string]string{
		"[data-test=sink]":              sink,
		"[data-test=health]":            "ready",
		"[data-test=total-records]":     num(p.Totals["records"]),
		"[data-test=total-batches]":     num(p.Totals["batches"]),
		"[data-test=total-quarantined]": num(p.Totals["quarantined"]),
		"[data-test=last-batch-id]":     strconv.FormatInt(p.BatchID, 10),
		"[data-test=table-name]":        dir,
		"[data-test=table-version]":     strconv.FormatInt(p.Tables[dir].Version, 10),
		"[data-test=table-batch]":       strconv.FormatInt(p.Tables[dir].BatchID, 10),
		"[data-test=table-live]":        num(int64(live)),
		"[data-test=table-deleted]":     num(int64(s.Counts().DeletedKeys)),
		"[data-test=partition-offset]":  num(end[0]) + "|" + num(end[1]),
		"[data-test=partition-lag]":     "0|0",
	}
	if p.Totals["quarantined"] != int64(len(s.Malformed())) || p.Totals["records"] < int64(len(s.Records)) {
		t.Fatalf("/progress totals %v: want %d quarantined, at least %d records", p.Totals, len(s.Malformed()), len(s.Records))
	}

	// The terminal summary of the same sink agrees too.
	if st.Totals.Records != p.Totals["records"] || st.Totals.Batches != p.Totals["batches"] || len(st.Tables) != 1 ||
		st.Tables[0].Version != p.Tables[dir].Version || st.Tables[0].Live != int64(live) {
		t.Fatalf("status --url %+v disagrees with /progress %+v (live rows %d)", st, p, live)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	d, err := webdriver.Start(ctx, driver)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	sess, err := d.NewSession(ctx, chrome, t.TempDir(), 1280, 1500)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close(context.Background())
	if err := sess.Navigate(ctx, "http://"+r.addr+"/"); err != nil {
		t.Fatal(err)
	}
	// The page fills itself from status.json; wait for it to show the
	// expected values (or fail with what it shows at the deadline).
	shown := func() (map[string]string, error) {
		got := map[string]string{}
		for sel := range want {
			txt, err := sess.Texts(ctx, sel)
			if err != nil {
				return nil, err
			}
			got[sel] = strings.Join(txt, "|")
		}
		reasons, err := sess.Texts(ctx, "[data-test=reason-count]")
		if err != nil {
			return nil, err
		}
		sum := int64(0)
		for _, r := range reasons {
			n, _ := strconv.ParseInt(strings.ReplaceAll(r, ",", ""), 10, 64)
			sum += n
		}
		got["sum of reason counts"] = num(sum)
		return got, nil
	}
	want["sum of reason counts"] = num(p.Totals["quarantined"])
	var got map[string]string
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(200 * time.Millisecond) // the page refreshes every 2s
	defer tick.Stop()
	for ; ; <-tick.C {
		if got, err = shown(); err != nil {
			t.Fatal(err)
		}
		bad := ""
		for k, w := range want {
			if got[k] != w {
				bad += fmt.Sprintf("\n  %s: page shows %q, want %q", k, got[k], w)
			}
		}
		if bad == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the status page disagrees with /progress and the table:%s", bad)
		}
	}
	png, err := sess.Screenshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG")) || len(png) < 10000 {
		t.Fatalf("screenshot: %d bytes, not a PNG of a page", len(png))
	}
	shot := filepath.Join(t.TempDir(), "status-page.png")
	if os.Getenv("CDC_SINK_UPDATE_SCREENSHOT") == "1" {
		shot = filepath.Join(deltacheck.RepoRoot(), "docs", "status-page.png")
	}
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", shot, len(png))
}

// The page's quarantine section shows rule violations per rule, and the
// rule of each newest entry, as /status.json reports them (a Recorder fed
// directly: no sink needed to check the page's rendering).
func TestStatusPageRulesInBrowser(t *testing.T) {
	chrome, driver := browserTools(t)
	rec := status.NewRecorder("rules", status.Options{})
	rec.SetReady(true)
	r := &source.Record{Topic: "loja.public.orders", Partition: 0, Offset: 1}
	var es []quarantine.Entry
	for i := 0; i < 1200; i++ {
		es = append(es, quarantine.Entry{Record: r, Reason: quarantine.RuleViolation, Rule: "positive_amount", Message: "amount <= 0"})
	}
	es = append(es, quarantine.Entry{Record: r, Reason: quarantine.MalformedJSON, Message: "bad json"},
		quarantine.Entry{Record: r, Reason: quarantine.RuleViolation, Rule: "known_status", Message: "status ?"})
	rec.Quarantined(es)
	srv := httptest.NewServer(rec.Handler())
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := webdriver.Start(ctx, driver)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	sess, err := d.NewSession(ctx, chrome, t.TempDir(), 1280, 1000)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close(context.Background())
	if err := sess.Navigate(ctx, srv.URL+"/"); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"#rules td":                               "positive_amount|1,200|known_status|1", // most first
		"[data-test=reason-count]":                "1,201|1",
		"#newest tr:first-child td:nth-child(2)":  "rule_violation (known_status)",
		"#newest tr:nth-child(2) td:nth-child(2)": "malformed_json",
	}
	got := map[string]string{}
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for ; ; <-tick.C {
		bad := ""
		for sel, w := range want {
			txt, err := sess.Texts(ctx, sel)
			if err != nil {
				t.Fatal(err)
			}
			got[sel] = strings.Join(txt, "|")
			if got[sel] != w {
				bad += fmt.Sprintf("\n  %s: page shows %q, want %q", sel, got[sel], w)
			}
		}
		if bad == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the status page disagrees with the Recorder:%s", bad)
		}
	}
}
