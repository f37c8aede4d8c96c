// The table schema of a source schema, and conversions between normalized values, Delta and Arrow types.

package merge

import (
	"fmt"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/shopspring/decimal"

	"github.com/cdcsink/cdc-sink/delta/schema"
	"github.com/cdcsink/cdc-sink/layout"
	"github.com/cdcsink/cdc-sink/normalize"
)

// metaFields is the fixed tail of every cdc-sink table schema.
func metaFields() []*schema.StructField {
	return []*schema.StructField{
		schema.NewField(layout.ColDeleted, schema.Boolean, false),
		schema.NewField(layout.ColVersion, schema.String, false),
		schema.NewField(layout.ColOp, schema.String, false),
		schema.NewField(layout.ColSourceTs, schema.Timestamp, true),
		schema.NewField(layout.ColBatchID, schema.Long, false),
		schema.NewField(layout.ColIngestTs, schema.Timestamp, false),
		schema.NewField(layout.ColTopic, schema.String, true),
		schema.NewField(layout.ColPartition, schema.Integer, true),
		schema.NewField(layout.ColOffset, schema.Long, true),
	}
}

// deltaType maps a normalized type to its Delta type.
func deltaType(t normalize.Type) (schema.DataType, error) {
	switch t.Kind {
	case normalize.Boolean:
		return schema.Boolean, nil
	case normalize.Byte:
		return schema.Byte, nil
	case normalize.Short:
		return schema.Short, nil
	case normalize.Integer:
		return schema.Integer, nil
	case normalize.Long:
		return schema.Long, nil
	case normalize.Float:
		return schema.Float, nil
	case normalize.Double:
		return schema.Double, nil
	case normalize.Decimal:
		p := t.Precision
		if p <= 0 {
			p = 38
		}
		return &schema.DecimalType{Precision: p, Scale: t.Scale}, nil
	case normalize.String:
		return schema.String, nil
	case normalize.Binary:
		return schema.Binary, nil
	case normalize.Date:
		return schema.Date, nil
	case normalize.Timestamp:
		return schema.Timestamp, nil
	case normalize.TimestampNTZ:
		return schema.TimestampNTZ, nil
	case normalize.Array:
		if t.Elem == nil {
			return nil, fmt.Errorf("array without element type")
		}
		e, err := deltaType(*t.Elem)
		if err != nil {
			return nil, err
		}
		return &schema.ArrayType{ElementType: e, ContainsNull: true}, nil
	case normalize.Map:
		if t.Key == nil || t.Val == nil {
			return nil, fmt.Errorf("map without key/value type")
		}
		k, err := deltaType(*t.Key)
		if err != nil {
			return nil, err
		}
		vt, err := deltaType(*t.Val)
		if err != nil {
			return nil, err
		}
		return &schema.MapType{KeyType: k, ValueType: vt, ValueContainsNull: true}, nil
	case normalize.Struct:
		st := &schema.StructType{}
		for _, f := range t.Fields {
			ft, err := deltaType(f.Type)
			if err != nil {
				return nil, fmt.Errorf("field %s: %w", f.Name, err)
			}
			st.Fields = append(st.Fields, schema.NewField(f.Name, ft, true))
		}
		return st, nil
	}
	return nil, fmt.Errorf("unsupported type kind %d", t.Kind)
}

// tableSchema is the Delta schema of a table for changes with source schema s
// and key columns keyNames: business columns (nullable except keys) followed
// by the metadata columns.
func tableSchema(s *normalize.Schema, keyNames []string, keyTypes []normalize.Type) (*schema.StructType, error) {
	st := &schema.StructType{}
	seen := map[string]bool{}
	for _, c := range s.Columns {
		if layout.IsMetaColumn(c.Name) {
			return nil, fmt.Errorf("source column %q uses the reserved _cdc_ prefix", c.Name)
		}
		if c.NullOnly {
			continue // no type known yet: added by evolution once one is seen
		}
		dt, err := deltaType(c.Type)
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", c.Name, err)
		}
		// Business columns are nullable: tombstones keep only key and version.
		st.Fields = append(st.Fields, schema.NewField(c.Name, dt, true))
		seen[c.Name] = true
	}
	for i, k := range keyNames {
		if seen[k] {
			continue
		}
		if i >= len(keyTypes) {
			return nil, fmt.Errorf("key column %s has no type", k)
		}
		dt, err := deltaType(keyTypes[i])
		if err != nil {
			return nil, fmt.Errorf("key column %s: %w", k, err)
		}
		st.Fields = append(st.Fields, schema.NewField(k, dt, true))
	}
	st.Fields = append(st.Fields, metaFields()...)
	return st, nil
}

// appendValue appends one normalized value to an arrow builder of the column's type.
func appendValue(b array.Builder, v any) error {
	if v == nil || normalize.IsUnavailable(v) {
		b.AppendNull()
		return nil
	}
	switch bb := b.(type) {
	case *array.BooleanBuilder:
		x, ok := v.(bool)
		if !ok {
			return mismatch(b, v)
		}
		bb.Append(x)
	case *array.Int8Builder:
		x, ok := asInt(v)
		if !ok || x < math.MinInt8 || x > math.MaxInt8 {
			return mismatch(b, v)
		}
		bb.Append(int8(x))
	case *array.Int16Builder:
		x, ok := asInt(v)
		if !ok || x < math.MinInt16 || x > math.MaxInt16 {
			return mismatch(b, v)
		}
		bb.Append(int16(x))
	case *array.Int32Builder:
		x, ok := asInt(v)
		if !ok || x < math.MinInt32 || x > math.MaxInt32 {
			return mismatch(b, v)
		}
		bb.Append(int32(x))
	case *array.Int64Builder:
		x, ok := asInt(v)
		if !ok {
			return mismatch(b, v)
		}
		bb.Append(x)
	case *array.Float32Builder:
		switch x := v.(type) {
		case float32:
			bb.Append(x)
		case float64:
			// a finite double beyond float32's range would become ±Inf
			if f := float32(x); !math.IsInf(x, 0) && math.IsInf(float64(f), 0) {
				return mismatch(b, v)
			}
			bb.Append(float32(x))
		default:
			return mismatch(b, v)
		}
	case *array.Float64Builder:
		switch x := v.(type) {
		case float64:
			bb.Append(x)
		case float32:
			bb.Append(float64(x))
		default:
			if i, ok := asInt(v); ok {
				bb.Append(float64(i))
				return nil
			}
			return mismatch(b, v)
		}
	case *array.StringBuilder:
		x, ok := v.(string)
		if !ok {
			return mismatch(b, v)
		}
		bb.Append(x)
	case *array.BinaryBuilder:
		switch x := v.(type) {
		case []byte:
			bb.Append(x)
		case string:
			bb.AppendString(x)
		default:
			return mismatch(b, v)
		}
	case *array.Date32Builder:
		x, ok := asInt(v)
		if !ok {
			return mismatch(b, v)
		}
		bb.Append(arrow.Date32(x))
	case *array.TimestampBuilder:
		x, ok := asInt(v)
		if !ok {
			return mismatch(b, v)
		}
		bb.Append(arrow.Timestamp(x))
	case *array.Decimal128Builder:
		d, ok := v.(decimal.Decimal)
		if !ok {
			return mismatch(b, v)
		}
		n, err := decimalToNum(d, bb.Type().(*arrow.Decimal128Type))
		if err != nil {
			return err
		}
		bb.Append(n)
	case *array.ListBuilder:
		xs, ok := v.([]any)
		if !ok {
			return mismatch(b, v)
		}
		bb.Append(true)
		for _, e := range xs {
			if err := appendValue(bb.ValueBuilder(), e); err != nil {
				return err
			}
		}
	case *array.MapBuilder:
		xs, ok := v.([]normalize.MapEntry)
		if !ok {
			return mismatch(b, v)
		}
		bb.Append(true)
		for _, e := range xs {
			if err := appendValue(bb.KeyBuilder(), e.Key); err != nil {
				return err
			}
			if err := appendValue(bb.ItemBuilder(), e.Value); err != nil {
				return err
			}
		}
	case *array.StructBuilder:
		xs, ok := v.([]any)
		if !ok || len(xs) != bb.NumField() {
			return mismatch(b, v)
		}
		bb.Append(true)
		for i := 0; i < bb.NumField(); i++ {
			if err := appendValue(bb.FieldBuilder(i), xs[i]); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("no arrow builder for %T", b)
	}
	return nil
}

func asInt(v any) (int64, bool) { return normalize.IntValue(v) }

// mismatch: v is not of the column's type, or out of its range (a value is
// never silently truncated to fit).
func mismatch(b array.Builder, v any) error {
	return fmt.Errorf("value %v (%T) does not fit column type %s", v, v, b.Type())
}

// decimalToNum rescales d to the column's scale exactly, or fails.
func decimalToNum(d decimal.Decimal, t *arrow.Decimal128Type) (decimal128.Num, error) {
	scale := int32(t.Scale)
	r := d.Round(scale) // exponent becomes exactly -scale
	if !r.Equal(d) {
		return decimal128.Num{}, fmt.Errorf("decimal %s does not fit scale %d exactly", d, scale)
	}
	bi := r.Coefficient()
	if bi.BitLen() > 127 {
		return decimal128.Num{}, fmt.Errorf("decimal %s overflows 128 bits", d)
	}
	n := decimal128.FromBigInt(bi)
	if !n.FitsInPrecision(t.Precision) {
		return decimal128.Num{}, fmt.Errorf("decimal %s exceeds precision %d", d, t.Precision)
	}
	return n, nil
}

// numToDecimal converts an arrow decimal back to an exact shopspring decimal.
func numToDecimal(n decimal128.Num, scale int32) decimal.Decimal {
	return decimal.NewFromBigInt(n.BigInt(), -scale)
}

// normalizeType is the inverse of deltaType.
func normalizeType(dt schema.DataType) (normalize.Type, error) {
	switch x := dt.(type) {
	case schema.PrimitiveType:
		k, ok := map[schema.PrimitiveType]normalize.Kind{schema.Boolean: normalize.Boolean, schema.Byte: normalize.Byte,
			schema.Short: normalize.Short, schema.Integer: normalize.Integer, schema.Long: normalize.Long,
			schema.Float: normalize.Float, schema.Double: normalize.Double, schema.String: normalize.String,
			schema.Binary: normalize.Binary, schema.Date: normalize.Date, schema.Timestamp: normalize.Timestamp,
			schema.TimestampNTZ: normalize.TimestampNTZ}[x]
		if !ok {
			return normalize.Type{}, fmt.Errorf("unsupported type %s", x)
		}
		return normalize.Type{Kind: k}, nil
	case *schema.DecimalType:
		return normalize.Type{Kind: normalize.Decimal, Precision: x.Precision, Scale: x.Scale}, nil
	case *schema.ArrayType:
		e, err := normalizeType(x.ElementType)
		return normalize.Type{Kind: normalize.Array, Elem: &e}, err
	case *schema.MapType:
		k, err := normalizeType(x.KeyType)
		if err != nil {
			return normalize.Type{}, err
		}
		v, err := normalizeType(x.ValueType)
		return normalize.Type{Kind: normalize.Map, Key: &k, Val: &v}, err
	case *schema.StructType:
		t := normalize.Type{Kind: normalize.Struct}
		for _, f := range x.Fields {
			ft, err := normalizeType(f.Type)
			if err != nil {
				return t, err
			}
			t.Fields = append(t.Fields, normalize.ColumnDef{Name: f.Name, Type: ft, Nullable: f.Nullable})
		}
		return t, nil
	}
	return normalize.Type{}, fmt.Errorf("unsupported type %s", dt.TypeName())
}
