// Package parquetio reads and writes the Parquet data files of Delta tables
// with arrow-go (pqarrow): Spark-compatible physical types, Delta per-file
// statistics, deletion-vector-aware reads with physical row indexes, and
// stats-based file pruning. It knows nothing about the Delta log; package
// delta wraps it.
package parquetio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/cdcsink/cdc-sink/delta/schema"
)

// Compression codecs accepted in WriteOptions.Compression.
const (
	Snappy       = "snappy"
	Zstd         = "zstd"
	Uncompressed = "uncompressed"
)

// DefaultNumIndexedCols is Delta's default delta.dataSkippingNumIndexedCols.
const DefaultNumIndexedCols = 32

// DefaultStringPrefixLength is Delta's default string stats prefix length.
const DefaultStringPrefixLength = 32

// WriteOptions configures a data file writer. The zero value is valid.
type WriteOptions struct {
	// Compression: "snappy" (default), "zstd" or "uncompressed".
	Compression string
	// PartitionColumns are left out of the file (their values belong in the
	// add action's partitionValues). Records may or may not contain them.
	PartitionColumns []string
	// NumIndexedCols is delta.dataSkippingNumIndexedCols: stats are
	// collected for the first N leaf columns of the data schema (partition
	// columns excluded). 0 means the default 32; -1 means all columns.
	NumIndexedCols int
	// StatsColumns, when non-empty, is delta.dataSkippingStatsColumns:
	// dotted column paths to collect stats for (overrides NumIndexedCols).
	StatsColumns []string
	// StringPrefixLength is the maximum length in characters of string
	// min/max values (default 32). A longer min is truncated (still a lower
	// bound); a longer max is omitted.
	StringPrefixLength int
	// RowGroupRows caps the rows per Parquet row group (default 1<<20).
	RowGroupRows int64
	// DictionaryForAll keeps dictionary encoding on for top-level long,
	// double and timestamp columns too (off by default: usually unique
	// values, where the dictionary only costs time).
	DictionaryForAll bool
	// DisableStats skips statistics (FileStats.StatsJSON is then "").
	DisableStats bool
	// Allocator for arrow buffers (default memory.DefaultAllocator).
	Allocator memory.Allocator
}

// FileStats is what the writer learned about the file it wrote.
type FileStats struct {
	NumRecords int64
	// StatsJSON is the value for add.stats:
	// {"numRecords":N,"minValues":{..},"maxValues":{..},"nullCount":{..},"tightBounds":true}
	StatsJSON string
	// Size is the number of bytes written to w.
	Size int64
}

// Writer writes one Parquet data file. Use NewWriter, Write any number of
// records, then Close. Not safe for concurrent use.
type Writer struct {
	ctx       context.Context
	cw        *countingWriter
	fw        *pqarrow.FileWriter
	tableSch  *schema.StructType
	dataSch   *schema.StructType // table schema minus partition columns
	arrowSch  *arrow.Schema      // logical names: what records are conformed to
	fileSch   *arrow.Schema      // physical names and field ids (column mapping); nil = arrowSch
	opts      WriteOptions
	stats     *statsCollector
	rows      int64
	rgRows    int64
	closed    bool
	mem       memory.Allocator
	closeErr  error
	finalStat FileStats
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// NewWriter starts a data file for table schema tbl.
func NewWriter(ctx context.Context, w io.Writer, tbl *schema.StructType, opts WriteOptions) (*Writer, error) {
	if err := tbl.Validate(); err != nil {
		return nil, err
	}
	part := map[string]bool{}
	for _, p := range opts.PartitionColumns {
		f, _ := tbl.Field(p)
		if f == nil {
			return nil, fmt.Errorf("parquetio: partition column %q not in schema", p)
		}
		part[f.Name] = true
	}
	data := &schema.StructType{}
	for _, f := range tbl.Fields {
		if !part[f.Name] {
			data.Fields = append(data.Fields, f)
		}
	}
	if len(data.Fields) == 0 {
		return nil, errors.New("parquetio: no data columns to write (all columns are partition columns)")
	}
	var codec compress.Compression
	switch strings.ToLower(opts.Compression) {
	case "", Snappy:
		codec = compress.Codecs.Snappy
	case Zstd:
		codec = compress.Codecs.Zstd
	case Uncompressed, "none":
		codec = compress.Codecs.Uncompressed
	default:
		return nil, fmt.Errorf("parquetio: unsupported compression %q", opts.Compression)
	}
	if opts.RowGroupRows <= 0 {
		opts.RowGroupRows = 1 << 20
	}
	if opts.StringPrefixLength <= 0 {
		opts.StringPrefixLength = DefaultStringPrefixLength
	}
	mem := opts.Allocator
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	asch := schema.ToArrow(data)
	// Column-mapped tables: Parquet columns are named by physical name and
	// carry the column id as field_id (protocol, "Writer Requirements for
	// Column Mapping"). Fields without mapping metadata keep their names.
	fsch := physicalArrowSchema(data)
	popts := []parquet.WriterProperty{
		parquet.WithCompression(codec),
		parquet.WithStoreDecimalAsInteger(true),
		parquet.WithDictionaryDefault(true),
		parquet.WithStats(true),
		parquet.WithAllocator(mem),
		parquet.WithMaxRowGroupLength(opts.RowGroupRows),
		parquet.WithCreatedBy("cdc-sink (arrow-go parquet)"),
	}
	// Dictionary encoding pays off for strings and low-cardinality values but
	// costs a hash lookup per value; wide numeric types (ids, timestamps,
	// doubles, versions) are usually high-cardinality, so they go plain.
	for _, f := range data.Fields {
		switch f.Type {
		case schema.Long, schema.Double, schema.Timestamp, schema.TimestampNTZ:
			if !opts.DictionaryForAll {
				popts = append(popts, parquet.WithDictionaryFor(physicalName(f), false))
			}
		}
	}
	props := parquet.NewWriterProperties(popts...)
	cw := &countingWriter{w: w}
	fw, err := pqarrow.NewFileWriter(fsch, cw, props, pqarrow.NewArrowWriterProperties(pqarrow.WithAllocator(mem)))
	if err != nil {
		return nil, fmt.Errorf("parquetio: %w", err)
	}
	wr := &Writer{ctx: ctx, cw: cw, fw: fw, tableSch: tbl, dataSch: data, arrowSch: asch, opts: opts, mem: mem}
	if !fsch.Equal(asch) {
		wr.fileSch = fsch
	}
	if !opts.DisableStats {
		wr.stats = newStatsCollector(data, opts)
	}
	return wr, nil
}

// Write appends a record. Its columns are matched to the table schema by
// name (case-insensitively); partition columns and unknown columns are
// ignored; missing nullable columns are written as nulls; columns whose
// Arrow type differs from schema.ToArrow's choice are cast (e.g. int32 into
// a long column, timestamp[ms] into timestamp).
func (w *Writer) Write(rec arrow.RecordBatch) error { return w.write(rec, false) }

// write appends rec. whole writes rec as row groups of its own, each column
// straight to the output: buffering the row group's pages (needed to let
// several records share a group) copied every page once more and was a fifth
// of writing a bootstrap's files (bench/README.md).
func (w *Writer) write(rec arrow.RecordBatch, whole bool) error {
	if w.closed {
		return errors.New("parquetio: write after close")
	}
	if err := w.ctx.Err(); err != nil {
		return err
	}
	if rec.NumRows() == 0 {
		return nil
	}
	out, err := w.conformRecord(rec)
	if err != nil {
		return err
	}
	defer out.Release()
	if w.stats != nil {
		if err := w.stats.add(out); err != nil {
			return err
		}
	}
	if w.fileSch != nil {
		phys := relabelRecord(out, w.fileSch)
		defer phys.Release()
		out = phys
	}
	n := out.NumRows()
	if whole {
		// pqarrow splits rec at MaxRowGroupLength (= RowGroupRows).
		if err := w.fw.Write(out); err != nil {
			return fmt.Errorf("parquetio: %w", err)
		}
		w.rgRows = w.opts.RowGroupRows // a later buffered write starts a group
		w.rows += n
		return nil
	}
	// Keep row groups at most RowGroupRows rows.
	var off int64
	for off < n {
		if w.rgRows >= w.opts.RowGroupRows {
			if err := w.fw.NewBufferedRowGroupChecked(); err != nil {
				return fmt.Errorf("parquetio: %w", err)
			}
			w.rgRows = 0
		}
		take := min(n-off, w.opts.RowGroupRows-w.rgRows)
		part := out
		if off != 0 || take != n {
			part = out.NewSlice(off, off+take)
		}
		err := w.fw.WriteBuffered(part)
		if part != out {
			part.Release()
		}
		if err != nil {
			return fmt.Errorf("parquetio: %w", err)
		}
		w.rgRows += take
		off += take
	}
	w.rows += n
	return nil
}

// Close finishes the file (it does not close the underlying io.Writer) and
// returns the file's stats.
func (w *Writer) Close() (FileStats, error) {
	if w.closed {
		return w.finalStat, w.closeErr
	}
	w.closed = true
	if err := w.fw.Close(); err != nil {
		w.closeErr = fmt.Errorf("parquetio: %w", err)
		return FileStats{}, w.closeErr
	}
	w.finalStat = FileStats{NumRecords: w.rows, Size: w.cw.n}
	if w.stats != nil {
		w.finalStat.StatsJSON = w.stats.json(w.rows)
	}
	return w.finalStat, nil
}

// WriteFile writes recs as one Parquet file to w and returns its stats.
func WriteFile(ctx context.Context, w io.Writer, tbl *schema.StructType, recs []arrow.RecordBatch, opts WriteOptions) (FileStats, error) {
	wr, err := NewWriter(ctx, w, tbl, opts)
	if err != nil {
		return FileStats{}, err
	}
	for _, r := range recs {
		if err := wr.write(r, len(recs) == 1); err != nil {
			_, _ = wr.Close()
			return FileStats{}, err
		}
	}
	return wr.Close()
}

func (w *Writer) conformRecord(rec arrow.RecordBatch) (arrow.RecordBatch, error) {
	rs := rec.Schema()
	cols := make([]arrow.Array, len(w.dataSch.Fields))
	defer func() {
		for _, c := range cols {
			if c != nil {
				c.Release()
			}
		}
	}()
	n := rec.NumRows()
	for i, f := range w.dataSch.Fields {
		want := w.arrowSch.Field(i).Type
		idx := fieldIndexFold(rs, f.Name)
		if idx < 0 {
			if !f.Nullable {
				return nil, fmt.Errorf("parquetio: record lacks non-nullable column %q", f.Name)
			}
			cols[i] = array.MakeArrayOfNull(w.mem, want, int(n))
			continue
		}
		src := rec.Column(idx)
		if !f.Nullable && src.NullN() > 0 {
			return nil, fmt.Errorf("parquetio: column %q is not nullable but has %d nulls", f.Name, src.NullN())
		}
		c, err := conform(w.ctx, w.mem, src, want)
		if err != nil {
			return nil, fmt.Errorf("parquetio: column %q: %w", f.Name, err)
		}
		cols[i] = c
	}
	out := array.NewRecordBatch(w.arrowSch, cols, n)
	return out, nil
}

func fieldIndexFold(s *arrow.Schema, name string) int {
	if idx := s.FieldIndices(name); len(idx) > 0 {
		return idx[0]
	}
	for i, f := range s.Fields() {
		if strings.EqualFold(f.Name, name) {
			return i
		}
	}
	return -1
}

// castArray is compute.CastArray with safe options.
func castArray(ctx context.Context, arr arrow.Array, to arrow.DataType) (arrow.Array, error) {
	return compute.CastArray(ctx, arr, compute.SafeCastOptions(to))
}

// physicalArrowSchema is schema.ToArrow(s) with every struct field (nested
// ones too) named by its column-mapping physical name and carrying its
// column id as Parquet field id.
func physicalArrowSchema(s *schema.StructType) *arrow.Schema {
	return arrow.NewSchema(physicalFields(s), nil)
}

func physicalFields(s *schema.StructType) []arrow.Field {
	out := make([]arrow.Field, len(s.Fields))
	for i, f := range s.Fields {
		af := arrow.Field{Name: physicalName(f), Type: physicalType(f.Type), Nullable: f.Nullable}
		if id, ok := columnMappingID(f); ok {
			af.Metadata = arrow.NewMetadata([]string{fieldIDKey}, []string{strconv.FormatInt(id, 10)})
		}
		out[i] = af
	}
	return out
}

func physicalType(t schema.DataType) arrow.DataType {
	switch t := t.(type) {
	case *schema.StructType:
		return arrow.StructOf(physicalFields(t)...)
	case *schema.ArrayType:
		return arrow.ListOfField(arrow.Field{Name: "element", Type: physicalType(t.ElementType), Nullable: t.ContainsNull})
	case *schema.MapType:
		return arrow.MapOfFields(
			arrow.Field{Name: "key", Type: physicalType(t.KeyType)},
			arrow.Field{Name: "value", Type: physicalType(t.ValueType), Nullable: t.ValueContainsNull})
	}
	return schema.ArrowType(t)
}

// relabelRecord returns rec with the (structurally identical) schema sch:
// same buffers, only field names and metadata change.
func relabelRecord(rec arrow.RecordBatch, sch *arrow.Schema) arrow.RecordBatch {
	cols := make([]arrow.Array, rec.NumCols())
	for i := range cols {
		d := relabelData(rec.Column(i).Data(), sch.Field(i).Type)
		cols[i] = array.MakeFromData(d)
		d.Release()
	}
	out := array.NewRecordBatch(sch, cols, rec.NumRows())
	for _, c := range cols {
		c.Release()
	}
	return out
}

func relabelData(d arrow.ArrayData, t arrow.DataType) arrow.ArrayData {
	var childTypes []arrow.DataType
	switch t := t.(type) {
	case *arrow.StructType:
		for _, f := range t.Fields() {
			childTypes = append(childTypes, f.Type)
		}
	case *arrow.ListType:
		childTypes = []arrow.DataType{t.Elem()}
	case *arrow.MapType:
		childTypes = []arrow.DataType{t.Elem()}
	}
	children := make([]arrow.ArrayData, len(d.Children()))
	for i, c := range d.Children() {
		children[i] = relabelData(c, childTypes[i])
	}
	out := array.NewData(t, d.Len(), d.Buffers(), children, d.NullN(), d.Offset())
	for _, c := range children {
		c.Release()
	}
	return out
}
