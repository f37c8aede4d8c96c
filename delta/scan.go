// Scanning a snapshot's live rows, with file pruning by statistics and partition values.

package delta

import (
	"context"
	"fmt"
	"io"
	"iter"

	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/parquet"

	"github.com/cdcsink/cdc-sink/delta/dv"
	"github.com/cdcsink/cdc-sink/delta/parquetio"
)

// ScanOptions selects columns and prunes files for Snapshot.Scan.
type ScanOptions struct {
	Columns      []string            // top-level logical columns (nil = all)
	Filter       parquetio.Predicate // file pruning on stats / partition values; rows are not filtered
	WithRowIndex bool                // add "_row_index" (physical row position)
	WithFilePath bool                // add "_file_path" (add.path)
	BatchSize    int64
}

// Scan reads the snapshot's live rows (deletion vectors applied, partition
// columns filled from partitionValues) by delegating to delta/parquetio.
// Records must be released by the consumer. Files whose path is absolute
// (outside the table) are refused.
func (s *Snapshot) Scan(ctx context.Context, opts ScanOptions) iter.Seq2[arrow.RecordBatch, error] {
	return func(yield func(arrow.RecordBatch, error) bool) {
		sch, err := s.Schema()
		if err != nil {
			yield(nil, err)
			return
		}
		// column mapping: partitionValues are keyed by physical name.
		phys := map[string]string{}
		if s.ColumnMappingMode() != "none" {
			for _, f := range sch.Fields {
				if p, ok := f.Metadata["delta.columnMapping.physicalName"].(string); ok && p != "" {
					phys[p] = f.Name
				}
			}
		}
		// Old files' stats of widened columns are not all bounds in the wide type.
		opts.Filter = parquetio.StatsSafeFilter(opts.Filter, sch)
		files := make([]parquetio.File, 0, len(s.files))
		dvfs := s.table.dvFS()
		for i := range s.files {
			a := &s.files[i]
			rel, ok := relPath(a.Path)
			if !ok {
				yield(nil, fmt.Errorf("scan v%d: file %s is outside the table (absolute path not supported)", s.version, a.Path))
				return
			}
			f := parquetio.File{Path: rel, PartitionValues: a.PartitionValues, Stats: a.Stats}
			if len(phys) > 0 && len(a.PartitionValues) > 0 {
				pv := make(map[string]*string, len(a.PartitionValues))
				for k, v := range a.PartitionValues {
					if l, ok := phys[k]; ok {
						k = l
					}
					pv[k] = v
				}
				f.PartitionValues = pv
			}
			if a.DeletionVector != nil {
				if opts.Filter != nil && !opts.Filter.MayMatch(a.Stats, f.PartitionValues) {
					continue // pruned: don't load its DV
				}
				bm, err := dv.Read(ctx, dvfs, s.table.path, a.DeletionVector)
				if err != nil {
					yield(nil, fmt.Errorf("scan v%d: deletion vector of %s: %w", s.version, a.Path, err))
					return
				}
				f.DV = bm
			}
			files = append(files, f)
		}
		open := func(ctx context.Context, p string) (parquet.ReaderAtSeeker, int64, io.Closer, error) {
			r, size, err := s.table.store.Open(ctx, s.table.Key(p))
			if err != nil {
				return nil, 0, nil, err
			}
			return r, size, r, nil
		}
		for rec, err := range parquetio.ScanFiles(ctx, open, files, sch, parquetio.ScanOptions{
			Columns: opts.Columns, Filter: opts.Filter, WithRowIndex: opts.WithRowIndex, WithFilePath: opts.WithFilePath, BatchSize: opts.BatchSize,
			ColumnMappingMode: s.ColumnMappingMode(),
		}) {
			if !yield(rec, err) {
				return
			}
			if err != nil {
				return
			}
		}
	}
}

// DataFileKey returns the storage key of an add/remove path (URI-decoded,
// relative to the table root).
func (t *Table) DataFileKey(path string) (string, error) {
	rel, ok := relPath(path)
	if !ok {
		return "", fmt.Errorf("path %s is absolute (outside the table)", path)
	}
	return t.Key(strings.TrimPrefix(rel, "./")), nil
}
