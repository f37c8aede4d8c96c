package maintain

import (
	"context"
	"testing"

	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/normalize"
)

// An optimize that lands between a batch's plan and its commit removes
// files for good. A batch of new keys only (it rewrites none of those
// files) is rebased over it, not re-planned, and its writer then rebuilds
// its state from the table: the next batch, which updates keys the
// optimize moved, hides their rows in the new files.
func TestBatchRebasedOverOptimize(t *testing.T) {
	ctx := context.Background()
	dir := buildPeople(t)
	once := false
	tb, err := merge.Open(ctx, dir, merge.Options{Sink: "people", Fault: func(p merge.FaultPoint) error {
		if p == merge.FaultBeforeCommit && !once {
			once = true
			if res, err := Optimize(ctx, dir, OptimizeOptions{}); err != nil || !res.Committed || res.FilesRemoved == 0 {
				t.Fatalf("optimize: %+v %v", res, err)
			}
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	batch := func(next int64, cs ...*normalize.Change) *merge.Result {
		t.Helper()
		for i, c := range cs {
			c.Coord = normalize.Coord{Topic: "dbz.public.people", Partition: 0, Offset: next - int64(len(cs)) + int64(i)}
			c.Table = normalize.TableID{Server: "dbz", Schema: "public", Table: "people"}
		}
		res, err := tb.Apply(ctx, &merge.Batch{Changes: cs, Offsets: map[merge.TP]int64{{Topic: "dbz.public.people", Partition: 0}: next}},
			func(context.Context, int64, []merge.Reject) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := batch(7, person(5, int64(50), "ed", "5.0000", 40)); res.Rebases != 1 || res.Conflicts != 0 {
		t.Fatalf("result %+v, want rebased once over the optimize, no re-plan", res)
	}
	if res := batch(8, person(1, int64(41), "ana", "1.0000", 50)); res.Updated != 1 {
		t.Fatalf("update after the rebase: %+v", res)
	}
	rows := allRows(t, dir)
	if len(rows) != 5 || rows[0]["age"] != "41" || rows[4]["name"] != `"ed"` {
		t.Fatalf("rows %v", rows)
	}
}
