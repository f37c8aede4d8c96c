// Tests of fencing: a batch whose partition another writer moved never commits.

package merge

import (
	"context"
	"errors"
	"testing"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/versioning"
)

// TestZombieFenced: a batch read from partition offset X (Batch.From) must
// not commit once another writer moved that partition's offset, whether the
// move happened before the zombie refreshed or between its plan and its
// commit (then delta's ExpectTxn catches it); it is never re-planned, it
// writes no tracker state, its files are deleted, and a later batch read
// from the table's current offset commits. A move of another partition is
// an ordinary conflict: re-planned and committed.
func TestZombieFenced(t *testing.T) {
	p0, p1 := TP{"t", 0}, TP{"t", 1}
	cases := []struct {
		name      string
		moveFirst bool // the new owner commits before the zombie's Apply
		moveRace  bool // the new owner commits between the zombie's plan and commit
		moved     TP
		wantFence bool
	}{
		{"no other writer", false, false, p0, false},
		{"taken over before the zombie resumed", true, false, p0, true},
		{"taken over between plan and commit", false, true, p0, true},
		{"another partition moved meanwhile", false, true, p1, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			store := delta.NewMemStorage()
			open := func(inst string, fault func(FaultPoint) error) *Table {
				tb, err := Open(ctx, "mem", Options{Sink: "s", Instance: inst, Storage: store, Fault: fault})
				if err != nil {
					t.Fatal(err)
				}
				return tb
			}
			owner := open("new-owner", nil)
			first := batchOf("t", 1, ch(1, 'c', "first", "1.00", v(1)))
			if _, err := owner.Apply(ctx, first, noReject(t)); err != nil {
				t.Fatal(err)
			}
			// the new owner's commit: the partition that moved goes from its
			// current offset to 5, with a newer row for key 2 and tracker state
			move := func() {
				bt := batchOf("t", 5, ch(2, 'c', "owner", "1.00", v(20)))
				from := int64(-1)
				if o, ok := owner.NextOffset(c.moved.Topic, c.moved.Partition); ok {
					from = o
				}
				bt.Offsets = map[TP]int64{c.moved: 5}
				bt.From = map[TP]int64{c.moved: from}
				bt.Tracker = []versioning.PartitionState{{Topic: c.moved.Topic, Partition: c.moved.Partition, Epoch: 7}}
				if _, err := owner.Apply(ctx, bt, noReject(t)); err != nil {
					t.Fatalf("new owner: %v", err)
				}
			}
			armed := c.moveRace
			zombie := open("zombie", func(point FaultPoint) error {
				if point == FaultBeforeCommit && armed {
					armed = false
					move()
				}
				return nil
			})
			if c.moveFirst {
				move()
			}
			zb := batchOf("t", 3, ch(2, 'c', "zombie", "1.00", v(10)), ch(3, 'c', "zombie", "1.00", v(11)))
			zb.From = map[TP]int64{p0: 1}
			zb.Tracker = []versioning.PartitionState{{Topic: "t", Partition: 0, Epoch: 1}}
			before := countData(t, store)
			ver, _ := delta.OpenTable(store, "").LatestVersion(ctx)
			res, err := zombie.Apply(ctx, zb, noReject(t))
			if !c.wantFence {
				if err != nil || !res.Committed {
					t.Fatalf("want a commit, got %+v, %v", res, err)
				}
				if o, _ := openT2(t, store).NextOffset("t", 0); o != 3 {
					t.Fatalf("partition 0 at %d, want 3", o)
				}
				return
			}
			var fe *FencedError
			if !errors.Is(err, ErrFenced) || !errors.As(err, &fe) || errors.Is(err, ErrGaveUp) {
				t.Fatalf("want a FencedError, got %v", err)
			}
			if got, ok := fe.Partitions[p0]; !ok || got != 5 || fe.From[p0] != 1 || len(fe.Partitions) != 1 {
				t.Fatalf("fenced %v (from %v), want t/0 at 5 from 1", fe.Partitions, fe.From)
			}
			after, _ := delta.OpenTable(store, "").LatestVersion(ctx)
			wantVer := ver
			if c.moveRace {
				wantVer++ // only the new owner's commit
			}
			if after != wantVer {
				t.Fatalf("table at v%d, want v%d: the zombie committed", after, wantVer)
			}
			wantFiles := before
			if c.moveRace {
				wantFiles++ // the new owner's
			}
			if n := countData(t, store); n != wantFiles {
				t.Fatalf("%d data files, want %d: the fenced attempt's files must be deleted", n, wantFiles)
			}
			fresh := openT2(t, store)
			if st := fresh.TrackerState(); len(st) != 1 || st[0].Epoch != 7 {
				t.Fatalf("tracker state %+v: the zombie's view was written", st)
			}
			// recovery: re-read the offset, re-read the records from there
			if err := zombie.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			o, _ := zombie.NextOffset("t", 0)
			next := batchOf("t", 6, ch(3, 'c', "resumed", "1.00", v(30)))
			next.From = map[TP]int64{p0: o}
			if _, err := zombie.Apply(ctx, next, noReject(t)); err != nil {
				t.Fatalf("batch read from the table's offset %d: %v", o, err)
			}
			rows := stateOf(t, openT2(t, store))
			if rows[2].status != "owner" || rows[3].status != "resumed" {
				t.Fatalf("rows %+v", rows)
			}
		})
	}
}

func openT2(t *testing.T, store delta.Storage) *Table {
	t.Helper()
	tb, err := Open(context.Background(), "mem", Options{Sink: "s", Storage: store})
	if err != nil {
		t.Fatal(err)
	}
	return tb
}
