package maintain

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/shopspring/decimal"

	"github.com/cdcsink/cdc-sink/delta/schema"
	"github.com/cdcsink/cdc-sink/tablerows"
)

// Conversion matrix of AlterColumn (docs/types.md, "Changing a column's
// type by hand"). Every conversion is exact: a value that would change
// (rounding, truncation, overflow, a lost time of day) is an error naming
// the value, never silently altered.
//
//	from \ to        string  integers  float/double  decimal  boolean  binary  date  timestamp(_ntz)
//	integers           text     range      exact       fits       -        -      -        -
//	float/double       text    integral    exact       fits       -        -      -        -
//	decimal            text    integral    exact       fits       -        -      -        -
//	string              -      parse       parse       parse    parse    UTF-8  parse    parse
//	boolean            text      -           -           -        -        -      -        -
//	binary            base64     -           -           -        -        -      -        -
//	date               text      -           -           -        -        -      -     midnight
//	timestamp(_ntz)    text      -           -           -        -        -  midnight  same µs
//	array/map/struct   JSON      -           -           -        -        -      -        -

// Canonical text forms (→ string) are those of `table show` (package
// tablerows) so that what the operator saw is what the column holds.

const (
	minDays = -719162 // 0001-01-01
	maxDays = 2932896 // 9999-12-31
	minUs   = int64(minDays) * 86400e6
	maxUs   = int64(maxDays+1)*86400e6 - 1
	dayUs   = int64(86400e6)
)

// typeNames is what ParseType accepts, for error messages.
const typeNames = "string, long, integer, short, byte, double, float, decimal(p,s), boolean, binary, date, timestamp, timestamp_ntz"

// ParseType parses a Delta type name as an operator gives it: a primitive
// type name (Spark SQL spelling: long, not bigint) or decimal(p,s).
// Arrays, maps and structs are not accepted as target types.
func ParseType(name string) (schema.DataType, error) {
	n := strings.ToLower(strings.ReplaceAll(strings.TrimSpace(name), " ", ""))
	if n == "decimal" {
		// Spark would read decimal(10,0); an operator almost never means that.
		return nil, fmt.Errorf("type %q: give the precision and scale, e.g. decimal(12,2)", name)
	}
	raw, _ := json.Marshal(n)
	t, err := schema.ParseType(raw)
	if err != nil {
		return nil, fmt.Errorf("type %q: %w", name, err)
	}
	switch t.(type) {
	case schema.PrimitiveType, *schema.DecimalType:
		return t, nil
	}
	return nil, fmt.Errorf("unknown type %q (want one of %s)", name, typeNames)
}

type class int

const (
	clsOther class = iota
	clsInt
	clsFloat
	clsDecimal
	clsString
	clsBool
	clsBinary
	clsDate
	clsTimestamp // timestamp and timestamp_ntz: µs since the epoch
	clsComplex
)

func classOf(t schema.DataType) class {
	switch t := t.(type) {
	case schema.PrimitiveType:
		switch t {
		case schema.Byte, schema.Short, schema.Integer, schema.Long:
			return clsInt
		case schema.Float, schema.Double:
			return clsFloat
		case schema.String:
			return clsString
		case schema.Boolean:
			return clsBool
		case schema.Binary:
			return clsBinary
		case schema.Date:
			return clsDate
		case schema.Timestamp, schema.TimestampNTZ:
			return clsTimestamp
		}
	case *schema.DecimalType:
		return clsDecimal
	case *schema.ArrayType, *schema.MapType, *schema.StructType:
		return clsComplex
	}
	return clsOther
}

func numeric(c class) bool { return c == clsInt || c == clsFloat || c == clsDecimal }

// CanConvert reports whether AlterColumn has a conversion from type from to
// type to (the matrix above); whether each stored value converts is only
// known when it is read.
func CanConvert(from, to schema.DataType) bool {
	f, t := classOf(from), classOf(to)
	switch {
	case f == clsOther || t == clsOther || t == clsComplex:
		return false
	case t == clsString:
		return true
	case f == clsString:
		return true
	case numeric(f) && numeric(t):
		return true
	case f == clsDate && t == clsTimestamp, f == clsTimestamp && (t == clsTimestamp || t == clsDate):
		return true
	}
	return false
}

// convertFunc appends the converted value of a[i] (never null) to b.
type convertFunc func(a arrow.Array, i int, b array.Builder) error

// valueError is a stored value that does not convert.
type valueError struct{ reason string }

func (e *valueError) Error() string { return e.reason }

func bad(format string, a ...any) error { return &valueError{fmt.Sprintf(format, a...)} }

// converter returns the conversion of values of type from into type to.
func converter(from, to schema.DataType) (convertFunc, error) {
	if !CanConvert(from, to) {
		return nil, fmt.Errorf("no conversion from %s to %s (see docs/types.md, \"Changing a column's type by hand\")", typeLabel(from), typeLabel(to))
	}
	fc := classOf(from)
	if classOf(to) == clsString {
		return toString(fc), nil
	}
	put, err := putter(to)
	if err != nil {
		return nil, err
	}
	get := getter(from)
	return func(a arrow.Array, i int, b array.Builder) error {
		v, err := get(a, i)
		if err != nil {
			return err
		}
		return put(b, v)
	}, nil
}

// toString renders the canonical text of a value (tablerows forms:
// decimals with their scale, timestamps RFC 3339 UTC with microseconds,
// binary base64, nested values as JSON).
func toString(fc class) convertFunc {
	var buf []byte
	return func(a arrow.Array, i int, b array.Builder) error {
		buf = tablerows.AppendJSON(buf[:0], a, i)
		s := string(buf)
		if fc != clsComplex {
			s = tablerows.Text(s) // scalars: the text, not a JSON string literal
		}
		b.(*array.StringBuilder).Append(s)
		return nil
	}
}

// A source value in a form independent of its Arrow width.
type (
	intVal   int64
	floatVal struct {
		f    float64
		bits int
	}
	decVal  decimal.Decimal
	strVal  string
	boolVal bool
	binVal  []byte
	dateVal int64 // days
	tsVal   int64 // µs
)

func getter(t schema.DataType) func(a arrow.Array, i int) (any, error) {
	return func(a arrow.Array, i int) (any, error) {
		switch x := a.(type) {
		case *array.Int8:
			return intVal(x.Value(i)), nil
		case *array.Int16:
			return intVal(x.Value(i)), nil
		case *array.Int32:
			return intVal(x.Value(i)), nil
		case *array.Int64:
			return intVal(x.Value(i)), nil
		case *array.Float32:
			return floatVal{float64(x.Value(i)), 32}, nil
		case *array.Float64:
			return floatVal{x.Value(i), 64}, nil
		case *array.Decimal128:
			sc := x.DataType().(*arrow.Decimal128Type).Scale
			return decVal(decimal.NewFromBigInt(x.Value(i).BigInt(), -sc)), nil
		case *array.String:
			return strVal(x.Value(i)), nil
		case *array.LargeString:
			return strVal(x.Value(i)), nil
		case *array.Boolean:
			return boolVal(x.Value(i)), nil
		case *array.Binary:
			return binVal(x.Value(i)), nil
		case *array.Date32:
			return dateVal(x.Value(i)), nil
		case *array.Timestamp:
			us := int64(x.Value(i))
			switch x.DataType().(*arrow.TimestampType).Unit {
			case arrow.Second:
				us *= 1e6
			case arrow.Millisecond:
				us *= 1e3
			case arrow.Nanosecond:
				if us%1000 != 0 {
					return nil, bad("has sub-microsecond digits")
				}
				us /= 1000
			}
			return tsVal(us), nil
		}
		return nil, fmt.Errorf("column of type %s read as unexpected Arrow type %s", typeLabel(t), a.DataType())
	}
}

// putter returns the function appending a source value to a builder of type to.
func putter(to schema.DataType) (func(b array.Builder, v any) error, error) {
	switch t := to.(type) {
	case *schema.DecimalType:
		return func(b array.Builder, v any) error {
			d, err := asDecimal(v)
			if err != nil {
				return err
			}
			n, err := fitDecimal(d, t)
			if err != nil {
				return err
			}
			b.(*array.Decimal128Builder).Append(n)
			return nil
		}, nil
	case schema.PrimitiveType:
		switch t {
		case schema.Byte, schema.Short, schema.Integer, schema.Long:
			bits := map[schema.PrimitiveType]int{schema.Byte: 8, schema.Short: 16, schema.Integer: 32, schema.Long: 64}[t]
			return func(b array.Builder, v any) error {
				n, err := asInt(v, bits, t)
				if err != nil {
					return err
				}
				switch bb := b.(type) {
				case *array.Int8Builder:
					bb.Append(int8(n))
				case *array.Int16Builder:
					bb.Append(int16(n))
				case *array.Int32Builder:
					bb.Append(int32(n))
				case *array.Int64Builder:
					bb.Append(n)
				}
				return nil
			}, nil
		case schema.Float, schema.Double:
			bits := 64
			if t == schema.Float {
				bits = 32
			}
			return func(b array.Builder, v any) error {
				f, err := asFloat(v, bits, t)
				if err != nil {
					return err
				}
				if bb, ok := b.(*array.Float32Builder); ok {
					bb.Append(float32(f))
				} else {
					b.(*array.Float64Builder).Append(f)
				}
				return nil
			}, nil
		case schema.Boolean:
			return func(b array.Builder, v any) error {
				s := string(v.(strVal))
				x, err := strconv.ParseBool(s)
				if err != nil {
					return bad("is not a boolean (true/false)")
				}
				b.(*array.BooleanBuilder).Append(x)
				return nil
			}, nil
		case schema.Binary:
			// The string's UTF-8 bytes (what merge stores for a string in a
			// binary column, and PostgreSQL's text::bytea for plain text).
			return func(b array.Builder, v any) error {
				b.(*array.BinaryBuilder).AppendString(string(v.(strVal)))
				return nil
			}, nil
		case schema.Date:
			return func(b array.Builder, v any) error {
				var days int64
				switch x := v.(type) {
				case strVal:
					tm, err := time.Parse("2006-01-02", string(x))
					if err != nil {
						return bad("is not a date (YYYY-MM-DD)")
					}
					days = floorDiv(tm.Unix(), 86400)
				case tsVal:
					if int64(x)%dayUs != 0 {
						return bad("has a time of day (a date holds midnight only)")
					}
					days = floorDiv(int64(x), dayUs)
				}
				if days < minDays || days > maxDays {
					return bad("is outside 0001-01-01..9999-12-31")
				}
				b.(*array.Date32Builder).Append(arrow.Date32(days))
				return nil
			}, nil
		case schema.Timestamp, schema.TimestampNTZ:
			return func(b array.Builder, v any) error {
				var us int64
				switch x := v.(type) {
				case strVal:
					var err error
					if us, err = parseTimestamp(string(x), t == schema.TimestampNTZ); err != nil {
						return err
					}
				case dateVal:
					us = int64(x) * dayUs
				case tsVal:
					us = int64(x) // timestamp ↔ timestamp_ntz: the same µs (wall clock read as UTC)
				}
				if us < minUs || us > maxUs {
					return bad("is outside 0001-01-01..9999-12-31")
				}
				b.(*array.TimestampBuilder).Append(arrow.Timestamp(us))
				return nil
			}, nil
		}
	}
	return nil, fmt.Errorf("no conversion into %s", typeLabel(to))
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// parseTimestamp reads ISO-8601 text: with a zone offset for timestamp
// (converted to UTC), without one for timestamp_ntz. A space may separate
// date and time (PostgreSQL's text form).
func parseTimestamp(s string, ntz bool) (int64, error) {
	if len(s) > 10 && s[10] == ' ' {
		s = s[:10] + "T" + s[11:]
	}
	var tm time.Time
	var err error
	if ntz {
		tm, err = time.Parse("2006-01-02T15:04:05.999999999", s)
		if err != nil {
			if _, zerr := time.Parse(time.RFC3339Nano, s); zerr == nil {
				return 0, bad("has a time zone (timestamp_ntz holds a wall-clock time)")
			}
			return 0, bad("is not a timestamp without time zone (YYYY-MM-DDTHH:MM:SS[.ffffff])")
		}
	} else {
		tm, err = time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return 0, bad("is not an ISO-8601 timestamp with zone (YYYY-MM-DDTHH:MM:SS[.ffffff]Z or ±HH:MM)")
		}
	}
	if tm.Nanosecond()%1000 != 0 {
		return 0, bad("has sub-microsecond digits")
	}
	if y := tm.UTC().Year(); y < 1 || y > 9999 {
		return 0, bad("is outside 0001-01-01..9999-12-31")
	}
	return tm.UnixMicro(), nil
}

var (
	minInt = map[int]int64{8: math.MinInt8, 16: math.MinInt16, 32: math.MinInt32, 64: math.MinInt64}
	maxInt = map[int]int64{8: math.MaxInt8, 16: math.MaxInt16, 32: math.MaxInt32, 64: math.MaxInt64}
)

func asInt(v any, bits int, t schema.DataType) (int64, error) {
	rangeErr := func() error { return bad("is out of range for %s", t) }
	var n int64
	switch x := v.(type) {
	case intVal:
		n = int64(x)
	case floatVal:
		f := x.f
		if math.IsNaN(f) || math.IsInf(f, 0) || f != math.Trunc(f) {
			return 0, bad("is not an integer")
		}
		// 2^63 is exactly representable; every double below it converts.
		if f < -9223372036854775808.0 || f >= 9223372036854775808.0 {
			return 0, rangeErr()
		}
		n = int64(f)
	case decVal:
		d := decimal.Decimal(x)
		if !d.IsInteger() {
			return 0, bad("has a fraction")
		}
		bi := d.BigInt()
		if !bi.IsInt64() {
			return 0, rangeErr()
		}
		n = bi.Int64()
	case strVal:
		var err error
		n, err = strconv.ParseInt(string(x), 10, 64)
		if err != nil {
			var ne *strconv.NumError
			if errors.As(err, &ne) && ne.Err == strconv.ErrRange {
				return 0, rangeErr()
			}
			return 0, bad("is not an integer")
		}
	default:
		return 0, bad("is not a number")
	}
	if n < minInt[bits] || n > maxInt[bits] {
		return 0, rangeErr()
	}
	return n, nil
}

// shortest is the shortest decimal text that reads back as f at its width.
func shortest(f float64, bits int) string { return strconv.FormatFloat(f, 'f', -1, bits) }

// asFloat converts exactly. For decimals and strings "exactly" means in
// decimal terms: the float's shortest round-trip text has the same value
// (0.1 converts, 0.1000000000000000055 does not), the rule docs/types.md
// uses for a float given for a decimal column.
func asFloat(v any, bits int, t schema.DataType) (float64, error) {
	inexact := func() error { return bad("is not exactly representable as %s", t) }
	switch x := v.(type) {
	case intVal:
		n := int64(x)
		f := float64(n)
		if bits == 32 {
			f = float64(float32(n))
		}
		if f >= 9223372036854775808.0 || int64(f) != n {
			return 0, inexact()
		}
		return f, nil
	case floatVal:
		if bits == 32 && x.bits == 64 && !math.IsNaN(x.f) && float64(float32(x.f)) != x.f {
			return 0, inexact()
		}
		return x.f, nil
	case decVal:
		return decimalToFloat(decimal.Decimal(x), bits, inexact)
	case strVal:
		s := string(x)
		switch s {
		case "NaN":
			return math.NaN(), nil
		case "Infinity":
			return math.Inf(1), nil
		case "-Infinity":
			return math.Inf(-1), nil
		}
		d, err := decimal.NewFromString(s)
		if err != nil {
			return 0, bad("is not a number")
		}
		return decimalToFloat(d, bits, inexact)
	}
	return 0, bad("is not a number")
}

func decimalToFloat(d decimal.Decimal, bits int, inexact func() error) (float64, error) {
	f, err := strconv.ParseFloat(d.String(), bits)
	if err != nil || math.IsInf(f, 0) {
		return 0, inexact()
	}
	back, err := decimal.NewFromString(shortest(f, bits))
	if err != nil || !back.Equal(d) {
		return 0, inexact()
	}
	return f, nil
}

func asDecimal(v any) (decimal.Decimal, error) {
	switch x := v.(type) {
	case intVal:
		return decimal.NewFromInt(int64(x)), nil
	case floatVal:
		if math.IsNaN(x.f) || math.IsInf(x.f, 0) {
			return decimal.Decimal{}, bad("is not a finite number")
		}
		return decimal.RequireFromString(shortest(x.f, x.bits)), nil
	case decVal:
		return decimal.Decimal(x), nil
	case strVal:
		d, err := decimal.NewFromString(string(x))
		if err != nil {
			return decimal.Decimal{}, bad("is not a decimal number")
		}
		return d, nil
	}
	return decimal.Decimal{}, bad("is not a number")
}

// fitDecimal rescales d to t's scale, refusing to drop non-zero digits or
// to exceed the precision.
func fitDecimal(d decimal.Decimal, t *schema.DecimalType) (decimal128.Num, error) {
	s := int32(t.Scale)
	r := d.Round(s) // exponent becomes exactly -s
	if !r.Equal(d) {
		return decimal128.Num{}, bad("has more than %d fraction digits (would lose digits in %s)", t.Scale, t.TypeName())
	}
	bi := r.Coefficient()
	if bi.BitLen() > 127 || !decimal128.FromBigInt(bi).FitsInPrecision(int32(t.Precision)) {
		return decimal128.Num{}, bad("has more than %d integer digits (does not fit %s)", t.Precision-t.Scale, t.TypeName())
	}
	return decimal128.FromBigInt(bi), nil
}

// typeLabel names a type for messages: the Delta name, or the JSON form of
// a nested type.
func typeLabel(t schema.DataType) string {
	switch t.(type) {
	case schema.PrimitiveType, *schema.DecimalType:
		return t.TypeName()
	}
	if b, err := schema.TypeJSON(t); err == nil {
		return string(b)
	}
	return t.TypeName()
}

// ConvertArray converts every value of a (a column of type from, as the
// table reader returns it) to type to, nulls staying null. On a value that
// does not convert it returns the row and the reason; the caller names the
// row. Exported for the conversion-matrix tests and other tools.
func ConvertArray(a arrow.Array, from, to schema.DataType) (arrow.Array, int, error) {
	conv, err := converter(from, to)
	if err != nil {
		return nil, -1, err
	}
	return convertArray(a, conv, to)
}

func convertArray(a arrow.Array, conv convertFunc, to schema.DataType) (arrow.Array, int, error) {
	b := array.NewBuilder(memory.DefaultAllocator, schema.ArrowType(to))
	defer b.Release()
	b.Reserve(a.Len())
	for i := 0; i < a.Len(); i++ {
		if a.IsNull(i) {
			b.AppendNull()
			continue
		}
		if err := conv(a, i, b); err != nil {
			return nil, i, err
		}
	}
	return b.NewArray(), -1, nil
}
