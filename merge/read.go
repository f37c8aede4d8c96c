// Reading stored rows back: the key index scan, stored values of given rows (TOAST fill, rewrites), Arrow to normalized values.

package merge

import (
	"context"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/cdcsink/cdc-sink/delta/parquetio"
	"github.com/cdcsink/cdc-sink/delta/schema"
	"github.com/cdcsink/cdc-sink/layout"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/versioning"
)

// readColumns reads the named columns of one data file through parquetio
// (the Delta read schema's types, partition values, the panic guard for
// corrupt files), one array per name. Columns the file does not have (added
// later by schema evolution) read as nulls. Deleted rows are kept: callers
// address rows by physical index.
func (o *deltaOps) readColumns(ctx context.Context, st *state, fs *fileState, names []string) ([]arrow.Array, int64, error) {
	return o.readColumnsAs(ctx, st.schema, fs, names)
}

// readColumnsAs is readColumns with an explicit read schema.
func (o *deltaOps) readColumnsAs(ctx context.Context, sc *schema.StructType, fs *fileState, names []string) ([]arrow.Array, int64, error) {
	path := fs.add.Path
	key, err := o.tbl.DataFileKey(path)
	if err != nil {
		return nil, 0, err
	}
	f, size, err := o.store.Open(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	rd, err := parquetio.ReadFile(ctx, f, size, sc, parquetio.ReadOptions{
		Columns: names, PartitionValues: fs.add.PartitionValues, Name: path,
		// big records, few concatenations (not the whole file: pqarrow
		// reserves buffers for a full batch up front)
		BatchSize: 1 << 20,
	})
	if err != nil {
		return nil, 0, fmt.Errorf("read %s: %w", path, err)
	}
	defer rd.Close()
	rows := rd.NumRows()
	var recs []arrow.RecordBatch
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, 0, fmt.Errorf("read %s: %w", path, err)
		}
		recs = append(recs, rec)
	}
	out := make([]arrow.Array, len(names))
	for i := range names {
		chunks := make([]arrow.Array, len(recs))
		for j, r := range recs {
			chunks[j] = r.Column(i)
		}
		switch len(chunks) {
		case 0:
			out[i] = array.MakeArrayOfNull(memory.DefaultAllocator, rd.Schema().Field(i).Type, 0)
		case 1:
			out[i] = chunks[0]
			out[i].Retain()
		default:
			if out[i], err = array.Concatenate(chunks, memory.DefaultAllocator); err != nil {
				releaseAll(out)
				return nil, 0, fmt.Errorf("read %s: %w", path, err)
			}
		}
	}
	return out, rows, nil
}

// scanFile reads the key, version and deleted columns of one file, sets its
// row counts, and calls fn for each live row (key: AppendKey encoding,
// valid during the call only).
func (o *deltaOps) scanFile(ctx context.Context, st *state, fs *fileState, fn func(key []byte, row int, v versioning.Version, deleted bool)) error {
	names := append(append([]string(nil), st.keyCols...), layout.ColVersion, layout.ColDeleted)
	nk := len(st.keyCols)
	key := make([]any, nk)
	var buf []byte
	cols, rows, err := o.readColumns(ctx, st, fs, names)
	if err != nil {
		return err
	}
	defer releaseAll(cols)
	fs.rows = rows
	fs.live = rows
	if fs.dv != nil {
		fs.live -= int64(fs.dv.GetCardinality())
	}
	vers, ok1 := cols[nk].(*array.String)
	del, ok2 := cols[nk+1].(*array.Boolean)
	if !ok1 || !ok2 {
		return fmt.Errorf("file %s: %s/%s have types %s/%s, not string/boolean", fs.add.Path, layout.ColVersion, layout.ColDeleted, cols[nk].DataType(), cols[nk+1].DataType())
	}
	for r := 0; r < int(rows); r++ {
		if fs.dv != nil && fs.dv.Contains(uint64(r)) {
			continue
		}
		if vers.IsNull(r) || del.IsNull(r) {
			return fmt.Errorf("file %s row %d: null %s or %s (file lacks the column, or not written by cdc-sink)", fs.add.Path, r, layout.ColVersion, layout.ColDeleted)
		}
		for k := 0; k < nk; k++ {
			key[k] = arrowValue(cols[k], r)
		}
		buf = AppendKey(buf[:0], key)
		v, err := versioning.ParseVersion(vers.Value(r))
		if err != nil {
			return fmt.Errorf("file %s row %d: %w", fs.add.Path, r, err)
		}
		fn(buf, r, v, del.Value(r))
	}
	return nil
}

// readRows reads whole rows (table column order) at the given physical row
// indexes of one file.
func (o *deltaOps) readRows(ctx context.Context, st *state, file int32, rows []int64) ([][]any, error) {
	names := make([]string, len(st.schema.Fields))
	for i, f := range st.schema.Fields {
		names[i] = f.Name
	}
	cols, _, err := o.readColumns(ctx, st, st.files[file], names)
	if err != nil {
		return nil, err
	}
	defer releaseAll(cols)
	out := make([][]any, len(rows))
	for i, r := range rows {
		row := make([]any, len(names))
		for j, c := range cols {
			if c != nil && int(r) < c.Len() {
				row[j] = arrowValue(c, int(r))
			}
		}
		out[i] = row
	}
	return out, nil
}

func releaseAll(as []arrow.Array) {
	for _, a := range as {
		if a != nil {
			a.Release()
		}
	}
}

// arrowValue converts one arrow value into the normalize value model.
func arrowValue(a arrow.Array, i int) any {
	if a.IsNull(i) {
		return nil
	}
	switch x := a.(type) {
	case *array.Boolean:
		return x.Value(i)
	case *array.Int8:
		return x.Value(i)
	case *array.Int16:
		return x.Value(i)
	case *array.Int32:
		return x.Value(i)
	case *array.Int64:
		return x.Value(i)
	case *array.Float32:
		return x.Value(i)
	case *array.Float64:
		return x.Value(i)
	case *array.String:
		return x.Value(i)
	case *array.LargeString:
		return x.Value(i)
	case *array.Binary:
		return append([]byte(nil), x.Value(i)...)
	case *array.Date32:
		return int32(x.Value(i))
	case *array.Timestamp:
		unit := x.DataType().(*arrow.TimestampType).Unit
		v := int64(x.Value(i))
		switch unit {
		case arrow.Second:
			return v * 1e6
		case arrow.Millisecond:
			return v * 1e3
		case arrow.Nanosecond:
			return v / 1e3
		}
		return v
	case *array.Decimal128:
		return numToDecimal(x.Value(i), x.DataType().(*arrow.Decimal128Type).Scale)
	case *array.List:
		s, e := x.ValueOffsets(i)
		vals := x.ListValues()
		out := make([]any, 0, e-s)
		for j := s; j < e; j++ {
			out = append(out, arrowValue(vals, int(j)))
		}
		return out
	case *array.Map:
		s, e := x.ValueOffsets(i)
		keys, items := x.Keys(), x.Items()
		out := make([]normalize.MapEntry, 0, e-s)
		for j := s; j < e; j++ {
			out = append(out, normalize.MapEntry{Key: arrowValue(keys, int(j)), Value: arrowValue(items, int(j))})
		}
		return out
	case *array.Struct:
		out := make([]any, x.NumField())
		for j := range out {
			out[j] = arrowValue(x.Field(j), i)
		}
		return out
	}
	return fmt.Sprintf("%v", a.ValueStr(i))
}
