//go:build e2e

package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/cdcsink/cdc-sink/internal/deltacheck"
	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/versioning"
)

func typ(k normalize.Kind) normalize.Type { return normalize.Type{Kind: k} }

// allTypes is a source schema with every type cdc-sink writes.
var allTypes = &normalize.Schema{Columns: []normalize.ColumnDef{
	{Name: "id", Type: typ(normalize.Long)},
	{Name: "b", Type: typ(normalize.Boolean), Nullable: true},
	{Name: "i8", Type: typ(normalize.Byte), Nullable: true},
	{Name: "i16", Type: typ(normalize.Short), Nullable: true},
	{Name: "i32", Type: typ(normalize.Integer), Nullable: true},
	{Name: "f32", Type: typ(normalize.Float), Nullable: true},
	{Name: "f64", Type: typ(normalize.Double), Nullable: true},
	{Name: "dec", Type: normalize.Type{Kind: normalize.Decimal, Precision: 12, Scale: 2}, Nullable: true},
	{Name: "bigdec", Type: normalize.Type{Kind: normalize.Decimal, Precision: 38, Scale: 10}, Nullable: true},
	{Name: "s", Type: typ(normalize.String), Nullable: true},
	{Name: "bin", Type: typ(normalize.Binary), Nullable: true},
	{Name: "d", Type: typ(normalize.Date), Nullable: true},
	{Name: "ts", Type: typ(normalize.Timestamp), Nullable: true},
	{Name: "ntz", Type: typ(normalize.TimestampNTZ), Nullable: true},
	{Name: "tags", Type: normalize.Type{Kind: normalize.Array, Elem: &normalize.Type{Kind: normalize.String}}, Nullable: true},
	{Name: "attrs", Type: normalize.Type{Kind: normalize.Map, Key: &normalize.Type{Kind: normalize.String}, Val: &normalize.Type{Kind: normalize.String}}, Nullable: true},
	{Name: "pt", Type: normalize.Type{Kind: normalize.Struct, Fields: []normalize.ColumnDef{
		{Name: "x", Type: typ(normalize.Double), Nullable: true}, {Name: "y", Type: typ(normalize.Double), Nullable: true}}}, Nullable: true},
}}

func allTypesRow(id int64, gen int) []any {
	if id%7 == 3 { // a row of nulls (except the key)
		row := make([]any, len(allTypes.Columns))
		row[0] = id
		return row
	}
	sign := int64(1)
	if id%2 == 1 {
		sign = -1
	}
	return []any{
		id, id%3 == 0, int8(id % 100), int16(id * 7 % 30000), int32(id * 1000), float32(id) / 3, float64(id) * 1.5e10,
		decimal.New(sign*(id*12345+int64(gen)), -2), decimal.RequireFromString(fmt.Sprintf("%d1234567890.0123456789", sign*id)),
		fmt.Sprintf("row %d gen %d — ünïcode ✓", id, gen), []byte{0, byte(id), 0xff},
		int32(-25567 + int(id)*1000), // 1900-01-01 onwards
		time.Date(1900+int(id)*40%8000, 1, 2, 3, 4, 5, 123456000, time.UTC).UnixMicro(),
		time.Date(2024, 2, 29, 23, 59, 59, 999999000, time.UTC).UnixMicro() + id,
		[]any{"a", nil, fmt.Sprint(gen)},
		[]normalize.MapEntry{{Key: "k1", Value: "v"}, {Key: "k2", Value: nil}},
		[]any{float64(id), -float64(gen)},
	}
}

// TestSparkReadsOurTables writes a table with every supported type, deletion
// vectors (updates and deletes over 14 batches), checkpoints and a schema
// evolution, then requires Spark (delta-spark) and delta-rs to read exactly
// the same rows.
func TestSparkReadsOurTables(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "alltypes")
	tb, err := merge.Open(ctx, dir, merge.Options{Sink: "spark-check"})
	if err != nil {
		t.Fatal(err)
	}
	wider := &normalize.Schema{Columns: append(append([]normalize.ColumnDef(nil), allTypes.Columns...),
		normalize.ColumnDef{Name: "added_later", Type: typ(normalize.String), Nullable: true})}
	lsn := uint64(100)
	off := int64(0)
	for batch := 0; batch < 14; batch++ {
		var cs []*normalize.Change
		for id := int64(1); id <= 40; id++ {
			if batch > 0 && (id+int64(batch))%3 != 0 {
				continue // later batches touch a third of the keys
			}
			lsn += 10
			c := &normalize.Change{Op: normalize.OpUpsert, SourceOp: 'u', KeyNames: []string{"id"}, Key: []any{id},
				Schema: allTypes, Row: allTypesRow(id, batch), SourceTsMicros: time.Now().UnixMicro(),
				Version: versioning.Version{Phase: versioning.PhaseStream, Commit: lsn, LSN: lsn}}
			if batch >= 8 {
				c.Schema = wider
				c.Row = append(c.Row, fmt.Sprintf("new %d", batch))
			}
			if batch%5 == 4 && id%4 == 0 {
				c.Op, c.SourceOp, c.Row = normalize.OpDelete, 'd', nil
			}
			cs = append(cs, c)
		}
		off += int64(len(cs))
		if _, err := tb.Apply(ctx, &merge.Batch{Changes: cs, Offsets: map[merge.TP]int64{{Topic: "t", Partition: 0}: off}},
			func(_ context.Context, _ int64, rs []merge.Reject) error {
				if len(rs) > 0 {
					t.Fatalf("rejects: %+v", rs)
				}
				return nil
			}); err != nil {
			t.Fatal(err)
		}
	}
	if tb.Version() < 10 {
		t.Fatalf("only %d versions: no checkpoint exercised", tb.Version())
	}
	rs := deltacheck.ReadDeltaRS(t, dir, "")
	start := time.Now()
	sp := deltacheck.ReadSpark(t, dir)[dir]
	t.Logf("spark read in %s: %d rows; delta-rs %d rows at v%d", time.Since(start).Round(time.Millisecond), len(sp.Rows), len(rs.Rows), rs.Version)
	if len(rs.Rows) != 40 || len(sp.Rows) != len(rs.Rows) {
		t.Fatalf("rows: delta-rs %d, spark %d, want 40", len(rs.Rows), len(sp.Rows))
	}
	for i := range rs.Rows {
		if rs.Rows[i] != sp.Rows[i] {
			t.Fatalf("row %d differs:\ndelta-rs %s\nspark    %s", i, rs.Rows[i], sp.Rows[i])
		}
	}
}
