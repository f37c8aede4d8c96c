package maintain

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cdcsink/cdc-sink/internal/aligncheck"
	"github.com/cdcsink/cdc-sink/internal/deltacheck"
	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/normalize"
)

// applyParts commits one batch whose i-th change comes from partition
// parts[i] of dbz.public.people (batch layout: one file, mixed partitions).
func applyParts(t *testing.T, dir string, aligned bool, parts []int32, cs ...*normalize.Change) {
	t.Helper()
	ctx := context.Background()
	tb, err := merge.Open(ctx, dir, merge.Options{Sink: "people", PartitionAligned: aligned})
	if err != nil {
		t.Fatal(err)
	}
	b := &merge.Batch{Offsets: map[merge.TP]int64{}}
	for i, c := range cs {
		tp := merge.TP{Topic: "dbz.public.people", Partition: parts[i]}
		next, _ := tb.NextOffset(tp.Topic, tp.Partition)
		next = max(next, b.Offsets[tp])
		c.Coord = normalize.Coord{Topic: tp.Topic, Partition: tp.Partition, Offset: next}
		c.Table = normalize.TableID{Server: "dbz", Schema: "public", Table: "people"}
		b.Offsets[tp] = next + 1
		b.Changes = append(b.Changes, c)
	}
	if _, err := tb.Apply(ctx, b, func(_ context.Context, _ int64, rs []merge.Reject) error {
		if len(rs) > 0 {
			return fmt.Errorf("rejects %+v", rs)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// Optimize keeps the partition-aligned layout: files of two partitions are
// never compacted together, and files written before the layout (rows of
// several partitions) are split by their rows' _cdc_topic/_cdc_partition.
// The content is unchanged, for us and for delta-rs.
func TestOptimizeKeepsAndRestoresPartitionAlignment(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "people")
	// batch layout: one mixed file; then an update that hides rows in it
	applyParts(t, dir, false, []int32{0, 1, 2, 1},
		person(1, int64(40), "ana", "12.3400", 10), person(2, int64(30), "bo", "1.0000", 11),
		person(3, nil, "cy", "0.5000", 12), person(4, int64(-7), "di", "-3.1200", 13))
	applyParts(t, dir, false, []int32{1, 2}, person(2, int64(31), "bo", "2.0000", 20), personDelete(3, 21))
	// aligned: two batches of partitions 0 and 1 (small tagged files)
	applyParts(t, dir, true, []int32{0, 1}, person(5, int64(1), "ed", "1.0000", 30), person(6, int64(2), "fe", "1.0000", 31))
	applyParts(t, dir, true, []int32{0, 1}, person(7, int64(3), "gu", "1.0000", 40), person(4, int64(8), "di", "1.0000", 41))
	before := rows(t, dir)
	res, err := Optimize(ctx, dir, OptimizeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("optimize: %+v", res)
	if got := rows(t, dir); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Errorf("rows changed:\n%v\nwant\n%v", got, before)
	}
	// the split rows of the old file are new files of their partitions; a
	// second run compacts each partition's small files into one
	if got := aligncheck.Tags(t, dir); fmt.Sprint(slices.Compact(got)) != "[dbz.public.people/0 dbz.public.people/1 dbz.public.people/2]" {
		t.Errorf("files after optimize by tag %v, want only the three partitions' tags", got)
	}
	if _, err := Optimize(ctx, dir, OptimizeOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := aligncheck.Tags(t, dir); fmt.Sprint(got) != "[dbz.public.people/0 dbz.public.people/1 dbz.public.people/2]" {
		t.Errorf("files after a second optimize by tag %v, want one per partition", got)
	}
	if got := rows(t, dir); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Errorf("rows changed by the second optimize")
	}
	rs := deltacheck.ReadDeltaRS(t, dir, "")
	if len(rs.Rows) != len(before) {
		t.Errorf("delta-rs reads %d rows, want %d", len(rs.Rows), len(before))
	}
	// an aligned instance opens the optimized table: every key in place
	tb, err := merge.Open(ctx, dir, merge.Options{Sink: "people", PartitionAligned: true})
	if err != nil {
		t.Fatal(err)
	}
	if n, located := tb.IndexKeys(); n != 0 || located != 7 {
		t.Errorf("aligned open after optimize: %d indexed, %d located; want 0 and 7 (every file tagged)", n, located)
	}
}
