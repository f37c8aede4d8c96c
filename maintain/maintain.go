// Package maintain rewrites the data of a Delta table: compaction
// (Optimize) and the retention-bounded removal of cdc-sink tombstones
// (PurgeTombstones), which do not change what the table means, and the
// change of a column's type with exact conversion of its values
// (AlterColumn), the recovery path after an incompatible source type
// change. It uses package delta for the log and delta/parquetio for data
// files; it owns the rewrite logic so that the CLI stays thin.
//
// None of them should run while a sink writes the same table: stop the
// sink for the table first (see docs/runbook.md). All commit with optimistic
// concurrency, so a writer that committed in between makes them fail with a
// conflict rather than lose data, but a long-running sink keeps an in-memory
// index of the files it read and must be restarted afterwards anyway.
package maintain

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/delta/parquetio"
	"github.com/cdcsink/cdc-sink/layout"
	"github.com/cdcsink/cdc-sink/tablerows"
)

// OptimizeOptions configures Optimize.
type OptimizeOptions struct {
	// Storage configures object store locations (endpoint, region…).
	Storage delta.StorageOptions
	// SmallFileBytes: files smaller than this are compacted (default 32 MiB).
	// Files with a deletion vector are always compacted.
	SmallFileBytes int64
	// TargetFileBytes bounds the input bytes packed into one output file
	// (default 256 MiB).
	TargetFileBytes int64
	// DryRun plans without writing anything.
	DryRun bool
	Now    func() time.Time
}

// OptimizeResult reports what Optimize did (or would do).
type OptimizeResult struct {
	ReadVersion    int64
	Version        int64 // new table version (ReadVersion when nothing was committed)
	Committed      bool
	FilesRemoved   int
	FilesAdded     int
	RowsRead       int64 // live (non-DV-deleted) rows of the removed files
	RowsWritten    int64
	BytesRemoved   int64
	BytesAdded     int64
	DVFilesRemoved int
}

// Optimize compacts the files that have deletion vectors or are small into
// fewer files holding only their current rows (tombstone rows included: they
// are current table content), and commits remove+add actions with
// dataChange=false. The table's logical content does not change.
func Optimize(ctx context.Context, dir string, opts OptimizeOptions) (*OptimizeResult, error) {
	if opts.SmallFileBytes <= 0 {
		opts.SmallFileBytes = 32 << 20
	}
	if opts.TargetFileBytes <= 0 {
		opts.TargetFileBytes = 256 << 20
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	t, err := tablerows.OpenWith(ctx, dir, opts.Storage)
	if err != nil {
		return nil, err
	}
	if err := writable(t); err != nil {
		return nil, err
	}
	res := &OptimizeResult{ReadVersion: t.Version(), Version: t.Version()}
	// Group candidate files by partition.
	groups := map[string][]*delta.Add{}
	var order []string
	files := t.Snap.Files()
	for i := range files {
		a := &files[i]
		if a.DeletionVector == nil && a.Size >= opts.SmallFileBytes {
			continue
		}
		k := partKey(a.PartitionValues)
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], a)
	}
	sort.Strings(order)
	type bin struct {
		files []*delta.Add
		pv    map[string]*string
	}
	var bins []bin
	for _, k := range order {
		fs := groups[k]
		hasDV := false
		for _, a := range fs {
			hasDV = hasDV || a.DeletionVector != nil
		}
		if len(fs) < 2 && !hasDV {
			continue // a lone small file without deletions: nothing to gain
		}
		sort.Slice(fs, func(i, j int) bool { return fs[i].Path < fs[j].Path })
		var cur bin
		var size int64
		for _, a := range fs {
			if len(cur.files) > 0 && size+a.Size > opts.TargetFileBytes {
				bins = append(bins, cur)
				cur, size = bin{}, 0
			}
			cur.files = append(cur.files, a)
			cur.pv = a.PartitionValues
			size += a.Size
		}
		if len(cur.files) > 0 {
			bins = append(bins, cur)
		}
	}
	if len(bins) == 0 {
		return res, nil
	}
	now := opts.Now()
	tx := t.Snap.Begin()
	cols := t.Columns()
	for _, b := range bins {
		var buf bytes.Buffer
		w, err := parquetio.NewWriter(ctx, &buf, t.Schema, parquetio.WriteOptions{PartitionColumns: t.Snap.PartitionColumns()})
		if err != nil {
			return nil, err
		}
		for _, a := range b.files {
			res.FilesRemoved++
			res.BytesRemoved += a.Size
			if a.DeletionVector != nil {
				res.DVFilesRemoved++
			}
			err := t.ScanFile(ctx, a, cols, false, func(rec arrow.RecordBatch) error {
				res.RowsRead += rec.NumRows()
				return w.Write(rec)
			})
			if err != nil {
				_, _ = w.Close()
				return nil, err
			}
			rm := delta.RemoveFile(*a, now)
			rm.DataChange = false
			tx.Remove(rm)
		}
		st, err := w.Close()
		if err != nil {
			return nil, err
		}
		if st.NumRecords == 0 {
			continue // every row was deleted: the files just go
		}
		res.RowsWritten += st.NumRecords
		res.FilesAdded++
		res.BytesAdded += int64(buf.Len())
		if opts.DryRun {
			continue
		}
		add, err := t.Delta.PutDataFile(ctx, buf.Bytes(), st.StatsJSON, t.Snap.PartitionColumns(), b.pv)
		if err != nil {
			return nil, fmt.Errorf("optimize: %w", err)
		}
		add.ModificationTime, add.DataChange = now.UnixMilli(), false
		tx.Add(add)
	}
	if res.RowsRead != res.RowsWritten {
		return nil, fmt.Errorf("optimize: read %d rows but wrote %d", res.RowsRead, res.RowsWritten)
	}
	if opts.DryRun {
		return res, nil
	}
	v, err := tx.Commit(ctx, "OPTIMIZE", map[string]any{
		"predicate": "[]", "zOrderBy": "[]", "auto": false,
		"filesRemoved": res.FilesRemoved, "filesAdded": res.FilesAdded,
	})
	if err != nil {
		return nil, err
	}
	res.Version, res.Committed = v, true
	return res, nil
}

func partKey(pv map[string]*string) string {
	if len(pv) == 0 {
		return ""
	}
	b, _ := json.Marshal(pv) // map keys are sorted
	return string(b)
}

func writable(t *tablerows.Table) error {
	if m := t.Snap.ColumnMappingMode(); m != "none" {
		return fmt.Errorf("table uses column mapping mode %q: rewriting it is not supported", m)
	}
	p := t.Snap.Protocol()
	if p.HasFeature("rowTracking") {
		return errors.New("table uses row tracking: rewriting it is not supported")
	}
	return nil
}

// PurgeOptions configures PurgeTombstones.
type PurgeOptions struct {
	// Storage configures object store locations (endpoint, region…).
	Storage delta.StorageOptions
	// OlderThan: tombstones whose _cdc_ingest_ts is older than Now-OlderThan
	// are removed.
	OlderThan time.Duration
	DryRun    bool
	Now       func() time.Time
}

// PurgeResult reports what PurgeTombstones did (or would do).
type PurgeResult struct {
	ReadVersion int64
	Version     int64
	Committed   bool
	Cutoff      time.Time
	Purged      int64 // tombstone rows removed
	Kept        int64 // tombstones younger than the cutoff
	Files       int   // files that got a new deletion vector
}

// PurgeTombstones hides, with deletion vectors, the tombstone rows
// (_cdc_deleted = true) whose _cdc_ingest_ts is older than the cutoff. The
// keys disappear from the table: a late change for such a key that is older
// than its delete can no longer be recognised as stale and would recreate
// the row. Choose OlderThan well above the longest possible redelivery delay.
func PurgeTombstones(ctx context.Context, dir string, opts PurgeOptions) (*PurgeResult, error) {
	if opts.OlderThan <= 0 {
		return nil, errors.New("purge-tombstones: the age must be positive")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	t, err := tablerows.OpenWith(ctx, dir, opts.Storage)
	if err != nil {
		return nil, err
	}
	if err := writable(t); err != nil {
		return nil, err
	}
	if !t.HasDeletedColumn() || t.Type(layout.ColIngestTs) == nil {
		return nil, fmt.Errorf("%s has no %s/%s columns: not a cdc-sink table", dir, layout.ColDeleted, layout.ColIngestTs)
	}
	if p := t.Snap.Protocol(); !p.HasFeature("deletionVectors") {
		return nil, errors.New("table does not enable deletion vectors")
	}
	now := opts.Now()
	cutoff := now.Add(-opts.OlderThan)
	cutUs := cutoff.UnixMicro()
	res := &PurgeResult{ReadVersion: t.Version(), Version: t.Version(), Cutoff: cutoff}
	tx := t.Snap.Begin()
	cdf := t.Snap.ChangeDataFeedEnabled()
	files := t.Snap.Files()
	for i := range files {
		a := &files[i]
		var hide []uint64
		err := t.ScanFile(ctx, a, []string{layout.ColDeleted, layout.ColIngestTs}, true, func(rec arrow.RecordBatch) error {
			del := rec.Column(0).(*array.Boolean)
			ts := rec.Column(1).(*array.Timestamp)
			idx := rec.Column(2).(*array.Int64)
			for r := 0; r < int(rec.NumRows()); r++ {
				if !del.IsValid(r) || !del.Value(r) {
					continue
				}
				if ts.IsValid(r) && int64(ts.Value(r)) < cutUs {
					hide = append(hide, uint64(idx.Value(r)))
				} else {
					res.Kept++
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		if len(hide) == 0 {
			continue
		}
		res.Purged += int64(len(hide))
		res.Files++
		if opts.DryRun {
			continue
		}
		old, err := t.ReadDV(ctx, a)
		if err != nil {
			return nil, err
		}
		bm := roaring64.New()
		if old != nil {
			bm.Or(old)
		}
		bm.AddMany(hide)
		na, rm, _, err := t.Delta.ReplaceDeletionVector(ctx, *a, bm, now)
		if err != nil {
			return nil, fmt.Errorf("purge-tombstones: %s: %w", a.Path, err)
		}
		if cdf {
			// Tombstones are not live rows: purging them changes no row of
			// the feed (docs/history.md, Change Data Feed).
			rm.DataChange, na.DataChange = false, false
		}
		tx.Remove(rm)
		tx.Add(na)
	}
	if res.Purged == 0 || opts.DryRun {
		return res, nil
	}
	v, err := tx.Commit(ctx, "DELETE", map[string]any{
		"predicate": fmt.Sprintf(`["(%s AND (%s < '%s'))"]`, layout.ColDeleted, layout.ColIngestTs, cutoff.UTC().Format(time.RFC3339)),
	})
	if err != nil {
		return nil, err
	}
	res.Version, res.Committed = v, true
	return res, nil
}
