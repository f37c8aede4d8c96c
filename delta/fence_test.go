// Tests of ExpectTxn fences: a commit conditional on a txn version.

package delta

import (
	"context"
	"errors"
	"testing"
)

// TestExpectTxnFences: a commit expecting appId at X fails with a
// *FencedError (never a retry at the next version, never a ConflictError)
// once a winner moved the appId elsewhere, in the read snapshot or
// concurrently; a winner leaving it alone, or other appIds, do not fence.
func TestExpectTxnFences(t *testing.T) {
	const app = "sink/topic/0"
	cases := []struct {
		name      string
		before    []int64 // txn versions of app committed before the read snapshot
		winner    *int64  // txn version of app a concurrent winner commits (nil: winner sets only "other")
		expect    int64
		wantFence bool
		found     int64
	}{
		{"nothing moved", []int64{10}, nil, 10, false, 0},
		{"first commit of the partition", nil, nil, -1, false, 0},
		{"already moved in the read snapshot", []int64{10, 20}, nil, 10, true, 20},
		{"expected absent, present", []int64{5}, nil, -1, true, 5},
		{"winner advanced it", []int64{10}, ptrTo(int64(25)), 10, true, 25},
		{"winner wrote the same value", []int64{10}, ptrTo(int64(10)), 10, false, 0},
		{"winner created it", nil, ptrTo(int64(3)), -1, true, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tb, _ := newTable(t, Protocol{}, nil)
			for i, v := range c.before {
				commit(t, snap(t, tb).Begin().Add(add("b"+string(rune('0'+i)))).SetAppTransaction(app, v))
			}
			s := snap(t, tb)
			if c.winner != nil {
				commit(t, snap(t, tb).Begin().Add(add("w")).SetAppTransaction(app, *c.winner).SetAppTransaction("other", 1))
			} else {
				commit(t, snap(t, tb).Begin().Add(add("w")).SetAppTransaction("other", 1))
			}
			before, _ := tb.LatestVersion(context.Background())
			tx := s.Begin().Add(add("ours")).ExpectTxn(app, c.expect)
			if c.expect >= 0 {
				// advancing from the expected offset
				tx.appTxns = append(tx.appTxns, Txn{AppID: app, Version: c.expect + 100})
			}
			v, err := tx.Commit(context.Background(), "WRITE", nil)
			after, _ := tb.LatestVersion(context.Background())
			if !c.wantFence {
				if err != nil && !(c.winner != nil && errors.Is(err, ErrConflict)) {
					t.Fatalf("want a commit, got %v", err)
				}
				if err == nil && v != after {
					t.Fatalf("committed v%d, latest v%d", v, after)
				}
				return
			}
			var fe *FencedError
			if !errors.Is(err, ErrFenced) || !errors.As(err, &fe) || errors.Is(err, ErrConflict) {
				t.Fatalf("want a FencedError (and not a conflict), got %v", err)
			}
			if len(fe.Fences) != 1 || fe.Fences[0].AppID != app || fe.Fences[0].Expected != c.expect || fe.Fences[0].Found != c.found {
				t.Fatalf("fences %+v, want %s expected %d found %d", fe.Fences, app, c.expect, c.found)
			}
			if after != before {
				t.Fatalf("a fenced transaction committed: v%d → v%d", before, after)
			}
		})
	}
}

func ptrTo[T any](v T) *T { return &v }
