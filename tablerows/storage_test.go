package tablerows

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/cdcsink/cdc-sink/delta"
)

// A table on any delta.Storage reads through it: data files and deletion
// vectors (MemStorage here: no file system involved).
func TestOpenStorageReadsDataAndDVsThroughStorage(t *testing.T) {
	ctx := context.Background()
	store := delta.NewMemStorage()
	schema := `{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}}]}`
	proto := delta.Protocol{MinReaderVersion: 3, MinWriterVersion: 7,
		ReaderFeatures: []string{"deletionVectors"}, WriterFeatures: []string{"deletionVectors"}}
	tb, err := delta.Create(ctx, store, "", delta.Metadata{SchemaString: schema, Configuration: map[string]string{"delta.enableDeletionVectors": "true"}}, proto)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := tb.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b := array.NewInt64Builder(memory.DefaultAllocator)
	b.AppendValues([]int64{1, 2, 3, 4, 5}, nil)
	col := b.NewArray()
	defer col.Release()
	rec := array.NewRecordBatch(arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64, Nullable: true}}, nil), []arrow.Array{col}, 5)
	defer rec.Release()
	add, err := snap.WriteDataFile(ctx, []arrow.RecordBatch{rec}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := snap.Begin().Add(add).Commit(ctx, "WRITE", nil); err != nil {
		t.Fatal(err)
	}
	if snap, err = tb.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	bm := roaring64.New()
	bm.AddMany([]uint64{1, 3})
	na, rm, _, err := tb.ReplaceDeletionVector(ctx, snap.Files()[0], bm, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := snap.Begin().Remove(rm).Add(na).Commit(ctx, "DELETE", nil); err != nil {
		t.Fatal(err)
	}
	rt, err := OpenStorage(ctx, store, "mem://t")
	if err != nil {
		t.Fatal(err)
	}
	c, err := rt.Count(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c.Live != 3 || rt.Dir != "mem://t" {
		t.Fatalf("count %+v dir %s, want 3 live rows", c, rt.Dir)
	}
	var ids []int64
	err = rt.ScanFile(ctx, &rt.Snap.Files()[0], []string{"id"}, false, func(r arrow.RecordBatch) error {
		ids = append(ids, r.Column(0).(*array.Int64).Int64Values()...)
		return nil
	})
	if err != nil || len(ids) != 3 || ids[0] != 1 || ids[1] != 3 || ids[2] != 5 {
		t.Fatalf("ScanFile = %v, %v; want [1 3 5]", ids, err)
	}
	if _, err := OpenStorage(ctx, delta.NewMemStorage(), "mem://empty"); !errors.Is(err, ErrNotATable) {
		t.Fatalf("empty store: %v", err)
	}
	if _, err := Open(ctx, "s3://lake/t"); !errors.Is(err, delta.ErrBackendNotBuilt) {
		t.Fatalf("s3 location: %v", err)
	}
}
