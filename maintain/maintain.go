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
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"

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
		// never mix files of two Kafka partitions (layout.TagPartition):
		// instances of a sink own partitions, and a file shared by two would
		// make them conflict again (docs/table-layout.md)
		k := partKey(a.PartitionValues) + "\x00" + a.Tags[layout.TagPartition]
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], a)
	}
	sort.Strings(order)
	type bin struct {
		files []*delta.Add
		pv    map[string]*string
		tag   string // the files' partition tag ("": untagged, split by row)
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
			cur.pv, cur.tag = a.PartitionValues, a.Tags[layout.TagPartition]
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
	topicCol, partCol := slices.Index(cols, layout.ColTopic), slices.Index(cols, layout.ColPartition)
	for _, b := range bins {
		// One output per partition tag: a tagged bin has one; an untagged
		// bin's rows are split by their _cdc_topic/_cdc_partition, which
		// realigns files written before the partition-aligned layout.
		outs := map[string]*optimizeOut{}
		out := func(tag string) (*optimizeOut, error) {
			if o, ok := outs[tag]; ok {
				return o, nil
			}
			o := &optimizeOut{tag: tag}
			w, err := parquetio.NewWriter(ctx, &o.buf, t.Schema, parquetio.WriteOptions{PartitionColumns: t.Snap.PartitionColumns()})
			if err != nil {
				return nil, err
			}
			o.w = w
			outs[tag] = o
			return o, nil
		}
		closeAll := func() {
			for _, o := range outs {
				if o.w != nil {
					_, _ = o.w.Close()
				}
			}
		}
		for _, a := range b.files {
			res.FilesRemoved++
			res.BytesRemoved += a.Size
			if a.DeletionVector != nil {
				res.DVFilesRemoved++
			}
			err := t.ScanFile(ctx, a, cols, false, func(rec arrow.RecordBatch) error {
				res.RowsRead += rec.NumRows()
				if b.tag != "" || topicCol < 0 || partCol < 0 {
					o, err := out(b.tag)
					if err != nil {
						return err
					}
					return o.w.Write(rec)
				}
				parts, err := splitByPartition(ctx, rec, topicCol, partCol)
				if err != nil {
					return err
				}
				for _, pr := range parts {
					o, err := out(pr.tag)
					if err == nil {
						err = o.w.Write(pr.rec)
					}
					if pr.rec != rec {
						pr.rec.Release()
					}
					if err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				closeAll()
				return nil, err
			}
			rm := delta.RemoveFile(*a, now)
			rm.DataChange = false
			tx.Remove(rm)
		}
		tags := slices.Sorted(maps.Keys(outs))
		for _, tag := range tags {
			o := outs[tag]
			st, err := o.w.Close()
			o.w = nil
			if err != nil {
				closeAll()
				return nil, err
			}
			if st.NumRecords == 0 {
				continue // every row was deleted: the files just go
			}
			res.RowsWritten += st.NumRecords
			res.FilesAdded++
			res.BytesAdded += int64(o.buf.Len())
			if opts.DryRun {
				continue
			}
			add, err := t.Delta.PutDataFile(ctx, o.buf.Bytes(), st.StatsJSON, t.Snap.PartitionColumns(), b.pv)
			if err != nil {
				closeAll()
				return nil, fmt.Errorf("optimize: %w", err)
			}
			add.ModificationTime, add.DataChange = now.UnixMilli(), false
			if tag != "" {
				add.Tags = map[string]string{layout.TagPartition: tag}
			}
			tx.Add(add)
		}
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

// optimizeOut is one output file of a bin: the rows of one partition tag.
type optimizeOut struct {
	tag string
	buf bytes.Buffer
	w   *parquetio.Writer
}

// taggedRecord is the rows of a record that came from one Kafka partition.
type taggedRecord struct {
	tag string // layout.PartitionTag; "" for rows without Kafka coordinates
	rec arrow.RecordBatch
}

// splitByPartition splits rec by its _cdc_topic / _cdc_partition columns
// (the rows' partition tags), in first-seen order. A record of a single
// partition comes back as itself (not retained again).
func splitByPartition(ctx context.Context, rec arrow.RecordBatch, topicCol, partCol int) ([]taggedRecord, error) {
	n := int(rec.NumRows())
	tagOf := make([]string, n)
	var order []string
	seen := map[string]bool{}
	topic, partition := rec.Column(topicCol), rec.Column(partCol)
	for r := 0; r < n; r++ {
		var tag string
		if !topic.IsNull(r) && !partition.IsNull(r) {
			if p, ok := intValue(partition, r); ok {
				tag = layout.PartitionTag(topic.ValueStr(r), int32(p))
				if _, _, ok := layout.ParsePartitionTag(tag); !ok {
					tag = ""
				}
			}
		}
		tagOf[r] = tag
		if !seen[tag] {
			seen[tag] = true
			order = append(order, tag)
		}
	}
	if len(order) <= 1 {
		return []taggedRecord{{tag: firstOr(order), rec: rec}}, nil
	}
	out := make([]taggedRecord, 0, len(order))
	for _, tag := range order {
		mb := array.NewBooleanBuilder(memory.DefaultAllocator)
		for r := 0; r < n; r++ {
			mb.Append(tagOf[r] == tag)
		}
		mask := mb.NewBooleanArray()
		mb.Release()
		part, err := compute.FilterRecordBatch(ctx, rec, mask, compute.DefaultFilterOptions())
		mask.Release()
		if err != nil {
			for _, o := range out {
				o.rec.Release()
			}
			return nil, fmt.Errorf("optimize: split rows by partition: %w", err)
		}
		out = append(out, taggedRecord{tag: tag, rec: part})
	}
	return out, nil
}

func firstOr(xs []string) string {
	if len(xs) == 0 {
		return ""
	}
	return xs[0]
}

// intValue reads an integer column's value (the partition column is an
// integer; tables written by other tools may use another width).
func intValue(a arrow.Array, i int) (int64, bool) {
	switch x := a.(type) {
	case *array.Int32:
		return int64(x.Value(i)), true
	case *array.Int64:
		return x.Value(i), true
	case *array.Int16:
		return int64(x.Value(i)), true
	case *array.Int8:
		return int64(x.Value(i)), true
	}
	return 0, false
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
	var (
		adds []delta.Add
		bms  []*roaring64.Bitmap
	)
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
		adds, bms = append(adds, *a), append(bms, bm)
	}
	if res.Purged == 0 || opts.DryRun {
		return res, nil
	}
	// the new DVs in one DV file
	nas, rms, _, err := t.Delta.ReplaceDeletionVectors(ctx, adds, bms, now)
	if err != nil {
		return nil, fmt.Errorf("purge-tombstones: deletion vectors of %d files: %w", len(adds), err)
	}
	for i := range nas {
		if cdf {
			// Tombstones are not live rows: purging them changes no row of
			// the feed (docs/history.md, Change Data Feed).
			rms[i].DataChange, nas[i].DataChange = false, false
		}
		tx.Remove(rms[i])
		tx.Add(nas[i])
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
