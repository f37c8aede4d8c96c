package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/internal/dbzgen"
	"github.com/cdcsink/cdc-sink/internal/deltacheck"
	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/source"
)

// TestHistoryRunRebuildPurge: `run` with history.path_template writes a
// history table beside the live one (one row per record); `replay
// --from-history` rebuilds a table that `diff` finds equal to the live one;
// `table purge-history --older-than` drops the old source dates; a bad
// history setting is refused at config load.
func TestHistoryRunRebuildPurge(t *testing.T) {
	s := dbzgen.Generate(dbzgen.Config{Seed: 8, Prefix: "loja", Schema: "public", Table: "orders", Partitions: 2,
		Keys: 80, Events: 300, SnapshotRows: 40, Tombstones: true, TxSize: 3, Duplicates: 0.05, ToastEvery: 5, PKChangeEvery: 30})
	_, brokers := newKfake(t, 2, "live.quarantine")
	if err := newProducer(t, brokers).produce(s.Records); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lake := t.TempDir()
	cfg := testConfig(brokers, lake, "live")
	cfg.HTTP.Listen = ""
	cfg.History.PathTemplate = filepath.Join(lake, "history", "{schema}.{table}")
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	if err := runSink(ctx, cfg, newLogger(LogConf{Level: "error", Format: "text"}, &bytes.Buffer{}),
		runHooks{stdout: &bytes.Buffer{}, Bounded: true, Quiet: true}); err != nil {
		t.Fatal(err)
	}
	live := tableDir(lake)
	hist := filepath.Join(lake, "history", "public.orders")
	if n := len(deltacheck.ReadDeltaRS(t, hist, "").Rows); n != len(s.Records) {
		t.Fatalf("history has %d rows, the topic %d records", n, len(s.Records))
	}

	rebuilt := filepath.Join(t.TempDir(), "orders-rebuilt")
	var out, errb bytes.Buffer
	if code := realMain(ctx, []string{"replay", "--from-history", hist, "--table", rebuilt, "--sink-name", "live"}, &out, &errb); code != 0 {
		t.Fatalf("replay --from-history: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "rebuilt from") {
		t.Errorf("replay output %q", out.String())
	}
	out.Reset()
	if code := realMain(ctx, []string{"diff", live, rebuilt}, &out, &errb); code != 0 {
		t.Fatalf("diff live rebuilt: exit %d\n%s%s", code, out.String(), errb.String())
	}
	errb.Reset()
	if code := realMain(ctx, []string{"replay", "--from-history", hist, "--table", rebuilt, "--sink-name", "live"}, &out, &errb); code == 0 || !strings.Contains(errb.String(), "exists") {
		t.Errorf("rebuild into an existing table: exit %d %q", code, errb.String())
	}

	out.Reset()
	errb.Reset()
	// the generator's source times are in the past: 1d drops them all but
	// the Kafka tombstones, which have none and sit in today's ingest date
	if code := realMain(ctx, []string{"table", "purge-history", hist, "--older-than", "1d"}, &out, &errb); code != 0 {
		t.Fatalf("purge-history: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "dropped") {
		t.Errorf("purge-history output %q", out.String())
	}
	left := deltacheck.Decode(t, deltacheck.ReadDeltaRS(t, hist, "").Rows)
	tombstones := 0
	for _, r := range s.Records {
		if r.Value == nil {
			tombstones++
		}
	}
	if len(left) != tombstones {
		t.Fatalf("%d history rows after the purge, want the %d tombstone records", len(left), tombstones)
	}
	for _, r := range left {
		if r["_cdc_tombstone"] != true || r["_cdc_source_ts"] != nil {
			t.Fatalf("purge kept %v", r)
		}
	}
	if code := realMain(ctx, []string{"table", "purge-history", hist, "--older-than", "ninety"}, &out, &errb); code == 0 {
		t.Errorf("purge-history accepted --older-than ninety")
	}

	bad := testConfig(brokers, lake, "live")
	bad.History.PathTemplate = hist
	bad.History.HashColumns = []string{"note"}
	if err := bad.validate(); err == nil || !strings.Contains(err.Error(), "salt") {
		t.Errorf("hash_columns without salt: %v", err)
	}
}

// TestHistoryFirstRecordTombstone: a topic whose first batch is a lone
// Kafka tombstone (a key the table never saw, no value, no schema) starts a
// history table with no image columns yet (and no SCD2 rows); the next run
// brings typed rows, the images appear by schema evolution, and a rebuild
// from the history equals the live table (and its SCD2 table, built with
// replay --scd2, the one the sink wrote). (It failed with "parquetio:
// cannot write struct type 'before' with no children field" and stopped
// the sink: Parquet has no empty group.)
func TestHistoryFirstRecordTombstone(t *testing.T) {
	s := dbzgen.Generate(dbzgen.Config{Seed: 16, Prefix: "loja", Schema: "public", Table: "orders", Partitions: 1,
		Keys: 30, Events: 120, SnapshotRows: 10, Tombstones: true, TxSize: 2})
	// a key the stream never uses: the generator's ids are 1..Keys
	key := regexp.MustCompile(`"id":\s*\d+`).ReplaceAll(s.Records[0].Key, []byte(`"id":9999`))
	if bytes.Equal(key, s.Records[0].Key) {
		t.Fatalf("no id in the key %s", key)
	}
	first := &source.Record{Topic: s.Records[0].Topic, Partition: 0, Offset: 0, Key: key, Timestamp: s.Records[0].Timestamp}
	for _, r := range s.Records {
		r.Offset++
	}
	_, brokers := newKfake(t, 1, "live.quarantine")
	p := newProducer(t, brokers)
	ctx := context.Background()
	lake := t.TempDir()
	hist := filepath.Join(lake, "history", "public.orders")
	scd := hist + "_scd2"
	run := func() {
		t.Helper()
		cfg := testConfig(brokers, lake, "live")
		cfg.HTTP.Listen = ""
		cfg.History.PathTemplate = filepath.Join(lake, "history", "{schema}.{table}")
		cfg.History.SCD2 = true
		if err := cfg.validate(); err != nil {
			t.Fatal(err)
		}
		if err := runSink(ctx, cfg, newLogger(LogConf{Level: "error", Format: "text"}, &bytes.Buffer{}),
			runHooks{stdout: &bytes.Buffer{}, Bounded: true, Quiet: true}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.produce([]*source.Record{first}); err != nil {
		t.Fatal(err)
	}
	run()
	rows := deltacheck.Decode(t, deltacheck.ReadDeltaRS(t, hist, "").Rows)
	if len(rows) != 1 || rows[0]["_cdc_tombstone"] != true || rows[0]["_cdc_outcome"] == nil {
		t.Fatalf("history after the lone tombstone: %v", rows)
	}
	if cols := historyColumns(t, hist); strings.Contains(cols, "before") || strings.Contains(cols, "after") {
		t.Fatalf("history columns before any typed change: %s", cols)
	}
	// a tombstone of a key never seen opens and closes no version: the SCD2
	// table is created with its first row
	if _, err := os.Stat(filepath.Join(scd, "_delta_log")); !os.IsNotExist(err) {
		t.Fatalf("scd2 table after a lone tombstone of a key never seen: %v, want none yet", err)
	}

	if err := p.produce(s.Records); err != nil {
		t.Fatal(err)
	}
	run()
	if n := len(deltacheck.ReadDeltaRS(t, hist, "").Rows); n != len(s.Records)+1 {
		t.Fatalf("history has %d rows, the topic %d records", n, len(s.Records)+1)
	}
	if cols := historyColumns(t, hist); !strings.HasPrefix(cols, "id,_cdc_op,_cdc_outcome,before,after,") {
		t.Fatalf("history columns after the typed changes: %s (the images belong after _cdc_outcome)", cols)
	}
	tb, err := merge.Open(ctx, tableDir(lake), merge.Options{Sink: "live"})
	if err != nil {
		t.Fatal(err)
	}
	all, err := tb.Rows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var kept []merge.Row
	for _, r := range all {
		if fmt.Sprint(r["id"]) == "9999" {
			if r["_cdc_deleted"] != true {
				t.Errorf("the first record's key is not a tombstone: %v", r)
			}
			continue
		}
		kept = append(kept, r)
	}
	if bad := compareExpected(kept, s.Expected()); bad != "" || len(kept) != len(all)-1 {
		t.Fatalf("live table differs from the source model: %s (%d rows)", bad, len(all))
	}
	live := 0
	for _, r := range s.Expected() {
		if !r.Deleted {
			live++
		}
	}
	current := 0
	for _, r := range deltacheck.Decode(t, deltacheck.ReadDeltaRS(t, scd, "").Rows) {
		if r["is_current"] == true {
			current++
		}
	}
	if current != live {
		t.Fatalf("scd2: %d current rows, the generator %d live keys", current, live)
	}
	rebuilt := filepath.Join(t.TempDir(), "orders-rebuilt")
	var out, errb bytes.Buffer
	if code := realMain(ctx, []string{"replay", "--from-history", hist, "--table", rebuilt, "--sink-name", "live"}, &out, &errb); code != 0 {
		t.Fatalf("replay --from-history: exit %d: %s", code, errb.String())
	}
	if code := realMain(ctx, []string{"diff", tableDir(lake), rebuilt}, &out, &errb); code != 0 {
		t.Fatalf("diff live rebuilt: exit %d\n%s%s", code, out.String(), errb.String())
	}
	// the SCD2 table of an existing history: built from it, equal to the
	// one the sink wrote beside it
	rebuiltSCD := filepath.Join(t.TempDir(), "orders-scd2")
	again := filepath.Join(t.TempDir(), "orders-again")
	out.Reset()
	if code := realMain(ctx, []string{"replay", "--from-history", hist, "--table", again, "--scd2", rebuiltSCD, "--sink-name", "live"}, &out, &errb); code != 0 {
		t.Fatalf("replay --from-history --scd2: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "scd2 table "+rebuiltSCD) {
		t.Errorf("replay output %q", out.String())
	}
	if code := realMain(ctx, []string{"diff", scd, rebuiltSCD}, &out, &errb); code != 0 {
		t.Fatalf("diff scd2 rebuilt: exit %d\n%s%s", code, out.String(), errb.String())
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--from-history", hist, "--table", filepath.Join(t.TempDir(), "x"), "--scd2", rebuiltSCD, "--sink-name", "live"}, "exists"},
		{[]string{"--from-history", hist, "--table", rebuiltSCD, "--scd2", rebuiltSCD}, "same table"},
		{[]string{"--topics", "t", "--table", filepath.Join(t.TempDir(), "y"), "--scd2", rebuiltSCD}, "--from-history only"},
	} {
		errb.Reset()
		if code := realMain(ctx, append([]string{"replay"}, tc.args...), &out, &errb); code == 0 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("replay %v: exit %d %q, want an error with %q", tc.args, code, errb.String(), tc.want)
		}
	}
}

// historyColumns is the top-level column list of the history table at dir.
func historyColumns(t *testing.T, dir string) string {
	t.Helper()
	st, err := delta.OpenStorage(context.Background(), dir, delta.StorageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := delta.OpenTable(st, "").Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sch, err := snap.Schema()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range sch.Fields {
		names = append(names, f.Name)
	}
	return strings.Join(names, ",")
}

func FuzzParseAge(f *testing.F) {
	for _, s := range []string{"90d", "36h", "0d", "d", "-1h", "99999999d", "1.5h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseAge(s)
		if err == nil && d < 0 {
			t.Fatalf("parseAge(%q) = %v", s, d)
		}
	})
}

// TestReplayConfigRoutesLikeRun: `replay --config` with a run config routes
// each topic to its table and history table (tables.path_template,
// history.path_template) as run does: a two-table file ends in two tables
// equal to the generator's state and two histories holding each record.
func TestReplayConfigRoutesLikeRun(t *testing.T) {
	lake := t.TempDir()
	var all []*source.Record
	streams := map[string]*dbzgen.Stream{}
	for i, tbl := range []string{"orders", "items"} {
		s := dbzgen.Generate(dbzgen.Config{Seed: int64(30 + i), Prefix: "loja", Schema: "public", Table: tbl, Partitions: 1,
			Keys: 40, Events: 120, SnapshotRows: 20, Tombstones: true, TxSize: 2, ToastEvery: 4})
		streams[tbl] = s
		all = append(all, s.Records...)
	}
	in := filepath.Join(t.TempDir(), "in.jsonl")
	var buf bytes.Buffer
	for _, r := range all {
		if err := source.WriteJSONLine(&buf, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(in, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(t.TempDir(), "run.yaml")
	yaml := "sink: live\ntables:\n  path_template: " + filepath.Join(lake, "{schema}.{table}") +
		"\nhistory:\n  path_template: " + filepath.Join(lake, "history", "{table}") + "\n  scd2: true\n"
	if err := os.WriteFile(conf, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := realMain(context.Background(), []string{"replay", "--config", conf, "--from-file", in, "--sink-name", "live", "--quiet"}, &out, &errb); code != 0 {
		t.Fatalf("replay --config: exit %d: %s", code, errb.String())
	}
	for tbl, s := range streams {
		dir := filepath.Join(lake, "public."+tbl)
		if tbl == "orders" {
			checkTable(t, dir, "live", s) // its progress helper knows this topic only
		} else {
			tb, err := merge.Open(context.Background(), dir, merge.Options{Sink: "live"})
			if err != nil {
				t.Fatal(err)
			}
			rows, err := tb.Rows(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if bad := compareExpected(rows, s.Expected()); bad != "" {
				t.Errorf("%s differs from the source model: %s", tbl, bad)
			}
		}
		if n := len(deltacheck.ReadDeltaRS(t, filepath.Join(lake, "history", tbl), "").Rows); n != len(s.Records) {
			t.Fatalf("history of %s: %d rows, %d records", tbl, n, len(s.Records))
		}
		// history.scd2: beside the history, one current version per live key
		current := 0
		for _, r := range deltacheck.Decode(t, deltacheck.ReadDeltaRS(t, filepath.Join(lake, "history", tbl+"_scd2"), "").Rows) {
			if r["is_current"] == true {
				current++
			}
		}
		live := 0
		for _, e := range s.Expected() {
			if !e.Deleted {
				live++
			}
		}
		if current != live || live == 0 {
			t.Fatalf("SCD2 table of %s: %d current versions, the source has %d live rows", tbl, current, live)
		}
	}
	if !strings.Contains(out.String(), "public.items") || !strings.Contains(out.String(), "public.orders") {
		t.Errorf("replay output names not both tables: %q", out.String())
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("history:\n  path_template: "+lake+"/h/{table}\n  hash_columns: [note]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	errb.Reset()
	if code := realMain(context.Background(), []string{"replay", "--config", bad, "--from-file", in, "--quiet"}, &out, &errb); code == 0 || !strings.Contains(errb.String(), "salt") {
		t.Errorf("hash_columns without salt: exit %d %q", code, errb.String())
	}
}

// TestHistorySCD2Config: history.scd2's settings are checked at config
// load, and its tables default to the history location + _scd2.
func TestHistorySCD2Config(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    HistoryConf
		bad  string // "" valid
	}{
		{"on", HistoryConf{PathTemplate: "lake/h/{table}", SCD2: true}, ""},
		{"template", HistoryConf{PathTemplate: "lake/h/{table}", SCD2: true, SCD2Template: "lake/scd/{table}"}, ""},
		{"no history", HistoryConf{SCD2: true}, "beside history tables"},
		{"hashed", HistoryConf{PathTemplate: "lake/h/{table}", SCD2: true, HashColumns: []string{"email"}, HashSalt: "x"}, "in clear"},
		{"excluded", HistoryConf{PathTemplate: "lake/h/{table}", SCD2: true, ExcludeColumns: []string{"ssn"}}, "in clear"},
		{"template without scd2", HistoryConf{PathTemplate: "lake/h/{table}", SCD2Template: "lake/scd/{table}"}, "history.scd2 is false"},
		{"bad map", HistoryConf{PathTemplate: "lake/h/{table}", SCD2: true, SCD2Map: map[string]string{"t": "ftp://x/y"}}, "history.scd2_map"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.h.validate(func(key, format string, a ...any) error { return fmt.Errorf(key+": "+format, a...) })
			if (err == nil) != (tc.bad == "") || (err != nil && !strings.Contains(err.Error(), tc.bad)) {
				t.Fatalf("validate: %v, want %q", err, tc.bad)
			}
		})
	}
	route := HistoryConf{PathTemplate: "lake/h/{table}", SCD2: true, SCD2Map: map[string]string{"loja.public.items": "lake/items_versions"}}.scd2Route()
	for _, tc := range []struct{ topic, hdir, want string }{
		{"loja.public.orders", "lake/h/orders", "lake/h/orders_scd2"},
		{"loja.public.orders", "s3://b/h/orders/", "s3://b/h/orders_scd2"},
		{"loja.public.items", "lake/h/items", canonLocation("lake/items_versions")},
	} {
		if got := route(tc.topic, tc.hdir); got != tc.want {
			t.Errorf("scd2 location of %s (history %s): %s, want %s", tc.topic, tc.hdir, got, tc.want)
		}
	}
	if (HistoryConf{PathTemplate: "x"}).scd2Route() != nil {
		t.Error("scd2 off: a route")
	}
}

// The history salt is a secret: config dumps (logs, status) never show it.
func TestHistorySaltRedacted(t *testing.T) {
	cfg := defaultConfig()
	cfg.History.HashSalt = "pepper-123"
	got := fmt.Sprint(cfg.Redacted())
	if strings.Contains(got, "pepper-123") {
		t.Fatalf("salt in the redacted config: %s", got)
	}
}
