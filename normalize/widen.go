package normalize

import (
	"fmt"
	"math"

	"github.com/shopspring/decimal"
)

// maxDecimalPrecision is Delta's (and Spark's) decimal limit.
const maxDecimalPrecision = 38

// Widen returns the narrowest type that values of both a and b convert to
// without loss, and whether there is one. It is the one widening rule of
// cdc-sink: schemaless inference uses it to merge the types seen in a column,
// and merge uses it to decide whether a change whose column type differs from
// the table's is written as is (the table's type is wider: the value is cast),
// widens the table's column (Delta type widening), or is a schema_mismatch
// (docs/types.md, "Type changes").
//
//	byte < short < integer < long
//	float < double; byte, short, integer → double; long + float/double → double
//	  (exact up to 2^53: the schemaless rule for a column seen as 1 then 3.14)
//	decimal(p1,s1) + decimal(p2,s2) → decimal(max(p-s) + max(s), max(s)), at most 38 digits
//	byte, short, integer → decimal(10,0), long → decimal(20,0), then as above
//	date + timestamp_ntz → timestamp_ntz; date + timestamp → timestamp (midnight UTC, as
//	  a source timestamp without time zone is read as UTC)
//	array, map: element-wise; struct: field-wise by name, fields of either kept
//
// Everything else (string vs number, double vs decimal, timestamp vs timestamp_ntz…)
// has no common type.
func Widen(a, b Type) (Type, bool) {
	if TypeEqual(a, b) {
		return a, true
	}
	switch {
	case isIntegral(a.Kind) && isIntegral(b.Kind):
		if a.Kind > b.Kind { // Byte < Short < Integer < Long in Kind order
			return Type{Kind: a.Kind}, true
		}
		return Type{Kind: b.Kind}, true
	case isNumericFloat(a.Kind) && isNumericFloat(b.Kind):
		// float+double, any integral with a float type
		return Type{Kind: Double}, true
	case (a.Kind == Decimal || isIntegral(a.Kind)) && (b.Kind == Decimal || isIntegral(b.Kind)):
		da, db := asDecimal(a), asDecimal(b)
		s := max(da.Scale, db.Scale)
		p := max(da.Precision-da.Scale, db.Precision-db.Scale) + s
		if p > maxDecimalPrecision {
			return Type{}, false
		}
		return Type{Kind: Decimal, Precision: p, Scale: s}, true
	case (a.Kind == Date && b.Kind == TimestampNTZ) || (a.Kind == TimestampNTZ && b.Kind == Date):
		return Type{Kind: TimestampNTZ}, true
	case (a.Kind == Date && b.Kind == Timestamp) || (a.Kind == Timestamp && b.Kind == Date):
		// midnight UTC: cdc-sink reads a source timestamp without time zone as UTC
		return Type{Kind: Timestamp}, true
	case a.Kind == Array && b.Kind == Array && a.Elem != nil && b.Elem != nil:
		e, ok := Widen(*a.Elem, *b.Elem)
		if !ok {
			return Type{}, false
		}
		return Type{Kind: Array, Elem: &e}, true
	case a.Kind == Map && b.Kind == Map && a.Key != nil && b.Key != nil && a.Val != nil && b.Val != nil:
		k, ok1 := Widen(*a.Key, *b.Key)
		v, ok2 := Widen(*a.Val, *b.Val)
		if !ok1 || !ok2 {
			return Type{}, false
		}
		return Type{Kind: Map, Key: &k, Val: &v}, true
	case a.Kind == Struct && b.Kind == Struct:
		out := Type{Kind: Struct, Fields: make([]ColumnDef, 0, len(a.Fields)+len(b.Fields))}
		used := make([]bool, len(b.Fields))
		for _, fa := range a.Fields {
			j := fieldPos(b.Fields, fa.Name)
			if j < 0 {
				out.Fields = append(out.Fields, fa)
				continue
			}
			used[j] = true
			w, ok := Widen(fa.Type, b.Fields[j].Type)
			if !ok {
				return Type{}, false
			}
			out.Fields = append(out.Fields, ColumnDef{Name: fa.Name, Type: w, Nullable: fa.Nullable || b.Fields[j].Nullable})
		}
		for j, fb := range b.Fields {
			if !used[j] {
				fb.Nullable = true
				out.Fields = append(out.Fields, fb)
			}
		}
		return out, true
	}
	return Type{}, false
}

// TypeEqual reports whether a and b are the same Delta type (field
// nullability aside; a decimal without precision is decimal(38,s)).
func TypeEqual(a, b Type) bool {
	if a.Kind != b.Kind {
		return false
	}
	switch a.Kind {
	case Decimal:
		return decPrec(a) == decPrec(b) && a.Scale == b.Scale
	case Array:
		return a.Elem != nil && b.Elem != nil && TypeEqual(*a.Elem, *b.Elem)
	case Map:
		return a.Key != nil && b.Key != nil && a.Val != nil && b.Val != nil &&
			TypeEqual(*a.Key, *b.Key) && TypeEqual(*a.Val, *b.Val)
	case Struct:
		if len(a.Fields) != len(b.Fields) {
			return false
		}
		for i := range a.Fields {
			if a.Fields[i].Name != b.Fields[i].Name || !TypeEqual(a.Fields[i].Type, b.Fields[i].Type) {
				return false
			}
		}
	}
	return true
}

func decPrec(t Type) int {
	if t.Precision <= 0 {
		return maxDecimalPrecision
	}
	return t.Precision
}

func isIntegral(k Kind) bool { return k == Byte || k == Short || k == Integer || k == Long }

func isNumericFloat(k Kind) bool { return isIntegral(k) || k == Float || k == Double }

// asDecimal is the decimal type an integral type widens to (Delta's minimum
// targets: decimal(10,0) for byte/short/integer, decimal(20,0) for long).
func asDecimal(t Type) Type {
	switch t.Kind {
	case Byte, Short, Integer:
		return Type{Kind: Decimal, Precision: 10}
	case Long:
		return Type{Kind: Decimal, Precision: 20}
	}
	return Type{Kind: Decimal, Precision: decPrec(t), Scale: t.Scale}
}

func fieldPos(fs []ColumnDef, name string) int {
	for i := range fs {
		if fs[i].Name == name {
			return i
		}
	}
	return -1
}

// Cast converts v, a value of type from (in the Go representation documented
// on Kind), to type to, where Widen(from, to) is to. A value already in to's
// representation is returned as is, so a value filled from the table (wide)
// into a row of a narrower change passes through. nil and Unavailable pass
// through.
func Cast(v any, from, to Type) (any, error) {
	if v == nil || IsUnavailable(v) || TypeEqual(from, to) {
		return v, nil
	}
	switch to.Kind {
	case Byte, Short, Integer, Long:
		i, ok := IntValue(v)
		if !ok {
			break
		}
		switch to.Kind {
		case Byte:
			if i >= math.MinInt8 && i <= math.MaxInt8 {
				return int8(i), nil
			}
		case Short:
			if i >= math.MinInt16 && i <= math.MaxInt16 {
				return int16(i), nil
			}
		case Integer:
			if i >= math.MinInt32 && i <= math.MaxInt32 {
				return int32(i), nil
			}
		default:
			return i, nil
		}
		return nil, fmt.Errorf("value %d does not fit %s", i, to)
	case Double:
		switch x := v.(type) {
		case float64:
			return x, nil
		case float32:
			return float64(x), nil
		}
		if i, ok := IntValue(v); ok {
			return float64(i), nil
		}
	case Decimal:
		switch x := v.(type) {
		case decimal.Decimal:
			return x, nil // rescaled exactly (or refused) by the writer
		}
		if i, ok := IntValue(v); ok {
			return decimal.New(i, 0), nil
		}
	case TimestampNTZ, Timestamp:
		switch x := v.(type) {
		case int32: // date: days since the epoch → midnight, in microseconds
			return int64(x) * 86_400_000_000, nil
		case int64:
			return x, nil
		}
	case Array:
		xs, ok := v.([]any)
		if !ok || from.Elem == nil || to.Elem == nil {
			break
		}
		out := make([]any, len(xs))
		for i, e := range xs {
			c, err := Cast(e, *from.Elem, *to.Elem)
			if err != nil {
				return nil, fmt.Errorf("element %d: %w", i, err)
			}
			out[i] = c
		}
		return out, nil
	case Map:
		xs, ok := v.([]MapEntry)
		if !ok || from.Key == nil || from.Val == nil || to.Key == nil || to.Val == nil {
			break
		}
		out := make([]MapEntry, len(xs))
		for i, e := range xs {
			k, err := Cast(e.Key, *from.Key, *to.Key)
			if err != nil {
				return nil, fmt.Errorf("map key: %w", err)
			}
			val, err := Cast(e.Value, *from.Val, *to.Val)
			if err != nil {
				return nil, fmt.Errorf("map value: %w", err)
			}
			out[i] = MapEntry{Key: k, Value: val}
		}
		return out, nil
	case Struct:
		xs, ok := v.([]any)
		if !ok || len(xs) != len(from.Fields) {
			break
		}
		out := make([]any, len(to.Fields))
		for i, f := range to.Fields {
			j := fieldPos(from.Fields, f.Name)
			if j < 0 {
				continue // a field the change does not have: null
			}
			c, err := Cast(xs[j], from.Fields[j].Type, f.Type)
			if err != nil {
				return nil, fmt.Errorf("field %s: %w", f.Name, err)
			}
			out[i] = c
		}
		return out, nil
	}
	return nil, fmt.Errorf("cannot convert %v (%T) from %s to %s", v, v, from, to)
}

// IntValue returns an integer value of any Go integer type as int64.
func IntValue(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case int32:
		return int64(x), true
	case int16:
		return int64(x), true
	case int8:
		return int64(x), true
	case int:
		return int64(x), true
	}
	return 0, false
}
