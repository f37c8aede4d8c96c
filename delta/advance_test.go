package delta

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"testing"
	"time"
)

// TestSnapshotAdvance: advancing a snapshot over the commits after it gives
// the snapshot a load at the target version gives (files, tombstones, app
// transactions, domains, protocol, metadata, timestamp), from every older
// version to every newer one, across checkpoints, removes, re-adds, a
// metadata change and a removed domain; s itself is not changed.
func TestSnapshotAdvance(t *testing.T) {
	ctx := context.Background()
	tb, _ := newTable(t, dvProtocol, map[string]string{"delta.checkpointInterval": "3"})
	steps := []func(s *Snapshot) *Transaction{
		func(s *Snapshot) *Transaction { return s.Begin().Add(add("a.parquet")).Add(add("b.parquet")) },
		func(s *Snapshot) *Transaction {
			return s.Begin().Remove(RemoveFile(add("a.parquet"), time.Now())).Add(add("c.parquet")).SetAppTransaction("sink/t/0", 1)
		},
		func(s *Snapshot) *Transaction {
			return s.Begin().SetDomainMetadata("d1", `{"x":1}`).SetDomainMetadata("d2", "y")
		},
		func(s *Snapshot) *Transaction {
			return s.Begin().Add(add("a.parquet")).SetAppTransaction("sink/t/0", 2)
		}, // re-added
		func(s *Snapshot) *Transaction {
			m := s.Metadata()
			m.Configuration = map[string]string{"delta.checkpointInterval": "3", "k": "v"}
			return s.Begin().SetMetadata(m).RemoveDomainMetadata("d2")
		},
		func(s *Snapshot) *Transaction {
			return s.Begin().Remove(RemoveFile(add("b.parquet"), time.Now())).SetAppTransaction("sink/t/1", 7)
		},
		func(s *Snapshot) *Transaction { return s.Begin().Add(add("d.parquet")) },
	}
	for i, st := range steps {
		if v := commit(t, st(snap(t, tb))); v != int64(i+1) {
			t.Fatalf("step %d committed v%d", i, v)
		}
	}
	last := int64(len(steps))
	for from := int64(0); from <= last; from++ {
		for to := from; to <= last; to++ {
			base, err := tb.SnapshotAt(ctx, from)
			if err != nil {
				t.Fatal(err)
			}
			before := describe(base)
			got, err := base.Advance(ctx, to)
			if err != nil {
				t.Fatalf("v%d → v%d: %v", from, to, err)
			}
			want, err := tb.SnapshotAt(ctx, to)
			if err != nil {
				t.Fatal(err)
			}
			if g, w := describe(got), describe(want); g != w {
				t.Errorf("v%d → v%d:\n got %s\nwant %s", from, to, g, w)
			}
			// a load from a checkpoint with no commit after it does not know the time
			if wt := want.Timestamp(); !wt.IsZero() && !got.Timestamp().Equal(wt) {
				t.Errorf("v%d → v%d: timestamp %v, want %v", from, to, got.Timestamp(), wt)
			}
			if after := describe(base); after != before {
				t.Errorf("v%d → v%d changed the base:\n%s\n%s", from, to, before, after)
			}
		}
	}
	s := snap(t, tb)
	if _, err := s.Advance(ctx, last-1); err == nil {
		t.Error("advancing to an older version did not fail")
	}
	if _, err := s.Advance(ctx, last+1); err == nil {
		t.Error("advancing past the latest version did not fail")
	}
}

// describe is a snapshot's state, files and tombstones in path order.
func describe(s *Snapshot) string {
	files := append([]Add(nil), s.Files()...)
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	for i := range files { // a checkpoint reads no partition values as nil, a commit as {}
		if len(files[i].PartitionValues) == 0 {
			files[i].PartitionValues = nil
		}
	}
	tombs := append([]Remove(nil), s.AllTombstones()...)
	sort.Slice(tombs, func(i, j int) bool { return tombs[i].Path < tombs[j].Path })
	doms := map[string]string{}
	for _, d := range s.Domains() {
		doms[d], _ = s.DomainMetadata(d)
	}
	var ts []string
	for _, r := range tombs {
		ts = append(ts, r.Path)
	}
	meta := s.Metadata()
	if len(meta.Format.Options) == 0 { // nil from a checkpoint, {} from a commit
		meta.Format.Options = nil
	}
	j := func(v any) string { b, _ := json.Marshal(v); return string(b) } // values, not pointers
	return fmt.Sprintf("v%d files %s tombstones %v txns %s domains %v protocol %s metadata %s",
		s.Version(), j(files), ts, j(s.Txns()), doms, j(s.Protocol()), j(meta))
}
