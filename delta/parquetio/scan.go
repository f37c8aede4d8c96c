package parquetio

import (
	"context"
	"fmt"
	"io"
	"iter"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/arrow/scalar"
	"github.com/apache/arrow-go/v18/parquet"

	"github.com/cdcsink/cdc-sink/delta/schema"
)

// File is one live data file of a snapshot.
type File struct {
	Path            string             // as passed to Open (usually the add path, relative to the table root)
	PartitionValues map[string]*string // add.partitionValues
	Stats           string             // add.stats ("" = none)
	DV              *roaring64.Bitmap  // deleted row indexes (already loaded), nil = none
}

// OpenFunc opens a data file for reading. The returned closer (may be nil)
// is called when the scan is done with the file.
type OpenFunc func(ctx context.Context, path string) (r parquet.ReaderAtSeeker, size int64, closer io.Closer, err error)

// ScanOptions configures ScanFiles.
type ScanOptions struct {
	Columns      []string  // top-level read-schema columns (nil = all)
	Filter       Predicate // file pruning by stats/partition values (nil = none); rows are NOT filtered
	WithRowIndex bool      // add "_row_index" (int64)
	WithFilePath bool      // add "_file_path" (string, File.Path)
	BatchSize    int64
	Allocator    memory.Allocator
	// ColumnMappingMode is the table's delta.columnMapping.mode (see ReadOptions).
	ColumnMappingMode string
}

// ScanSchema is the schema of the records ScanFiles yields.
func ScanSchema(readSchema *schema.StructType, opts ScanOptions) (*arrow.Schema, error) {
	s, err := OutputSchema(readSchema, ReadOptions{Columns: opts.Columns, WithRowIndex: opts.WithRowIndex})
	if err != nil {
		return nil, err
	}
	if opts.WithFilePath {
		fs := append(s.Fields(), arrow.Field{Name: FilePathColumn, Type: arrow.BinaryTypes.String})
		s = arrow.NewSchema(fs, nil)
	}
	return s, nil
}

// ScanFiles reads the files in order, skipping those the filter excludes,
// dropping deleted rows, and yields records (the consumer releases them).
// Iteration stops at the first error, which is yielded with a nil record.
// Files are read one at a time; run several ScanFiles over disjoint file
// sets for parallelism.
func ScanFiles(ctx context.Context, open OpenFunc, files []File, readSchema *schema.StructType, opts ScanOptions) iter.Seq2[arrow.RecordBatch, error] {
	return func(yield func(arrow.RecordBatch, error) bool) {
		outSch, err := ScanSchema(readSchema, opts)
		if err != nil {
			yield(nil, err)
			return
		}
		mem := opts.Allocator
		if mem == nil {
			mem = memory.DefaultAllocator
		}
		opts.Filter = StatsSafeFilter(opts.Filter, readSchema)
		for _, f := range files {
			if err := ctx.Err(); err != nil {
				yield(nil, err)
				return
			}
			if opts.Filter != nil && !opts.Filter.MayMatch(f.Stats, f.PartitionValues) {
				continue
			}
			if !scanOne(ctx, open, f, readSchema, opts, outSch, mem, yield) {
				return
			}
		}
	}
}

func scanOne(ctx context.Context, open OpenFunc, f File, readSchema *schema.StructType, opts ScanOptions, outSch *arrow.Schema, mem memory.Allocator, yield func(arrow.RecordBatch, error) bool) bool {
	r, size, closer, err := open(ctx, f.Path)
	if err != nil {
		yield(nil, fmt.Errorf("parquetio: open %s: %w", f.Path, err))
		return false
	}
	if closer != nil {
		defer closer.Close()
	}
	rd, err := ReadFile(ctx, r, size, readSchema, ReadOptions{
		Columns: opts.Columns, PartitionValues: f.PartitionValues, Deleted: f.DV,
		WithRowIndex: opts.WithRowIndex, BatchSize: opts.BatchSize, Allocator: mem, Name: f.Path,
		ColumnMappingMode: opts.ColumnMappingMode,
	})
	if err != nil {
		yield(nil, err)
		return false
	}
	defer rd.Close()
	var pathSc scalar.Scalar
	if opts.WithFilePath {
		pathSc = scalar.NewStringScalar(f.Path)
	}
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			return true
		}
		if err != nil {
			yield(nil, err)
			return false
		}
		if opts.WithFilePath {
			pc, err := scalar.MakeArrayFromScalar(pathSc, int(rec.NumRows()), mem)
			if err != nil {
				rec.Release()
				yield(nil, err)
				return false
			}
			cols := append(append([]arrow.Array{}, rec.Columns()...), pc)
			nrec := array.NewRecordBatch(outSch, cols, rec.NumRows())
			pc.Release()
			rec.Release()
			rec = nrec
		}
		if !yield(rec, nil) {
			return false
		}
	}
}
