package parquetio

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/cdcsink/cdc-sink/delta/schema"
)

// conform returns arr converted to type want, matching nested struct fields
// by name. The result is a new reference (the caller releases it). It is the
// writer's path: records carry logical names.
func conform(ctx context.Context, mem memory.Allocator, arr arrow.Array, want arrow.DataType) (arrow.Array, error) {
	return conformTo(ctx, mem, arr, want, nil, "")
}

// conformTo returns arr converted to type want (schema.ArrowType(dt) when dt
// is not nil). dt, the Delta type, tells how nested struct fields are found
// in the file: by column-mapping field id (mode "id", when the file has
// ids), by delta.columnMapping.physicalName, else by logical name; struct
// fields missing in arr become nulls. Values are only ever widened exactly
// (Delta type widening: integer upcasts, float->double, integer->double,
// integer->decimal, decimal rescale, date->timestamp_ntz); timestamps are
// rescaled exactly (ns -> us floors, which is exact for Spark's microsecond
// data). Any other type mismatch is an error naming both types.
func conformTo(ctx context.Context, mem memory.Allocator, arr arrow.Array, want arrow.DataType, dt schema.DataType, cmMode string) (arrow.Array, error) {
	have := arr.DataType()
	if arrow.TypeEqual(have, want) && !hasStruct(want) {
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
		return conformTo(ctx, mem, dense, want, dt, cmMode)
	}
	if have.ID() == arrow.NULL {
		return array.MakeArrayOfNull(mem, want, arr.Len()), nil
	}
	switch wt := want.(type) {
	case *arrow.StructType:
		st, ok := arr.(*array.Struct)
		if !ok {
			return nil, mismatch(have, want)
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
		var dfields []*schema.StructField
		if ds, ok := dt.(*schema.StructType); ok && len(ds.Fields) == wt.NumFields() {
			dfields = ds.Fields
		}
		children := make([]arrow.ArrayData, wt.NumFields())
		defer func() {
			for _, c := range children {
				if c != nil {
					c.Release()
				}
			}
		}()
		for i, f := range wt.Fields() {
			var df *schema.StructField
			var ct schema.DataType
			idx := -1
			if dfields != nil {
				df, ct = dfields[i], dfields[i].Type
				var err error
				if idx, err = matchFileField(sht.Fields(), df, cmMode); err != nil {
					return nil, err
				}
			} else {
				idx = structFieldFold(sht, f.Name)
			}
			var c arrow.Array
			if idx < 0 {
				c = array.MakeArrayOfNull(mem, f.Type, st.Len())
			} else {
				var err error
				c, err = conformTo(ctx, mem, st.Field(idx), f.Type, ct, cmMode)
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
		var et schema.DataType
		if at, ok := dt.(*schema.ArrayType); ok {
			et = at.ElementType
		}
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
			return conformTo(ctx, mem, c, want, dt, cmMode)
		default:
			return nil, mismatch(have, want)
		}
		nv, err := conformTo(ctx, mem, values, wt.Elem(), et, cmMode)
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
			return nil, mismatch(have, want)
		}
		// The entries struct's fields are key and value, whatever the file
		// calls them: match them by position.
		var kt, vt schema.DataType
		if mt, ok := dt.(*schema.MapType); ok {
			kt, vt = mt.KeyType, mt.ValueType
		}
		data := m.Data()
		keys, err := conformTo(ctx, mem, m.Keys(), wt.KeyType(), kt, cmMode)
		if err != nil {
			return nil, fmt.Errorf("key: %w", err)
		}
		defer keys.Release()
		items, err := conformTo(ctx, mem, m.Items(), wt.ItemType(), vt, cmMode)
		if err != nil {
			return nil, fmt.Errorf("value: %w", err)
		}
		defer items.Release()
		ed := data.Children()[0]
		if n := ed.Offset() + ed.Len(); keys.Len() < n || items.Len() < n {
			return nil, fmt.Errorf("map entries: %d keys, %d values for %d entries", keys.Len(), items.Len(), n)
		}
		entries := array.NewData(wt.Elem(), ed.Len(), []*memory.Buffer{nil}, []arrow.ArrayData{keys.Data(), items.Data()}, 0, ed.Offset())
		defer entries.Release()
		d := array.NewData(want, data.Len(), []*memory.Buffer{data.Buffers()[0], data.Buffers()[1]}, []arrow.ArrayData{entries}, data.NullN(), data.Offset())
		defer d.Release()
		return array.MakeFromData(d), nil
	case *arrow.Decimal128Type:
		switch ht := have.(type) {
		case *arrow.Decimal128Type:
			// Only types whose every value fits (type widening: scale and
			// integer digits do not shrink), so a read never depends on the data.
			if wt.Scale >= ht.Scale && wt.Precision-wt.Scale >= ht.Precision-ht.Scale {
				// Not compute's cast: it panics (on another goroutine) on corrupt values.
				return rescaleDecimals(mem, arr.(*array.Decimal128), ht, wt)
			}
		case *arrow.Int8Type, *arrow.Int16Type, *arrow.Int32Type, *arrow.Int64Type:
			if digits := map[int]int32{8: 3, 16: 5, 32: 10, 64: 20}[intWidth(ht)]; wt.Precision-wt.Scale >= digits {
				return intsToDecimals(mem, arr, wt)
			}
		}
		return nil, mismatch(have, want)
	case *arrow.TimestampType:
		switch ht := have.(type) {
		case *arrow.TimestampType:
			return rescaleTimestamps(mem, arr, ht, wt)
		case *arrow.Date32Type:
			if wt.TimeZone == "" { // date -> timestamp_ntz only: midnight has no zone
				return datesToTimestamps(mem, arr.(*array.Date32), wt)
			}
		}
		return nil, mismatch(have, want)
	case *arrow.StringType:
		switch have.ID() {
		case arrow.BINARY, arrow.LARGE_STRING, arrow.STRING_VIEW:
			return relabelOrCast(ctx, arr, want)
		}
		return nil, mismatch(have, want)
	case *arrow.BinaryType:
		switch have.ID() {
		case arrow.STRING, arrow.FIXED_SIZE_BINARY, arrow.LARGE_BINARY, arrow.BINARY_VIEW:
			return relabelOrCast(ctx, arr, want)
		}
		return nil, mismatch(have, want)
	}
	if !numericCastOK(have, want) {
		return nil, mismatch(have, want)
	}
	return castArray(ctx, arr, want)
}

// hasStruct reports whether t contains a struct: equal struct types can still
// differ in which file field feeds which table field (column mapping).
func hasStruct(t arrow.DataType) bool {
	switch t := t.(type) {
	case *arrow.StructType:
		return true
	case *arrow.ListType:
		return hasStruct(t.Elem())
	case *arrow.MapType:
		return hasStruct(t.KeyType()) || hasStruct(t.ItemType())
	}
	return false
}

type typeMismatchError struct{ have, want arrow.DataType }

func (e *typeMismatchError) Error() string {
	return fmt.Sprintf("cannot read file type %s as table type %s", e.have, e.want)
}

func mismatch(have, want arrow.DataType) error { return &typeMismatchError{have, want} }

// numericCastOK allows compute's cast only where every value of the file's
// type is exactly a value of the table type: integer upcasts (a Parquet
// UINT_8/16/32 counts as the next wider signed type), float->double and
// byte/short/int->double. Narrowing (a file that does not belong to this
// table version) and parsing strings into numbers are mismatches.
func numericCastOK(have, want arrow.DataType) bool {
	hw, wantW := intWidth(have), intWidth(want)
	switch want.ID() {
	case arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64:
		return hw > 0 && hw <= wantW
	case arrow.FLOAT64:
		return have.ID() == arrow.FLOAT32 || (hw > 0 && hw <= 32)
	case arrow.DATE32:
		return have.ID() == arrow.DATE64
	}
	return false
}

// intWidth is the signed width an integer type needs (0 for non-integers).
func intWidth(t arrow.DataType) int {
	switch t.ID() {
	case arrow.INT8:
		return 8
	case arrow.INT16, arrow.UINT8:
		return 16
	case arrow.INT32, arrow.UINT16:
		return 32
	case arrow.INT64, arrow.UINT32:
		return 64
	}
	return 0
}

// matchFileField finds the file's field for table field df (-1 when the
// file does not have it). Column mapping mode "id" resolves by Parquet field
// id; the protocol lets readers refuse a file without field ids or read it as
// nulls, and we refuse: silent nulls would look like data. Other modes
// resolve by physical name (delta.columnMapping.physicalName, which
// column-mapped tables have), else by logical name.
func matchFileField(fields []arrow.Field, df *schema.StructField, cmMode string) (int, error) {
	if cmMode == "id" {
		id, ok := columnMappingID(df)
		if !ok {
			return -1, fmt.Errorf("column mapping mode id: field %q has no delta.columnMapping.id", df.Name)
		}
		hasIDs := false
		for i, f := range fields {
			fid, ok := parquetFieldID(f)
			if !ok {
				continue
			}
			hasIDs = true
			if fid == id {
				return i, nil
			}
		}
		if !hasIDs && len(fields) > 0 {
			return -1, fmt.Errorf("column mapping mode id: data file has no Parquet field ids for %q (id %d)", df.Name, id)
		}
		return -1, nil
	}
	name := physicalName(df)
	for i, f := range fields {
		if f.Name == name {
			return i, nil
		}
	}
	for i, f := range fields {
		if strings.EqualFold(f.Name, name) {
			return i, nil
		}
	}
	return -1, nil
}

// columnMappingID is the field's delta.columnMapping.id.
func columnMappingID(f *schema.StructField) (int64, bool) {
	switch v := f.Metadata["delta.columnMapping.id"].(type) {
	case json.Number:
		n, err := v.Int64()
		return n, err == nil
	case float64:
		return int64(v), v == float64(int64(v))
	case int64:
		return v, true
	case int:
		return int64(v), true
	}
	return 0, false
}

// parquetFieldID is the Parquet field_id pqarrow puts in field metadata.
func parquetFieldID(f arrow.Field) (int64, bool) {
	i := f.Metadata.FindKey(fieldIDKey)
	if i < 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(f.Metadata.Values()[i], 10, 32)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// fieldIDKey is the Arrow field metadata key pqarrow maps to Parquet's
// SchemaElement.field_id (both ways).
const fieldIDKey = "PARQUET:field_id"

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

// intsToDecimals widens integers to decimal(p,s) exactly: v * 10^s in
// decimal128 arithmetic, refusing values that do not fit p digits.
func intsToDecimals(mem memory.Allocator, arr arrow.Array, want *arrow.Decimal128Type) (arrow.Array, error) {
	b := array.NewDecimal128Builder(mem, want)
	defer b.Release()
	b.Reserve(arr.Len())
	scale := decimal128.GetScaleMultiplier(int(want.Scale))
	for i := 0; i < arr.Len(); i++ {
		if arr.IsNull(i) {
			b.UnsafeAppendBoolToBitmap(false)
			continue
		}
		var v int64
		switch a := arr.(type) {
		case *array.Int8:
			v = int64(a.Value(i))
		case *array.Int16:
			v = int64(a.Value(i))
		case *array.Int32:
			v = int64(a.Value(i))
		case *array.Int64:
			v = a.Value(i)
		default:
			return nil, mismatch(arr.DataType(), want)
		}
		out := decimal128.FromI64(v).Mul(scale)
		if !out.FitsInPrecision(want.Precision) {
			return nil, fmt.Errorf("value %d does not fit %s", v, want)
		}
		b.UnsafeAppend(out)
	}
	return b.NewArray(), nil
}

const microsPerDay = 86_400_000_000

// datesToTimestamps widens dates to timestamp_ntz (midnight of the day).
func datesToTimestamps(mem memory.Allocator, arr *array.Date32, want *arrow.TimestampType) (arrow.Array, error) {
	if want.Unit != arrow.Microsecond {
		return nil, mismatch(arr.DataType(), want)
	}
	b := array.NewTimestampBuilder(mem, want)
	defer b.Release()
	b.Reserve(arr.Len())
	for i := 0; i < arr.Len(); i++ {
		if arr.IsNull(i) {
			b.UnsafeAppendBoolToBitmap(false)
			continue
		}
		// Valid dates fit easily, but a corrupt int32 day count times
		// 8.64e10 can overflow int64 (2^31 days is 1.86e20 us).
		d := int64(arr.Value(i))
		if d > math.MaxInt64/microsPerDay || d < math.MinInt64/microsPerDay {
			return nil, fmt.Errorf("date %d days overflows %s", d, want)
		}
		b.UnsafeAppend(arrow.Timestamp(d * microsPerDay))
	}
	return b.NewArray(), nil
}
