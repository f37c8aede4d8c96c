package audit

import (
	"context"
	"testing"

	"github.com/cdcsink/cdc-sink/internal/deltacheck"
	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/tablerows"
	"github.com/cdcsink/cdc-sink/versioning"
)

var itemsSchema = &normalize.Schema{Columns: []normalize.ColumnDef{
	{Name: "id", Type: normalize.Type{Kind: normalize.Long}},
	{Name: "name", Type: normalize.Type{Kind: normalize.String}, Nullable: true},
	{Name: "qty", Type: normalize.Type{Kind: normalize.Integer}, Nullable: true},
}}

func upsert(id int64, name string, qty int32, lsn uint64) *normalize.Change {
	return &normalize.Change{Op: normalize.OpUpsert, SourceOp: 'c', KeyNames: []string{"id"}, Key: []any{id},
		Schema: itemsSchema, Row: []any{id, name, qty}, Version: versioning.Version{Phase: versioning.PhaseStream, Commit: lsn, LSN: lsn}}
}

func del(id int64, lsn uint64) *normalize.Change {
	return &normalize.Change{Op: normalize.OpDelete, SourceOp: 'd', KeyNames: []string{"id"}, Key: []any{id},
		Schema: itemsSchema, Row: make([]any, 3), Version: versioning.Version{Phase: versioning.PhaseStream, Commit: lsn, LSN: lsn}}
}

// apply commits changes as one batch of sink to the table at dir; next is
// the partition's next offset after the batch.
func apply(t *testing.T, dir, sink string, next int64, cs ...*normalize.Change) {
	t.Helper()
	ctx := context.Background()
	tb, err := merge.Open(ctx, dir, merge.Options{Sink: sink, AllowForeignSink: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cs {
		c.Coord = normalize.Coord{Topic: "dbz.public.items", Partition: 0, Offset: next - int64(len(cs)) + int64(i)}
		c.Table = normalize.TableID{Server: "dbz", Schema: "public", Table: "items"}
	}
	b := &merge.Batch{Changes: cs, Offsets: map[merge.TP]int64{{Topic: "dbz.public.items", Partition: 0}: next}}
	if _, err := tb.Apply(ctx, b, func(_ context.Context, _ int64, rs []merge.Reject) error {
		if len(rs) > 0 {
			t.Fatalf("rejects: %+v", rs)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func open(t *testing.T, dir string) *tablerows.Table {
	t.Helper()
	tb, err := tablerows.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// liveDeltaRS is the number of live rows delta-rs reads from dir.
func liveDeltaRS(t *testing.T, dir string) int {
	t.Helper()
	return len(deltacheck.ReadDeltaRS(t, dir, "NOT _cdc_deleted").Rows)
}
