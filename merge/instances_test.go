package merge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/layout"
	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/cdcsink/cdc-sink/versioning"
)

func openInstance(t *testing.T, dir, id string) *Table {
	t.Helper()
	tb, err := Open(context.Background(), dir, Options{Sink: "test", InstanceID: id})
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// Instances of one sink write their own batch txn (<sink>@<id>) and each
// partition's tracker state in its own domain; the single tracker domain of
// older tables is still read, under the partitions' own domains.
func TestInstancesOwnBatchAndTrackerIdentities(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a, b := openInstance(t, dir, "A"), openInstance(t, dir, "B")
	stA := versioning.PartitionState{Topic: "t", Partition: 0, Epoch: 1, LastLSN: 50}
	btA := batchOf("t", 1, ch(1, 'c', "A", "1.00", v(1)))
	btA.Tracker = []versioning.PartitionState{stA}
	if _, err := a.Apply(ctx, btA, noReject(t)); err != nil {
		t.Fatal(err)
	}
	// a table of the single-domain layout: a stale state of partition 0 and
	// the only one of partition 2
	legacy, _ := json.Marshal([]versioning.PartitionState{{Topic: "t", Partition: 0, Epoch: 9}, {Topic: "t", Partition: 2, LastLSN: 70}})
	snap, err := delta.OpenTable(delta.NewLocalStorage(dir), "").Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := snap.Begin().SetDomainMetadata(layout.TrackerDomain("test"), string(legacy)).Commit(ctx, "SET DOMAIN", nil); err != nil {
		t.Fatal(err)
	}
	stB := versioning.PartitionState{Topic: "t", Partition: 1, LastLSN: 7}
	btB := batchOf("t", 1, ch(2, 'c', "B", "1.00", v(2)))
	btB.Offsets = map[TP]int64{{"t", 1}: 1}
	btB.Tracker = []versioning.PartitionState{{Topic: "t", Partition: 0}, stB} // b's stale view of partition 0 is not written
	res, err := b.Apply(ctx, btB, noReject(t))
	if err != nil {
		t.Fatal(err)
	}
	if res.BatchID != 2 {
		t.Errorf("b's first batch id %d, want 2 (above every instance's)", res.BatchID)
	}
	snap, err = delta.OpenTable(delta.NewLocalStorage(dir), "").Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	txns := map[string]int64{}
	for app, tx := range snap.Txns() {
		txns[app] = tx.Version
	}
	if txns["test@A"] != 1 || txns["test@B"] != 2 || len(txns) != 4 {
		t.Errorf("txns %v, want test@A=1, test@B=2 and two offsets", txns)
	}
	doms := strings.Join(snap.Domains(), " ")
	if doms != "cdcsink.tracker.test cdcsink.tracker.test/t/0 cdcsink.tracker.test/t/1" {
		t.Errorf("domains %q", doms)
	}
	c := openInstance(t, dir, "B")
	want := []versioning.PartitionState{stA, stB, {Topic: "t", Partition: 2, LastLSN: 70}}
	if got := c.TrackerState(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("tracker state %+v, want %+v", got, want)
	}
	if c.LastBatchID() != 2 {
		t.Errorf("B's last batch id %d, want 2", c.LastBatchID())
	}
	if _, err := Open(ctx, dir, Options{Sink: "test", InstanceID: "a/b"}); err == nil || !strings.Contains(err.Error(), `"a/b"`) {
		t.Errorf("instance id a/b: err = %v", err)
	}
}

func TestReadTracker(t *testing.T) {
	p0 := `[{"topic":"t","partition":0,"epoch":1}]`
	for _, tc := range []struct {
		name    string
		domains map[string]string
		want    string // fmt of the states, or the error's substring
		err     bool
	}{
		{"none", map[string]string{"other": "x"}, "[]", false},
		{"legacy only", map[string]string{"cdcsink.tracker.s": `[{"topic":"t","partition":1,"epoch":2}]`}, "[{t 1 2", false},
		{"partition over legacy", map[string]string{"cdcsink.tracker.s": `[{"topic":"t","partition":0,"epoch":5}]`, "cdcsink.tracker.s/t/0": p0}, "[{t 0 1", false},
		{"another sink's", map[string]string{"cdcsink.tracker.s2/t/0": p0}, "[]", false},
		{"domain names another partition", map[string]string{"cdcsink.tracker.s/t/1": p0}, "want the one of t/1", true},
		{"bad json", map[string]string{"cdcsink.tracker.s/t/0": `{`}, "cdcsink.tracker.s/t/0", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadTracker("s", tc.domains)
			if tc.err {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err = %v, want one with %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s := fmt.Sprint(got); !strings.HasPrefix(s, tc.want) {
				t.Fatalf("got %s, want %s…", s, tc.want)
			}
		})
	}
}

// A batch that loses every commit race to a writer changing one of its keys
// is re-planned up to MaxCommitAttempts, then fails with ErrGaveUp, which
// is permanent (not retried by the pipeline as transient). Its rejects were
// handed to quarantine once, not once per attempt, and the files of every
// lost attempt were deleted.
func TestApplyGivesUpAfterConflicts(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b := openT(t, dir)
	if _, err := b.Apply(ctx, batchOf("t", 1, ch(9, 'c', "B0", "1.00", v(1))), noReject(t)); err != nil {
		t.Fatal(err)
	}
	won := 0
	a, err := Open(ctx, dir, Options{Sink: "test", InstanceID: "a", MaxCommitAttempts: 3, Fault: func(point FaultPoint) error {
		if point == FaultBeforeCommit {
			won++ // the other writer changes our key before each of our commits
			bt := batchOf("t", int64(1+won), ch(1, 'u', fmt.Sprintf("B%d", won), "1.00", v(uint64(10*won))))
			bt.Offsets = map[TP]int64{{"t", 1}: int64(won)}
			if _, err := b.Apply(ctx, bt, noReject(t)); err != nil {
				t.Fatal(err)
			}
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	bad := ch(5, 'c', "X", "1.00", v(3))
	bad.Key, bad.KeyNames = []any{int64(5), int64(6)}, []string{"pedido_id", "extra"}
	var rejected [][]Reject
	_, err = a.Apply(ctx, batchOf("t", 2, ch(1, 'u', "A", "1.00", v(1000)), bad), func(_ context.Context, _ int64, rs []Reject) error {
		rejected = append(rejected, rs)
		return nil
	})
	if !errors.Is(err, ErrGaveUp) || errors.Is(err, ErrReplan) == false || quarantine.IsTransient(err) {
		t.Fatalf("err = %v, want ErrGaveUp (wrapping the last ErrReplan), not transient", err)
	}
	if won != 3 {
		t.Errorf("%d attempts, want 3", won)
	}
	if len(rejected) != 1 || len(rejected[0]) != 1 || rejected[0][0].Index != 1 {
		t.Errorf("reject calls %+v, want one, with change 1", rejected)
	}
	snap, err := delta.OpenTable(delta.NewLocalStorage(dir), "").Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	live := map[string]bool{}
	for _, f := range snap.Files() {
		live[f.Path] = true
		if f.DeletionVector != nil {
			p, _ := f.DeletionVector.RelativePath()
			live[p] = true
		}
	}
	for _, tb := range snap.AllTombstones() {
		live[tb.Path] = true
		if tb.DeletionVector != nil {
			p, _ := tb.DeletionVector.RelativePath()
			live[p] = true
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.IsDir() && !live[e.Name()] {
			t.Errorf("file %s of a lost attempt left behind", e.Name())
		}
	}
}
