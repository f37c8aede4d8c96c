package merge

import (
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/versioning"
)

// readColumns reads the named columns of one data file. Columns the file
// does not have (added later by schema evolution) come back as nil.
func (o *deltaOps) readColumns(ctx context.Context, path string, names []string) ([]arrow.Array, int64, error) {
	f, size, err := o.store.Open(ctx, path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	_ = size
	pf, err := file.NewParquetReader(f)
	if err != nil {
		return nil, 0, fmt.Errorf("open parquet %s: %w", path, err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{Parallel: false, BatchSize: 64 << 10}, memory.DefaultAllocator)
	if err != nil {
		return nil, 0, fmt.Errorf("read parquet %s: %w", path, err)
	}
	// Read only the leaf columns of the wanted top-level fields.
	want := map[string]int{}
	for i, n := range names {
		want[n] = i
	}
	md := pf.MetaData().Schema
	var leaves []int
	for i := 0; i < md.NumColumns(); i++ {
		if _, ok := want[md.Column(i).ColumnPath()[0]]; ok {
			leaves = append(leaves, i)
		}
	}
	rows := pf.NumRows()
	out := make([]arrow.Array, len(names))
	if len(leaves) == 0 {
		return out, rows, nil
	}
	rgs := make([]int, pf.NumRowGroups())
	for i := range rgs {
		rgs[i] = i
	}
	tbl, err := fr.ReadRowGroups(ctx, leaves, rgs)
	if err != nil {
		return nil, 0, fmt.Errorf("read parquet %s: %w", path, err)
	}
	defer tbl.Release()
	for c := 0; c < int(tbl.NumCols()); c++ {
		i, ok := want[tbl.Schema().Field(c).Name]
		if !ok {
			continue
		}
		chunks := tbl.Column(c).Data().Chunks()
		var arr arrow.Array
		if len(chunks) == 1 {
			arr = chunks[0]
			arr.Retain()
		} else {
			arr, err = array.Concatenate(chunks, memory.DefaultAllocator)
			if err != nil {
				return nil, 0, err
			}
		}
		out[i] = arr
	}
	return out, rows, nil
}

// scanIndex rebuilds the key → (file, row, version) index from every live
// row of every file.
func (o *deltaOps) scanIndex(ctx context.Context, st *state) error {
	names := append(append([]string(nil), st.keyCols...), ColVersion, ColDeleted)
	nk := len(st.keyCols)
	key := make([]any, nk)
	var buf []byte
	for id, fs := range st.files {
		cols, rows, err := o.readColumns(ctx, fs.add.Path, names)
		if err != nil {
			return err
		}
		fs.rows = rows
		fs.live = rows
		if fs.dv != nil {
			fs.live -= int64(fs.dv.GetCardinality())
		}
		for i, c := range cols {
			if c == nil {
				releaseAll(cols)
				return fmt.Errorf("file %s lacks column %s", fs.add.Path, names[i])
			}
		}
		vers := cols[nk].(*array.String)
		del := cols[nk+1].(*array.Boolean)
		for r := 0; r < int(rows); r++ {
			if fs.dv != nil && fs.dv.Contains(uint64(r)) {
				continue
			}
			for k := 0; k < nk; k++ {
				key[k] = arrowValue(cols[k], r)
			}
			buf = AppendKey(buf[:0], key)
			v, err := versioning.ParseVersion(vers.Value(r))
			if err != nil {
				releaseAll(cols)
				return fmt.Errorf("file %s row %d: %w", fs.add.Path, r, err)
			}
			l := loc{file: int32(id), row: int32(r), ver: v, deleted: del.Value(r)}
			if prev, dup := st.index[string(buf)]; dup && !prev.ver.Less(v) {
				continue // a live duplicate would be a bug; keep the newest
			}
			st.index[string(buf)] = l
		}
		releaseAll(cols)
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
	cols, _, err := o.readColumns(ctx, st.files[file].add.Path, names)
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
