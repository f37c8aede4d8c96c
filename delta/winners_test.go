// Tests of CheckWinners: a writer's own rule for concurrent data changes.

package delta

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// A winner's data change is judged by the writer's WinnerCheck instead of
// ReadWholeTable's "any data change conflicts": nil rebases ours on top
// (committed at the next version, CommitResult.Rebased), a *ConflictError
// conflicts with the versions filled in, another error fails the commit
// without a conflict. The built-in checks still come first: a winner's
// remove of a file we also remove conflicts without asking the check.
func TestCheckWinners(t *testing.T) {
	boom := errors.New("cannot read the winner's file")
	cases := []struct {
		name         string
		winner       func(s *Snapshot) *Transaction
		verdict      error
		wantConflict string // substring of the conflict reason; "" none
		wantErr      error
		wantCalled   bool
	}{
		{"rebased over another file's add", func(s *Snapshot) *Transaction { return s.Begin().Add(add("theirs")) }, nil, "", nil, true},
		{"the check says conflict", func(s *Snapshot) *Transaction { return s.Begin().Add(add("theirs")) },
			&ConflictError{Reason: "concurrent change of key 7"}, "key 7", nil, true},
		{"the check fails", func(s *Snapshot) *Transaction { return s.Begin().Add(add("theirs")) }, boom, "", boom, true},
		{"winner removed the file we rewrite", func(s *Snapshot) *Transaction {
			return s.Begin().Remove(RemoveFile(s.Files()[0], time.Now()))
		}, nil, "concurrent remove of base", nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			tb, _ := newTable(t, Protocol{}, nil)
			commit(t, snap(t, tb).Begin().Add(add("base")))
			s := snap(t, tb)
			commit(t, c.winner(snap(t, tb)))
			var called []int64
			tx := s.Begin().ReadWholeTable().Remove(RemoveFile(s.Files()[0], time.Now())).Add(add("ours")).
				CheckWinners(func(_ context.Context, v int64, acts []Action) error {
					called = append(called, v)
					return c.verdict
				})
			res, err := tx.CommitWithResult(ctx, "MERGE", nil)
			if c.wantCalled != (len(called) == 1 && called[0] == s.Version()+1) {
				t.Errorf("check called for %v, want called %v (for v%d)", called, c.wantCalled, s.Version()+1)
			}
			var ce *ConflictError
			switch {
			case c.wantConflict != "":
				if !errors.As(err, &ce) || !strings.Contains(ce.Reason, c.wantConflict) || ce.WinnerVersion != s.Version()+1 || ce.ReadVersion != s.Version() || ce.Attempts != 1 {
					t.Fatalf("err = %v (%+v), want a conflict %q with the winner at v%d", err, ce, c.wantConflict, s.Version()+1)
				}
			case c.wantErr != nil:
				if !errors.Is(err, c.wantErr) || errors.Is(err, ErrConflict) {
					t.Fatalf("err = %v, want %v and no conflict", err, c.wantErr)
				}
			default:
				if err != nil {
					t.Fatal(err)
				}
				if res.Version != s.Version()+2 || res.Rebased != 1 {
					t.Fatalf("result %+v, want v%d rebased over 1 commit", res, s.Version()+2)
				}
			}
		})
	}
}

// A txn written blind does not conflict with a concurrent winner setting the
// same appId (the later commit's version is the table's); one written with
// SetAppTransaction does.
func TestSetAppTransactionBlind(t *testing.T) {
	for _, blind := range []bool{true, false} {
		tb, _ := newTable(t, Protocol{}, nil)
		s := snap(t, tb)
		commit(t, snap(t, tb).Begin().Add(add("theirs")).SetAppTransaction("sink", 7))
		tx := s.Begin().Add(add("ours"))
		if blind {
			tx.SetAppTransactionBlind("sink", 5)
		} else {
			tx.SetAppTransaction("sink", 5)
		}
		_, err := tx.Commit(context.Background(), "WRITE", nil)
		if blind != (err == nil) || (!blind && !errors.Is(err, ErrConflict)) {
			t.Fatalf("blind %v: err = %v", blind, err)
		}
		if blind {
			if v, _ := snap(t, tb).TxnVersion("sink"); v != 5 {
				t.Fatalf("txn sink = %d, want 5 (the later commit's)", v)
			}
		}
	}
}
