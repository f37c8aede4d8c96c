package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
