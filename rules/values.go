package rules

// CEL values of normalized columns. Rows are exposed lazily (a column is
// converted when an expression reads it), so a rule reading two columns of a
// 50-column row converts two values, and no map is built per change.

import (
	"fmt"
	"math"
	"reflect"
	"time"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"github.com/shopspring/decimal"

	"github.com/cdcsink/cdc-sink/normalize"
)

// DecimalType is the CEL type of exact decimal columns: comparisons and
// arithmetic with ints, doubles and other decimals are exact (a double
// literal is read as its shortest decimal form, so 0.1 is 0.1).
var DecimalType = types.NewObjectType("cdcsink.Decimal",
	traits.ComparerType|traits.AdderType|traits.SubtractorType|traits.MultiplierType|
		traits.DividerType|traits.NegatorType)

// Decimal is a CEL value holding an exact decimal. Scale is the column's
// scale (string() keeps its trailing zeros), -1 for computed values.
type Decimal struct {
	D     decimal.Decimal
	Scale int32
}

func toDecimal(v ref.Val) (decimal.Decimal, bool) {
	switch x := v.(type) {
	case Decimal:
		return x.D, true
	case types.Int:
		return decimal.NewFromInt(int64(x)), true
	case types.Uint:
		return decimal.NewFromUint64(uint64(x)), true
	case types.Double:
		f := float64(x)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return decimal.Decimal{}, false
		}
		return decimal.NewFromFloat(f), true
	}
	return decimal.Decimal{}, false
}

// Compare implements traits.Comparer.
func (d Decimal) Compare(other ref.Val) ref.Val {
	if i, ok := other.(types.Int); ok && i == 0 {
		return types.Int(d.D.Sign()) // `> 0` without a big.Int per call
	}
	o, ok := toDecimal(other)
	if !ok {
		return types.MaybeNoSuchOverloadErr(other)
	}
	return types.Int(d.D.Cmp(o))
}

// arith applies op to d and other (any number); computed values have no
// column scale.
func (d Decimal) arith(other ref.Val, op func(a, b decimal.Decimal) decimal.Decimal) ref.Val {
	o, ok := toDecimal(other)
	if !ok {
		return types.MaybeNoSuchOverloadErr(other)
	}
	return Decimal{op(d.D, o), -1}
}

// Add implements traits.Adder.
func (d Decimal) Add(other ref.Val) ref.Val { return d.arith(other, decimal.Decimal.Add) }

// Subtract implements traits.Subtractor.
func (d Decimal) Subtract(other ref.Val) ref.Val { return d.arith(other, decimal.Decimal.Sub) }

// Multiply implements traits.Multiplier.
func (d Decimal) Multiply(other ref.Val) ref.Val { return d.arith(other, decimal.Decimal.Mul) }

// Divide implements traits.Divider (34 significant fractional digits at most).
func (d Decimal) Divide(other ref.Val) ref.Val {
	o, ok := toDecimal(other)
	if !ok {
		return types.MaybeNoSuchOverloadErr(other)
	}
	if o.IsZero() {
		return types.NewErr("division by zero")
	}
	return Decimal{d.D.DivRound(o, 34), -1}
}

// Negate implements traits.Negater.
func (d Decimal) Negate() ref.Val { return Decimal{d.D.Neg(), d.Scale} }

// ConvertToNative implements ref.Val.
func (d Decimal) ConvertToNative(t reflect.Type) (any, error) {
	switch t {
	case reflect.TypeOf(decimal.Decimal{}):
		return d.D, nil
	case reflect.TypeOf(""):
		return d.D.String(), nil
	case reflect.TypeOf(float64(0)):
		f, _ := d.D.Float64()
		return f, nil
	}
	return nil, fmt.Errorf("decimal cannot be converted to %v", t)
}

// ConvertToType implements ref.Val: double(), string() and int() work on decimals.
func (d Decimal) ConvertToType(t ref.Type) ref.Val {
	switch t {
	case types.DoubleType:
		f, _ := d.D.Float64()
		return types.Double(f)
	case types.StringType:
		if d.Scale >= 0 {
			return types.String(d.D.StringFixed(d.Scale))
		}
		return types.String(d.D.String())
	case types.IntType:
		if !d.D.IsInteger() || d.D.Cmp(decimal.NewFromInt(math.MaxInt64)) > 0 || d.D.Cmp(decimal.NewFromInt(math.MinInt64)) < 0 {
			return types.NewErr("int(%s): not an integer in range", d.D.String())
		}
		return types.Int(d.D.IntPart())
	case types.TypeType:
		return DecimalType
	case DecimalType:
		return d
	}
	return types.NewErr("type conversion error from decimal to %s", t.TypeName())
}

// Equal implements ref.Val: numerically equal numbers are equal (1.50 == 1.5 == 1.5 double).
func (d Decimal) Equal(other ref.Val) ref.Val {
	o, ok := toDecimal(other)
	if !ok {
		return types.False
	}
	return types.Bool(d.D.Equal(o))
}

// Type implements ref.Val.
func (d Decimal) Type() ref.Type { return DecimalType }

// Value implements ref.Val.
func (d Decimal) Value() any { return d.D }

// value converts one normalized column value (normalize.Kind representation) to CEL.
func value(v any, t *normalize.Type) ref.Val {
	if v == nil {
		return types.NullValue
	}
	switch x := v.(type) {
	case bool:
		return types.Bool(x)
	case int8:
		return types.Int(x)
	case int16:
		return types.Int(x)
	case int32:
		if t != nil && t.Kind == normalize.Date {
			return types.Timestamp{Time: time.Unix(int64(x)*86400, 0).UTC()}
		}
		return types.Int(x)
	case int64:
		if t != nil && (t.Kind == normalize.Timestamp || t.Kind == normalize.TimestampNTZ) {
			return types.Timestamp{Time: time.UnixMicro(x).UTC()}
		}
		return types.Int(x)
	case float32:
		return types.Double(x)
	case float64:
		return types.Double(x)
	case decimal.Decimal:
		scale := int32(-1)
		if t != nil && t.Kind == normalize.Decimal {
			scale = int32(t.Scale)
		}
		return Decimal{x, scale}
	case string:
		return types.String(x)
	case []byte:
		return types.Bytes(x)
	case []any:
		var et *normalize.Type
		if t != nil {
			if t.Kind == normalize.Struct {
				return structVal(x, t)
			}
			et = t.Elem
		}
		vals := make([]ref.Val, len(x))
		for i, e := range x {
			vals[i] = value(e, et)
		}
		return types.NewRefValList(types.DefaultTypeAdapter, vals)
	case []normalize.MapEntry:
		var kt, vt *normalize.Type
		if t != nil {
			kt, vt = t.Key, t.Val
		}
		m := make(map[ref.Val]ref.Val, len(x))
		for _, e := range x {
			m[value(e.Key, kt)] = value(e.Value, vt)
		}
		return types.NewRefValMap(types.DefaultTypeAdapter, m)
	}
	if normalize.IsUnavailable(v) {
		return types.NewErr("unavailable TOAST value")
	}
	return types.NewErr("unsupported column value %T", v)
}

func structVal(x []any, t *normalize.Type) ref.Val {
	m := make(map[string]ref.Val, len(t.Fields))
	for i, f := range t.Fields {
		if i < len(x) {
			m[f.Name] = value(x[i], &t.Fields[i].Type)
		}
	}
	return types.NewStringInterfaceMap(types.DefaultTypeAdapter, toAny(m))
}

func toAny(m map[string]ref.Val) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// rowVal is a row image as a CEL map(string, dyn). Key columns missing from
// the image (a delete's partial before) are read from the key tuple.
// Unavailable TOAST values are absent: has(row.c) is false.
type rowVal struct {
	schema *normalize.Schema
	row    []any
	names  []string // key names
	key    []any
	index  map[string]int // column → position in row, per schema
}

var _ traits.Mapper = (*rowVal)(nil)

func (r *rowVal) lookup(name string) (ref.Val, bool) {
	if r.schema != nil {
		if i, ok := r.index[name]; ok && i < len(r.row) {
			v := r.row[i]
			if normalize.IsUnavailable(v) {
				return nil, false
			}
			return value(v, &r.schema.Columns[i].Type), true
		}
	}
	for i, n := range r.names {
		if n == name && i < len(r.key) {
			return value(r.key[i], nil), true
		}
	}
	return nil, false
}

func (r *rowVal) Find(key ref.Val) (ref.Val, bool) {
	s, ok := key.(types.String)
	if !ok {
		return nil, false
	}
	return r.lookup(string(s))
}

func (r *rowVal) Get(key ref.Val) ref.Val {
	v, ok := r.Find(key)
	if !ok {
		return types.NewErr("no such column: %v (null, absent or an unavailable TOAST value)", key)
	}
	return v
}

func (r *rowVal) Contains(key ref.Val) ref.Val {
	_, ok := r.Find(key)
	return types.Bool(ok)
}

func (r *rowVal) columns() []string {
	var out []string
	seen := map[string]bool{}
	if r.schema != nil {
		for i, c := range r.schema.Columns {
			if i < len(r.row) && !normalize.IsUnavailable(r.row[i]) {
				out = append(out, c.Name)
				seen[c.Name] = true
			}
		}
	}
	for i, n := range r.names {
		if !seen[n] && i < len(r.key) {
			out = append(out, n)
		}
	}
	return out
}

func (r *rowVal) Size() ref.Val { return types.Int(len(r.columns())) }

func (r *rowVal) Iterator() traits.Iterator {
	return &nameIter{names: r.columns()}
}

func (r *rowVal) ConvertToNative(t reflect.Type) (any, error) {
	if t.Kind() == reflect.Map && t.Key().Kind() == reflect.String {
		m := map[string]any{}
		for _, n := range r.columns() {
			v, _ := r.lookup(n)
			m[n] = v.Value()
		}
		return m, nil
	}
	return nil, fmt.Errorf("row cannot be converted to %v", t)
}

func (r *rowVal) ConvertToType(t ref.Type) ref.Val {
	switch t {
	case types.MapType:
		return r
	case types.TypeType:
		return types.MapType
	}
	return types.NewErr("type conversion error from row to %s", t.TypeName())
}

func (r *rowVal) Equal(other ref.Val) ref.Val { return types.Bool(other == ref.Val(r)) }
func (r *rowVal) Type() ref.Type              { return types.MapType }
func (r *rowVal) Value() any                  { return r }

type nameIter struct {
	names []string
	i     int
}

func (it *nameIter) HasNext() ref.Val { return types.Bool(it.i < len(it.names)) }
func (it *nameIter) Next() ref.Val {
	if it.i >= len(it.names) {
		return nil
	}
	it.i++
	return types.String(it.names[it.i-1])
}
func (it *nameIter) ConvertToNative(reflect.Type) (any, error) {
	return nil, fmt.Errorf("iterator cannot be converted")
}
func (it *nameIter) ConvertToType(ref.Type) ref.Val { return types.NewErr("iterator") }
func (it *nameIter) Equal(ref.Val) ref.Val          { return types.False }
func (it *nameIter) Type() ref.Type                 { return types.IteratorType }
func (it *nameIter) Value() any                     { return it }
