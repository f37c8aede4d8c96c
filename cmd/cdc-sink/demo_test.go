package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/cdcsink/cdc-sink/internal/deltacheck"
)

// The embedded demo end to end: the table matches the generator's model,
// reads back identically through delta-rs, and a second run changes nothing.
func TestDemoEndToEnd(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	var out, errb bytes.Buffer
	if code := realMain(ctx, []string{"demo", "--dir", dir, "--events", "800", "--snapshot-rows", "150"}, &out, &errb); code != 0 {
		t.Fatalf("demo exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	s := out.String()
	if !regexp.MustCompile(`matches the source's final state`).MatchString(s) {
		t.Fatalf("demo output lacks the model check:\n%s", s)
	}
	m := regexp.MustCompile(`\(version (\d+)\)\n  (\d+) live rows, (\d+) deleted`).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("no summary in:\n%s", s)
	}
	version, _ := strconv.ParseInt(m[1], 10, 64)
	live, _ := strconv.Atoi(m[2])
	deleted, _ := strconv.Atoi(m[3])
	// 4 malformed records plus the changes the demo's rule holds back
	q := regexp.MustCompile(`Quarantine topic demo.quarantine: (\d+) records`).FindStringSubmatch(s)
	r := regexp.MustCompile(`rule_violation +(\d+)\n`).FindStringSubmatch(s)
	br := regexp.MustCompile(`by rule: positive_amount=(\d+)`).FindStringSubmatch(s)
	if q == nil || r == nil || br == nil || r[1] != br[1] {
		t.Fatalf("quarantine summary: %v %v %v\n%s", q, r, br, s)
	}
	total, _ := strconv.Atoi(q[1])
	viol, _ := strconv.Atoi(r[1])
	if viol == 0 || total != 4+viol {
		t.Errorf("quarantine: %d records, %d rule violations: want the 4 malformed records plus the violations", total, viol)
	}
	table := filepath.Join(dir, "lake", "public.orders")
	rs := deltacheck.ReadDeltaRS(t, table, "")
	if rs.Version != version {
		t.Errorf("delta-rs version %d, demo says %d", rs.Version, version)
	}
	rows := deltacheck.Decode(t, rs.Rows)
	var gotLive, gotDel int
	for _, r := range rows {
		if r["_cdc_deleted"] == true {
			gotDel++
		} else {
			gotLive++
		}
	}
	if gotLive != live || gotDel != deleted {
		t.Errorf("delta-rs: %d live %d deleted; demo: %d live %d deleted", gotLive, gotDel, live, deleted)
	}
	// Running it again is a no-op: same version, no new log entry.
	out.Reset()
	if code := realMain(ctx, []string{"demo", "--dir", dir, "--events", "800", "--snapshot-rows", "150"}, &out, &errb); code != 0 {
		t.Fatalf("second demo exit %d: %s", code, errb.String())
	}
	if _, err := os.Stat(filepath.Join(table, "_delta_log", filepathVersion(version+1))); err == nil {
		t.Errorf("second run wrote version %d", version+1)
	}
}

func filepathVersion(v int64) string {
	s := strconv.FormatInt(v, 10)
	for len(s) < 20 {
		s = "0" + s
	}
	return s + ".json"
}
