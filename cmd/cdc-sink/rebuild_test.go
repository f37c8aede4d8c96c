package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cdcsink/cdc-sink/internal/dbzgen"
	"github.com/cdcsink/cdc-sink/layout"
	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/versioning"
)

// The rebuild procedure of the runbook on kfake: the live sink applies the
// topic to table A; `replay --topics` rebuilds it into table B with its own
// sink name and stops at the end offsets captured at start; `diff A B` exits
// 0. A deliberately corrupted rebuild is caught (exit 1 naming the key), and
// replaying into a table owned by another sink is refused unless allowed.
func TestRebuildReplayFromKafkaEqualsLive(t *testing.T) {
	s := dbzgen.Generate(dbzgen.Config{Seed: 5, Prefix: "loja", Schema: "public", Table: "orders", Partitions: 3,
		Keys: 250, Events: 600, SnapshotRows: 150, Tombstones: true, TxSize: 3, InFlightAtSnapshot: true,
		Duplicates: 0.05, ToastEvery: 5, PKChangeEvery: 40, Malformed: 2})
	_, brokers := newKfake(t, 3, "live.quarantine")
	if err := newProducer(t, brokers).produce(s.Records); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lake := t.TempDir()
	cfg := testConfig(brokers, lake, "live")
	cfg.HTTP.Listen = ""
	if err := runSink(ctx, cfg, newLogger(LogConf{Level: "error", Format: "text"}, &bytes.Buffer{}),
		runHooks{stdout: &bytes.Buffer{}, Bounded: true, Quiet: true}); err != nil {
		t.Fatal(err)
	}
	live := tableDir(lake)

	rebuild := filepath.Join(t.TempDir(), "orders-rebuild")
	qfile := filepath.Join(t.TempDir(), "rebuild.quarantine.jsonl")
	var out, errb bytes.Buffer
	args := []string{"replay", "--topics", testTopic, "--brokers", strings.Join(brokers, ","), "--starting", "earliest",
		"--table", rebuild, "--sink-name", "rebuild", "--quarantine-file", qfile, "--quiet"}
	if code := realMain(ctx, args, &out, &errb); code != 0 {
		t.Fatalf("replay exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "quarantined") {
		t.Errorf("replay summary: %q", out.String())
	}
	out.Reset()
	if code := realMain(ctx, []string{"diff", live, rebuild}, &out, &errb); code != 0 {
		t.Fatalf("diff live rebuild: exit %d\n%s%s", code, out.String(), errb.String())
	}

	// Replaying again is idempotent: the rebuild table covers every offset.
	vBefore := tableVersion(t, rebuild)
	if code := realMain(ctx, args, &out, &errb); code != 0 {
		t.Fatalf("second replay exit %d: %s", code, errb.String())
	}
	if v := tableVersion(t, rebuild); v != vBefore {
		t.Errorf("second replay wrote v%d (was v%d)", v, vBefore)
	}

	// The rebuild belongs to sink "rebuild": the live sink name is refused.
	foreign := append([]string(nil), args...)
	for i := range foreign {
		if foreign[i] == "rebuild" {
			foreign[i] = "live"
		}
	}
	errb.Reset()
	if code := realMain(ctx, foreign, &out, &errb); code == 0 || !strings.Contains(errb.String(), "another sink") {
		t.Errorf("replay into a foreign table: exit %d, %q", code, errb.String())
	}

	// Corrupt one live row of the rebuild (a newer, wrong update) and diff.
	want := s.Expected()
	var victim int64
	for _, r := range want {
		if !r.Deleted {
			victim = r.ID
			break
		}
	}
	tb, err := merge.Open(ctx, rebuild, merge.Options{Sink: "rebuild"})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := tb.Rows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var img merge.Row
	for _, r := range rows {
		if r["id"] == victim {
			img = r
		}
	}
	sc := &normalize.Schema{}
	var vals []any
	for _, c := range tb.Columns() {
		if layout.IsMetaColumn(c) {
			continue
		}
		sc.Columns = append(sc.Columns, normalize.ColumnDef{Name: c, Nullable: true})
		v := img[c]
		if c == "status" {
			v = "CORRUPTED"
		}
		vals = append(vals, v)
	}
	// Reuse the table's own column types through a change of the same shape.
	typed, err := typedSchema(tb, sc)
	if err != nil {
		t.Fatal(err)
	}
	ch := &normalize.Change{Op: normalize.OpUpsert, SourceOp: 'u', KeyNames: []string{"id"}, Key: []any{victim},
		Schema: typed, Row: vals, Version: versioning.Version{Epoch: 99, Phase: versioning.PhaseStream}}
	if _, err := tb.Apply(ctx, &merge.Batch{Changes: []*normalize.Change{ch}, Offsets: map[merge.TP]int64{}},
		func(context.Context, int64, []merge.Reject) error { return nil }); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	code := realMain(ctx, []string{"diff", live, rebuild}, &out, &errb)
	if code != 1 || !strings.Contains(out.String(), "CORRUPTED") && !strings.Contains(out.String(), "status") {
		t.Fatalf("diff after corruption: exit %d\n%s", code, out.String())
	}
}

func tableVersion(t *testing.T, dir string) int64 {
	t.Helper()
	tb, err := merge.Open(context.Background(), dir, merge.Options{Sink: "x", AllowForeignSink: true})
	if err != nil {
		t.Fatal(err)
	}
	return tb.Version()
}

// typedSchema gives the columns of sc the types the table has, by asking the
// table to describe itself through a stored row's Go values.
func typedSchema(tb *merge.Table, sc *normalize.Schema) (*normalize.Schema, error) {
	out := &normalize.Schema{}
	types := tb.ColumnTypes()
	for _, c := range sc.Columns {
		c.Type = types[c.Name]
		out.Columns = append(out.Columns, c)
	}
	return out, nil
}
