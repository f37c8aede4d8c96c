// Tracked: a current-state table with its history table, written in the same batch.

package history

import (
	"context"

	"github.com/cdcsink/cdc-sink/merge"
)

// Tracked is a current-state table whose every batch is first appended to
// its history (pipeline.Table). The order makes a crash between the two
// commits safe: on restart the pipeline re-reads from the current table's
// offsets, the merge recomputes the same outcomes from the same table
// state, and the history skips what its own offsets already hold.
type Tracked struct {
	*merge.Table
	History *Writer
	// SCD2, when set, is the SCD type 2 table, written after the history
	// and before the current table (the same crash argument holds: it
	// skips what its own offsets hold).
	SCD2 *SCD2
	// Written counts history rows appended by the last Apply (tests, logs).
	Written int
}

// Apply implements pipeline.Table.
func (t *Tracked) Apply(ctx context.Context, b *merge.Batch, reject func(ctx context.Context, batchID int64, rs []merge.Reject) error) (*merge.Result, error) {
	bb := *b
	t.Written = 0
	bb.BeforeCommit = func(ctx context.Context, batchID int64, outcomes []merge.Outcome) error {
		n, err := t.History.Write(ctx, Input{BatchID: batchID, Changes: b.Changes, Outcomes: outcomes, Offsets: b.Offsets})
		t.Written += n
		if err != nil || t.SCD2 == nil {
			return err
		}
		if err := t.SCD2.Write(ctx, t.Table, Input{BatchID: batchID, Changes: b.Changes, Outcomes: outcomes, Offsets: b.Offsets}); err != nil {
			return err
		}
		return t.History.fault(FaultSCD2AfterCommit)
	}
	return t.Table.Apply(ctx, &bb, reject)
}
