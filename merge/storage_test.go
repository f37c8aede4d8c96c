// Tests of Apply over a storage that fails (transient and permanent faults at each step).

package merge

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand"
	"strings"
	"testing"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/delta/storagetest"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/quarantine"
)

// applyAll applies the batches to the table on store, retrying an Apply
// exactly when the pipeline would (quarantine.IsTransient), and returns the
// number of retries. noReject makes any quarantined record fail the test.
func applyAll(t *testing.T, store delta.Storage, batches [][]event) (*Table, int, error) {
	t.Helper()
	ctx := context.Background()
	tb, err := Open(ctx, "mem://test", Options{Sink: "model", Storage: store, CheckpointInterval: 4})
	if err != nil {
		return nil, 0, err
	}
	retries := 0
	off := int64(0)
	for _, b := range batches {
		off += int64(len(b))
		for {
			cs := make([]*normalize.Change, len(b))
			for j, e := range b {
				cs[j] = e.change()
			}
			_, err := tb.Apply(ctx, batchOf("t", off, cs...), noReject(t))
			if err == nil {
				break
			}
			if !quarantine.IsTransient(err) {
				return tb, retries, err
			}
			if retries++; retries > 20 {
				t.Fatalf("still failing after %d retries: %v", retries, err)
			}
		}
	}
	return tb, retries, nil
}

func countData(t *testing.T, s delta.Storage) int {
	ls, err := s.List(context.Background(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range ls {
		if strings.HasSuffix(f.Name, ".parquet") {
			n++
		}
	}
	return n
}

// A transient storage failure anywhere in a batch (data file, deletion
// vector, commit, log reads; before the write or after it landed) is
// classified transient, so the pipeline retries the batch; the table ends
// equal to an uninterrupted run's, with no extra version.
func TestTransientStorageFailuresAreRetried(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	evs := genStream(rng, 12, 90)
	var batches [][]event
	for rest := evs; len(rest) > 0; rest = rest[min(len(rest), 9):] {
		batches = append(batches, rest[:min(len(rest), 9)])
	}
	ref := delta.NewMemStorage()
	refTable, _, err := applyAll(t, ref, batches)
	if err != nil {
		t.Fatal(err)
	}
	want, wantVersion, wantFiles := stateOf(t, refTable), refTable.Version(), countData(t, ref)
	if len(want) == 0 || wantVersion < 5 {
		t.Fatalf("reference run too small: %d keys, v%d", len(want), wantVersion)
	}
	transient := delta.Transient(fmt.Errorf("503 slow down: %w", storagetest.ErrInjected))
	const commits = "_delta_log/*.json"
	for _, c := range []struct {
		name    string
		fault   storagetest.Fault
		orphans int // data files written but never committed
	}{
		{"data file before write", storagetest.Fault{Op: storagetest.OpPutIfAbsent, Pattern: "*.parquet", Before: transient, Skip: 3, Times: 2}, 0},
		{"data file after write", storagetest.Fault{Op: storagetest.OpPutIfAbsent, Pattern: "*.parquet", After: transient, Skip: 3, Times: 1}, 1},
		{"deletion vector", storagetest.Fault{Op: storagetest.OpPutIfAbsent, Pattern: "deletion_vector_*.bin", Before: transient, Skip: 2, Times: 1}, 1},
		{"commit before write", storagetest.Fault{Op: storagetest.OpPutIfAbsent, Pattern: commits, Before: transient, Skip: 4, Times: 2}, 2},
		// The commit landed but the writer was told it failed: the retry
		// finds its own commit, re-plans to nothing and removes the files it
		// wrote for the lost attempt.
		{"commit after write (ambiguous)", storagetest.Fault{Op: storagetest.OpPutIfAbsent, Pattern: commits, After: transient, Skip: 4, Times: 1}, 0},
		{"log listing", storagetest.Fault{Op: storagetest.OpList, Pattern: "_delta_log", Before: transient, Skip: 6, Times: 1}, 1},
		{"log read", storagetest.Fault{Op: storagetest.OpGet, Pattern: commits, Before: transient, Skip: 5, Times: 1}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			mem := delta.NewMemStorage()
			f := storagetest.NewFaulty(mem, c.fault)
			tb, retries, err := applyAll(t, f, batches)
			if err != nil {
				t.Fatal(err)
			}
			if f.Injected() == 0 || retries == 0 {
				t.Fatalf("fault never fired (injected %d, retries %d)", f.Injected(), retries)
			}
			fresh, err := Open(context.Background(), "mem://test", Options{Sink: "model", Storage: mem})
			if err != nil {
				t.Fatal(err)
			}
			got := stateOf(t, fresh)
			if len(got) != len(want) {
				t.Fatalf("%d keys, want %d", len(got), len(want))
			}
			for k, w := range want {
				if got[k] != w {
					t.Fatalf("key %d: %+v, want %+v", k, got[k], w)
				}
			}
			if tb.Version() != wantVersion || fresh.Version() != wantVersion {
				t.Errorf("version %d (reopened %d), want %d as without failures", tb.Version(), fresh.Version(), wantVersion)
			}
			if n := countData(t, mem); n > wantFiles+c.orphans {
				t.Errorf("%d data files, want at most %d + %d orphans", n, wantFiles, c.orphans)
			}
		})
	}
}

// A permanent storage failure is not retried: Apply stops with an error
// that says what was being written and why.
func TestPermanentStorageFailureStops(t *testing.T) {
	rng := rand.New(rand.NewSource(8))
	evs := genStream(rng, 6, 30)
	f := storagetest.NewFaulty(delta.NewMemStorage(), storagetest.Fault{Op: storagetest.OpPutIfAbsent, Pattern: "*.parquet",
		Skip: 1, Before: &fs.PathError{Op: "put", Path: "part-x.parquet", Err: fs.ErrPermission}})
	_, retries, err := applyAll(t, f, [][]event{evs[:10], evs[10:20], evs[20:]})
	if err == nil {
		t.Fatal("permanent failure swallowed")
	}
	if retries != 0 || quarantine.IsTransient(err) || delta.IsTransient(err) {
		t.Fatalf("permanent failure classified transient (retries %d): %v", retries, err)
	}
	if !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), "write data file") {
		t.Errorf("error %q does not say what failed", err)
	}
}

// TestCommitsAdvanceTheSnapshot: once a table is open, each batch's commit
// reads the commits after the version it read and never a checkpoint (a
// load per commit read the checkpoint every time: a tenth of a sink's CPU on
// a 1M-row table), checkpoints are still written, a commit cleaned up from
// under the cache falls back to a load, and the table ends as with loads.
func TestCommitsAdvanceTheSnapshot(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	evs := genStream(rng, 20, 160)
	var batches [][]event
	for rest := evs; len(rest) > 0; rest = rest[min(len(rest), 8):] {
		batches = append(batches, rest[:min(len(rest), 8)])
	}
	ref := delta.NewMemStorage()
	refTable, _, err := applyAll(t, ref, batches)
	if err != nil {
		t.Fatal(err)
	}
	f := storagetest.NewFaulty(delta.NewMemStorage())
	tb, _, err := applyAll(t, f, batches)
	if err != nil {
		t.Fatal(err)
	}
	reads, written := 0, 0
	for _, c := range f.Calls() {
		if !strings.Contains(c.Key, ".checkpoint.") {
			continue
		}
		switch c.Op {
		case storagetest.OpGet, storagetest.OpOpen:
			reads++
		case storagetest.OpPut:
			written++
		}
	}
	if reads != 0 || written < 3 {
		t.Errorf("%d batches: %d checkpoint reads (want none), %d written (want ≥ 3)", len(batches), reads, written)
	}
	want, got := stateOf(t, refTable), stateOf(t, tb)
	if len(got) != len(want) || tb.Version() != refTable.Version() {
		t.Fatalf("%d keys at v%d, want %d at v%d", len(got), tb.Version(), len(want), refTable.Version())
	}
	for k, w := range want {
		if got[k] != w {
			t.Fatalf("key %d: %+v, want %+v", k, got[k], w)
		}
	}

	// The commit after the cached snapshot is gone for good (log cleanup):
	// the next batch loads the table and commits.
	ctx := context.Background()
	o := tb.ops
	o.mu.Lock()
	stale := o.last
	o.mu.Unlock()
	old, err := o.tbl.SnapshotAt(ctx, stale.Version()-2)
	if err != nil {
		t.Fatal(err)
	}
	o.keep(old, true)
	f.Add(storagetest.Fault{Op: storagetest.OpGet, Pattern: "_delta_log/*.json", Before: fs.ErrNotExist, Times: 1})
	v := tb.Version()
	if _, err := tb.Apply(ctx, batchOf("t", 10_000, evs[0].change()), noReject(t)); err != nil {
		t.Fatal(err)
	}
	if f.Injected() != 1 || tb.Version() != v+1 {
		t.Errorf("injected %d, version %d, want 1 and v%d", f.Injected(), tb.Version(), v+1)
	}
}
