package maintain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/cdcsink/cdc-sink/internal/golden"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/shopspring/decimal"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/internal/deltacheck"
	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/cdcsink/cdc-sink/tablerows"
	"github.com/cdcsink/cdc-sink/versioning"
)

func personSchema(age normalize.Kind) *normalize.Schema {
	return &normalize.Schema{Columns: []normalize.ColumnDef{
		{Name: "id", Type: normalize.Type{Kind: normalize.Long}},
		{Name: "age", Type: normalize.Type{Kind: age}, Nullable: true},
		{Name: "name", Type: normalize.Type{Kind: normalize.String}, Nullable: true},
		{Name: "price", Type: normalize.Type{Kind: normalize.Decimal, Precision: 12, Scale: 4}, Nullable: true},
		{Name: "seen", Type: normalize.Type{Kind: normalize.Timestamp}, Nullable: true},
		{Name: "addr", Type: normalize.Type{Kind: normalize.Struct, Fields: []normalize.ColumnDef{
			{Name: "city", Type: normalize.Type{Kind: normalize.String}, Nullable: true},
			{Name: "zip", Type: normalize.Type{Kind: normalize.Integer}, Nullable: true}}}, Nullable: true},
	}}
}

var personLong = personSchema(normalize.Long)

func person(id int64, age any, name, price string, lsn uint64) *normalize.Change {
	return &normalize.Change{Op: normalize.OpUpsert, SourceOp: 'c', KeyNames: []string{"id"}, Key: []any{id},
		Schema: personLong, Row: []any{id, age, name, decimal.RequireFromString(price), int64(1704164645123456), []any{"Lisboa", int32(1000 + id)}},
		Version: versioning.Version{Phase: versioning.PhaseStream, Commit: lsn, LSN: lsn}}
}

func personDelete(id int64, lsn uint64) *normalize.Change {
	return &normalize.Change{Op: normalize.OpDelete, SourceOp: 'd', KeyNames: []string{"id"}, Key: []any{id},
		Schema: personLong, Row: make([]any, len(personLong.Columns)),
		Version: versioning.Version{Phase: versioning.PhaseStream, Commit: lsn, LSN: lsn}}
}

// apply commits changes as one batch of topic dbz.public.people (offsets
// up to next) and returns the rejects.
func apply(t *testing.T, dir string, next int64, cs ...*normalize.Change) []merge.Reject {
	t.Helper()
	ctx := context.Background()
	tb, err := merge.Open(ctx, dir, merge.Options{Sink: "people"})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cs {
		c.Coord = normalize.Coord{Topic: "dbz.public.people", Partition: 0, Offset: next - int64(len(cs)) + int64(i)}
		c.Table = normalize.TableID{Server: "dbz", Schema: "public", Table: "people"}
	}
	var rejects []merge.Reject
	b := &merge.Batch{Changes: cs, Offsets: map[merge.TP]int64{{Topic: "dbz.public.people", Partition: 0}: next}}
	if _, err := tb.Apply(ctx, b, func(_ context.Context, _ int64, rs []merge.Reject) error {
		rejects = append(rejects, rs...)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return rejects
}

// buildPeople writes two files: ids 1..4, then 2 updated (a deletion
// vector on the first file) and 3 deleted (a tombstone).
func buildPeople(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "people")
	if rs := apply(t, dir, 4,
		person(1, int64(40), "ana", "12.3400", 10),
		person(2, int64(30), "bo", "1.0000", 11),
		person(3, nil, "cy", "0.5000", 12),
		person(4, int64(-7), "di", "-3.1200", 13)); len(rs) > 0 {
		t.Fatalf("rejects %+v", rs)
	}
	if rs := apply(t, dir, 6, person(2, int64(31), "bo", "2.0000", 20), personDelete(3, 21)); len(rs) > 0 {
		t.Fatalf("rejects %+v", rs)
	}
	return dir
}

// allRows is the table's content as `table show --include-deleted` sees it,
// one map per row, sorted by id.
func allRows(t *testing.T, dir string) []map[string]string {
	t.Helper()
	tb, err := tablerows.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	cols := tb.Columns()
	var out []map[string]string
	err = tb.Scan(context.Background(), tablerows.ScanOptions{IncludeDeleted: true}, func(r tablerows.Row) error {
		m := map[string]string{}
		for i, c := range cols {
			m[c] = r[i]
		}
		out = append(out, m)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i]["id"] < out[j]["id"] })
	return out
}

// dataFiles lists the parquet files on disk (referenced or not).
func dataFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && strings.HasSuffix(p, ".parquet") && !strings.Contains(p, "_delta_log") {
			out = append(out, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func snapshot(t *testing.T, dir string) *delta.Snapshot {
	t.Helper()
	s, err := delta.OpenTable(delta.NewLocalStorage(dir), "").Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func commitInfo(t *testing.T, dir string, v int64) map[string]any {
	t.Helper()
	name := fmt.Sprintf("%020d.json", v)
	data, err := os.ReadFile(filepath.Join(dir, "_delta_log", name))
	if err != nil {
		t.Fatal(err)
	}
	acts, err := delta.ParseCommit(name, data)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range acts {
		if a.CommitInfo != nil {
			return a.CommitInfo
		}
	}
	t.Fatalf("v%d has no commitInfo", v)
	return nil
}

// long -> string on a cdc-sink table with a deletion vector and a
// tombstone: one commit, every other column, txn, domain and property
// unchanged, the values converted, delta-rs reads the same, and the sink
// then takes string changes and refuses long ones.
func TestAlterColumnRewrite(t *testing.T) {
	ctx := context.Background()
	dir := buildPeople(t)
	before := allRows(t, dir)
	snapBefore := snapshot(t, dir)
	rsBefore := deltacheck.ReadDeltaRS(t, dir, "")

	res, err := AlterColumn(ctx, dir, "age", "string", AlterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := AlterResult{Column: "age", OldType: "long", NewType: "string", ReadVersion: 2, Version: 3, Committed: true,
		FilesRemoved: 2, DVFilesRemoved: 1, FilesAdded: 2, Rows: 4, Values: 3}
	if *res != want {
		t.Fatalf("result\n%+v\nwant\n%+v", *res, want)
	}
	after := allRows(t, dir)
	if len(after) != len(before) {
		t.Fatalf("%d rows before, %d after", len(before), len(after))
	}
	for i := range before {
		b, a := before[i], after[i]
		for c := range b {
			if c == "age" {
				wantAge := b[c]
				if wantAge != "null" {
					wantAge = `"` + wantAge + `"`
				}
				if a[c] != wantAge {
					t.Errorf("id %s: age %s, want %s", b["id"], a[c], wantAge)
				}
				continue
			}
			if a[c] != b[c] {
				t.Errorf("id %s: column %s changed: %s -> %s", b["id"], c, b[c], a[c])
			}
		}
	}
	if after[2]["_cdc_deleted"] != "true" || after[2]["_cdc_op"] != `"d"` {
		t.Errorf("tombstone of 3 not kept: %v", after[2])
	}
	snap := snapshot(t, dir)
	if !reflect.DeepEqual(snap.Txns(), snapBefore.Txns()) {
		t.Errorf("txns changed: %v -> %v", snapBefore.Txns(), snap.Txns())
	}
	for _, d := range snapBefore.Domains() {
		b, _ := snapBefore.DomainMetadata(d)
		a, ok := snap.DomainMetadata(d)
		if !ok || a != b {
			t.Errorf("domain %s changed: %q -> %q", d, b, a)
		}
	}
	if !reflect.DeepEqual(snap.Metadata().Configuration, snapBefore.Metadata().Configuration) || snap.Metadata().ID != snapBefore.Metadata().ID {
		t.Errorf("metadata changed: %+v", snap.Metadata())
	}
	if !reflect.DeepEqual(snap.Protocol(), snapBefore.Protocol()) {
		t.Errorf("protocol changed: %+v", snap.Protocol())
	}
	sc, _ := snap.Schema()
	if f, _ := sc.Field("age"); f.Type.TypeName() != "string" || !f.Nullable {
		t.Errorf("age is %s nullable=%v", f.Type.TypeName(), f.Nullable)
	}
	for _, f := range snap.Files() {
		if f.DeletionVector != nil || !f.DataChange {
			t.Errorf("new file %s: dv %v dataChange %v", f.Path, f.DeletionVector, f.DataChange)
		}
	}
	ci := commitInfo(t, dir, 3)
	params, _ := ci["operationParameters"].(map[string]any)
	if ci["operation"] != OpAlterColumn || params["column"] != "age" || params["oldType"] != "long" || params["newType"] != "string" {
		t.Errorf("commitInfo %v", ci)
	}
	// delta-rs: same rows, age now text.
	rs := deltacheck.ReadDeltaRS(t, dir, "")
	if rs.Version != 3 || len(rs.Rows) != len(rsBefore.Rows) {
		t.Fatalf("delta-rs: v%d %d rows", rs.Version, len(rs.Rows))
	}
	b, a := deltacheck.Decode(t, rsBefore.Rows), deltacheck.Decode(t, rs.Rows)
	bk, ak := deltacheck.ByKey(b, "id"), deltacheck.ByKey(a, "id")
	for k, br := range bk {
		ar := ak[k]
		if br["age"] != nil {
			if s, ok := ar["age"].(string); !ok || s != fmt.Sprint(br["age"]) {
				t.Errorf("delta-rs id %s: age %v (%T), was %v", k, ar["age"], ar["age"], br["age"])
			}
		} else if ar["age"] != nil {
			t.Errorf("delta-rs id %s: age %v, was null", k, ar["age"])
		}
		delete(br, "age")
		delete(ar, "age")
		if !reflect.DeepEqual(br, ar) {
			t.Errorf("delta-rs id %s:\n%v\n%v", k, br, ar)
		}
	}
	// The sink takes the new type and refuses the old one; the key index
	// was rebuilt from the rewritten files (2 is updated, the deleted 3 stays
	// deleted against an older change).
	s := &normalize.Schema{Columns: append([]normalize.ColumnDef(nil), personLong.Columns...)}
	s.Columns[1].Type = normalize.Type{Kind: normalize.String}
	c := person(2, "thirty-two", "bo", "2.0000", 30)
	c.Schema = s
	old := person(1, int64(41), "ana", "12.3400", 31)
	stale := person(3, "x", "cy", "0.5000", 5)
	stale.Schema = s
	rejects := apply(t, dir, 9, c, old, stale)
	if len(rejects) != 1 || rejects[0].Reason != quarantine.SchemaMismatch || !strings.Contains(rejects[0].Message, "table has string, change has long") {
		t.Fatalf("rejects after alter: %+v", rejects)
	}
	rows := allRows(t, dir)
	if rows[1]["age"] != `"thirty-two"` || rows[2]["_cdc_deleted"] != "true" {
		t.Fatalf("after applying: %v / %v", rows[1], rows[2])
	}
}

// Decimal scale decrease: allowed when every stored value has zeros in the
// dropped digits, refused (naming key and value, nothing left on disk)
// otherwise.
func TestAlterColumnDecimalScale(t *testing.T) {
	ctx := context.Background()
	dir := buildPeople(t)
	files := dataFiles(t, dir)
	_, err := AlterColumn(ctx, dir, "price", "decimal(10,1)", AlterOptions{})
	if err == nil || !strings.Contains(err.Error(), `column price: key id=1: value "12.3400" has more than 1 fraction digits`) {
		t.Fatalf("err = %v", err)
	}
	if got := dataFiles(t, dir); !reflect.DeepEqual(got, files) {
		t.Fatalf("files left behind:\n%v\nwas\n%v", got, files)
	}
	if v := snapshot(t, dir).Version(); v != 2 {
		t.Fatalf("version %d after a refused alter", v)
	}
	res, err := AlterColumn(ctx, dir, "price", "decimal(10,2)", AlterOptions{})
	if err != nil || res.Widening {
		t.Fatalf("%+v %v", res, err)
	}
	var prices []string
	for _, r := range allRows(t, dir) {
		prices = append(prices, r["price"])
	}
	if strings.Join(prices, " ") != `"12.34" "2.00" null "-3.12"` {
		t.Fatalf("prices %v", prices)
	}
	if rs := deltacheck.ReadDeltaRS(t, dir, "id = 4"); len(rs.Rows) != 1 || !strings.Contains(rs.Rows[0], `"price":"-3.12"`) {
		t.Fatalf("delta-rs: %v", rs.Rows)
	}
}

// Every refusal happens before anything is written.
func TestAlterColumnRefusals(t *testing.T) {
	ctx := context.Background()
	dir := buildPeople(t)
	unsupported := filepath.Join(t.TempDir(), "unsupported")
	copyTree(t, dir, unsupported)
	// A later protocol with a writer feature we do not implement.
	if err := os.WriteFile(filepath.Join(unsupported, "_delta_log", fmt.Sprintf("%020d.json", 3)),
		[]byte(`{"protocol":{"minReaderVersion":3,"minWriterVersion":7,"readerFeatures":["deletionVectors"],"writerFeatures":["deletionVectors","domainMetadata","generatedColumns"]}}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	newer := filepath.Join(t.TempDir(), "newer")
	copyTree(t, dir, newer)
	if err := os.WriteFile(filepath.Join(newer, "_delta_log", fmt.Sprintf("%020d.json", 3)),
		[]byte(`{"protocol":{"minReaderVersion":4,"minWriterVersion":8}}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	files := dataFiles(t, dir)
	tests := []struct {
		name, dir, column, typ, err string
	}{
		{"unknown column", dir, "agee", "string", `column "agee" is not in the table (columns: id, age, name, price, seen, addr, _cdc_deleted`},
		{"key column", dir, "id", "string", "column id is a key column (cdcsink.keyColumns=id): its type is part of every key's identity"},
		{"metadata column", dir, "_cdc_op", "binary", "column _cdc_op is a cdc-sink metadata column"},
		{"same type", dir, "age", "long", "column age already has type long"},
		{"same type, other spelling", dir, "AGE", " LONG ", "column age already has type long"},
		{"unknown type", dir, "age", "bigint", `unknown type "bigint"`},
		{"invalid decimal", dir, "price", "decimal(39,2)", `invalid decimal type "decimal(39,2)"`},
		{"no conversion", dir, "age", "boolean", "column age: no conversion from long to boolean"},
		{"value that does not convert", dir, "name", "long", `is not an integer, so it cannot become long (nothing was committed)`},
		{"dry run converts everything, writes nothing", dir, "age", "byte", ""}, // every age fits a byte
		{"unsupported protocol", unsupported, "age", "string", `table cannot be rewritten: delta: unsupported writer feature "generatedColumns"`},
		{"newer protocol", newer, "age", "string", "readerVersion 4"},
		{"not a table", t.TempDir(), "age", "string", "not a Delta table"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err == "" {
				res, err := AlterColumn(ctx, tc.dir, tc.column, tc.typ, AlterOptions{DryRun: true})
				if err != nil || res.Committed || res.FilesAdded != 2 {
					t.Fatalf("dry run: %+v %v", res, err)
				}
				return
			}
			_, err := AlterColumn(ctx, tc.dir, tc.column, tc.typ, AlterOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err = %v\nwant %q", err, tc.err)
			}
			// The error names the row by its key and shows the value.
			if tc.name == "value that does not convert" && !regexp.MustCompile(`column name: key id=\d: value "\w+" is not`).MatchString(err.Error()) {
				t.Fatalf("err = %v", err)
			}
		})
	}
	if got := dataFiles(t, dir); !reflect.DeepEqual(got, files) {
		t.Fatalf("files written by refused alters:\n%v", got)
	}
	if v := snapshot(t, dir).Version(); v != 2 {
		t.Fatalf("version %d after refusals", v)
	}
}

// A writer that commits between our read and our commit wins: the alter
// fails with a conflict, deletes its files, and the table holds exactly the
// other writer's commit.
func TestAlterColumnConcurrentWriter(t *testing.T) {
	ctx := context.Background()
	dir := buildPeople(t)
	files := dataFiles(t, dir)
	var ours []string
	_, err := AlterColumn(ctx, dir, "age", "string", AlterOptions{fault: func(point string) error {
		if point == "before-commit" {
			for _, f := range dataFiles(t, dir) {
				if !contains(files, f) {
					ours = append(ours, f)
				}
			}
			apply(t, dir, 7, person(5, int64(50), "ed", "5.0000", 40))
		}
		return nil
	}})
	if err == nil || !errors.Is(err, delta.ErrConflict) || !strings.Contains(err.Error(), "another writer committed while the table was rewritten") ||
		!strings.Contains(err.Error(), "the 2 data files written by this attempt were deleted") {
		t.Fatalf("err = %v", err)
	}
	if len(ours) != 2 {
		t.Fatalf("the attempt wrote %v", ours)
	}
	for _, f := range ours {
		if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind (%v)", f, err)
		}
	}
	snap := snapshot(t, dir)
	sc, _ := snap.Schema()
	if f, _ := sc.Field("age"); snap.Version() != 3 || f.Type.TypeName() != "long" {
		t.Fatalf("v%d, age %s", snap.Version(), f.Type.TypeName())
	}
	if rows := allRows(t, dir); len(rows) != 5 || rows[4]["age"] != "50" {
		t.Fatalf("rows %v", rows)
	}
	// Run again once the writer is quiet: it succeeds.
	if res, err := AlterColumn(ctx, dir, "age", "string", AlterOptions{}); err != nil || res.Version != 4 || res.Rows != 5 {
		t.Fatalf("rerun: %+v %v", res, err)
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// A crash after the files are written and before the commit leaves the
// table unchanged for every reader; a rerun completes the alter.
func TestAlterColumnCrashBeforeCommit(t *testing.T) {
	ctx := context.Background()
	for _, point := range []string{"files-written", "before-commit"} {
		t.Run(point, func(t *testing.T) {
			dir := buildPeople(t)
			before := allRows(t, dir)
			crash := errors.New("crash")
			_, err := AlterColumn(ctx, dir, "age", "string", AlterOptions{fault: func(p string) error {
				if p == point {
					return crash
				}
				return nil
			}})
			if !errors.Is(err, crash) {
				t.Fatalf("err = %v", err)
			}
			if v := snapshot(t, dir).Version(); v != 2 {
				t.Fatalf("version %d after the crash", v)
			}
			if after := allRows(t, dir); !reflect.DeepEqual(after, before) {
				t.Fatalf("content changed by a crashed alter")
			}
			if rs := deltacheck.ReadDeltaRS(t, dir, ""); rs.Version != 2 || len(rs.Rows) != 4 {
				t.Fatalf("delta-rs: v%d %d rows", rs.Version, len(rs.Rows))
			}
			if res, err := AlterColumn(ctx, dir, "age", "string", AlterOptions{}); err != nil || res.Version != 3 {
				t.Fatalf("rerun: %+v %v", res, err)
			}
		})
	}
}

// A Spark-written partitioned table with deletion vectors and a checkpoint
// (no cdc-sink keys): integer -> long is a widening (reported), partition
// values and the rows hidden by DVs are honoured, delta-rs agrees; the
// partition column itself is refused.
func TestAlterColumnGoldenPartitioned(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "t")
	copyTree(t, golden.Path("dv-partitioned-with-checkpoint"), dir)
	rsBefore := deltacheck.ReadDeltaRS(t, dir, "")
	if _, err := AlterColumn(ctx, dir, "part", "long", AlterOptions{}); err == nil || !strings.Contains(err.Error(), "column part is a partition column") {
		t.Fatalf("err = %v", err)
	}
	// Without key columns a bad value is named by its file and position.
	if _, err := AlterColumn(ctx, dir, "col2", "long", AlterOptions{}); err == nil ||
		!regexp.MustCompile(`column col2: live row \d+ of part=\d/part-\S+\.parquet: value "foo\d+" is not an integer`).MatchString(err.Error()) {
		t.Fatalf("err = %v", err)
	}
	res, err := AlterColumn(ctx, dir, "col1", "long", AlterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Widening || res.DVFilesRemoved == 0 || res.Rows != int64(len(rsBefore.Rows)) {
		t.Fatalf("result %+v (delta-rs had %d rows)", res, len(rsBefore.Rows))
	}
	rs := deltacheck.ReadDeltaRS(t, dir, "")
	if rs.Version != res.Version || strings.Join(rs.Rows, "\n") != strings.Join(rsBefore.Rows, "\n") {
		t.Fatalf("delta-rs after: v%d %d rows (before %d)", rs.Version, len(rs.Rows), len(rsBefore.Rows))
	}
	if snap := snapshot(t, dir); snap.Files()[0].PartitionValues["part"] == nil {
		t.Fatalf("partition values lost: %+v", snap.Files()[0])
	}
}

// timestamp -> timestamp_ntz adds the timestampNtz feature in the same commit.
func TestAlterColumnTimestampNTZ(t *testing.T) {
	dir := buildPeople(t)
	res, err := AlterColumn(context.Background(), dir, "seen", "timestamp_ntz", AlterOptions{})
	if err != nil || !res.ProtocolUpgraded {
		t.Fatalf("%+v %v", res, err)
	}
	p := snapshot(t, dir).Protocol()
	if !p.HasFeature("timestampNtz") || !contains(p.ReaderFeatures, "deletionVectors") {
		t.Fatalf("protocol %+v", p)
	}
	if rows := allRows(t, dir); rows[0]["seen"] != `"2024-01-02T03:04:05.123456"` {
		t.Fatalf("seen %s", rows[0]["seen"])
	}
	rs := deltacheck.ReadDeltaRS(t, dir, "id = 1")
	var m map[string]any
	if len(rs.Rows) != 1 || json.Unmarshal([]byte(rs.Rows[0]), &m) != nil || m["seen"] != float64(1704164645123456) {
		t.Fatalf("delta-rs: %v", rs.Rows)
	}
}

// A struct that becomes a scalar at the source: struct -> string holds the
// struct's JSON text; delta-rs reads it as a string.
func TestAlterColumnStructToString(t *testing.T) {
	dir := buildPeople(t)
	res, err := AlterColumn(context.Background(), dir, "addr", "string", AlterOptions{})
	if err != nil || res.OldType != `{"type":"struct","fields":[{"name":"city","type":"string","nullable":true,"metadata":{}},{"name":"zip","type":"integer","nullable":true,"metadata":{}}]}` {
		t.Fatalf("%+v %v", res, err)
	}
	if rows := allRows(t, dir); rows[0]["addr"] != `"{\"city\":\"Lisboa\",\"zip\":1001}"` || rows[2]["addr"] != "null" {
		t.Fatalf("addr %s / %s", rows[0]["addr"], rows[2]["addr"])
	}
	rs := deltacheck.ReadDeltaRS(t, dir, "id = 4")
	if len(rs.Rows) != 1 || !strings.Contains(rs.Rows[0], `"addr":"{\"city\":\"Lisboa\",\"zip\":1004}"`) {
		t.Fatalf("delta-rs: %v", rs.Rows)
	}
}
