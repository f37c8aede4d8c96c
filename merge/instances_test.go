package merge

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/layout"
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
