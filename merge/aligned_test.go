// Tests of the partition-aligned layout: one file per partition, the partition-scoped key index,
// keys that change partition.

package merge

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math/rand"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/internal/aligncheck"
	"github.com/cdcsink/cdc-sink/internal/deltacheck"
	"github.com/cdcsink/cdc-sink/layout"
	"github.com/cdcsink/cdc-sink/normalize"
)

func openAligned(t *testing.T, dir, id string) *Table {
	t.Helper()
	tb, err := Open(context.Background(), dir, Options{Sink: "model", InstanceID: id, PartitionAligned: true,
		Logger: slog.New(slog.NewTextHandler(testLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// alignedPhase is the phase of TestPartitionAlignedModel (1: no key has
// changed partition yet), for the log of re-plans.
var alignedPhase atomic.Int32

// testLogWriter logs re-plans (their reason) through t.
type testLogWriter struct{ t *testing.T }

func (w testLogWriter) Write(b []byte) (int, error) {
	if bytes.Contains(b, []byte("re-planning")) && alignedPhase.Load() == 1 {
		w.t.Log("phase 1: " + string(b))
	}
	return len(b), nil
}

// alignedRun is instances writing one table, each the owner of some
// partitions, every instance applying its own batches on its own view of
// the table, concurrently, as instances of a consumer group do.
type alignedRun struct {
	t    *testing.T
	dir  string
	inst []*Table
	mu   sync.Mutex
	next map[TP]int64
	// commits, re-plans (Conflicts) and rebases over all batches
	commits, replans, rebases int
}

// apply hands one batch of events of partition p to instance i (safe for
// concurrent use by different instances); false after a failure (reported).
func (r *alignedRun) apply(i int, p int32, evs []event) bool {
	return r.applyParts(i, map[int32][]event{p: evs})
}

// applyParts is apply for one batch of several partitions' events.
func (r *alignedRun) applyParts(i int, parts map[int32][]event) bool {
	b := &Batch{Offsets: map[TP]int64{}}
	r.mu.Lock()
	for _, p := range slices.Sorted(maps.Keys(parts)) {
		tp := TP{"t", p}
		for _, e := range parts[p] {
			c := e.change()
			c.Table = normalize.TableID{Server: "dbz", Schema: "public", Table: "pedidos"}
			c.Coord = normalize.Coord{Topic: "t", Partition: p, Offset: r.next[tp]}
			r.next[tp]++
			b.Changes = append(b.Changes, c)
		}
		b.Offsets[tp] = r.next[tp]
	}
	r.mu.Unlock()
	res, err := r.inst[i].Apply(context.Background(), b, func(_ context.Context, _ int64, rs []Reject) error {
		if len(rs) > 0 {
			return fmt.Errorf("unexpected rejects: %+v", rs)
		}
		return nil
	})
	if err != nil {
		r.t.Errorf("instance %d, partitions %v: %v", i, slices.Sorted(maps.Keys(parts)), err)
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if res.Committed {
		r.commits++
		r.replans += res.Conflicts
		r.rebases += res.Rebases
	}
	return true
}

// run delivers evs, keyed to partition id % parts, partition p owned by
// instance p % len(inst): one goroutine per instance, random batch cuts.
func (r *alignedRun) run(seed int64, evs []event, parts int32) {
	queues := make([][]event, parts)
	for _, e := range evs {
		p := int32(e.id % int64(parts))
		queues[p] = append(queues[p], e)
	}
	var wg sync.WaitGroup
	for i := range r.inst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewSource(seed + int64(i)))
			for {
				var open []int32
				for p := int32(i); p < parts; p += int32(len(r.inst)) {
					if len(queues[p]) > 0 {
						open = append(open, p)
					}
				}
				if len(open) == 0 {
					return
				}
				// a batch of one or (an instance owning several) all of its partitions
				take := open
				if rng.Intn(2) == 0 {
					j := rng.Intn(len(open))
					take = open[j : j+1]
				}
				batch := map[int32][]event{}
				for _, p := range take {
					n := min(len(queues[p]), 1+rng.Intn(25))
					batch[p] = queues[p][:n]
					queues[p] = queues[p][n:]
				}
				if !r.applyParts(i, batch) {
					return
				}
			}
		}()
	}
	wg.Wait()
	if r.t.Failed() {
		r.t.FailNow()
	}
}

// checkAligned asserts every data file holds the rows of one partition of
// topic t, and says so in its tag.
func checkAligned(t *testing.T, dir string) {
	t.Helper()
	for _, tag := range aligncheck.Tags(t, dir) {
		if topic, _, _ := layout.ParsePartitionTag(tag); topic != "t" {
			t.Errorf("file tagged %s, want a partition of topic t", tag)
		}
	}
}

// TestPartitionAlignedModel: random streams over keys spread on 3
// partitions, then on 4 (the topic grew: most keys move to another
// partition, written by another instance), applied by three instances with
// random batch cuts in random order. The table must equal the model, every
// file must hold one partition, and only moved keys may make an instance
// re-plan. Each instance's key index holds about its share of the keys.
func TestPartitionAlignedModel(t *testing.T) {
	cases := 40
	if testing.Short() {
		cases = 8
	}
	var commits, replans, movedReplans, rebases int
	for c := 0; c < cases; c++ {
		rng := rand.New(rand.NewSource(int64(c)))
		keys := 30 + rng.Intn(60)
		evs := genStream(rng, keys, 200+rng.Intn(400))
		dir := t.TempDir()
		r := &alignedRun{t: t, dir: dir, next: map[TP]int64{}}
		for _, id := range []string{"A", "B", "C"} {
			r.inst = append(r.inst, openAligned(t, dir, id))
		}
		// phase 1: partition id%3, owned by instance p; phase 2: id%4,
		// partition 3 owned by instance 0
		half := len(evs) / 2
		alignedPhase.Store(1)
		r.run(int64(c)*10, evs[:half], 3)
		alignedPhase.Store(2)
		if c == 0 {
			// before any key moved: each instance indexes its own partition's keys
			total := 0
			for _, tb := range r.inst {
				n, located := tb.IndexKeys()
				total += n
				t.Logf("phase 1: instance indexes %d keys, locates %d by hash", n, located)
			}
			for i, tb := range r.inst {
				n, _ := tb.IndexKeys()
				if n > total/2 {
					t.Errorf("instance %d indexes %d of %d keys, want about a third", i, n, total)
				}
			}
		}
		before := r.replans
		r.run(int64(c)*10+5, evs[half:], 4)
		movedReplans += r.replans - before
		commits += r.commits
		replans += r.replans
		rebases += r.rebases
		want := model(evs)
		got := tableState(t, dir)
		if len(got) != len(want) {
			t.Fatalf("case %d: %d keys in table, model has %d", c, len(got), len(want))
		}
		for id, w := range want {
			// a tombstone keeps the last image: only its version and flag matter
			if g, ok := got[id]; !ok || g.deleted != w.deleted || g.ver != w.ver || (!w.deleted && g.status != w.status) {
				t.Fatalf("case %d key %d: got %+v want %+v", c, id, g, w)
			}
		}
		checkAligned(t, dir)
		if c == 0 {
			rs := deltacheck.ReadDeltaRS(t, dir, "")
			if len(rs.Rows) != len(want) {
				t.Errorf("delta-rs reads %d rows, want %d", len(rs.Rows), len(want))
			}
		}
	}
	t.Logf("%d commits: %.3f re-plans per commit (%d, all after keys moved partition: %d), %.2f rebases per commit",
		commits, float64(replans)/float64(commits), replans, movedReplans, float64(rebases)/float64(commits))
	if replans != movedReplans {
		t.Errorf("%d re-plans before any key changed partition, want 0 with the aligned layout", replans-movedReplans)
	}
}

// A key whose partition changed is found in the other partition's file by
// the instance that now writes it: the version guard holds across
// instances (an older change is stale, a newer one replaces the row), and
// the key is live once.
func TestPartitionAlignedMovedKey(t *testing.T) {
	dir := t.TempDir()
	r := &alignedRun{t: t, dir: dir, next: map[TP]int64{}}
	for _, id := range []string{"A", "B"} {
		r.inst = append(r.inst, openAligned(t, dir, id))
	}
	r.apply(0, 0, []event{{id: 7, op: 'c', status: "first", ver: v(10)}, {id: 8, op: 'c', status: "stays", ver: v(11)}})
	// B never saw partition 0's file: key 7 arrives on partition 1 (the topic grew)
	r.apply(1, 1, []event{{id: 7, op: 'u', status: "late", ver: v(5)}})
	if got := tableState(t, dir)[7]; got.status != "first" {
		t.Errorf("after an older change on the new partition: %+v, want the stored row kept", got)
	}
	r.apply(1, 1, []event{{id: 7, op: 'u', status: "moved", ver: v(20)}, {id: 9, op: 'c', status: "new", ver: v(21)}})
	got := tableState(t, dir)
	if got[7].status != "moved" || got[8].status != "stays" || got[9].status != "new" || len(got) != 3 {
		t.Errorf("table %v, want 7=moved, 8=stays, 9=new", got)
	}
	// A, the old owner, learns of B's commits by rebasing or reloading, then
	// deletes the key on its side with an even newer version (a late
	// delete redelivered on the old partition would be older: stale)
	r.apply(0, 0, []event{{id: 7, op: 'd', ver: v(30)}})
	got = tableState(t, dir)
	if !got[7].deleted || len(got) != 3 {
		t.Errorf("table %v, want 7 deleted", got)
	}
	n, located := r.inst[1].IndexKeys()
	t.Logf("B indexes %d keys, locates %d", n, located)
	if n != 2 || located != 1 {
		t.Errorf("B indexes %d keys and locates %d, want 2 and 1 (9 and the moved 7 indexed, 8 of A's file located)", n, located)
	}
	rows := deltacheck.ByKey(deltacheck.Decode(t, deltacheck.ReadDeltaRS(t, dir, "").Rows), "pedido_id")
	if len(rows) != 3 || fmt.Sprint(rows["7"][layout.ColDeleted]) != "true" || fmt.Sprint(rows["9"]["status"]) != "new" {
		t.Errorf("delta-rs rows %v", rows)
	}
}

// Without the option, a batch is still one file, tagged only when all its
// rows come from one partition; a scoped reader opens it all the same.
func TestUnalignedFilesTaggedWhenSinglePartition(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tb := openT(t, dir)
	b := batchOf("t", 2, ch(1, 'c', "A", "1.00", v(1)), ch(2, 'c', "B", "1.00", v(2)))
	if _, err := tb.Apply(ctx, b, noReject(t)); err != nil {
		t.Fatal(err)
	}
	mixed := batchOf("t", 4, ch(3, 'c', "C", "1.00", v(3)), ch(4, 'c', "D", "1.00", v(4)))
	mixed.Changes[1].Coord.Partition = 1
	mixed.Offsets[TP{"t", 1}] = 1
	if _, err := tb.Apply(ctx, mixed, noReject(t)); err != nil {
		t.Fatal(err)
	}
	snap, err := delta.OpenTable(delta.NewLocalStorage(dir), "").Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var tags []string
	for _, a := range snap.Files() {
		tags = append(tags, a.Tags[layout.TagPartition])
	}
	slices.Sort(tags)
	if fmt.Sprint(tags) != "[ t/0]" {
		t.Errorf("tags %q, want one untagged (mixed) file and one t/0", tags)
	}
	sc, err := Open(ctx, dir, Options{Sink: "test", InstanceID: "X", PartitionAligned: true})
	if err != nil {
		t.Fatal(err)
	}
	if n, located := sc.IndexKeys(); n != 2 || located != 2 {
		t.Errorf("scoped open: %d indexed, %d located; want the mixed file's 2 indexed, t/0's 2 located", n, located)
	}
	if got := stateOf(t, sc); len(got) != 4 {
		t.Errorf("rows %v", got)
	}
}

// A partition revoked from an instance leaves its key index at the next
// Refresh (Release), unless it is assigned again first (Keep); a key of a
// released partition is still found by hash and version-guarded.
func TestPartitionAlignedRelease(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	r := &alignedRun{t: t, dir: dir, next: map[TP]int64{}}
	r.inst = append(r.inst, openAligned(t, dir, "A"))
	a := r.inst[0]
	parts := map[int32][]event{}
	for id := range int64(30) {
		parts[int32(id%3)] = append(parts[int32(id%3)], event{id: id, op: 'c', status: "first", ver: v(uint64(100 + id))})
	}
	r.applyParts(0, parts) // A owns all three partitions: indexes every key
	if n, located := a.IndexKeys(); n != 30 || located != 0 {
		t.Fatalf("A indexes %d keys and locates %d, want 30 and 0", n, located)
	}
	// a rebalance revokes 1 and 2 and gives 2 back (eager protocol)
	a.Release([]TP{{"t", 1}, {"t", 2}})
	a.Keep([]TP{{"t", 2}})
	if err := a.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	r.applyParts(0, map[int32][]event{0: {{id: 0, op: 'u', status: "second", ver: v(200)}}, 2: {{id: 2, op: 'u', status: "second", ver: v(201)}}})
	if n, located := a.IndexKeys(); n != 20 || located != 10 {
		t.Errorf("after releasing partition 1: A indexes %d keys and locates %d, want 20 (partitions 0, 2) and 10", n, located)
	}
	// key 1 (partition 1's) arrives on partition 0 with an older version:
	// found by hash, the stored row is kept; then a newer one wins
	r.applyParts(0, map[int32][]event{0: {{id: 1, op: 'u', status: "stale", ver: v(50)}}})
	r.applyParts(0, map[int32][]event{0: {{id: 4, op: 'u', status: "moved", ver: v(300)}}})
	got := tableState(t, dir)
	if len(got) != 30 || got[0].status != "second" || got[2].status != "second" || got[1].status != "first" || got[4].status != "moved" || got[3].status != "first" {
		t.Errorf("table %v", got)
	}
	// nothing revoked that is indexed: no reload (the index keeps the moved keys)
	n0, _ := a.IndexKeys()
	a.Release([]TP{{"t", 1}})
	if err := a.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := a.IndexKeys(); n != n0 {
		t.Errorf("a release of a partition not adopted changed the index: %d keys, was %d", n, n0)
	}
	rows := deltacheck.ByKey(deltacheck.Decode(t, deltacheck.ReadDeltaRS(t, dir, "").Rows), "pedido_id")
	if len(rows) != 30 || fmt.Sprint(rows["4"]["status"]) != "moved" || fmt.Sprint(rows["1"]["status"]) != "first" {
		t.Errorf("delta-rs rows: %d, 4=%v 1=%v", len(rows), rows["4"]["status"], rows["1"]["status"])
	}
}
