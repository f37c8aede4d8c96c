package audit

import (
	"math/big"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/cdcsink/cdc-sink/delta/schema"
)

// pgCanon maps what pgx returns to the text tablerows prints for the same
// value in a Delta column of that type.
func TestPgCanon(t *testing.T) {
	dec := &schema.DecimalType{Precision: 12, Scale: 2}
	ts := time.Date(2024, 1, 2, 3, 4, 5, 123456000, time.UTC)
	tests := []struct {
		name string
		v    any
		dt   schema.DataType
		want string
	}{
		{"null", nil, schema.Long, "null"},
		{"decimal text padded to scale", "12.3", dec, `"12.30"`},
		{"decimal numeric", pgtype.Numeric{Int: big.NewInt(-5), Exp: -2, Valid: true}, dec, `"-0.05"`},
		{"decimal beyond scale differs by construction", "1.234", dec, `"1.234"`},
		{"decimal NaN", "NaN", dec, `"NaN"`},
		{"int32", int32(7), schema.Integer, "7"},
		{"int16 into long", int16(-3), schema.Long, "-3"},
		{"time as MicroTime", pgtype.Time{Microseconds: 3600e6, Valid: true}, schema.Long, "3600000000"},
		{"interval as MicroDuration", pgtype.Interval{Days: 1, Microseconds: 1, Valid: true}, schema.Long, "86400000001"},
		{"bool", true, schema.Boolean, "true"},
		{"float32", float32(0.25), schema.Float, "0.25"},
		{"double", 1.5, schema.Double, "1.5"},
		{"bytea", []byte{0, 1, 2, 255}, schema.Binary, `"AAEC/w=="`},
		{"date", time.Date(2024, 1, 2, 0, 0, 0, 0, time.UTC), schema.Date, `"2024-01-02"`},
		{"timestamptz", ts, schema.Timestamp, `"2024-01-02T03:04:05.123456Z"`},
		{"timestamp without zone", ts, schema.TimestampNTZ, `"2024-01-02T03:04:05.123456"`},
		{"uuid", [16]byte{0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 1, 2, 3, 4, 5, 6, 7, 8}, schema.String, `"12345678-9abc-def0-0102-030405060708"`},
		{"text with quote", `a"b`, schema.String, `"a\"b"`},
		{"array", []any{"a", nil}, &schema.ArrayType{ElementType: schema.String}, `["a",null]`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := pgCanon(tc.v, tc.dt)
			if err != nil || got != tc.want {
				t.Fatalf("pgCanon(%#v, %s) = %s, %v; want %s", tc.v, tc.dt.TypeName(), got, err, tc.want)
			}
		})
	}
	if _, err := pgCanon(int32(1), dec); err == nil {
		t.Fatal("an int32 for a decimal column: want an error")
	}
}

// JSON documents compare equal whatever their key order and spacing.
func TestNormJSONCell(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`"{\"b\": 1, \"a\": [1, 2]}"`, `"{\"a\":[1,2],\"b\":1}"`},
		{"null", "null"},
		{`"not json"`, `"not json"`},
	} {
		if got := normJSONCell(tc.in); got != tc.want {
			t.Errorf("normJSONCell(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestQuoteRelation(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"public.items", `"public"."items"`, true},
		{"items", `"items"`, true},
		{`we"ird.t`, `"we""ird"."t"`, true},
		{"a.b.c", "", false},
		{".t", "", false},
	} {
		got, err := quoteRelation(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("quoteRelation(%q) = %q, %v", tc.in, got, err)
		}
	}
}
