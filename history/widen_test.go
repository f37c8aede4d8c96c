package history_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/delta/schema"
	"github.com/cdcsink/cdc-sink/history"
	"github.com/cdcsink/cdc-sink/internal/deltacheck"
	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/cdcsink/cdc-sink/versioning"
)

func nt(k normalize.Kind) normalize.Type { return normalize.Type{Kind: k} }

func arrayOf(k normalize.Kind) normalize.Type {
	e := nt(k)
	return normalize.Type{Kind: normalize.Array, Elem: &e}
}

// items before and after ALTER TABLE items ALTER id TYPE bigint, qty TYPE
// bigint, price TYPE numeric(12,2), ratio TYPE double precision, tags TYPE
// bigint[].
var (
	itemsNarrow = &normalize.Schema{Columns: []normalize.ColumnDef{
		{Name: "id", Type: nt(normalize.Integer)},
		{Name: "qty", Type: nt(normalize.Integer), Nullable: true},
		{Name: "price", Type: normalize.Type{Kind: normalize.Decimal, Precision: 10, Scale: 2}, Nullable: true},
		{Name: "ratio", Type: nt(normalize.Float), Nullable: true},
		{Name: "tags", Type: arrayOf(normalize.Integer), Nullable: true},
		{Name: "note", Type: nt(normalize.String), Nullable: true},
	}}
	itemsWide = &normalize.Schema{Columns: []normalize.ColumnDef{
		{Name: "id", Type: nt(normalize.Long)},
		{Name: "qty", Type: nt(normalize.Long), Nullable: true},
		{Name: "price", Type: normalize.Type{Kind: normalize.Decimal, Precision: 12, Scale: 2}, Nullable: true},
		{Name: "ratio", Type: nt(normalize.Double), Nullable: true},
		{Name: "tags", Type: arrayOf(normalize.Long), Nullable: true},
		{Name: "note", Type: nt(normalize.String), Nullable: true},
	}}
)

// item is one row image, typed by the test (narrow values fit both types).
type item struct {
	id, qty int64
	price   string
	ratio   float64 // exact as a float32 in narrow rows
	tags    []int64
	note    string
}

// values is the row in the Go types of s (the narrow or the wide source).
func (it item) values(wide bool) []any {
	tags := make([]any, len(it.tags))
	for i, x := range it.tags {
		tags[i] = x
		if !wide {
			tags[i] = int32(x)
		}
	}
	price := decimal.RequireFromString(it.price)
	if wide {
		return []any{it.id, it.qty, price, it.ratio, tags, it.note}
	}
	return []any{int32(it.id), int32(it.qty), price, float32(it.ratio), tags, it.note}
}

// typed renders a value with its Go types, so an int32 read back where the
// history should hold an int64 does not compare equal.
func typed(v any) string {
	switch x := v.(type) {
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = typed(e)
		}
		return "[" + strings.Join(parts, " ") + "]"
	case decimal.Decimal:
		return "decimal(" + x.StringFixed(2) + ")"
	case nil:
		return "nil"
	}
	return fmt.Sprintf("%T(%v)", v, v)
}

// widenStep is one source record of the widening stream.
type widenStep struct {
	batch         int
	op            byte // c u d
	wide          bool // the source table's type after the ALTER
	ver           uint64
	after, before *item
	oldKey        int64 // create half of a primary-key change
	keyMoved      bool
	outcome       string
}

const itemsTopic = "shop.public.items"

func (s widenStep) change(off int) *normalize.Change {
	sch := itemsNarrow
	if s.wide {
		sch = itemsWide
	}
	key := func(id int64) any {
		if s.wide {
			return id
		}
		return int32(id)
	}
	c := &normalize.Change{Table: normalize.TableID{Server: "shop", Schema: "public", Table: "items"},
		Op: normalize.OpUpsert, SourceOp: s.op, KeyNames: []string{"id"},
		Version:        versioning.Version{Commit: s.ver, LSN: s.ver},
		SourceTsMicros: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixMicro() + int64(s.ver),
		Coord:          normalize.Coord{Topic: itemsTopic, Offset: int64(off)}, KeyMoved: s.keyMoved}
	switch {
	case s.op == 'd':
		c.Op, c.Key, c.Schema, c.Row = normalize.OpDelete, []any{key(s.before.id)}, sch, s.before.values(s.wide)
	default:
		c.Key, c.Schema, c.Row = []any{key(s.after.id)}, sch, s.after.values(s.wide)
		if s.before != nil {
			c.BeforeSchema, c.Before = sch, s.before.values(s.wide)
		}
	}
	if s.oldKey != 0 {
		c.OldKey = []any{key(s.oldKey)}
	}
	return c
}

// widenStream: rows written while the columns are narrow, then the source
// widens them (ALTER … TYPE) and later records carry the wide types and
// values only they hold; a redelivered and a late record still have the
// narrow types.
func widenStream() []widenStep {
	a1 := &item{1, 7, "12.34", 0.5, []int64{1, 2}, "a"}
	a2 := &item{2, -8, "-99999999.99", -1.25, nil, "b"}
	a3 := &item{3, 3, "0.01", 3.75, []int64{3}, "c"}
	a1b := &item{1, 9, "12.35", 0.5, []int64{1, 2}, "a2"}
	a30 := &item{30, 3, "0.01", 3.75, []int64{3}, "c"}
	w1 := &item{1, 1 << 40, "9999999999.99", 1e300, []int64{1 << 40}, "w"}
	w5 := &item{5_000_000_000, -1 << 62, "-9999999999.99", -2.5e-300, []int64{-1 << 50, 0}, "big"}
	w5b := &item{5_000_000_000, 1, "0.00", 0, []int64{}, "big2"}
	late := &item{1, 8, "1.00", 0.25, nil, "late"}
	return []widenStep{
		{batch: 0, op: 'c', ver: 1, after: a1, outcome: "applied"},
		{batch: 0, op: 'c', ver: 2, after: a2, outcome: "applied"},
		{batch: 0, op: 'c', ver: 3, after: a3, outcome: "applied"},
		{batch: 1, op: 'u', ver: 4, after: a1b, before: a1, outcome: "applied"},
		// primary-key change 3 → 30: delete half, create half
		{batch: 1, op: 'd', ver: 5, before: a3, keyMoved: true, outcome: "applied"},
		{batch: 1, op: 'c', ver: 6, after: a30, oldKey: 3, outcome: "applied"},
		// the source widened its columns here
		{batch: 2, op: 'u', wide: true, ver: 7, after: w1, before: a1b, outcome: "applied"},
		{batch: 2, op: 'c', wide: true, ver: 8, after: w5, outcome: "applied"},
		{batch: 2, op: 'd', wide: true, ver: 9, before: a2, outcome: "applied"},
		{batch: 3, op: 'c', ver: 6, after: a30, oldKey: 3, outcome: "duplicate"}, // redelivered, narrow
		{batch: 3, op: 'u', wide: true, ver: 10, after: w5b, before: w5, outcome: "applied"},
		{batch: 3, op: 'u', ver: 5, after: late, outcome: "stale"}, // late, narrow
	}
}

// applyWiden writes the stream through history.Tracked over a merge table
// in the given widening mode, one Apply per batch.
func applyWiden(t *testing.T, mode merge.WideningMode, cur, hist string, steps []widenStep) {
	t.Helper()
	ctx := context.Background()
	now := func() time.Time { return time.Unix(1.7e9, 0) }
	tr := tracked(t, cur, hist, merge.Options{Now: now, Widening: mode}, history.Options{Now: now})
	var cs []*normalize.Change
	flush := func() {
		if len(cs) == 0 {
			return
		}
		next := cs[len(cs)-1].Coord.Offset + 1
		if _, err := tr.Apply(ctx, &merge.Batch{Changes: cs, Offsets: map[merge.TP]int64{{Topic: itemsTopic}: next}},
			func(_ context.Context, _ int64, rs []merge.Reject) error {
				if len(rs) > 0 {
					return fmt.Errorf("rejected: %+v", rs)
				}
				return nil
			}); err != nil {
			t.Fatalf("batch ending at offset %d: %v", next-1, err)
		}
		if tr.Written != len(cs) {
			t.Fatalf("batch ending at offset %d: %d history rows written, want %d", next-1, tr.Written, len(cs))
		}
		cs = nil
	}
	for off, s := range steps {
		if off > 0 && s.batch != steps[off-1].batch {
			flush()
		}
		cs = append(cs, s.change(off))
	}
	flush()
}

// typeChangesOf is the delta.typeChanges entries of field path (a.b) as text.
func typeChangesOf(t *testing.T, sch *schema.StructType, path string) string {
	t.Helper()
	parts := strings.Split(path, ".")
	st := sch
	var f *schema.StructField
	for i, p := range parts {
		if f, _ = st.Field(p); f == nil {
			t.Fatalf("history schema has no field %s", path)
		}
		if i < len(parts)-1 {
			st = f.Type.(*schema.StructType)
		}
	}
	tc, err := schema.TypeChanges(f)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range tc {
		s := fmt.Sprintf("%v->%v", c["fromType"], c["toType"])
		if p, ok := c["fieldPath"]; ok {
			s += "@" + fmt.Sprint(p)
		}
		out = append(out, s)
	}
	return f.Type.TypeName() + " " + strings.Join(out, ",")
}

// TestHistoryFollowsWidening: a source table whose columns widen midway
// (integer → long, also the key; numeric(10,2) → numeric(12,2); float →
// double; integer[] → bigint[]), through history.Tracked over a current
// table in both widening modes. The history follows with Delta type
// widening, append-only: no file is ever removed or rewritten, every field
// of the before/after structs (and the key, and the old-key struct) records
// its change in delta.typeChanges (fieldPath only for the array element),
// and the table has the typeWidening feature. Every record has its row, and
// rows written before the ALTER read back in the wide types, also through
// DuckDB and Spark; delta-rs 1.6 refuses the typeWidening feature, so it reads
// the history as of the version before the widening. A rebuild from the
// history equals the live table (and delta-rs reads it).
func TestHistoryFollowsWidening(t *testing.T) {
	ctx := context.Background()
	steps := widenStream()
	histories := map[string]merge.WideningMode{} // for Spark, at the end
	base := t.TempDir()                          // outlives the subtests
	for _, mode := range []merge.WideningMode{merge.WidenTypeWidening, merge.WidenRewrite} {
		t.Run(string(mode), func(t *testing.T) {
			cur, hist := filepath.Join(base, string(mode), "current"), filepath.Join(base, string(mode), "history")
			for _, d := range []string{cur, hist} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			applyWiden(t, mode, cur, hist, steps)

			// every record, old ones in the wide types
			es := entries(t, hist)
			if len(es) != len(steps) {
				t.Fatalf("history has %d rows, stream %d records", len(es), len(steps))
			}
			for _, e := range es {
				off := int(e.Change.Coord.Offset)
				s := steps[off]
				c := e.Change
				if e.Outcome != s.outcome || c.SourceOp != s.op {
					t.Errorf("offset %d: outcome %s op %c, want %s %c", off, e.Outcome, c.SourceOp, s.outcome, s.op)
				}
				img, row := s.after, c.Row
				if s.op == 'd' {
					img = s.before
				}
				if got, want := typed(c.Key), typed([]any{img.id}); got != want {
					t.Errorf("offset %d: key %s, want %s", off, got, want)
				}
				if got, want := typed(row), typed(img.values(true)); got != want {
					t.Errorf("offset %d: image\n got %s\nwant %s", off, got, want)
				}
				if s.op == 'u' && s.before != nil {
					if got, want := typed(c.Before), typed(s.before.values(true)); got != want {
						t.Errorf("offset %d: before image\n got %s\nwant %s", off, got, want)
					}
				}
				if s.oldKey != 0 {
					if got, want := typed(c.OldKey), typed([]any{s.oldKey}); got != want {
						t.Errorf("offset %d: old key %s, want %s", off, got, want)
					}
				}
				if c.KeyMoved != s.keyMoved {
					t.Errorf("offset %d: key moved %v", off, c.KeyMoved)
				}
			}

			// Delta type widening, append-only
			snap, err := delta.OpenTable(delta.NewLocalStorage(hist), "").Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if rm := snap.AllTombstones(); len(rm) > 0 {
				t.Errorf("history removed %d files (rewritten?): %v", len(rm), rm[0].Path)
			}
			if p := snap.Protocol(); !slices.Contains(p.ReaderFeatures, "typeWidening") || !slices.Contains(p.WriterFeatures, "typeWidening") {
				t.Errorf("history protocol %+v lacks typeWidening", p)
			}
			if v, _ := snap.Config("delta.enableTypeWidening"); v != "true" {
				t.Errorf("delta.enableTypeWidening = %q", v)
			}
			sch, err := snap.Schema()
			if err != nil {
				t.Fatal(err)
			}
			for path, want := range map[string]string{
				"id":              "long integer->long",
				"_cdc_old_key.id": "long integer->long",
				"before.id":       "long integer->long",
				"after.qty":       "long integer->long",
				"before.qty":      "long integer->long",
				"after.price":     "decimal(12,2) decimal(10,2)->decimal(12,2)",
				"after.ratio":     "double float->double",
				"before.ratio":    "double float->double",
				"after.tags":      "array integer->long@element",
				"after.note":      "string ",
			} {
				if got := typeChangesOf(t, sch, path); got != want {
					t.Errorf("history field %s: %q, want %q", path, got, want)
				}
			}

			// DuckDB (the docs' engine, delta extension) reads narrow and wide files as the wide types
			// (integers as text: the helper decodes JSON numbers as float64)
			rows := duckdb(t, "SELECT _cdc_offset AS off, CAST(id AS VARCHAR) AS id, CAST(after.qty AS VARCHAR) AS qty, "+
				"CAST(after.price AS VARCHAR) AS price, after.ratio AS ratio, list_transform(after.tags, x -> CAST(x AS VARCHAR)) AS tags, "+
				"typeof(after.qty) AS qty_type, typeof(id) AS id_type, typeof(after.tags) AS tags_type "+
				"FROM delta_scan('lake/history/orders') WHERE _cdc_op <> 'd' ORDER BY _cdc_offset", hist)
			checkEngineRows(t, "duckdb", steps, rows)
			for _, r := range rows {
				if r["qty_type"] != "BIGINT" || r["id_type"] != "BIGINT" || r["tags_type"] != "BIGINT[]" {
					t.Fatalf("duckdb reads qty as %v, id as %v, tags as %v", r["qty_type"], r["id_type"], r["tags_type"])
				}
			}

			// delta-rs: the history up to the version before the widening
			// (it refuses the typeWidening feature, docs/history.md)
			if n := len(deltacheck.ReadDeltaRSAt(t, hist, "", 2).Rows); n != 6 {
				t.Errorf("delta-rs reads %d rows of history version 2, want the 6 narrow ones", n)
			}

			// rebuild from the history equals the live table
			dst := t.TempDir()
			if st := rebuild(t, hist, dst, 0); st.Entries != len(steps) {
				t.Fatalf("rebuild read %d entries, want %d", st.Entries, len(steps))
			}
			assertRebuilt(t, cur, dst)
			histories[hist] = mode
		})
	}
	// Spark (delta-spark 4 implements typeWidening) reads both histories in one session.
	if len(histories) != 2 {
		return
	}
	var dirs []string
	for d := range histories {
		dirs = append(dirs, d)
	}
	for dir, tb := range deltacheck.ReadSpark(t, dirs...) {
		var rows []map[string]any
		for _, r := range deltacheck.Decode(t, tb.Rows) {
			if r["_cdc_op"] == "d" {
				continue
			}
			after, _ := r["after"].(map[string]any)
			rows = append(rows, map[string]any{"off": r["_cdc_offset"], "id": r["id"], "qty": after["qty"], "price": after["price"],
				"ratio": after["ratio"], "tags": after["tags"]})
		}
		checkEngineRows(t, "spark "+string(histories[dir]), steps, rows)
	}
}

// checkEngineRows compares an engine's after images (columns off, id, qty,
// price, ratio, tags; numbers as json.Number or float64) with the stream's.
func checkEngineRows(t *testing.T, engine string, steps []widenStep, rows []map[string]any) {
	t.Helper()
	var want []string
	for off, s := range steps {
		if s.op == 'd' {
			continue
		}
		it := s.after
		want = append(want, fmt.Sprintf("%d id=%d qty=%d price=%s ratio=%s tags=%v", off, it.id, it.qty, it.price, num(it.ratio), it.tags))
	}
	var got []string
	for _, r := range rows {
		var tags []string
		if ts, ok := r["tags"].([]any); ok {
			for _, x := range ts {
				tags = append(tags, fmt.Sprint(x))
			}
		}
		ratio := fmt.Sprint(r["ratio"])
		if f, err := json.Number(ratio).Float64(); err == nil {
			ratio = num(f)
		}
		got = append(got, fmt.Sprintf("%v id=%v qty=%v price=%v ratio=%s tags=[%s]", r["off"], r["id"], r["qty"], r["price"], ratio, strings.Join(tags, " ")))
	}
	slices.Sort(want)
	slices.Sort(got)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s reads the widened history differently:\n got %s\nwant %s", engine, strings.Join(got, "\n     "), strings.Join(want, "\n     "))
	}
}

func num(f float64) string { return fmt.Sprint(f) }

// TestHistoryRefusesInexpressibleWidening: a widening the current table
// follows by rewriting its files but Delta type widening cannot express
// (long → double, date → timestamp) stops the batch with a schema_mismatch
// error naming the column and both types; neither table commits anything.
// A new history location (the documented way out) takes the batch.
func TestHistoryRefusesInexpressibleWidening(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name       string
		from, to   normalize.Kind
		narrow     any
		wide       any
		fromT, toT string
	}{
		{"long-double", normalize.Long, normalize.Double, int64(7), 0.5, "long", "double"},
		{"date-timestamp", normalize.Date, normalize.Timestamp, int32(3), int64(1_500_000), "date", "timestamp"},
	}
	for _, mode := range []merge.WideningMode{merge.WidenRewrite, merge.WidenTypeWidening} {
		for _, tc := range cases {
			t.Run(string(mode)+"/"+tc.name, func(t *testing.T) {
				cur, hist := t.TempDir(), t.TempDir()
				tr := tracked(t, cur, hist, merge.Options{Widening: mode}, history.Options{})
				mk := func(off int, k normalize.Kind, v any) *normalize.Change {
					sch := &normalize.Schema{Columns: []normalize.ColumnDef{{Name: "id", Type: nt(normalize.Long)}, {Name: "c", Type: nt(k), Nullable: true}}}
					return &normalize.Change{Table: normalize.TableID{Schema: "public", Table: "t"}, Op: normalize.OpUpsert, SourceOp: 'u',
						KeyNames: []string{"id"}, Key: []any{int64(off)}, Schema: sch, Row: []any{int64(off), v},
						Version: versioning.Version{Commit: uint64(off + 1), LSN: uint64(off + 1)}, SourceTsMicros: 1_700_000_000_000_000,
						Coord: normalize.Coord{Topic: "t", Offset: int64(off)}}
				}
				apply := func(tr *history.Tracked, c *normalize.Change) error {
					_, err := tr.Apply(ctx, &merge.Batch{Changes: []*normalize.Change{c}, Offsets: map[merge.TP]int64{{Topic: "t"}: c.Coord.Offset + 1}},
						func(context.Context, int64, []merge.Reject) error { return nil })
					return err
				}
				if err := apply(tr, mk(0, tc.from, tc.narrow)); err != nil {
					t.Fatal(err)
				}
				hv, cv := version(t, hist), version(t, cur)
				err := apply(tr, mk(1, tc.to, tc.wide))
				if reason, _ := quarantine.ReasonOf(err); reason != quarantine.SchemaMismatch {
					t.Fatalf("widening %s: error %v (reason %q), want schema_mismatch", tc.name, err, reason)
				}
				for _, s := range []string{"column c ", "from " + tc.fromT + " to " + tc.toT, hist, "new location"} {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error does not say %q: %v", s, err)
					}
				}
				if version(t, hist) != hv || version(t, cur) != cv {
					t.Fatalf("something was committed: history %d → %d, current %d → %d", hv, version(t, hist), cv, version(t, cur))
				}
				// the way out: a new history table from this batch on
				hist2 := t.TempDir()
				hw2, err := history.Open(ctx, hist2, history.Options{Sink: "s"})
				if err != nil {
					t.Fatal(err)
				}
				if err := apply(&history.Tracked{Table: tr.Table, History: hw2}, mk(1, tc.to, tc.wide)); err != nil {
					t.Fatalf("with a new history: %v", err)
				}
				if es := entries(t, hist2); len(es) != 1 || es[0].Change.Coord.Offset != 1 {
					t.Fatalf("new history holds %d rows, want the batch's one", len(es))
				}
			})
		}
	}
}

func version(t *testing.T, dir string) int64 {
	t.Helper()
	v, err := delta.OpenTable(delta.NewLocalStorage(dir), "").LatestVersion(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestHistoryWideningCasts: widenings whose narrow values change
// representation — date → timestamp_ntz (days → midnight microseconds, and
// the table gains the timestampNtz feature) and integer → decimal — are
// converted exactly, also for a narrow record after the widening; DuckDB
// reads the old and new files alike.
func TestHistoryWideningCasts(t *testing.T) {
	ctx := context.Background()
	const day = int64(86_400_000_000)
	cases := []struct {
		name                string
		from, to            normalize.Type
		v0, v1, v2          any      // narrow, wide, narrow again
		want                []string // typed values read back, offsets 0..2
		duck                []string // DuckDB's text of them
		toT, fromT, feature string
	}{
		{"date-timestamp_ntz", nt(normalize.Date), nt(normalize.TimestampNTZ), int32(3), 5*day + 1_500_000, int32(-1),
			[]string{fmt.Sprintf("int64(%d)", 3*day), fmt.Sprintf("int64(%d)", 5*day+1_500_000), fmt.Sprintf("int64(%d)", -day)},
			[]string{"1970-01-04 00:00:00", "1970-01-06 00:00:01.5", "1969-12-31 00:00:00"}, "timestamp_ntz", "date", "timestampNtz"},
		{"integer-decimal", nt(normalize.Integer), normalize.Type{Kind: normalize.Decimal, Precision: 12, Scale: 2}, int32(7), decimal.RequireFromString("123456789.12"), int32(-8),
			[]string{"decimal(7.00)", "decimal(123456789.12)", "decimal(-8.00)"}, []string{"7.00", "123456789.12", "-8.00"}, "decimal(12,2)", "integer", "typeWidening"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cur, hist := t.TempDir(), t.TempDir()
			tr := tracked(t, cur, hist, merge.Options{Widening: merge.WidenTypeWidening}, history.Options{})
			for off, v := range []any{tc.v0, tc.v1, tc.v2} {
				typ := tc.from
				if off == 1 {
					typ = tc.to
				}
				sch := &normalize.Schema{Columns: []normalize.ColumnDef{{Name: "id", Type: nt(normalize.Long)}, {Name: "c", Type: typ, Nullable: true}}}
				c := &normalize.Change{Table: normalize.TableID{Schema: "public", Table: "t"}, Op: normalize.OpUpsert, SourceOp: 'c',
					KeyNames: []string{"id"}, Key: []any{int64(off)}, Schema: sch, Row: []any{int64(off), v},
					Version: versioning.Version{Commit: uint64(off + 1), LSN: uint64(off + 1)}, SourceTsMicros: 1_700_000_000_000_000,
					Coord: normalize.Coord{Topic: "t", Offset: int64(off)}}
				if _, err := tr.Apply(ctx, &merge.Batch{Changes: []*normalize.Change{c}, Offsets: map[merge.TP]int64{{Topic: "t"}: int64(off + 1)}},
					func(context.Context, int64, []merge.Reject) error { return nil }); err != nil {
					t.Fatalf("offset %d: %v", off, err)
				}
			}
			for _, e := range entries(t, hist) {
				off := e.Change.Coord.Offset
				if got := typed(e.Change.Row[1]); got != tc.want[off] {
					t.Errorf("offset %d: c = %s, want %s", off, got, tc.want[off])
				}
			}
			snap, err := delta.OpenTable(delta.NewLocalStorage(hist), "").Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if p := snap.Protocol(); !slices.Contains(p.ReaderFeatures, tc.feature) || !slices.Contains(p.ReaderFeatures, "typeWidening") {
				t.Errorf("protocol %+v: want %s and typeWidening", p, tc.feature)
			}
			sch, err := snap.Schema()
			if err != nil {
				t.Fatal(err)
			}
			if got, want := typeChangesOf(t, sch, "after.c"), tc.toT+" "+tc.fromT+"->"+tc.toT; got != want {
				t.Errorf("after.c: %q, want %q", got, want)
			}
			rows := duckdb(t, "SELECT _cdc_offset AS off, CAST(after.c AS VARCHAR) AS c FROM delta_scan('lake/history/orders') ORDER BY _cdc_offset", hist)
			var got []string
			for _, r := range rows {
				got = append(got, fmt.Sprint(r["c"]))
			}
			if strings.Join(got, "|") != strings.Join(tc.duck, "|") {
				t.Errorf("duckdb reads %q, want %q", got, tc.duck)
			}
		})
	}
}
