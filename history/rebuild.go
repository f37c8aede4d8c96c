// Rebuilding a current-state table from a history table.

package history

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/normalize"
)

// ErrRedacted: the history leaves out or hashes columns (privacy settings),
// so a table rebuilt from it would not hold the source's values.
var ErrRedacted = errors.New("history is redacted")

// RebuildStats reports a rebuild.
type RebuildStats struct {
	Entries, Batches int
	Result           merge.Result // summed over the batches
}

// Rebuild applies the history's entries (up to untilMicros of source commit
// time; 0: all) to dst batch by batch, with the batches the live table
// had: the same changes fold the same way, so run to the end the rebuilt
// table equals the live one (cdc-sink diff). Changes the live table
// skipped are handed in too and skipped again by the version guard;
// truncates it ignored stay ignored. Each batch records the offsets of its
// records, so dst can be carried on from Kafka where the history ends.
func Rebuild(ctx context.Context, h *History, dst *merge.Table, untilMicros int64) (RebuildStats, error) {
	return RebuildWith(ctx, h, dst, RebuildOptions{UntilMicros: untilMicros})
}

// RebuildOptions are the settings of RebuildWith.
type RebuildOptions struct {
	UntilMicros int64 // only changes committed at the source at or before this time (0: all)
	// SCD2, when set, is a new SCD type 2 table built in the same batches
	// (each written before dst's, as the sink writes them): the way to give
	// an existing history its SCD2 table, which cannot start beside a
	// current table that has rows (SCD2.CheckStart).
	SCD2 *SCD2
}

// RebuildWith is Rebuild with options.
func RebuildWith(ctx context.Context, h *History, dst *merge.Table, opts RebuildOptions) (RebuildStats, error) {
	untilMicros := opts.UntilMicros
	var st RebuildStats
	if len(h.Excluded) > 0 || len(h.Hashed) > 0 {
		return st, fmt.Errorf("%w: %s leaves out %v and hashes %v (history.exclude_columns / hash_columns): a rebuild would not hold the source's values",
			ErrRedacted, h.Location, h.Excluded, h.Hashed)
	}
	entries, err := h.Entries(ctx, untilMicros)
	if err != nil {
		return st, err
	}
	st.Entries = len(entries)
	for i := 0; i < len(entries); {
		j := i
		var cs []*normalize.Change
		offsets := map[merge.TP]int64{}
		for ; j < len(entries) && entries[j].BatchID == entries[i].BatchID; j++ {
			e := entries[j]
			if e.Outcome == merge.OutcomeIgnored.String() {
				continue
			}
			cs = append(cs, e.Change)
			if c := e.Change.Coord; c.Topic != "" {
				tp := merge.TP{Topic: c.Topic, Partition: c.Partition}
				if c.Offset+1 > offsets[tp] {
					offsets[tp] = c.Offset + 1
				}
			}
		}
		i = j
		if len(cs) == 0 {
			continue
		}
		b := &merge.Batch{Changes: cs, Offsets: offsets}
		if opts.SCD2 != nil {
			b.BeforeCommit = func(ctx context.Context, batchID int64, outcomes []merge.Outcome) error {
				return opts.SCD2.Write(ctx, dst, Input{BatchID: batchID, Changes: cs, Outcomes: outcomes, Offsets: offsets})
			}
		}
		res, err := dst.Apply(ctx, b, func(_ context.Context, batchID int64, rs []merge.Reject) error {
			if len(rs) == 0 {
				return nil
			}
			msgs := make([]string, len(rs))
			for k, r := range rs {
				msgs[k] = r.Message
			}
			return fmt.Errorf("rebuild batch %d: %d changes refused: %s", batchID, len(rs), strings.Join(msgs, "; "))
		})
		if err != nil {
			return st, fmt.Errorf("rebuild from %s: %w", h.Location, err)
		}
		st.Batches++
		st.Result.Inserted += res.Inserted
		st.Result.Updated += res.Updated
		st.Result.Deleted += res.Deleted
		st.Result.Stale += res.Stale
		st.Result.Duplicate += res.Duplicate
	}
	return st, nil
}
