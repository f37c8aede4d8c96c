package history_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/cdcsink/cdc-sink/history"
	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/versioning"
)

// TestHistoryOutcomes: what the current table did with each change is in
// the history row — a late event the version guard skipped is there as
// stale, a redelivery as duplicate, an ignored truncate as ignored, and a
// version conflict (quarantined) is not there at all.
func TestHistoryOutcomes(t *testing.T) {
	ctx := context.Background()
	cur, hist := t.TempDir(), t.TempDir()
	tr := tracked(t, cur, hist, merge.Options{Truncate: merge.TruncateIgnore}, history.Options{})
	mk := func(off int64, ver uint64, email string) *normalize.Change {
		c := custChange(int(off), 7, email, 0)
		c.Version = versioning.Version{Commit: ver, LSN: ver}
		return c
	}
	trunc := &normalize.Change{Table: normalize.TableID{Schema: "public", Table: "customers"}, Op: normalize.OpTruncate, SourceOp: 't',
		Version: versioning.Version{Commit: 9, LSN: 9}, SourceTsMicros: 1,
		Coord: normalize.Coord{Topic: "shop.public.customers", Offset: 5}}
	var rejected int
	apply := func(cs ...*normalize.Change) {
		next := cs[len(cs)-1].Coord.Offset + 1
		if _, err := tr.Apply(ctx, &merge.Batch{Changes: cs, Offsets: map[merge.TP]int64{{Topic: "shop.public.customers"}: next}},
			func(_ context.Context, _ int64, rs []merge.Reject) error { rejected += len(rs); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	apply(mk(0, 3, "a"))
	apply(mk(1, 2, "late"), mk(2, 3, "a"))
	// equal versions with different content in one batch: a conflict
	apply(mk(3, 4, "b"), mk(4, 4, "conflict"), trunc)
	got := map[int64]string{}
	for _, e := range entries(t, hist) {
		got[e.Change.Coord.Offset] = e.Outcome
	}
	want := map[int64]string{0: "applied", 1: "stale", 2: "duplicate", 3: "applied", 5: "ignored"}
	if len(got) != len(want) || rejected != 1 {
		t.Fatalf("history %v (%d rejected), want %v and the conflict quarantined", got, rejected, want)
	}
	for off, o := range want {
		if got[off] != o {
			t.Fatalf("offset %d: %q, want %q (history %v)", off, got[off], o, got)
		}
	}
}

// TestHistoryTruncate: an applied truncate is one history row (op t, no
// key, no images) and a rebuild from the history tombstones what it
// tombstoned live: the rebuilt table equals the live one.
func TestHistoryTruncate(t *testing.T) {
	ctx := context.Background()
	cur, hist := t.TempDir(), t.TempDir()
	tr := tracked(t, cur, hist, merge.Options{}, history.Options{})
	mk := func(off int64, id int64, ver uint64) *normalize.Change {
		c := custChange(int(off), id, "e", 0)
		c.Version = versioning.Version{Commit: ver, LSN: ver}
		return c
	}
	trunc := &normalize.Change{Table: normalize.TableID{Schema: "public", Table: "customers"}, Op: normalize.OpTruncate, SourceOp: 't',
		Version: versioning.Version{Commit: 3, LSN: 3}, SourceTsMicros: mk(0, 1, 1).SourceTsMicros,
		Coord: normalize.Coord{Topic: "shop.public.customers", Offset: 2}}
	batches := [][]*normalize.Change{{mk(0, 1, 1), mk(1, 2, 2)}, {trunc, mk(3, 1, 4)}}
	for _, cs := range batches {
		next := cs[len(cs)-1].Coord.Offset + 1
		if _, err := tr.Apply(ctx, &merge.Batch{Changes: cs, Offsets: map[merge.TP]int64{{Topic: "shop.public.customers"}: next}},
			func(context.Context, int64, []merge.Reject) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	es := entries(t, hist)
	if len(es) != 4 {
		t.Fatalf("%d history rows, want 4", len(es))
	}
	for _, e := range es {
		if e.Change.Coord.Offset == 2 && (e.Change.Op != normalize.OpTruncate || e.Change.Key != nil || e.Change.Row != nil || e.Outcome != "applied") {
			t.Fatalf("truncate row: %+v %s", e.Change, e.Outcome)
		}
	}
	dst := t.TempDir()
	rebuild(t, hist, dst, 0)
	a, b := tableRows(t, cur), tableRows(t, dst)
	if len(a) != 2 || fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("live %v\nrebuilt %v", a, b)
	}
	live, deleted := tr.Table.LiveRows()
	if live != 1 || deleted != 1 {
		t.Fatalf("live table: %d live, %d tombstones; want key 1 live, key 2 truncated", live, deleted)
	}
}
