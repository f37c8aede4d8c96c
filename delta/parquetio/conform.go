package parquetio

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// conform returns arr converted to type want. The result is a new reference
// (the caller releases it). Nested types are matched by field name; struct
// fields missing in arr become nulls. Timestamps are rescaled exactly (ns ->
// us floors, which is exact for Spark's microsecond data).
func conform(ctx context.Context, mem memory.Allocator, arr arrow.Array, want arrow.DataType) (arrow.Array, error) {
	have := arr.DataType()
	if arrow.TypeEqual(have, want) {
		arr.Retain()
		return arr, nil
	}
	if have.ID() == arrow.DICTIONARY {
		dict := arr.(*array.Dictionary)
		dense, err := castArray(ctx, dict, dict.DataType().(*arrow.DictionaryType).ValueType)
		if err != nil {
			return nil, err
		}
		defer dense.Release()
		return conform(ctx, mem, dense, want)
	}
	if have.ID() == arrow.NULL {
		return array.MakeArrayOfNull(mem, want, arr.Len()), nil
	}
	switch wt := want.(type) {
	case *arrow.StructType:
		st, ok := arr.(*array.Struct)
		if !ok {
			return nil, fmt.Errorf("cannot read %s as %s", have, want)
		}
		if st.Data().Offset() != 0 {
			c, err := array.Concatenate([]arrow.Array{st}, mem)
			if err != nil {
				return nil, err
			}
			defer c.Release()
			st = c.(*array.Struct)
		}
		sht := st.DataType().(*arrow.StructType)
		children := make([]arrow.ArrayData, wt.NumFields())
		defer func() {
			for _, c := range children {
				if c != nil {
					c.Release()
				}
			}
		}()
		for i, f := range wt.Fields() {
			idx := structFieldFold(sht, f.Name)
			var c arrow.Array
			if idx < 0 {
				c = array.MakeArrayOfNull(mem, f.Type, st.Len())
			} else {
				var err error
				c, err = conform(ctx, mem, st.Field(idx), f.Type)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", f.Name, err)
				}
			}
			children[i] = c.Data()
			children[i].Retain()
			c.Release()
		}
		d := array.NewData(want, st.Len(), []*memory.Buffer{st.Data().Buffers()[0]}, children, st.NullN(), 0)
		defer d.Release()
		return array.MakeFromData(d), nil
	case *arrow.ListType:
		var offsets *memory.Buffer
		var values arrow.Array
		var data arrow.ArrayData
		switch l := arr.(type) {
		case *array.List:
			data, values = l.Data(), l.ListValues()
			offsets = data.Buffers()[1]
		case *array.LargeList, *array.FixedSizeList:
			c, err := castArray(ctx, arr, arrow.ListOfField(arrow.Field{Name: "element", Type: arr.DataType().(arrow.ListLikeType).Elem(), Nullable: true}))
			if err != nil {
				return nil, err
			}
			defer c.Release()
			return conform(ctx, mem, c, want)
		default:
			return nil, fmt.Errorf("cannot read %s as %s", have, want)
		}
		nv, err := conform(ctx, mem, values, wt.Elem())
		if err != nil {
			return nil, fmt.Errorf("element: %w", err)
		}
		defer nv.Release()
		d := array.NewData(want, data.Len(), []*memory.Buffer{data.Buffers()[0], offsets}, []arrow.ArrayData{nv.Data()}, data.NullN(), data.Offset())
		defer d.Release()
		return array.MakeFromData(d), nil
	case *arrow.MapType:
		m, ok := arr.(*array.Map)
		if !ok {
			return nil, fmt.Errorf("cannot read %s as %s", have, want)
		}
		data := m.Data()
		entries := array.MakeFromData(data.Children()[0])
		defer entries.Release()
		ne, err := conform(ctx, mem, entries, wt.Elem())
		if err != nil {
			return nil, fmt.Errorf("map entries: %w", err)
		}
		defer ne.Release()
		d := array.NewData(want, data.Len(), []*memory.Buffer{data.Buffers()[0], data.Buffers()[1]}, []arrow.ArrayData{ne.Data()}, data.NullN(), data.Offset())
		defer d.Release()
		return array.MakeFromData(d), nil
	case *arrow.Decimal128Type:
		if ht, ok := have.(*arrow.Decimal128Type); ok {
			// Not compute's cast: it panics (on another goroutine) on corrupt values.
			return rescaleDecimals(mem, arr.(*array.Decimal128), ht, wt)
		}
	case *arrow.TimestampType:
		ht, ok := have.(*arrow.TimestampType)
		if !ok {
			break
		}
		return rescaleTimestamps(mem, arr, ht, wt)
	case *arrow.StringType:
		switch have.ID() {
		case arrow.BINARY, arrow.LARGE_STRING, arrow.STRING_VIEW:
			return relabelOrCast(ctx, arr, want)
		}
	case *arrow.BinaryType:
		switch have.ID() {
		case arrow.STRING, arrow.FIXED_SIZE_BINARY, arrow.LARGE_BINARY, arrow.BINARY_VIEW:
			return relabelOrCast(ctx, arr, want)
		}
	}
	return castArray(ctx, arr, want)
}

func relabelOrCast(ctx context.Context, arr arrow.Array, want arrow.DataType) (arrow.Array, error) {
	if (arr.DataType().ID() == arrow.BINARY || arr.DataType().ID() == arrow.STRING) &&
		(want.ID() == arrow.BINARY || want.ID() == arrow.STRING) {
		d := arr.Data()
		nd := array.NewData(want, d.Len(), d.Buffers(), nil, d.NullN(), d.Offset())
		defer nd.Release()
		return array.MakeFromData(nd), nil
	}
	return castArray(ctx, arr, want)
}

func structFieldFold(st *arrow.StructType, name string) int {
	if i, ok := st.FieldIdx(name); ok {
		return i
	}
	for i, f := range st.Fields() {
		if strings.EqualFold(f.Name, name) {
			return i
		}
	}
	return -1
}

func unitPerSecond(u arrow.TimeUnit) int64 {
	switch u {
	case arrow.Second:
		return 1
	case arrow.Millisecond:
		return 1e3
	case arrow.Microsecond:
		return 1e6
	}
	return 1e9
}

func rescaleTimestamps(mem memory.Allocator, arr arrow.Array, have, want *arrow.TimestampType) (arrow.Array, error) {
	src := arr.(*array.Timestamp).TimestampValues()
	hf, wf := unitPerSecond(have.Unit), unitPerSecond(want.Unit)
	b := memory.NewResizableBuffer(mem)
	b.Resize(arrow.Int64Traits.BytesRequired(len(src)))
	out := arrow.Int64Traits.CastFromBytes(b.Bytes())
	switch {
	case hf == wf:
		for i, v := range src {
			out[i] = int64(v)
		}
	case hf > wf:
		div := hf / wf
		for i, v := range src {
			q := int64(v) / div
			if int64(v)%div < 0 {
				q--
			}
			out[i] = q
		}
	default:
		mul := wf / hf
		lim := math.MaxInt64 / mul
		for i, v := range src {
			if (int64(v) > lim || int64(v) < -lim) && arr.IsValid(i) {
				b.Release()
				return nil, fmt.Errorf("timestamp %d %s overflows %s", v, have.Unit, want.Unit)
			}
			out[i] = int64(v) * mul
		}
	}
	d := arr.Data()
	var valid *memory.Buffer
	if d.NullN() > 0 {
		valid = d.Buffers()[0]
	}
	nd := array.NewData(want, len(src), []*memory.Buffer{valid, b}, nil, d.NullN(), 0)
	if valid != nil && d.Offset() != 0 {
		// validity bitmap is relative to the original offset; copy via slice
		nd.Release()
		b.Release()
		return rescaleCompact(mem, arr, have, want)
	}
	b.Release()
	defer nd.Release()
	return array.MakeFromData(nd), nil
}

func rescaleCompact(mem memory.Allocator, arr arrow.Array, have, want *arrow.TimestampType) (arrow.Array, error) {
	c, err := array.Concatenate([]arrow.Array{arr}, mem)
	if err != nil {
		return nil, err
	}
	defer c.Release()
	if c.Data().Offset() != 0 {
		return nil, fmt.Errorf("cannot compact timestamp array")
	}
	return rescaleTimestamps(mem, c, have, want)
}

func rescaleDecimals(mem memory.Allocator, arr *array.Decimal128, have, want *arrow.Decimal128Type) (arrow.Array, error) {
	b := array.NewDecimal128Builder(mem, want)
	defer b.Release()
	b.Reserve(arr.Len())
	for i := 0; i < arr.Len(); i++ {
		if arr.IsNull(i) {
			b.UnsafeAppendBoolToBitmap(false)
			continue
		}
		v := arr.Value(i)
		if !v.FitsInPrecision(have.Precision) {
			return nil, fmt.Errorf("value does not fit %s", have)
		}
		out, err := v.Rescale(have.Scale, want.Scale)
		if err != nil {
			return nil, fmt.Errorf("cannot rescale %s to %s: %w", have, want, err)
		}
		if !out.FitsInPrecision(want.Precision) {
			return nil, fmt.Errorf("value %s does not fit %s", v.ToString(have.Scale), want)
		}
		b.UnsafeAppend(out)
	}
	return b.NewArray(), nil
}
