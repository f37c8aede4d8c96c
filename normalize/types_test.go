package normalize

import (
	"math"
	"math/big"
	"reflect"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/quarantine"
)

// twos returns the minimal big-endian two's complement bytes of the decimal
// integer literal s (as Kafka Connect's Decimal does: BigInteger.toByteArray).
func twos(s string) []byte {
	v, ok := new(big.Int).SetString(s, 10)
	if !ok {
		panic(s)
	}
	if v.Sign() >= 0 {
		b := v.Bytes()
		if len(b) == 0 || b[0]&0x80 != 0 {
			b = append([]byte{0}, b...)
		}
		return b
	}
	// negative: 2^(8n) + v for the smallest n that keeps the sign bit
	for n := 1; ; n++ {
		m := new(big.Int).Lsh(big.NewInt(1), uint(8*n))
		t := new(big.Int).Add(m, v)
		if t.Sign() >= 0 && t.BitLen() == 8*n {
			b := t.Bytes()
			for len(b) < n {
				b = append([]byte{0}, b...)
			}
			return b
		}
	}
}

func dec(s string, scale int32) decimal.Decimal {
	d := decimal.RequireFromString(s)
	u, ok := rescaleExact(d.Coefficient(), int(-d.Exponent()), int(scale))
	if !ok {
		panic(s)
	}
	return decimal.NewFromBigInt(u, -scale)
}

// sameValue compares Change values: decimals by value AND scale, NaN == NaN.
func sameValue(a, b any) bool {
	if da, ok := a.(decimal.Decimal); ok {
		db, ok := b.(decimal.Decimal)
		return ok && da.Equal(db) && da.Exponent() == db.Exponent()
	}
	if fa, ok := a.(float64); ok {
		fb, ok := b.(float64)
		return ok && (fa == fb || (math.IsNaN(fa) && math.IsNaN(fb)))
	}
	if aa, ok := a.([]any); ok {
		ba, ok := b.([]any)
		if !ok || len(aa) != len(ba) {
			return false
		}
		for i := range aa {
			if !sameValue(aa[i], ba[i]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}

const (
	micros1900      = int64(-2208988800000000) // 1900-01-01T00:00:00Z
	micros99991231  = int64(253402300799999999)
	micros00010101  = int64(-62135596800000000)
	micros20180620  = int64(1529500396945104) // 2018-06-20T13:13:16.945104Z
	days1900        = int32(-25567)
	days99991231    = int32(2932896)
	days20170915    = int32(17424)
	days00010101    = int32(-719162)
	decimalName     = "org.apache.kafka.connect.data.Decimal"
	varScaleName    = "io.debezium.data.VariableScaleDecimal"
	geometryName    = "io.debezium.data.geometry.Geometry"
	pointName       = "io.debezium.data.geometry.Point"
	microTimestampN = "io.debezium.time.MicroTimestamp"
)

type typeCase struct {
	name   string
	schema *envelope.Schema
	in     any
	typ    string // Type.String()
	want   any
	reason quarantine.Reason // expected error class, "" for success
	opts   *Options
}

func typeCases() []typeCase {
	varScale := structOf(varScaleName, "scale", sch("int32"), "value", sch("bytes"))
	varScale.Optional = true
	point := structOf(pointName, "x", sch("float64"), "y", sch("float64"), "wkb", opt("bytes"), "srid", opt("int32"))
	point.Optional = true
	geom := structOf(geometryName, "wkb", sch("bytes"), "srid", opt("int32"))
	geom.Optional = true
	noPrec := withParams(named("bytes", decimalName), "scale", "3")
	return []typeCase{
		// Connect primitives
		{name: "int8", schema: opt("int8"), in: int64(-128), typ: "byte", want: int8(-128)},
		{name: "int8 overflow", schema: opt("int8"), in: int64(200), reason: quarantine.TypeMismatch},
		{name: "int16", schema: opt("int16"), in: int64(32767), typ: "short", want: int16(32767)},
		{name: "int32", schema: opt("int32"), in: int64(math.MinInt32), typ: "integer", want: int32(math.MinInt32)},
		{name: "int32 overflow", schema: opt("int32"), in: int64(math.MaxInt32 + 1), reason: quarantine.TypeMismatch},
		{name: "int64", schema: opt("int64"), in: int64(math.MaxInt64), typ: "long", want: int64(math.MaxInt64)},
		{name: "float32", schema: opt("float32"), in: 1.5, typ: "float", want: float32(1.5)},
		{name: "float64", schema: opt("float64"), in: -0.25, typ: "double", want: -0.25},
		{name: "float64 NaN (double mode)", schema: opt("float64"), in: "NaN", typ: "double", want: math.NaN()},
		{name: "boolean", schema: opt("boolean"), in: true, typ: "boolean", want: true},
		{name: "boolean mismatch", schema: opt("boolean"), in: int64(1), reason: quarantine.TypeMismatch},
		{name: "string", schema: opt("string"), in: "héllo", typ: "string", want: "héllo"},
		{name: "string mismatch", schema: opt("string"), in: true, reason: quarantine.TypeMismatch},
		{name: "bytes", schema: opt("bytes"), in: []byte{0, 1, 255}, typ: "binary", want: []byte{0, 1, 255}},
		{name: "null", schema: opt("int32"), in: nil, typ: "integer", want: nil},

		// dates
		{name: "Date epoch", schema: named("int32", "io.debezium.time.Date"), in: int64(0), typ: "date", want: int32(0)},
		{name: "Date 1900", schema: named("int32", "io.debezium.time.Date"), in: int64(days1900), typ: "date", want: days1900},
		{name: "Date 9999-12-31", schema: named("int32", "io.debezium.time.Date"), in: int64(days99991231), typ: "date", want: days99991231},
		{name: "Date 0001-01-01", schema: named("int32", "io.debezium.time.Date"), in: int64(days00010101), typ: "date", want: days00010101},
		{name: "Date beyond 9999", schema: named("int32", "io.debezium.time.Date"), in: int64(days99991231 + 1), reason: quarantine.InvalidTime},
		{name: "Date null", schema: named("int32", "io.debezium.time.Date"), in: nil, typ: "date", want: nil},
		{name: "connect Date", schema: named("int32", "org.apache.kafka.connect.data.Date"), in: int64(days1900), typ: "date", want: days1900},
		{name: "IsoDate", schema: named("string", "io.debezium.time.IsoDate"), in: "2017-09-15Z", typ: "date", want: days20170915},
		{name: "IsoDate 1900", schema: named("string", "io.debezium.time.IsoDate"), in: "1900-01-01Z", typ: "date", want: days1900},
		{name: "IsoDate bad", schema: named("string", "io.debezium.time.IsoDate"), in: "2017-02-30Z", reason: quarantine.InvalidTime},
		{name: "Date on string schema", schema: named("string", "io.debezium.time.Date"), in: "x", reason: quarantine.TypeMismatch},

		// times of day → long µs since midnight
		{name: "Time ms", schema: named("int32", "io.debezium.time.Time"), in: int64(3723004), typ: "long", want: int64(3723004000)},
		{name: "MicroTime 24:00", schema: named("int64", "io.debezium.time.MicroTime"), in: int64(86400000000), typ: "long", want: int64(86400000000)},
		{name: "MicroTime negative", schema: named("int64", "io.debezium.time.MicroTime"), in: int64(-1), reason: quarantine.InvalidTime},
		{name: "NanoTime", schema: named("int64", "io.debezium.time.NanoTime"), in: int64(3723004005000), typ: "long", want: int64(3723004005)},
		{name: "connect Time", schema: named("int32", "org.apache.kafka.connect.data.Time"), in: int64(1000), typ: "long", want: int64(1000000)},
		{name: "IsoTime", schema: named("string", "io.debezium.time.IsoTime"), in: "04:05:11.789Z", typ: "long", want: int64(14711789000)},
		{name: "ZonedTime UTC kept", schema: named("string", "io.debezium.time.ZonedTime"), in: "14:30:00Z", typ: "string", want: "14:30:00Z"},
		{name: "ZonedTime offset → UTC", schema: named("string", "io.debezium.time.ZonedTime"), in: "16:30:00.5+02:00", typ: "string", want: "14:30:00.5Z"},
		{name: "ZonedTime wraps day", schema: named("string", "io.debezium.time.ZonedTime"), in: "23:30:00-01:00", typ: "string", want: "00:30:00Z"},
		{name: "ZonedTime bad", schema: named("string", "io.debezium.time.ZonedTime"), in: "25:00:00Z", reason: quarantine.InvalidTime},
		{name: "MicroDuration", schema: named("int64", "io.debezium.time.MicroDuration"), in: int64(-31557600000000), typ: "long", want: int64(-31557600000000)},
		{name: "Interval string", schema: named("string", "io.debezium.time.Interval"), in: "P1Y2M3DT4H5M6.78S", typ: "string", want: "P1Y2M3DT4H5M6.78S"},

		// timestamps → UTC micros
		{name: "Timestamp ms 1900", schema: named("int64", "io.debezium.time.Timestamp"), in: int64(-2208988800000), typ: "timestamp", want: micros1900},
		{name: "MicroTimestamp", schema: named("int64", microTimestampN), in: micros20180620, typ: "timestamp", want: micros20180620},
		{name: "MicroTimestamp pre-1970", schema: named("int64", microTimestampN), in: micros1900, typ: "timestamp", want: micros1900},
		{name: "MicroTimestamp 9999-12-31", schema: named("int64", microTimestampN), in: micros99991231, typ: "timestamp", want: micros99991231},
		{name: "MicroTimestamp +infinity clamps", schema: named("int64", microTimestampN), in: int64(9223372036825200000), typ: "timestamp", want: micros99991231},
		{name: "MicroTimestamp -infinity clamps", schema: named("int64", microTimestampN), in: int64(-9223372036832400000), typ: "timestamp", want: micros00010101},
		{name: "MicroTimestamp +infinity rejected", schema: named("int64", microTimestampN), in: int64(9223372036825200000), reason: quarantine.InvalidTime, opts: &Options{RejectInfinity: true}},
		{name: "MicroTimestamp year 10000", schema: named("int64", microTimestampN), in: micros99991231 + 1, reason: quarantine.InvalidTime},
		{name: "MicroTimestamp NTZ", schema: named("int64", microTimestampN), in: micros1900, typ: "timestamp_ntz", want: micros1900, opts: &Options{TimestampNTZ: true}},
		{name: "NanoTimestamp", schema: named("int64", "io.debezium.time.NanoTimestamp"), in: micros20180620*1000 + 999, typ: "timestamp", want: micros20180620},
		{name: "NanoTimestamp pre-1970 floors", schema: named("int64", "io.debezium.time.NanoTimestamp"), in: int64(-1), typ: "timestamp", want: int64(-1)},
		{name: "NanoTimestamp +infinity", schema: named("int64", "io.debezium.time.NanoTimestamp"), in: int64(math.MaxInt64), typ: "timestamp", want: micros99991231},
		{name: "connect Timestamp", schema: named("int64", "org.apache.kafka.connect.data.Timestamp"), in: int64(1529500396945), typ: "timestamp", want: int64(1529500396945000)},
		{name: "ZonedTimestamp", schema: named("string", "io.debezium.time.ZonedTimestamp"), in: "2018-06-20T13:13:16.945104Z", typ: "timestamp", want: micros20180620},
		{name: "ZonedTimestamp offset", schema: named("string", "io.debezium.time.ZonedTimestamp"), in: "2018-06-20T15:13:16.945104+02:00", typ: "timestamp", want: micros20180620},
		{name: "ZonedTimestamp negative offset", schema: named("string", "io.debezium.time.ZonedTimestamp"), in: "2018-06-20T08:13:16.945104-05:00", typ: "timestamp", want: micros20180620},
		{name: "ZonedTimestamp 1900", schema: named("string", "io.debezium.time.ZonedTimestamp"), in: "1900-01-01T00:00:00Z", typ: "timestamp", want: micros1900},
		{name: "ZonedTimestamp 9999", schema: named("string", "io.debezium.time.ZonedTimestamp"), in: "9999-12-31T23:59:59.999999Z", typ: "timestamp", want: micros99991231},
		{name: "ZonedTimestamp infinity", schema: named("string", "io.debezium.time.ZonedTimestamp"), in: "infinity", typ: "timestamp", want: micros99991231},
		{name: "ZonedTimestamp -infinity", schema: named("string", "io.debezium.time.ZonedTimestamp"), in: "-infinity", typ: "timestamp", want: micros00010101},
		{name: "ZonedTimestamp -infinity rejected", schema: named("string", "io.debezium.time.ZonedTimestamp"), in: "-infinity", reason: quarantine.InvalidTime, opts: &Options{RejectInfinity: true}},
		{name: "ZonedTimestamp stays UTC with NTZ option", schema: named("string", "io.debezium.time.ZonedTimestamp"), in: "1900-01-01T00:00:00Z", typ: "timestamp", want: micros1900, opts: &Options{TimestampNTZ: true}},
		{name: "ZonedTimestamp year 10000", schema: named("string", "io.debezium.time.ZonedTimestamp"), in: "+10000-01-01T00:00:00Z", reason: quarantine.InvalidTime},
		{name: "ZonedTimestamp garbage", schema: named("string", "io.debezium.time.ZonedTimestamp"), in: "yesterday", reason: quarantine.InvalidTime},
		{name: "Avro date as time.Time", schema: named("int32", "org.apache.kafka.connect.data.Date"), in: time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC), typ: "date", want: days1900},
		{name: "Avro timestamp-millis as time.Time", schema: named("int64", "org.apache.kafka.connect.data.Timestamp"), in: time.UnixMicro(micros1900).UTC(), typ: "timestamp", want: micros1900},
		{name: "Avro time-millis as time.Duration", schema: named("int32", "org.apache.kafka.connect.data.Time"), in: 90 * time.Second, typ: "long", want: int64(90000000)},
		{name: "Avro decimal as *big.Rat", schema: decimalSchema("10", "2"), in: big.NewRat(-1234, 100), typ: "decimal(10,2)", want: dec("-12.34", 2)},
		{name: "IsoTimestamp", schema: named("string", "io.debezium.time.IsoTimestamp"), in: "2019-07-09T02:28:57.123456Z", typ: "timestamp", want: int64(1562639337123456)},

		// decimals
		{name: "Decimal 12.34", schema: decimalSchema("10", "2"), in: twos("1234"), typ: "decimal(10,2)", want: dec("12.34", 2)},
		{name: "Decimal BNI=", schema: decimalSchema("10", "2"), in: []byte{0x04, 0xD2}, typ: "decimal(10,2)", want: dec("12.34", 2)},
		{name: "Decimal negative", schema: decimalSchema("10", "2"), in: twos("-1234"), typ: "decimal(10,2)", want: dec("-12.34", 2)},
		{name: "Decimal -0.01", schema: decimalSchema("10", "2"), in: []byte{0xff}, typ: "decimal(10,2)", want: dec("-0.01", 2)},
		{name: "Decimal zero keeps scale", schema: decimalSchema("5", "3"), in: []byte{0}, typ: "decimal(5,3)", want: dec("0.000", 3)},
		{name: "Decimal 38 digits", schema: decimalSchema("38", "0"), in: twos("99999999999999999999999999999999999999"), typ: "decimal(38,0)", want: dec("99999999999999999999999999999999999999", 0)},
		{name: "Decimal 38 digits negative", schema: decimalSchema("38", "10"), in: twos("-12345678901234567890123456789012345678"), typ: "decimal(38,10)", want: dec("-1234567890123456789012345678.9012345678", 10)},
		{name: "Decimal value exceeds precision", schema: decimalSchema("4", "2"), in: twos("10000"), reason: quarantine.InvalidDecimal},
		{name: "Decimal precision 39", schema: decimalSchema("39", "2"), in: twos("1"), reason: quarantine.InvalidDecimal},
		{name: "Decimal without precision → 38", schema: noPrec, in: twos("-5"), typ: "decimal(38,3)", want: dec("-0.005", 3)},
		{name: "Decimal empty bytes", schema: decimalSchema("10", "2"), in: []byte{}, reason: quarantine.InvalidDecimal},
		{name: "Decimal NUMERIC format", schema: decimalSchema("10", "2"), in: envelope.Number("-12.3"), typ: "decimal(10,2)", want: dec("-12.30", 2)},
		{name: "Decimal NUMERIC too many digits", schema: decimalSchema("10", "2"), in: envelope.Number("1.234"), reason: quarantine.InvalidDecimal},
		{name: "Decimal null", schema: decimalSchema("10", "2"), in: nil, typ: "decimal(10,2)", want: nil},
		{name: "VariableScaleDecimal", schema: varScale, in: rowOf(varScale, int64(3), []byte("04")), typ: "decimal(38,18)", want: dec("12.34", 18)},
		{name: "VariableScaleDecimal negative", schema: varScale, in: rowOf(varScale, int64(1), twos("-5")), typ: "decimal(38,18)", want: dec("-0.5", 18)},
		{name: "VariableScaleDecimal scale 20 inexact", schema: varScale, in: rowOf(varScale, int64(20), twos("1")), reason: quarantine.InvalidDecimal},
		{name: "VariableScaleDecimal scale 20 exact", schema: varScale, in: rowOf(varScale, int64(20), twos("100")), typ: "decimal(38,18)", want: dec("0.000000000000000001", 18)},
		{name: "VariableScaleDecimal too big", schema: varScale, in: rowOf(varScale, int64(0), twos("100000000000000000000")), reason: quarantine.InvalidDecimal},
		{name: "VariableScaleDecimal as string", schema: varScale, in: rowOf(varScale, int64(30), twos("-1")), typ: "string", want: "-0.000000000000000000000000000001", opts: &Options{VariableScaleAsString: true}},
		{name: "decimal.handling.mode=string", schema: opt("string"), in: "NAN", typ: "string", want: "NAN"},
		{name: "decimal.handling.mode=double", schema: opt("float64"), in: 12.34, typ: "double", want: 12.34},

		// string-like semantic types
		{name: "Json", schema: named("string", "io.debezium.data.Json"), in: `{"a":[1,2]}`, typ: "string", want: `{"a":[1,2]}`},
		{name: "Xml", schema: named("string", "io.debezium.data.Xml"), in: `<a/>`, typ: "string", want: `<a/>`},
		{name: "Uuid", schema: named("string", "io.debezium.data.Uuid"), in: "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", typ: "string", want: "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"},
		{name: "Enum", schema: withParams(named("string", "io.debezium.data.Enum"), "allowed", "a,b"), in: "b", typ: "string", want: "b"},
		{name: "EnumSet", schema: named("string", "io.debezium.data.EnumSet"), in: "a,b", typ: "string", want: "a,b"},
		{name: "Bits", schema: withParams(named("bytes", "io.debezium.data.Bits"), "length", "9"), in: []byte{0x01, 0x01}, typ: "binary", want: []byte{0x01, 0x01}},

		// containers
		{name: "int4[]", schema: arrayOf(opt("int32")), in: []any{int64(1), nil, int64(-3)}, typ: "array<integer>", want: []any{int32(1), nil, int32(-3)}},
		{name: "text[] empty", schema: arrayOf(opt("string")), in: []any{}, typ: "array<string>", want: []any{}},
		{name: "timestamptz[]", schema: arrayOf(named("string", "io.debezium.time.ZonedTimestamp")), in: []any{"1900-01-01T00:00:00Z"}, typ: "array<timestamp>", want: []any{micros1900}},
		{name: "numeric(5,2)[]", schema: arrayOf(decimalSchema("5", "2")), in: []any{twos("-1")}, typ: "array<decimal(5,2)>", want: []any{dec("-0.01", 2)}},
		{name: "array element mismatch", schema: arrayOf(opt("int32")), in: []any{"x"}, reason: quarantine.TypeMismatch},
		{name: "hstore map", schema: mapOf(sch("string"), opt("string")), in: map[string]any{"b": "2", "a": nil}, typ: "map<string,string>", want: []MapEntry{{Key: "a", Value: nil}, {Key: "b", Value: "2"}}},
		{name: "map int keys as pairs", schema: mapOf(sch("int32"), opt("string")), in: []any{[]any{int64(2), "x"}}, typ: "map<integer,string>", want: []MapEntry{{Key: int32(2), Value: "x"}}},
		{name: "Point", schema: point, in: rowOf(point, 1.5, -2.0, nil, nil), typ: "struct<x:double,y:double,wkb:binary,srid:integer>", want: []any{1.5, -2.0, nil, nil}},
		{name: "Geometry", schema: geom, in: rowOf(geom, []byte{1, 1, 0, 0, 0}, int64(4326)), typ: "struct<wkb:binary,srid:integer>", want: []any{[]byte{1, 1, 0, 0, 0}, int32(4326)}},
		{name: "struct field mismatch", schema: geom, in: rowOf(geom, "nope", int64(1)), reason: quarantine.TypeMismatch},
		{name: "DoubleVector", schema: &envelope.Schema{Type: "array", Name: "io.debezium.data.DoubleVector", Optional: true, Items: sch("float64")}, in: []any{1.0, 2.5}, typ: "array<double>", want: []any{1.0, 2.5}},
	}
}

func TestTypes(t *testing.T) {
	for _, tc := range typeCases() {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{}
			if tc.opts != nil {
				o = *tc.opts
			}
			n := newN(t, o)
			vs := structOf("dbz.public.t.Value", "id", sch("int32"), "c", tc.schema)
			ev := &envelope.Event{Kind: envelope.KindChange, Op: 'c', Key: rowOf(keySchema, int64(1)),
				After: rowOf(vs, int64(1), tc.in), Source: itemsSource("false", `["1","2"]`, 2)}
			c, err := n.Normalize(ev, rec(0))
			if tc.reason != "" {
				wantReason(t, err, tc.reason, `"c"`)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			col := c.Schema.Columns[1]
			if got := col.Type.String(); got != tc.typ {
				t.Errorf("type %s, want %s", got, tc.typ)
			}
			if !sameValue(c.Row[1], tc.want) {
				t.Errorf("value %#v (%T), want %#v (%T)", c.Row[1], c.Row[1], tc.want, tc.want)
			}
			if !col.Nullable != !tc.schema.Optional {
				t.Errorf("nullable %v", col.Nullable)
			}
		})
	}
}

func TestDecimalNeverFloat(t *testing.T) {
	// 0.1 + 0.2 style values survive exactly at scale 17.
	n := newN(t, Options{})
	vs := structOf("v", "id", sch("int32"), "c", decimalSchema("38", "17"))
	ev := &envelope.Event{Kind: envelope.KindChange, Op: 'c', Key: rowOf(keySchema, int64(1)),
		After: rowOf(vs, int64(1), twos("30000000000000001")), Source: itemsSource("", "", 9)}
	c, err := n.Normalize(ev, rec(0))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Row[1].(decimal.Decimal).String(); got != "0.30000000000000001" {
		t.Fatal(got)
	}
}
