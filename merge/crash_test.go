// Crash-safety tests: a crash at every commit step, then a restart, ends in the uncrashed table.

package merge

import (
	"context"
	"errors"
	"math/rand"
	"testing"

	"github.com/cdcsink/cdc-sink/internal/deltacheck"
	"github.com/cdcsink/cdc-sink/normalize"
)

var errCrash = errors.New("injected crash")

// TestCrashAtEveryStep injects a crash at each commit step of each batch,
// restarts from the table (a fresh Open, as a new process would), re-applies
// the batches whose offsets the table does not cover, and requires the final
// table to equal the uninterrupted run's.
func TestCrashAtEveryStep(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewSource(42))
	evs := genStream(rng, 10, 80)
	var batches [][]event
	for rest := evs; len(rest) > 0; {
		n := 1 + rng.Intn(min(len(rest), 15))
		batches = append(batches, rest[:n])
		rest = rest[n:]
	}
	run := func(dir string, crashBatch int, point FaultPoint) {
		opts := Options{Sink: "crash"}
		armed := true
		opts.Fault = func(p FaultPoint) error {
			if armed && p == point {
				armed = false
				return errCrash
			}
			return nil
		}
		tb, err := Open(ctx, dir, Options{Sink: "crash"})
		if err != nil {
			t.Fatal(err)
		}
		off := int64(0)
		for i, b := range batches {
			off += int64(len(b))
			if next, ok := tb.NextOffset("t", 0); ok && next >= off {
				continue // the table already has this batch (a restart skips it)
			}
			cs := make([]*normalize.Change, len(b))
			for j, e := range b {
				cs[j] = e.change()
			}
			if i == crashBatch {
				crashing, err := Open(ctx, dir, opts)
				if err != nil {
					t.Fatal(err)
				}
				_, err = crashing.Apply(ctx, batchOf("t", off, cs...), noReject(t))
				if err != nil && !errors.Is(err, errCrash) {
					t.Fatal(err)
				}
				// "restart": a new Table from disk, then retry this batch.
				if tb, err = Open(ctx, dir, Options{Sink: "crash"}); err != nil {
					t.Fatal(err)
				}
				if next, ok := tb.NextOffset("t", 0); ok && next >= off {
					continue // crashed after the commit: already applied
				}
				for j, e := range b {
					cs[j] = e.change()
				}
			}
			if _, err := tb.Apply(ctx, batchOf("t", off, cs...), noReject(t)); err != nil {
				t.Fatal(err)
			}
		}
	}
	ref := t.TempDir()
	run(ref, -1, "")
	want := tableState(t, ref)
	wantRS := deltacheck.ReadDeltaRS(t, ref, "")
	for _, point := range []FaultPoint{FaultDataWritten, FaultDVWritten, FaultBeforeCommit, FaultAfterCommit} {
		for _, b := range []int{0, len(batches) / 2, len(batches) - 1} {
			dir := t.TempDir()
			run(dir, b, point)
			got := tableState(t, dir)
			if len(got) != len(want) {
				t.Fatalf("%s@batch %d: %d keys, want %d", point, b, len(got), len(want))
			}
			for k, w := range want {
				if got[k] != w {
					t.Fatalf("%s@batch %d key %d: %+v want %+v", point, b, k, got[k], w)
				}
			}
		}
	}
	// One crashed table also reads back identically through delta-rs
	// (ignoring lineage/ingest metadata, which differ between runs).
	dir := t.TempDir()
	run(dir, len(batches)/2, "dv-written")
	gotRS := deltacheck.ReadDeltaRS(t, dir, "")
	strip := func(rows []string) []map[string]any {
		out := deltacheck.Decode(t, rows)
		for _, r := range out {
			delete(r, "_cdc_ingest_ts")
			delete(r, "_cdc_batch_id")
		}
		return out
	}
	a, b := strip(wantRS.Rows), strip(gotRS.Rows)
	if len(a) != len(b) {
		t.Fatalf("delta-rs rows %d vs %d", len(a), len(b))
	}
	for i := range a {
		for k, v := range a[i] {
			if b[i][k] != v {
				t.Fatalf("row %d col %s: %v vs %v", i, k, v, b[i][k])
			}
		}
	}
}
