// What the merge did with each change of a batch, for writers beside the table (history).

package merge

import (
	"context"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/cdcsink/cdc-sink/delta/schema"
	"github.com/cdcsink/cdc-sink/normalize"
)

// Outcome is what the current-state table did with one change of a batch.
type Outcome uint8

const (
	// OutcomeApplied: the change is part of the key's state (possibly
	// superseded by a newer change of the same batch), or a truncate applied.
	OutcomeApplied Outcome = iota + 1
	// OutcomeStale: the version guard skipped it (older than the stored or
	// in-batch version, or wiped by a newer truncate).
	OutcomeStale
	// OutcomeDuplicate: a redelivery of a version already seen.
	OutcomeDuplicate
	// OutcomeIgnored: a truncate skipped by Options.Truncate = ignore.
	OutcomeIgnored
	// OutcomeRejected: sent to quarantine (version conflict, schema mismatch).
	OutcomeRejected
)

// String is the name written in history tables.
func (o Outcome) String() string {
	switch o {
	case OutcomeApplied:
		return "applied"
	case OutcomeStale:
		return "stale"
	case OutcomeDuplicate:
		return "duplicate"
	case OutcomeIgnored:
		return "ignored"
	case OutcomeRejected:
		return "rejected"
	}
	return "unknown"
}

// BeforeCommitFunc is Batch.BeforeCommit: called once per commit attempt,
// after the fold decided every change's outcome and the rejects were sent
// to quarantine, before anything of the table's commit is written. outcomes
// is aligned with Batch.Changes. An error aborts the attempt (a transient
// one is retried by the pipeline like any other).
type BeforeCommitFunc func(ctx context.Context, batchID int64, outcomes []Outcome) error

func (f *foldResult) outcomes(n int, usableIdx []int, rejects []Reject, ignored []int) []Outcome {
	out := make([]Outcome, n)
	for i, o := range f.Outcomes {
		var x Outcome
		switch o {
		case outApplied:
			x = OutcomeApplied
		case outStale:
			x = OutcomeStale
		case outDuplicate:
			x = OutcomeDuplicate
		case outConflict:
			x = OutcomeRejected
		}
		out[usableIdx[i]] = x
	}
	for _, r := range rejects {
		out[r.Index] = OutcomeRejected
	}
	for _, i := range ignored {
		out[i] = OutcomeIgnored
	}
	return out
}

// DeltaType is the Delta type a normalized type is stored as in a cdc-sink
// table (docs/types.md): other tables beside it (history) use the same mapping.
func DeltaType(t normalize.Type) (schema.DataType, error) { return deltaType(t) }

// NormalizeType is the inverse of DeltaType.
func NormalizeType(dt schema.DataType) (normalize.Type, error) { return normalizeType(dt) }

// AppendValue appends a normalized value to an Arrow builder of the column's
// Delta type (Unavailable and nil as null).
func AppendValue(b array.Builder, v any) error { return appendValue(b, v) }

// ArrowValue converts one Arrow value back into the normalized value model.
func ArrowValue(a arrow.Array, i int) any { return arrowValue(a, i) }
