package main

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/cdcsink/cdc-sink/internal/golden"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/cdcsink/cdc-sink/internal/deltacheck"
	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/versioning"
)

// runCLI runs realMain in-process.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := realMain(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func mkVer(lsn uint64) versioning.Version {
	return versioning.Version{Phase: versioning.PhaseStream, Commit: lsn, LSN: lsn}
}

func mkType(k normalize.Kind) normalize.Type { return normalize.Type{Kind: k} }

// allTypesSchema has one column of every Delta type cdc-sink writes.
var allTypesSchema = &normalize.Schema{Columns: []normalize.ColumnDef{
	{Name: "id", Type: mkType(normalize.Long)},
	{Name: "name", Type: mkType(normalize.String), Nullable: true},
	{Name: "amount", Type: normalize.Type{Kind: normalize.Decimal, Precision: 12, Scale: 2}, Nullable: true},
	{Name: "rate", Type: normalize.Type{Kind: normalize.Decimal, Precision: 10, Scale: 4}, Nullable: true},
	{Name: "price", Type: mkType(normalize.Double), Nullable: true},
	{Name: "ratio", Type: mkType(normalize.Float), Nullable: true},
	{Name: "qty", Type: mkType(normalize.Integer), Nullable: true},
	{Name: "small", Type: mkType(normalize.Short), Nullable: true},
	{Name: "tiny", Type: mkType(normalize.Byte), Nullable: true},
	{Name: "active", Type: mkType(normalize.Boolean), Nullable: true},
	{Name: "born", Type: mkType(normalize.Date), Nullable: true},
	{Name: "created", Type: mkType(normalize.Timestamp), Nullable: true},
	{Name: "local", Type: mkType(normalize.TimestampNTZ), Nullable: true},
	{Name: "data", Type: mkType(normalize.Binary), Nullable: true},
	{Name: "tags", Type: normalize.Type{Kind: normalize.Array, Elem: &normalize.Type{Kind: normalize.String}}, Nullable: true},
	{Name: "attrs", Type: normalize.Type{Kind: normalize.Map, Key: &normalize.Type{Kind: normalize.String}, Val: &normalize.Type{Kind: normalize.Long}}, Nullable: true},
	{Name: "addr", Type: normalize.Type{Kind: normalize.Struct, Fields: []normalize.ColumnDef{
		{Name: "city", Type: mkType(normalize.String), Nullable: true},
		{Name: "zip", Type: mkType(normalize.Integer), Nullable: true}}}, Nullable: true},
}}

// allTypesRow is the row of id with every column set (the id picks a few values).
func allTypesRow(id int64, name, amount string) []any {
	ts := time.Date(2024, 1, 2, 3, 4, 5, 123456000, time.UTC).UnixMicro()
	return []any{id, name, decimal.RequireFromString(amount), decimal.RequireFromString("0.0500"),
		1.5, float32(0.25), int32(7), int16(-3), int8(1), true,
		int32(19724), // 2024-01-02
		ts, ts + 3600e6, []byte{0, 1, 2, 255},
		[]any{"a", "b\"c"}, []normalize.MapEntry{{Key: "x", Value: int64(1)}},
		[]any{"Lisboa", int32(1000)}}
}

func thingUpsert(id int64, row []any, v versioning.Version) *normalize.Change {
	return &normalize.Change{Op: normalize.OpUpsert, SourceOp: 'c', KeyNames: []string{"id"}, Key: []any{id},
		Schema: allTypesSchema, Row: row, Version: v}
}

func thingDelete(id int64, v versioning.Version) *normalize.Change {
	return &normalize.Change{Op: normalize.OpDelete, SourceOp: 'd', KeyNames: []string{"id"}, Key: []any{id},
		Schema: allTypesSchema, Row: make([]any, len(allTypesSchema.Columns)), Version: v}
}

// applyChanges applies changes as one batch of topic "dbz.public.things" to the table at dir.
func applyChanges(t *testing.T, dir, sink string, next int64, cs ...*normalize.Change) *merge.Result {
	t.Helper()
	ctx := context.Background()
	tb, err := merge.Open(ctx, dir, merge.Options{Sink: sink, AllowForeignSink: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cs {
		c.Coord = normalize.Coord{Topic: "dbz.public.things", Partition: 0, Offset: next - int64(len(cs)) + int64(i)}
		c.Table = normalize.TableID{Server: "dbz", Schema: "public", Table: "things"}
	}
	b := &merge.Batch{Changes: cs, Offsets: map[merge.TP]int64{{Topic: "dbz.public.things", Partition: 0}: next}}
	res, err := tb.Apply(ctx, b, func(_ context.Context, _ int64, rs []merge.Reject) error {
		if len(rs) > 0 {
			t.Fatalf("rejects: %+v", rs)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// buildThings writes a table: ids 1..3 (2 updated, 3 deleted later), so it
// has a deletion vector and a tombstone.
func buildThings(t *testing.T, dir string) {
	t.Helper()
	applyChanges(t, dir, "things", 3,
		thingUpsert(1, allTypesRow(1, "one", "12.30"), mkVer(10)),
		thingUpsert(2, allTypesRow(2, "two", "-0.05"), mkVer(11)),
		thingUpsert(3, allTypesRow(3, "three", "1000"), mkVer(12)))
	applyChanges(t, dir, "things", 5,
		thingUpsert(2, allTypesRow(2, "two v2", "2.00"), mkVer(20)),
		thingDelete(3, mkVer(21)))
}

const wantRow1 = `{"id":1,"name":"one","amount":"12.30","rate":"0.0500","price":1.5,"ratio":0.25,"qty":7,"small":-3,"tiny":1,"active":true,` +
	`"born":"2024-01-02","created":"2024-01-02T03:04:05.123456Z","local":"2024-01-02T04:04:05.123456","data":"AAEC/w==",` +
	`"tags":["a","b\"c"],"attrs":{"x":1},"addr":{"city":"Lisboa","zip":1000}}`

func TestTableShow(t *testing.T) {
	dir := t.TempDir()
	buildThings(t, dir)
	business := "id,name,amount,rate,price,ratio,qty,small,tiny,active,born,created,local,data,tags,attrs,addr"
	tests := []struct {
		name     string
		args     []string
		wantCode int
		check    func(t *testing.T, out string)
	}{
		{"jsonl exact", []string{"table", "show", dir, "--columns", business}, 0, func(t *testing.T, out string) {
			if !strings.Contains(out, wantRow1+"\n") {
				t.Errorf("got\n%s\nwant\n%s", out, wantRow1)
			}
		}},
		{"tombstones hidden", []string{"table", "show", dir, "--columns", "id,name,_cdc_deleted"}, 0, func(t *testing.T, out string) {
			want := `{"id":1,"name":"one","_cdc_deleted":false}` + "\n" + `{"id":2,"name":"two v2","_cdc_deleted":false}` + "\n"
			if sortedLines(out) != want {
				t.Errorf("got\n%s", out)
			}
		}},
		{"include deleted", []string{"table", "show", "--include-deleted", dir, "--columns", "id,amount,_cdc_deleted,_cdc_op"}, 0, func(t *testing.T, out string) {
			want := `{"id":1,"amount":"12.30","_cdc_deleted":false,"_cdc_op":"c"}` + "\n" +
				`{"id":2,"amount":"2.00","_cdc_deleted":false,"_cdc_op":"c"}` + "\n" +
				`{"id":3,"amount":null,"_cdc_deleted":true,"_cdc_op":"d"}` + "\n"
			if sortedLines(out) != want {
				t.Errorf("got\n%s", out)
			}
		}},
		{"limit", []string{"table", "show", dir, "--limit", "1", "--columns", "id"}, 0, func(t *testing.T, out string) {
			if strings.Count(out, "\n") != 1 {
				t.Errorf("got\n%s", out)
			}
		}},
		{"table format", []string{"table", "show", dir, "--format", "table", "--columns", "id,name,amount,created,tags"}, 0, func(t *testing.T, out string) {
			// Rows come in file order (the updated 2 lives in the newer file): sort them.
			lines := strings.SplitAfter(out, "\n")
			if len(lines) == 6 {
				out = lines[0] + lines[1] + sortedLines(lines[2]+lines[3]) + lines[4]
			}
			want := "id  name    amount  created                      tags\n" +
				"--  ------  ------  ---------------------------  ------------\n" +
				"1   one     12.30   2024-01-02T03:04:05.123456Z  [\"a\",\"b\\\"c\"]\n" +
				"2   two v2  2.00    2024-01-02T03:04:05.123456Z  [\"a\",\"b\\\"c\"]\n" +
				"(2 rows)\n"
			if out != want {
				t.Errorf("got\n%s\nwant\n%s", out, want)
			}
		}},
		{"all columns", []string{"table", "show", dir}, 0, func(t *testing.T, out string) {
			if n := strings.Count(out, "\n"); n != 2 || !strings.Contains(out, `"_cdc_source_version":`) {
				t.Errorf("got\n%s", out)
			}
		}},
		{"unknown column", []string{"table", "show", dir, "--columns", "nope"}, 1, nil},
		{"bad format", []string{"table", "show", dir, "--format", "xml"}, 2, nil},
		{"not a table", []string{"table", "show", t.TempDir()}, 1, nil},
		{"no dir", []string{"table", "show"}, 2, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, tc.args...)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.wantCode, out, errOut)
			}
			if tc.check != nil {
				tc.check(t, out)
			}
		})
	}
}

func sortedLines(s string) string {
	ls := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	sort.Strings(ls)
	return strings.Join(ls, "\n") + "\n"
}

// Golden tables written by Spark: row counts (and decimal values) agree with delta-rs.
func TestTableShowGolden(t *testing.T) {
	for _, name := range []string{"basic-decimal-table", "dv-partitioned-with-checkpoint", "data-reader-primitives", "decimal-various-scale-precision",
		"data-reader-map", "data-reader-array-primitives", "data-reader-nested-struct", "data-reader-partition-values", "dv-with-columnmapping",
		"kernel-timestamp-INT96", "data-reader-timestamp_ntz", "multi-part-checkpoint"} {
		t.Run(name, func(t *testing.T) {
			dir := golden.Path(name)
			if _, err := os.Stat(dir); err != nil {
				t.Fatalf("golden table missing: %v", err)
			}
			code, out, errOut := runCLI(t, "table", "show", dir)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			rs := deltacheck.ReadDeltaRS(t, dir, "")
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if out == "" {
				lines = nil
			}
			if len(lines) != len(rs.Rows) {
				t.Fatalf("show printed %d rows, delta-rs reads %d", len(lines), len(rs.Rows))
			}
			// Every decimal (a string in both canonical forms) matches.
			ours := map[string]int{}
			for _, l := range lines {
				var m map[string]any
				d := json.NewDecoder(strings.NewReader(l))
				d.UseNumber()
				if err := d.Decode(&m); err != nil {
					t.Fatalf("bad jsonl %q: %v", l, err)
				}
				ours[canonKey(m)]++
			}
			theirs := map[string]int{}
			for _, m := range deltacheck.Decode(t, rs.Rows) {
				theirs[canonKey(m)]++
			}
			for k, n := range theirs {
				if ours[k] != n {
					t.Errorf("delta-rs row %s: %d times, show: %d", k, n, ours[k])
					break
				}
			}
			code, out, _ = runCLI(t, "table", "info", dir)
			if code != 0 || !strings.Contains(out, "rows:") {
				t.Errorf("info exit %d: %s", code, out)
			}
		})
	}
}

// canonKey renders the scalar columns (numbers, strings, booleans, nulls)
// in sorted key order, values made comparable by canonValue.
func canonKey(m map[string]any) string {
	keys := make([]string, 0, len(m))
	for k, v := range m {
		switch v.(type) {
		case string, json.Number, bool, nil:
		default:
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k + "=" + canonValue(m[k]) + ";")
	}
	return b.String()
}

// stringify compares numbers as float64 and decimal strings by value
// (python prints small decimals as 0E-10).
func canonValue(v any) string {
	switch x := v.(type) {
	case json.Number:
		if f, err := x.Float64(); err == nil {
			b, _ := json.Marshal(f)
			return string(b)
		}
	case string:
		if d, err := decimal.NewFromString(x); err == nil {
			return "dec:" + d.String()
		}
		// Our timestamps are RFC 3339 text; delta-rs gives microseconds.
		for _, layout := range []string{"2006-01-02T15:04:05.999999Z07:00", "2006-01-02T15:04:05.999999"} {
			if ts, err := time.Parse(layout, x); err == nil && len(x) >= 26 {
				b, _ := json.Marshal(float64(ts.UnixMicro()))
				return string(b)
			}
		}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func TestTableInfo(t *testing.T) {
	dir := t.TempDir()
	buildThings(t, dir)
	code, out, errOut := runCLI(t, "table", "info", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"version:       2", "sink:          things", "key columns:   id",
		"rows:          2 live, 1 deleted (tombstones)",
		"files:         2 (1 with deletion vectors hiding 2 rows)",
		"last batch:    2", "MERGE (v2)",
		"  things/dbz.public.things/0  5",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("info lacks %q:\n%s", want, out)
		}
	}
	// another instance of the sink (its own batch counter things@pod-1):
	// the last batch is the highest of all, and its counter is not another sink's txn
	ctx := context.Background()
	tb, err := merge.Open(ctx, dir, merge.Options{Sink: "things", InstanceID: "pod-1"})
	if err != nil {
		t.Fatal(err)
	}
	c := thingUpsert(1, allTypesRow(1, "one v2", "1.00"), mkVer(30))
	c.Coord = normalize.Coord{Topic: "dbz.public.things", Partition: 1, Offset: 0}
	c.Table = normalize.TableID{Server: "dbz", Schema: "public", Table: "things"}
	if _, err := tb.Apply(ctx, &merge.Batch{Changes: []*normalize.Change{c}, Offsets: map[merge.TP]int64{{Topic: "dbz.public.things", Partition: 1}: 1}},
		func(context.Context, int64, []merge.Reject) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if _, out, _ = runCLI(t, "table", "info", dir); !strings.Contains(out, "last batch:    3") || strings.Contains(out, "pod-1") {
		t.Errorf("info with two instances' batch counters:\n%s", out)
	}
}

// showAll returns the rows (with tombstones, business columns and
// _cdc_deleted/_cdc_source_version) sorted: the table's logical content.
func showAll(t *testing.T, dir string) string {
	t.Helper()
	code, out, errOut := runCLI(t, "table", "show", dir, "--include-deleted", "--columns",
		"id,name,amount,created,tags,attrs,addr,_cdc_deleted,_cdc_source_version,_cdc_ingest_ts")
	if code != 0 {
		t.Fatalf("show: exit %d: %s", code, errOut)
	}
	return sortedLines(out)
}

func TestTableOptimizePurgeVacuum(t *testing.T) {
	dir := t.TempDir()
	buildThings(t, dir)
	before := showAll(t, dir)
	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     string
	}{
		{"optimize dry run", []string{"table", "optimize", dir, "--dry-run"}, 0, "dry run: would rewrite 2 files (1 with deletion vectors"},
		{"optimize", []string{"table", "optimize", dir}, 0, "rewrote 2 files (1 with deletion vectors"},
		{"optimize again: nothing", []string{"table", "optimize", dir}, 0, "nothing to compact"},
		{"vacuum dry run lists nothing young", []string{"table", "vacuum", dir}, 0, "dry run: 0 files would be deleted"},
		{"vacuum dry run retention 0", []string{"table", "vacuum", dir, "--retention", "0s"}, 0, "dry run: 3 files would be deleted"},
		{"purge keeps young tombstones", []string{"table", "purge-tombstones", dir}, 0, "no tombstones ingested before"},
		{"purge dry run", []string{"table", "purge-tombstones", dir, "--older-than", "1ns", "--dry-run"}, 0, "would purge 1 tombstones"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, tc.args...)
			if code != tc.wantCode || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d (want %d)\nstdout: %s\nstderr: %s\nwant %q", code, tc.wantCode, out, errOut, tc.want)
			}
		})
	}
	// Optimize did not change the logical content; the file has no DV.
	if after := showAll(t, dir); after != before {
		t.Fatalf("optimize changed the content:\nbefore\n%s\nafter\n%s", before, after)
	}
	_, info, _ := runCLI(t, "table", "info", dir)
	if !strings.Contains(info, "files:         1 (0 with deletion vectors") || !strings.Contains(info, "OPTIMIZE") {
		t.Errorf("info after optimize:\n%s", info)
	}
	// delta-rs agrees, and a merge.Table reopened rebuilds its index from the
	// compacted file and keeps applying: 1 is updated, the deleted 3 stays
	// deleted against an older change.
	if rs := deltacheck.ReadDeltaRS(t, dir, ""); len(rs.Rows) != 3 {
		t.Fatalf("delta-rs reads %d rows", len(rs.Rows))
	}
	res := applyChanges(t, dir, "things", 7, thingUpsert(1, allTypesRow(1, "one v2", "1.00"), mkVer(30)), thingUpsert(3, allTypesRow(3, "zombie", "1"), mkVer(5)))
	if res.Updated != 1 || res.Stale != 1 {
		t.Fatalf("after optimize: %+v", res)
	}
	// Vacuum for real with retention 0 deletes the replaced files; the table still reads.
	code, out, _ := runCLI(t, "table", "vacuum", dir, "--retention", "0s", "--dry-run=false")
	if code != 0 || !strings.Contains(out, "deleted ") {
		t.Fatalf("vacuum: %d %s", code, out)
	}
	// Purge the tombstone of 3.
	code, out, errOut := runCLI(t, "table", "purge-tombstones", dir, "--older-than", "1ns")
	if code != 0 || !strings.Contains(out, "purged 1 tombstones") {
		t.Fatalf("purge: %d %s %s", code, out, errOut)
	}
	code, out, _ = runCLI(t, "table", "show", dir, "--include-deleted", "--columns", "id,name")
	if code != 0 || sortedLines(out) != `{"id":1,"name":"one v2"}`+"\n"+`{"id":2,"name":"two v2"}`+"\n" {
		t.Fatalf("after purge: %s", out)
	}
	if rs := deltacheck.ReadDeltaRS(t, dir, ""); len(rs.Rows) != 2 {
		t.Fatalf("delta-rs reads %d rows after purge", len(rs.Rows))
	}
	// The trade-off: an old change for the purged key now recreates it.
	res = applyChanges(t, dir, "things", 8, thingUpsert(3, allTypesRow(3, "resurrected", "1"), mkVer(6)))
	if res.Inserted != 1 {
		t.Fatalf("expected the documented resurrection after purge: %+v", res)
	}
}

// cleanup-log deletes commits older than the log retention once a checkpoint covers them.
func TestTableCleanupLog(t *testing.T) {
	dir := t.TempDir()
	for i := int64(1); i <= 12; i++ { // checkpoint at v10 (interval 10)
		applyChanges(t, dir, "things", i, thingUpsert(i, allTypesRow(i, "x", "1.00"), mkVer(uint64(i))))
	}
	code, out, _ := runCLI(t, "table", "cleanup-log", dir)
	if code != 0 || !strings.Contains(out, "deleted 0 log files") {
		t.Fatalf("young log: %d %s", code, out)
	}
	old := time.Now().Add(-40 * 24 * time.Hour)
	logs, _ := filepath.Glob(filepath.Join(dir, "_delta_log", "000*"))
	for _, f := range logs {
		if b := filepath.Base(f); b < "00000000000000000010" || strings.HasPrefix(b, "00000000000000000010.checkpoint") {
			if err := os.Chtimes(f, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	code, out, errOut := runCLI(t, "table", "cleanup-log", dir)
	if code != 0 || !strings.Contains(out, "deleted 10 log files") {
		t.Fatalf("cleanup: %d %s %s", code, out, errOut)
	}
	code, out, _ = runCLI(t, "table", "show", dir, "--columns", "id")
	if code != 0 || strings.Count(out, "\n") != 12 {
		t.Fatalf("table after cleanup: %d %s", code, out)
	}
}
