package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/internal/dbzgen"
	"github.com/cdcsink/cdc-sink/internal/deltacheck"
	"github.com/cdcsink/cdc-sink/merge"
)

// expectedFeed derives the change list of every commit of a table from its
// states: version v's changes are the difference between the live rows
// (every column) at v-1 and at v — a new key is an insert, a key gone a
// delete of its last image, a rewritten row an update pair. An oracle
// independent of how the feed is written.
func expectedFeed(t *testing.T, dir string, last int64) []string {
	t.Helper()
	live := func(v int64) map[string]map[string]any {
		if v < 0 {
			return nil
		}
		return deltacheck.ByKey(deltacheck.Decode(t, deltacheck.ReadDeltaRSAt(t, dir, "NOT _cdc_deleted", v).Rows), "id")
	}
	var out []string
	emit := func(r map[string]any, kind string, v int64) {
		c := map[string]any{"_change_type": kind, "_commit_version": json.Number(fmt.Sprint(v))}
		for k, x := range r {
			c[k] = x
		}
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(b))
	}
	prev := live(0)
	for v := int64(1); v <= last; v++ {
		cur := live(v)
		for k, r := range cur {
			old, ok := prev[k]
			switch {
			case !ok:
				emit(r, delta.ChangeInsert, v)
			case fmt.Sprint(old) != fmt.Sprint(r):
				emit(old, delta.ChangeUpdatePreimage, v)
				emit(r, delta.ChangeUpdatePostimage, v)
			}
		}
		for k, old := range prev {
			if _, ok := cur[k]; !ok {
				emit(old, delta.ChangeDelete, v)
			}
		}
		prev = cur
	}
	slices.Sort(out)
	return out
}

// canonFeed re-encodes an engine's change rows like expectedFeed does.
func canonFeed(t *testing.T, rows []string) []string {
	t.Helper()
	out := make([]string, 0, len(rows))
	for _, r := range deltacheck.Decode(t, rows) {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(b))
	}
	slices.Sort(out)
	return out
}

// TestChangeDataFeedSparkAndDeltaRS: a generated stream (snapshot,
// inserts, updates, deletes, re-inserts, redelivered duplicates, TOAST
// updates, primary-key changes) replayed in small batches into a table with
// Change Data Feed; Spark readChangeFeed and delta-rs load_cdf return, for
// every commit, exactly the row changes between consecutive table versions.
func TestChangeDataFeedSparkAndDeltaRS(t *testing.T) {
	tmp := t.TempDir()
	s := dbzgen.Generate(dbzgen.Config{Seed: 31, Keys: 60, SnapshotRows: 30, Events: 260, Tombstones: true, TxSize: 2,
		Duplicates: 0.08, ToastEvery: 4, PKChangeEvery: 15})
	in := filepath.Join(tmp, "orders.jsonl")
	if err := dbzgen.WriteKcatFile(in, s.Records); err != nil {
		t.Fatal(err)
	}
	// the same stream into a plain and a column-mapped table
	dirs := map[string]string{}
	wants := map[string][]string{}
	for _, cm := range []string{merge.ColumnMappingNone, merge.ColumnMappingName} {
		dir := filepath.Join(tmp, "orders-"+cm)
		if code, out, errOut := runCLI(t, "replay", "--from-file", in, "--table", dir, "--sink-name", "cdf", "--change-data-feed",
			"--column-mapping", cm, "--batch-records", "40", "--quarantine-file", filepath.Join(tmp, cm+".q.jsonl"), "--quiet"); code != 0 {
			t.Fatalf("replay: exit %d\n%s\n%s", code, out, errOut)
		}
		last := tableVersion(t, dir)
		if last < 5 {
			t.Fatalf("only %d commits", last)
		}
		want := expectedFeed(t, dir, last)
		kinds := map[string]int{}
		for _, r := range deltacheck.Decode(t, want) {
			kinds[fmt.Sprint(r["_change_type"])]++
		}
		if kinds[delta.ChangeInsert] == 0 || kinds[delta.ChangeUpdatePostimage] == 0 || kinds[delta.ChangeDelete] == 0 {
			t.Fatalf("the stream does not exercise every change type: %v", kinds)
		}
		dirs[cm], wants[cm] = dir, want
	}
	check := func(engine, cm string, rows []string) {
		t.Helper()
		if got, want := canonFeed(t, rows), wants[cm]; !slices.Equal(got, want) {
			t.Errorf("%s, column mapping %s: change data feed differs from the table's version-to-version changes (%d rows, want %d):\n%s",
				engine, cm, len(got), len(want), feedDiff(got, want))
		}
	}
	// delta-rs 1.6 refuses change feed reads of column-mapped tables
	check("deltars", merge.ColumnMappingNone, deltacheck.ReadCDF(t, "deltars", 0, dirs[merge.ColumnMappingNone])[dirs[merge.ColumnMappingNone]].Rows)
	spark := deltacheck.ReadCDF(t, "spark", 0, dirs[merge.ColumnMappingNone], dirs[merge.ColumnMappingName])
	for cm, dir := range dirs {
		check("spark", cm, spark[dir].Rows)
	}
}

func feedDiff(got, want []string) string {
	var b strings.Builder
	for _, g := range got {
		if !slices.Contains(want, g) {
			fmt.Fprintf(&b, "+ %s\n", g)
		}
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			fmt.Fprintf(&b, "- %s\n", w)
		}
	}
	return b.String()
}

// TestChangeDataFeedCLI: replay --change-data-feed refuses a table without
// the feed and names the command that enables it; `table set-property`
// enables it, after which the feed holds the next batches.
func TestChangeDataFeedCLI(t *testing.T) {
	tmp := t.TempDir()
	in := filepath.Join(tmp, "items.jsonl")
	azureLoad(t, in)
	dir := filepath.Join(tmp, "items")
	if code, out, errOut := runCLI(t, "replay", "--from-file", in, "--table", dir, "--sink-name", "items", "--quiet"); code != 0 {
		t.Fatalf("replay: exit %d\n%s\n%s", code, out, errOut)
	}
	v := tableVersion(t, dir)
	more := filepath.Join(tmp, "more.jsonl")
	writeKcatLines(t, more, dbzRecord(1000, "u", 5000, itemsInt, nil, map[string]any{"id": 1, "qty": 77, "name": "item-001"}, map[string]any{"id": 1}))
	code, _, errOut := runCLI(t, "replay", "--from-file", more, "--table", dir, "--sink-name", "items", "--change-data-feed", "--quiet")
	if code == 0 || !strings.Contains(errOut, "table set-property "+dir+" delta.enableChangeDataFeed=true") {
		t.Fatalf("replay --change-data-feed on a table without it: exit %d\n%s", code, errOut)
	}
	if code, _, errOut := runCLI(t, "table", "set-property", dir, "delta.appendOnly=true"); code == 0 || !strings.Contains(errOut, "cannot be set") {
		t.Fatalf("set-property of another property: exit %d %s", code, errOut)
	}
	code, out, errOut := runCLI(t, "table", "set-property", dir, "delta.enableChangeDataFeed=true")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("starts at version %d", v+1)) {
		t.Fatalf("set-property: exit %d\n%s\n%s", code, out, errOut)
	}
	if code, out, _ := runCLI(t, "table", "info", dir); code != 0 || !strings.Contains(out, "change feed:") {
		t.Fatalf("table info: exit %d\n%s", code, out)
	}
	// without the flag too: the table asks for the feed, so it is written
	if code, out, errOut := runCLI(t, "replay", "--from-file", more, "--table", dir, "--sink-name", "items", "--quiet"); code != 0 {
		t.Fatalf("replay after enabling: exit %d\n%s\n%s", code, out, errOut)
	}
	feed := deltacheck.Decode(t, deltacheck.ReadCDF(t, "deltars", v+1, dir)[dir].Rows)
	var got []string
	for _, r := range feed {
		got = append(got, fmt.Sprintf("v%v %v id=%v qty=%v", r["_commit_version"], r["_change_type"], r["id"], r["qty"]))
	}
	slices.Sort(got)
	want := []string{fmt.Sprintf("v%d update_postimage id=1 qty=77", v+2), fmt.Sprintf("v%d update_preimage id=1 qty=10", v+2)}
	if !slices.Equal(got, want) {
		t.Fatalf("feed after enabling: %v, want %v", got, want)
	}
}

// TestChangeDataFeedConfig: tables.change_data_feed from the file, the
// environment and a flag (flag > env > file), off by default.
func TestChangeDataFeedConfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "run.yaml")
	if err := os.WriteFile(file, []byte("kafka:\n  brokers: [127.0.0.1:9]\n  topics: [t]\ntables:\n  path_template: lake/{table}\n  change_data_feed: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	cases := []struct {
		name string
		args []string
		env  map[string]string
		want bool
	}{
		{"default", []string{"--kafka.brokers", "127.0.0.1:9", "--kafka.topics", "t"}, nil, false},
		{"file", []string{"--config", file}, nil, true},
		{"env", []string{"--kafka.brokers", "127.0.0.1:9", "--kafka.topics", "t"}, map[string]string{"CDC_SINK_TABLES_CHANGE_DATA_FEED": "true"}, true},
		{"flag over file", []string{"--config", file, "--tables.change_data_feed=false"}, nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stderr strings.Builder
			cfg, err := loadConfig(c.args, env(c.env), &stderr)
			if err != nil {
				t.Fatalf("%v\n%s", err, stderr.String())
			}
			if cfg.Table.ChangeDataFeed != c.want {
				t.Fatalf("change_data_feed = %v, want %v", cfg.Table.ChangeDataFeed, c.want)
			}
		})
	}
}
