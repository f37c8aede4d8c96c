// Runnable examples of the delta package's API (checked by go test).

package delta_test

import (
	"context"
	"fmt"
	"os"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/cdcsink/cdc-sink/delta"
)

// Create a table on local disk, commit one data file with an idempotency
// txn, and read the latest snapshot back.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "delta-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	store := delta.NewLocalStorage(dir)
	meta := delta.Metadata{SchemaString: `{"type":"struct","fields":[` +
		`{"name":"id","type":"long","nullable":false,"metadata":{}},` +
		`{"name":"name","type":"string","nullable":true,"metadata":{}}]}`}
	tb, err := delta.Create(ctx, store, "orders", meta, delta.Protocol{MinReaderVersion: 1, MinWriterVersion: 2})
	if err != nil {
		panic(err)
	}

	// Write a data file against the latest snapshot, then commit it.
	snap, err := tb.Snapshot(ctx)
	if err != nil {
		panic(err)
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil))
	defer b.Release()
	b.Field(0).(*array.Int64Builder).AppendValues([]int64{1, 2}, nil)
	b.Field(1).(*array.StringBuilder).AppendValues([]string{"ana", "bruno"}, nil)
	rec := b.NewRecordBatch()
	defer rec.Release()
	add, err := snap.WriteDataFile(ctx, []arrow.RecordBatch{rec}, nil)
	if err != nil {
		panic(err)
	}
	res, err := snap.Begin().Add(add).SetAppTransaction("my-sink", 1).CommitWithResult(ctx, "WRITE", nil)
	if err != nil {
		panic(err)
	}
	fmt.Println("committed version", res.Version, "checkpoint error:", res.CheckpointErr)

	// Read it back.
	snap, err = tb.Snapshot(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("version", snap.Version(), "files", len(snap.Files()), "txn my-sink", snap.Txns()["my-sink"].Version)
	for r, err := range snap.Scan(ctx, delta.ScanOptions{Columns: []string{"id", "name"}}) {
		if err != nil {
			panic(err)
		}
		ids, names := r.Column(0).(*array.Int64), r.Column(1).(*array.String)
		for i := 0; i < int(r.NumRows()); i++ {
			fmt.Println(ids.Value(i), names.Value(i))
		}
		r.Release()
	}
	// Output:
	// committed version 1 checkpoint error: <nil>
	// version 1 files 1 txn my-sink 1
	// 1 ana
	// 2 bruno
}
