package parquetio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"strings"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/arrow/scalar"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/cdcsink/cdc-sink/delta/schema"
)

// Names of the metadata columns readers can add.
const (
	RowIndexColumn = "_row_index" // int64, physical row position in the file
	FilePathColumn = "_file_path" // string, File.Path (ScanFiles only)
)

// DefaultBatchSize is the default number of rows per record read.
const DefaultBatchSize = 64 * 1024

// ReadOptions configures ReadFile.
type ReadOptions struct {
	// Columns selects top-level columns of the read schema (nil = all), in
	// the order given.
	Columns []string
	// PartitionValues is the add action's partitionValues. Read-schema
	// columns that are keys here are filled with the (parsed) value instead
	// of being read from the file; a nil value, "" and
	// "__HIVE_DEFAULT_PARTITION__" are null.
	PartitionValues map[string]*string
	// Deleted holds the physical row indexes to drop (the file's deletion
	// vector); nil for none.
	Deleted *roaring64.Bitmap
	// WithRowIndex appends the int64 column "_row_index" (physical row
	// position within the file, before deletions).
	WithRowIndex bool
	// BatchSize is the number of physical rows per record (default 64Ki);
	// records are smaller when rows are deleted.
	BatchSize int64
	// Allocator for arrow buffers (default memory.DefaultAllocator).
	Allocator memory.Allocator
	// Name identifies the file in errors (e.g. its path).
	Name string
	// ColumnMappingMode is the table's delta.columnMapping.mode. In mode
	// "id" columns and nested fields are found by Parquet field id
	// (delta.columnMapping.id) and a file without field ids is refused;
	// otherwise by delta.columnMapping.physicalName when the field has one,
	// else by name.
	ColumnMappingMode string
}

// RecordReader yields the records of one file. Next returns io.EOF at the
// end. Records are owned by the caller (Release them).
type RecordReader struct {
	ctx     context.Context
	name    string
	mem     memory.Allocator
	outSch  *arrow.Schema
	pf      *file.Reader
	rr      pqarrow.RecordReader
	total   int64 // rows in the file
	pos     int64 // physical row index of the next batch
	batch   int64
	deleted *roaring64.Bitmap
	cols    []colSource
	rowIdx  bool
	cmMode  string
	done    bool
	err     error
}

type colSource struct {
	field    arrow.Field
	dtype    schema.DataType // Delta type of field
	fileName string          // file column name ("" = not in file)
	constant scalar.Scalar   // partition value (or null when missing)
	i96      *int96Col       // top-level INT96 column read directly
}

// PanicError is returned when arrow-go panics on a corrupt file.
type PanicError struct {
	File  string
	Value any
	Stack string
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("parquetio: corrupt or unsupported Parquet file %s: %v", e.File, e.Value)
}

func recoverErr(name string, err *error) {
	if r := recover(); r != nil {
		*err = &PanicError{File: name, Value: r, Stack: string(debug.Stack())}
	}
}

// physicalName returns the name of f's column in data files (column mapping
// "delta.columnMapping.physicalName" metadata, else the logical name).
func physicalName(f *schema.StructField) string {
	if p, ok := f.Metadata["delta.columnMapping.physicalName"].(string); ok && p != "" {
		return p
	}
	return f.Name
}

// OutputSchema is the Arrow schema of the records ReadFile returns for
// these options (readSchema columns selected by opts.Columns, then
// _row_index if requested).
func OutputSchema(readSchema *schema.StructType, opts ReadOptions) (*arrow.Schema, error) {
	fields, err := selectFields(readSchema, opts.Columns)
	if err != nil {
		return nil, err
	}
	af := make([]arrow.Field, 0, len(fields)+1)
	for _, f := range fields {
		af = append(af, schema.ArrowField(f))
	}
	if opts.WithRowIndex {
		af = append(af, arrow.Field{Name: RowIndexColumn, Type: arrow.PrimitiveTypes.Int64})
	}
	return arrow.NewSchema(af, nil), nil
}

func selectFields(readSchema *schema.StructType, cols []string) ([]*schema.StructField, error) {
	if cols == nil {
		return readSchema.Fields, nil
	}
	out := make([]*schema.StructField, 0, len(cols))
	for _, c := range cols {
		f, _ := readSchema.Field(c)
		if f == nil {
			return nil, fmt.Errorf("parquetio: column %q not in read schema", c)
		}
		out = append(out, f)
	}
	return out, nil
}

func lookupPartition(pv map[string]*string, name string) (*string, bool) {
	if v, ok := pv[name]; ok {
		return v, true
	}
	for k, v := range pv {
		if strings.EqualFold(k, name) {
			return v, true
		}
	}
	return nil, false
}

// ReadFile opens a Parquet data file (Spark- or cdc-sink-written) for
// reading with the Delta read schema readSchema. size is the file size in
// bytes (0 = unknown). Values are converted to schema.ToArrow types: INT96
// and TIMESTAMP_MILLIS/MICROS -> timestamp[us, UTC], every decimal encoding
// -> decimal128(p,s), legacy lists/maps; files written before a Delta type
// widening are widened exactly (integer upcasts, float/byte/short/int ->
// double, integer or decimal -> wider decimal, date -> timestamp_ntz, also
// inside structs, arrays and maps), any other type mismatch is an error
// naming the column and both types; columns absent from the file read as
// null. Rows whose physical index is in opts.Deleted are dropped.
func ReadFile(ctx context.Context, r parquet.ReaderAtSeeker, size int64, readSchema *schema.StructType, opts ReadOptions) (rd *RecordReader, err error) {
	name := opts.Name
	if name == "" {
		name = "<parquet>"
	}
	defer recoverErr(name, &err)
	if err := readSchema.Validate(); err != nil {
		return nil, err
	}
	fields, err := selectFields(readSchema, opts.Columns)
	if err != nil {
		return nil, err
	}
	outSch, err := OutputSchema(readSchema, opts)
	if err != nil {
		return nil, err
	}
	mem := opts.Allocator
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	batch := opts.BatchSize
	if batch <= 0 {
		batch = DefaultBatchSize
	}
	props := parquet.NewReaderProperties(mem)
	pf, err := file.NewParquetReader(r, file.WithReadProps(props))
	if err != nil {
		return nil, fmt.Errorf("parquetio: %s: %w", name, err)
	}
	rd = &RecordReader{ctx: ctx, name: name, mem: mem, outSch: outSch, pf: pf, total: pf.NumRows(), batch: batch, deleted: opts.Deleted, rowIdx: opts.WithRowIndex, cmMode: opts.ColumnMappingMode}
	// Close through a copy: error returns below set the named result to nil.
	opened := rd
	defer func() {
		if err != nil {
			opened.Close()
			rd = nil
		}
	}()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: batch}, mem)
	if err != nil {
		return nil, fmt.Errorf("parquetio: %s: %w", name, err)
	}
	fileSch, err := fr.Schema()
	if err != nil {
		return nil, fmt.Errorf("parquetio: %s: %w", name, err)
	}
	var topIdx []int
	for i, f := range fields {
		cs := colSource{field: outSch.Field(i), dtype: f.Type}
		v, isPart := lookupPartition(opts.PartitionValues, f.Name)
		idx := -1
		if !isPart {
			if idx, err = matchFileField(fileSch.Fields(), f, opts.ColumnMappingMode); err != nil {
				return nil, fmt.Errorf("parquetio: %s: %w", name, err)
			}
		}
		if isPart {
			sc, err := ParsePartitionValue(v, f.Type)
			if err != nil {
				return nil, fmt.Errorf("parquetio: %s: partition column %q: %w", name, f.Name, err)
			}
			cs.constant = sc
		} else if idx >= 0 {
			cs.fileName = fileSch.Field(idx).Name
			if sf := &fr.Manifest.Fields[idx]; sf.IsLeaf() && pf.MetaData().Schema.Column(sf.ColIndex).PhysicalType() == parquet.Types.Int96 {
				descr := pf.MetaData().Schema.Column(sf.ColIndex)
				if descr.MaxRepetitionLevel() != 0 {
					return nil, fmt.Errorf("parquetio: %s: repeated INT96 column %q", name, cs.fileName)
				}
				cs.i96 = &int96Col{pf: pf, col: sf.ColIndex, maxDef: descr.MaxDefinitionLevel()}
			} else {
				topIdx = append(topIdx, idx)
			}
		} else {
			cs.constant = scalar.MakeNullScalar(cs.field.Type)
		}
		rd.cols = append(rd.cols, cs)
	}
	if len(topIdx) > 0 {
		var leaves []int
		for _, i := range topIdx {
			leaves = appendLeaves(leaves, &fr.Manifest.Fields[i])
		}
		if len(leaves) > 0 && rd.total > 0 {
			// The footer reader measured the file itself (size may be 0 = unknown).
			if err := CheckChunks(pf.MetaData(), leaves, pf.MetaData().GetSourceFileSize()); err != nil {
				return nil, fmt.Errorf("parquetio: %s: %w", name, err)
			}
			rr, err := fr.GetRecordReader(ctx, leaves, nil)
			if err != nil {
				return nil, fmt.Errorf("parquetio: %s: %w", name, err)
			}
			rd.rr = rr
		}
	}
	return rd, nil
}

// CheckChunks refuses a file whose column chunks (of the leaf columns
// given) lie outside it, before pqarrow opens them. pqarrow opens the chunks
// of a struct's fields on goroutines of its own, where a panic on such a
// range (a negative length is a makeslice panic) ends the process instead of
// reaching a recover; the bounds are the ones
// RowGroupReader.GetColumnPageReader reads (CI run of 01c2cf3:
// FuzzReadParquet, "fuzzing process hung or terminated unexpectedly").
func CheckChunks(md *metadata.FileMetaData, leaves []int, size int64) error {
	if md.NumRows < 0 {
		return fmt.Errorf("negative row count %d", md.NumRows)
	}
	for g := 0; g < md.NumRowGroups(); g++ {
		rg := md.RowGroup(g)
		if rg.NumRows() < 0 {
			return fmt.Errorf("row group %d: negative row count %d", g, rg.NumRows())
		}
		for _, c := range leaves {
			if c < 0 || c >= rg.NumColumns() {
				return fmt.Errorf("row group %d: no column chunk %d", g, c)
			}
			col, err := rg.ColumnChunk(c)
			if err != nil {
				return fmt.Errorf("row group %d: column %d: %w", g, c, err)
			}
			if col.CryptoMetadata() != nil {
				return fmt.Errorf("row group %d: column %d: encrypted column chunks are not supported", g, c)
			}
			start := col.DataPageOffset()
			if col.HasDictionaryPage() && col.DictionaryPageOffset() > 0 && start > col.DictionaryPageOffset() {
				start = col.DictionaryPageOffset()
			}
			n := col.TotalCompressedSize()
			if start < 0 || n < 0 || start > size || n > size-start {
				return fmt.Errorf("row group %d: column %d: chunk at offset %d with %d bytes lies outside the file's %d bytes", g, c, start, n, size)
			}
			if col.NumValues() < 0 || col.TotalUncompressedSize() < 0 {
				return fmt.Errorf("row group %d: column %d: negative value count or size", g, c)
			}
		}
	}
	return nil
}

// Schema returns the schema of the records.
func (rd *RecordReader) Schema() *arrow.Schema { return rd.outSch }

// NumRows is the physical row count of the file (before deletions).
func (rd *RecordReader) NumRows() int64 { return rd.total }

// Close releases the reader (not the underlying ReaderAtSeeker).
func (rd *RecordReader) Close() {
	if rd.rr != nil {
		rd.rr.Release()
		rd.rr = nil
	}
	rd.done = true
}

// Next returns the next non-empty record, or io.EOF.
func (rd *RecordReader) Next() (rec arrow.RecordBatch, err error) {
	for {
		rec, err = rd.next()
		if err != nil || rec == nil {
			return nil, err
		}
		if rec.NumRows() > 0 {
			return rec, nil
		}
		rec.Release()
	}
}

func (rd *RecordReader) next() (rec arrow.RecordBatch, err error) {
	if rd.err != nil {
		return nil, rd.err
	}
	if rd.done || rd.pos >= rd.total {
		rd.Close()
		return nil, io.EOF
	}
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{File: rd.name, Value: r, Stack: string(debug.Stack())}
		}
		if err != nil && err != io.EOF {
			rd.err = err
			rd.Close()
		}
	}()
	if err := rd.ctx.Err(); err != nil {
		return nil, err
	}
	var src arrow.RecordBatch
	n := min(rd.batch, rd.total-rd.pos)
	if rd.rr != nil {
		if !rd.rr.Next() {
			if e := rd.rr.Err(); e != nil && !errors.Is(e, io.EOF) {
				return nil, fmt.Errorf("parquetio: %s: %w", rd.name, e)
			}
			return nil, fmt.Errorf("parquetio: %s: file ended at row %d of %d", rd.name, rd.pos, rd.total)
		}
		src = rd.rr.RecordBatch()
		n = src.NumRows()
		if n == 0 {
			return nil, fmt.Errorf("parquetio: %s: empty batch at row %d", rd.name, rd.pos)
		}
	}
	start := rd.pos
	rd.pos += n

	cols := make([]arrow.Array, 0, rd.outSch.NumFields())
	defer func() {
		for _, c := range cols {
			c.Release()
		}
	}()
	for _, cs := range rd.cols {
		if cs.i96 != nil {
			a, err := cs.i96.read(rd.mem, n, cs.field.Type)
			if err != nil {
				return nil, fmt.Errorf("parquetio: %s: column %q: %w", rd.name, cs.field.Name, err)
			}
			cols = append(cols, a)
			continue
		}
		if cs.fileName == "" {
			a, err := scalar.MakeArrayFromScalar(cs.constant, int(n), rd.mem)
			if err != nil {
				return nil, fmt.Errorf("parquetio: %s: column %q: %w", rd.name, cs.field.Name, err)
			}
			cols = append(cols, a)
			continue
		}
		idx := src.Schema().FieldIndices(cs.fileName)
		if len(idx) == 0 {
			return nil, fmt.Errorf("parquetio: %s: column %q missing from batch", rd.name, cs.fileName)
		}
		if err := validateArray(src.Column(idx[0])); err != nil {
			return nil, fmt.Errorf("parquetio: %s: corrupt column %q: %w", rd.name, cs.field.Name, err)
		}
		a, err := conformTo(rd.ctx, rd.mem, src.Column(idx[0]), cs.field.Type, cs.dtype, rd.cmMode)
		if err != nil {
			return nil, fmt.Errorf("parquetio: %s: column %q: %w", rd.name, cs.field.Name, err)
		}
		if !cs.field.Nullable && a.NullN() > 0 {
			// Declared non-nullable but the file has nulls (e.g. a column
			// added later): keep the data, relax nothing silently.
			a.Release()
			return nil, fmt.Errorf("parquetio: %s: non-nullable column %q has nulls", rd.name, cs.field.Name)
		}
		cols = append(cols, a)
	}
	if rd.rowIdx {
		b := array.NewInt64Builder(rd.mem)
		b.Reserve(int(n))
		for i := int64(0); i < n; i++ {
			b.UnsafeAppend(start + i)
		}
		cols = append(cols, b.NewArray())
		b.Release()
	}
	out := array.NewRecordBatch(rd.outSch, cols, n)
	if mask := rd.deleteMask(start, n); mask != nil {
		defer mask.Release()
		defer out.Release()
		filtered, err := compute.FilterRecordBatch(rd.ctx, out, mask, compute.DefaultFilterOptions())
		if err != nil {
			return nil, fmt.Errorf("parquetio: %s: applying deletion vector: %w", rd.name, err)
		}
		return filtered, nil
	}
	return out, nil
}

// deleteMask returns a keep-mask for rows [start, start+n), or nil if no row
// in the range is deleted.
func (rd *RecordReader) deleteMask(start, n int64) arrow.Array {
	if rd.deleted == nil || rd.deleted.IsEmpty() {
		return nil
	}
	it := rd.deleted.Iterator()
	it.AdvanceIfNeeded(uint64(start))
	if !it.HasNext() || it.PeekNext() >= uint64(start+n) {
		return nil
	}
	b := array.NewBooleanBuilder(rd.mem)
	defer b.Release()
	b.Reserve(int(n))
	keep := make([]bool, n)
	for i := range keep {
		keep[i] = true
	}
	for it.HasNext() {
		v := it.Next()
		if v >= uint64(start+n) {
			break
		}
		keep[v-uint64(start)] = false
	}
	b.AppendValues(keep, nil)
	return b.NewArray()
}

// ReadAll reads every record of a file (convenience for small files and tests).
func ReadAll(ctx context.Context, r parquet.ReaderAtSeeker, size int64, readSchema *schema.StructType, opts ReadOptions) ([]arrow.RecordBatch, error) {
	rd, err := ReadFile(ctx, r, size, readSchema, opts)
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	var out []arrow.RecordBatch
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			for _, r := range out {
				r.Release()
			}
			return nil, err
		}
		out = append(out, rec)
	}
}

func appendLeaves(dst []int, f *pqarrow.SchemaField) []int {
	if f.IsLeaf() {
		return append(dst, f.ColIndex)
	}
	for i := range f.Children {
		dst = appendLeaves(dst, &f.Children[i])
	}
	return dst
}
