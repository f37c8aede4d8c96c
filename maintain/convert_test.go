package maintain

import (
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/cdcsink/cdc-sink/delta/schema"
	"github.com/cdcsink/cdc-sink/tablerows"
)

func dec(p, s int) schema.DataType { return &schema.DecimalType{Precision: p, Scale: s} }

var pointType = &schema.StructType{Fields: []*schema.StructField{
	schema.NewField("city", schema.String, true), schema.NewField("zip", schema.Integer, true)}}

// The conversion matrix of docs/types.md ("Changing a column's type by
// hand"): values in and out in the canonical JSON of `table show`. A case
// with err expects the conversion to fail at row badRow with that reason.
func TestConvertMatrix(t *testing.T) {
	tests := []struct {
		name     string
		from, to schema.DataType
		in       string // JSON array (arrow FromJSON)
		want     string // canonical values, comma-separated
		err      string
		badRow   int
	}{
		// anything -> string: canonical text
		{"long->string", schema.Long, schema.String, `[40, null, -7]`, `"40",null,"-7"`, "", 0},
		{"integer->string", schema.Integer, schema.String, `[2147483647]`, `"2147483647"`, "", 0},
		{"double->string", schema.Double, schema.String, `[1.5, "NaN", 1e21]`, `"1.5","NaN","1e+21"`, "", 0},
		{"decimal->string keeps the scale", dec(10, 2), schema.String, `["12.30", "-0.05"]`, `"12.30","-0.05"`, "", 0},
		{"boolean->string", schema.Boolean, schema.String, `[true, false]`, `"true","false"`, "", 0},
		{"binary->string is base64", schema.Binary, schema.String, `["AAH/"]`, `"AAH/"`, "", 0},
		{"date->string", schema.Date, schema.String, `["2024-01-02"]`, `"2024-01-02"`, "", 0},
		{"timestamp->string is ISO-8601 UTC", schema.Timestamp, schema.String, `["2024-01-02T03:04:05.123456Z"]`, `"2024-01-02T03:04:05.123456Z"`, "", 0},
		{"timestamp_ntz->string", schema.TimestampNTZ, schema.String, `["2024-01-02T03:04:05.5"]`, `"2024-01-02T03:04:05.500000"`, "", 0},
		{"struct->string is JSON", pointType, schema.String, `[{"city":"Lisboa","zip":1000}, null]`, `"{\"city\":\"Lisboa\",\"zip\":1000}",null`, "", 0},
		{"array->string is JSON", &schema.ArrayType{ElementType: schema.String, ContainsNull: true}, schema.String, `[["a","b\""]]`, `"[\"a\",\"b\\\"\"]"`, "", 0},
		// integers
		{"integer->long", schema.Integer, schema.Long, `[1, -2147483648]`, `1,-2147483648`, "", 0},
		{"long->integer fits", schema.Long, schema.Integer, `[2147483647, null]`, `2147483647,null`, "", 0},
		{"long->integer overflow", schema.Long, schema.Integer, `[1, 3000000000]`, "", "is out of range for integer", 1},
		{"long->short overflow", schema.Long, schema.Short, `[-32769]`, "", "is out of range for short", 0},
		{"long->byte", schema.Long, schema.Byte, `[-128, 127]`, `-128,127`, "", 0},
		{"long->double exact", schema.Long, schema.Double, `[9007199254740992]`, `9007199254740992`, "", 0},
		{"long->double inexact", schema.Long, schema.Double, `[9007199254740993]`, "", "is not exactly representable as double", 0},
		{"integer->float inexact", schema.Integer, schema.Float, `[16777216, 16777217]`, "", "is not exactly representable as float", 1},
		{"long->decimal", schema.Long, dec(5, 2), `[123, -999]`, `"123.00","-999.00"`, "", 0},
		{"long->decimal too many digits", schema.Long, dec(5, 2), `[1000]`, "", "has more than 3 integer digits", 0},
		// floats
		{"double->long integral", schema.Double, schema.Long, `[3.0, -1e15]`, `3,-1000000000000000`, "", 0},
		{"double->long fraction", schema.Double, schema.Long, `[3.5]`, "", "is not an integer", 0},
		{"double->long NaN", schema.Double, schema.Long, `["NaN"]`, "", "is not an integer", 0},
		{"double->long range", schema.Double, schema.Long, `[1e19]`, "", "is out of range for long", 0},
		{"double->float exact", schema.Double, schema.Float, `[0.5, "Infinity"]`, `0.5,"Infinity"`, "", 0},
		{"double->float inexact", schema.Double, schema.Float, `[0.1]`, "", "is not exactly representable as float", 0},
		{"float->double", schema.Float, schema.Double, `[0.5]`, `0.5`, "", 0},
		{"double->decimal", schema.Double, dec(10, 2), `[1.5, 0.1]`, `"1.50","0.10"`, "", 0},
		{"double->decimal loses digits", schema.Double, dec(10, 2), `[0.125]`, "", "has more than 2 fraction digits", 0},
		{"double->decimal NaN", schema.Double, dec(10, 2), `["NaN"]`, "", "is not a finite number", 0},
		// decimals
		{"decimal scale decrease, zeros only", dec(12, 4), dec(10, 2), `["12.3400", "-1.0000"]`, `"12.34","-1.00"`, "", 0},
		{"decimal scale decrease loses digits", dec(12, 4), dec(10, 2), `["12.3400", "12.3456"]`, "", "has more than 2 fraction digits (would lose digits in decimal(10,2))", 1},
		{"decimal precision decrease overflow", dec(10, 2), dec(4, 2), `["12.34", "123.45"]`, "", "has more than 2 integer digits (does not fit decimal(4,2))", 1},
		{"decimal->long", dec(10, 2), schema.Long, `["12.00"]`, `12`, "", 0},
		{"decimal->long fraction", dec(10, 2), schema.Long, `["12.50"]`, "", "has a fraction", 0},
		{"decimal->double", dec(10, 2), schema.Double, `["0.10", "-12.25"]`, `0.1,-12.25`, "", 0},
		{"decimal->double inexact", dec(38, 18), schema.Double, `["0.123456789012345678"]`, "", "is not exactly representable as double", 0},
		// from string: strict parsing
		{"string->long", schema.String, schema.Long, `["42", "-7", null]`, `42,-7,null`, "", 0},
		{"string->long not a number", schema.String, schema.Long, `["42", "forty"]`, "", "is not an integer", 1},
		{"string->long out of range", schema.String, schema.Long, `["99999999999999999999"]`, "", "is out of range for long", 0},
		{"string->integer out of range", schema.String, schema.Integer, `["3000000000"]`, "", "is out of range for integer", 0},
		{"string->double", schema.String, schema.Double, `["1.5", "NaN", "-Infinity"]`, `1.5,"NaN","-Infinity"`, "", 0},
		{"string->double garbage", schema.String, schema.Double, `["1,5"]`, "", "is not a number", 0},
		{"string->decimal", schema.String, dec(5, 2), `["1.2", "-999.99"]`, `"1.20","-999.99"`, "", 0},
		{"string->decimal loses digits", schema.String, dec(5, 2), `["1.234"]`, "", "has more than 2 fraction digits", 0},
		{"string->boolean", schema.String, schema.Boolean, `["true", "false", "t"]`, `true,false,true`, "", 0},
		{"string->boolean garbage", schema.String, schema.Boolean, `["yes"]`, "", "is not a boolean", 0},
		{"string->binary is UTF-8", schema.String, schema.Binary, `["hé"]`, `"aMOp"`, "", 0},
		{"string->date", schema.String, schema.Date, `["2024-01-02", "0001-01-01"]`, `"2024-01-02","0001-01-01"`, "", 0},
		{"string->date garbage", schema.String, schema.Date, `["02/01/2024"]`, "", "is not a date", 0},
		{"string->timestamp to UTC", schema.String, schema.Timestamp, `["2024-01-02T03:04:05.123456+01:00", "2024-01-02 03:04:05Z"]`,
			`"2024-01-02T02:04:05.123456Z","2024-01-02T03:04:05.000000Z"`, "", 0},
		{"string->timestamp needs a zone", schema.String, schema.Timestamp, `["2024-01-02T03:04:05"]`, "", "is not an ISO-8601 timestamp with zone", 0},
		{"string->timestamp sub-microsecond", schema.String, schema.Timestamp, `["2024-01-02T03:04:05.1234567Z"]`, "", "has sub-microsecond digits", 0},
		{"string->timestamp_ntz", schema.String, schema.TimestampNTZ, `["2024-01-02T03:04:05.5"]`, `"2024-01-02T03:04:05.500000"`, "", 0},
		{"string->timestamp_ntz refuses a zone", schema.String, schema.TimestampNTZ, `["2024-01-02T03:04:05Z"]`, "", "has a time zone", 0},
		// temporal
		{"date->timestamp is midnight UTC", schema.Date, schema.Timestamp, `["2024-01-02"]`, `"2024-01-02T00:00:00.000000Z"`, "", 0},
		{"date->timestamp_ntz", schema.Date, schema.TimestampNTZ, `["2024-01-02"]`, `"2024-01-02T00:00:00.000000"`, "", 0},
		{"timestamp->timestamp_ntz keeps the µs", schema.Timestamp, schema.TimestampNTZ, `["2024-01-02T03:04:05.123456Z"]`, `"2024-01-02T03:04:05.123456"`, "", 0},
		{"timestamp->date at midnight", schema.Timestamp, schema.Date, `["2024-01-02T00:00:00Z", "1969-12-31T00:00:00Z"]`, `"2024-01-02","1969-12-31"`, "", 0},
		{"timestamp->date with a time of day", schema.Timestamp, schema.Date, `["2024-01-02T00:00:00Z", "2024-01-02T00:00:00.000001Z"]`, "", "has a time of day", 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in, _, err := array.FromJSON(memory.DefaultAllocator, schema.ArrowType(tc.from), strings.NewReader(tc.in))
			if err != nil {
				t.Fatalf("input: %v", err)
			}
			defer in.Release()
			out, row, err := ConvertArray(in, tc.from, tc.to)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || row != tc.badRow {
					t.Fatalf("err = %v at row %d, want %q at row %d", err, row, tc.err, tc.badRow)
				}
				return
			}
			if err != nil {
				t.Fatalf("row %d: %v", row, err)
			}
			defer out.Release()
			got := make([]string, out.Len())
			for i := range got {
				got[i] = string(tablerows.AppendJSON(nil, out, i))
			}
			if s := strings.Join(got, ","); s != tc.want {
				t.Fatalf("got  %s\nwant %s", s, tc.want)
			}
		})
	}
}

// Pairs without a conversion are refused up front, naming both types.
func TestConvertUnsupported(t *testing.T) {
	for _, c := range []struct{ from, to schema.DataType }{
		{schema.Boolean, schema.Long},
		{schema.Long, schema.Boolean},
		{schema.Long, schema.Date},
		{schema.Long, schema.Timestamp},
		{schema.Binary, schema.Long},
		{schema.Date, schema.Long},
		{pointType, schema.Long},
		{schema.String, pointType},
	} {
		if CanConvert(c.from, c.to) {
			t.Errorf("%s -> %s: CanConvert = true", typeLabel(c.from), typeLabel(c.to))
		}
		_, err := converter(c.from, c.to)
		if err == nil || !strings.Contains(err.Error(), "no conversion from "+typeLabel(c.from)+" to "+typeLabel(c.to)) {
			t.Errorf("%s -> %s: err = %v", typeLabel(c.from), typeLabel(c.to), err)
		}
	}
}

func TestParseType(t *testing.T) {
	for _, c := range []struct{ in, want, err string }{
		{"string", "string", ""},
		{"LONG", "long", ""},
		{" decimal(12, 2) ", "decimal(12,2)", ""},
		{"timestamp_ntz", "timestamp_ntz", ""},
		{"bigint", "", `unknown type "bigint"`},
		{"decimal", "", "give the precision and scale"},
		{"decimal(40,2)", "", "invalid decimal type"},
		{"decimal(4,5)", "", "invalid decimal type"},
		{"array<string>", "", "unknown type"},
		{"", "", "unknown type"},
	} {
		got, err := ParseType(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseType(%q) err = %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || got.TypeName() != c.want {
			t.Errorf("ParseType(%q) = %v, %v; want %s", c.in, got, err, c.want)
		}
	}
}
