// Retention: dropping whole source-date partitions of a history table.

package history

import (
	"context"
	"fmt"
	"time"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/layout"
)

// PurgeStats reports a purge.
type PurgeStats struct {
	Version int64 // the commit written (-1: nothing to purge)
	Files   int
	Rows    int64
	Dates   []string
}

// Purge removes, in one commit, every data file of the history partitions
// whose source date is before cutoff's UTC date. It is a metadata-only
// delete (remove actions): the files stay readable by time travel until
// vacuum deletes them. Rows without a source time are in the partition of
// their ingest date.
func Purge(ctx context.Context, location string, store delta.Storage, so delta.StorageOptions, cutoff time.Time, now time.Time) (PurgeStats, error) {
	st := PurgeStats{Version: -1}
	if store == nil {
		var err error
		if store, err = delta.OpenStorage(ctx, location, so); err != nil {
			return st, err
		}
	}
	tbl := delta.OpenTable(store, "")
	snap, err := tbl.Snapshot(ctx)
	if err != nil {
		return st, fmt.Errorf("purge history %s: %w", location, err)
	}
	if _, ok := snap.Config(layout.ConfHistoryOf); !ok {
		return st, fmt.Errorf("purge history %s: no %s property: not a cdc-sink history table (purge-history only drops history partitions)", location, layout.ConfHistoryOf)
	}
	limit := cutoff.UTC().Format(time.DateOnly)
	tx := tbl.Begin(snap)
	seen := map[string]bool{}
	for _, a := range snap.Files() {
		d := a.PartitionValues[layout.HistSourceDate]
		if d == nil || *d == "" || *d >= limit {
			continue
		}
		tx.Remove(delta.RemoveFile(a, now))
		st.Files++
		if s, err := a.ParsedStats(); err == nil && s != nil {
			st.Rows += s.NumRecords
		}
		if !seen[*d] {
			seen[*d] = true
			st.Dates = append(st.Dates, *d)
		}
	}
	if st.Files == 0 {
		return st, nil
	}
	// A concurrent history append adds files of recent dates only: it does
	// not conflict with removing old ones (blind appends are retried past).
	v, err := tx.Commit(ctx, "DELETE", map[string]any{"predicate": fmt.Sprintf("%s < '%s'", layout.HistSourceDate, limit)})
	if err != nil {
		return st, fmt.Errorf("purge history %s: %w", location, err)
	}
	st.Version = v
	return st, nil
}
