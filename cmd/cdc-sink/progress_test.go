package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cdcsink/cdc-sink/merge"
)

// TestReplayAllQuarantinedKeepsProgress: a partition whose every record so
// far was quarantined has no table to carry its offsets; the progress must
// still be stored so a restart resumes after those records instead of
// quarantining them again. The first real commit takes the offsets over.
func TestReplayAllQuarantinedKeepsProgress(t *testing.T) {
	tmp := t.TempDir()
	table := filepath.Join(tmp, "t")
	qfile := filepath.Join(tmp, "q.jsonl")
	bad := filepath.Join(tmp, "bad.jsonl")
	writeKcatLines(t, bad,
		`{"topic":"dbz.public.items","partition":0,"offset":0,"key":"{\"id\":1}","payload":"{not json"}`,
		`{"topic":"dbz.public.items","partition":1,"offset":0,"key":"{\"id\":2}","payload":"{neither"}`,
	)
	replay := func(in, wantQ string) {
		t.Helper()
		code, out, errOut := runCLI(t, "replay", "--from-file", in, "--table", table, "--quarantine-file", qfile, "--sink-name", "p", "--quiet")
		if code != 0 || !strings.Contains(out, wantQ) {
			t.Fatalf("replay %s: exit %d, want %q\n%s\n%s", filepath.Base(in), code, wantQ, out, errOut)
		}
	}
	replay(bad, " 2 quarantined")
	replay(bad, " 0 quarantined") // the restart resumes after them
	if n := lines(t, qfile); n != 2 {
		t.Fatalf("quarantine file has %d entries, want 2 (nothing quarantined twice)", n)
	}
	good := filepath.Join(tmp, "good.jsonl")
	writeKcatLines(t, good,
		dbzRecord(1, "c", 100, itemsInt, nil, map[string]any{"id": 1, "qty": 5, "name": "a"}, map[string]any{"id": 1}),
	)
	replay(good, " 0 quarantined")
	tb, err := merge.Open(context.Background(), table, merge.Options{Sink: "p"})
	if err != nil {
		t.Fatal(err)
	}
	offs := tb.Offsets()
	if offs[merge.TP{Topic: "dbz.public.items", Partition: 0}] != 2 || offs[merge.TP{Topic: "dbz.public.items", Partition: 1}] != 1 {
		t.Fatalf("table offsets %v, want partition 0 → 2 and partition 1 → 1 (taken over from the table-less progress)", offs)
	}
	if _, err := os.Stat(filepath.Join(table, "_cdc_sink", "progress.p.json")); !os.IsNotExist(err) {
		t.Errorf("progress file still there after the table took it over: %v", err)
	}
	replay(bad, " 0 quarantined")
	if n := lines(t, qfile); n != 2 {
		t.Fatalf("quarantine file has %d entries, want 2", n)
	}
}

func lines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}
