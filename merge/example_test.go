// Runnable examples of the merge package's API (checked by go test).

package merge_test

import (
	"context"
	"fmt"
	"os"

	"github.com/cdcsink/cdc-sink/layout"
	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/versioning"
)

// Open a table, apply a batch whose changes arrive out of order (an update
// before the create it follows, a delete of another key), then a batch
// redelivering an old change, and read the rows: the source version
// decides, not the arrival order.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "merge-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	tb, err := merge.Open(ctx, dir, merge.Options{Sink: "example"})
	if err != nil {
		panic(err)
	}
	sch := &normalize.Schema{Columns: []normalize.ColumnDef{
		{Name: "id", Type: normalize.Type{Kind: normalize.Long}},
		{Name: "status", Type: normalize.Type{Kind: normalize.String}, Nullable: true},
	}}
	change := func(offset, id int64, op normalize.Op, status any, lsn uint64) *normalize.Change {
		return &normalize.Change{
			Table: normalize.TableID{Server: "dbz", Schema: "public", Table: "orders"},
			Op:    op, KeyNames: []string{"id"}, Key: []any{id}, Schema: sch, Row: []any{id, status},
			Version: versioning.Version{Phase: versioning.PhaseStream, Commit: lsn, LSN: lsn},
			Coord:   normalize.Coord{Topic: "dbz.public.orders", Partition: 0, Offset: offset},
		}
	}
	batch := &merge.Batch{
		Changes: []*normalize.Change{
			change(0, 1, normalize.OpUpsert, "PAID", 20), // newer, delivered first
			change(1, 1, normalize.OpUpsert, "NEW", 10),  // older: superseded within the batch
			change(2, 2, normalize.OpUpsert, "NEW", 11),
			change(3, 2, normalize.OpDelete, nil, 30),
		},
		Offsets: map[merge.TP]int64{{Topic: "dbz.public.orders", Partition: 0}: 4}, // next offset to read
	}
	// reject would write refused changes to the quarantine; none here.
	reject := func(ctx context.Context, batchID int64, rs []merge.Reject) error {
		if len(rs) > 0 {
			return fmt.Errorf("%d rejected changes", len(rs))
		}
		return nil
	}
	res, err := tb.Apply(ctx, batch, reject)
	if err != nil {
		panic(err)
	}
	fmt.Printf("batch %d: version %d, %d inserted, %d deleted, %d stale\n", res.BatchID, res.Version, res.Inserted, res.Deleted, res.Stale)

	// A redelivery of the older change of key 1 (Kafka is at-least-once).
	again := &merge.Batch{
		Changes: []*normalize.Change{change(4, 1, normalize.OpUpsert, "NEW", 10)},
		Offsets: map[merge.TP]int64{{Topic: "dbz.public.orders", Partition: 0}: 5},
	}
	if res, err = tb.Apply(ctx, again, reject); err != nil {
		panic(err)
	}
	fmt.Printf("batch %d: version %d, %d updated, %d stale\n", res.BatchID, res.Version, res.Updated, res.Stale)
	next, _ := tb.NextOffset("dbz.public.orders", 0)
	fmt.Println("next offset", next)

	rows, err := tb.Rows(ctx)
	if err != nil {
		panic(err)
	}
	for _, r := range rows {
		if r[layout.ColDeleted] == true {
			fmt.Println(r["id"], "(tombstone)")
			continue
		}
		fmt.Println(r["id"], r["status"])
	}
	// Output:
	// batch 1: version 1, 1 inserted, 1 deleted, 0 stale
	// batch 2: version 2, 0 updated, 1 stale
	// next offset 5
	// 1 PAID
	// 2 (tombstone)
}
