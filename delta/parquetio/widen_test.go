package parquetio

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/cdcsink/cdc-sink/delta/schema"
)

// writeNarrow writes one column "c" of Delta type narrow with the rows given
// as JSON values (arrow's JSON form) and returns the file bytes.
func writeNarrow(t *testing.T, narrow schema.DataType, rowsJSON string) []byte {
	t.Helper()
	sch := schema.NewStruct(schema.NewField("c", narrow, true))
	rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, schema.ToArrow(sch), strings.NewReader(rowsJSON))
	if err != nil {
		t.Fatalf("build %s record: %v", narrow.TypeName(), err)
	}
	defer rec.Release()
	var buf bytes.Buffer
	if _, err := WriteFile(context.Background(), &buf, sch, []arrow.RecordBatch{rec}, WriteOptions{}); err != nil {
		t.Fatalf("write %s: %v", narrow.TypeName(), err)
	}
	return buf.Bytes()
}

// readAs reads column "c" of file as Delta type wide and returns canonical values.
func readAs(t *testing.T, file []byte, wide schema.DataType) ([]any, error) {
	t.Helper()
	sch := schema.NewStruct(schema.NewField("c", wide, true))
	recs, err := ReadAll(context.Background(), bytes.NewReader(file), int64(len(file)), sch, ReadOptions{Name: "narrow.parquet"})
	if err != nil {
		return nil, err
	}
	var out []any
	for _, r := range canonRows(t, recs) {
		out = append(out, r["c"])
	}
	for _, r := range recs {
		if !arrow.TypeEqual(r.Schema().Field(0).Type, schema.ArrowType(wide)) {
			t.Fatalf("read type %s, want %s", r.Schema().Field(0).Type, schema.ArrowType(wide))
		}
		r.Release()
	}
	return out, nil
}

func dec(p, s int) schema.DataType { return &schema.DecimalType{Precision: p, Scale: s} }

// Every Delta type-widening pair: a file written with the narrow type reads
// back as the wide type, exactly.
func TestReadWidenedTypes(t *testing.T) {
	const (
		bytes8  = `[{"c":-128},{"c":0},{"c":127},{"c":null}]`
		shorts  = `[{"c":-32768},{"c":1},{"c":32767},{"c":null}]`
		ints    = `[{"c":-2147483648},{"c":2},{"c":2147483647},{"c":null}]`
		longs   = `[{"c":-9223372036854775808},{"c":3},{"c":9223372036854775807},{"c":null}]`
		floats  = `[{"c":3.4},{"c":-1.5},{"c":3.4028235e38},{"c":null}]`
		decs    = `[{"c":"-999.99"},{"c":"123.45"},{"c":"0.01"},{"c":null}]`
		dates   = `[{"c":-719162},{"c":0},{"c":19975},{"c":null}]`
		int8s   = `["-128","0","127",null]`
		int16s  = `["-32768","1","32767",null]`
		int32s  = `["-2147483648","2","2147483647",null]`
		int64s  = `["-9223372036854775808","3","9223372036854775807",null]`
		int8f   = `["-128","0","127",null]`
		int16f  = `["-32768","1","32767",null]`
		int32f  = `["-2147483648","2","2147483647",null]`
		floatsW = `["3.4000000953674316","-1.5","3.4028234663852886e+38",null]`
		datesW  = `["-62135596800000000","0","1725840000000000",null]`
	)
	cases := []struct {
		from, to schema.DataType
		rows     string
		want     string // canonical values (JSON array of json.Number / strings)
	}{
		{schema.Byte, schema.Short, bytes8, int8s},
		{schema.Byte, schema.Integer, bytes8, int8s},
		{schema.Byte, schema.Long, bytes8, int8s},
		{schema.Short, schema.Integer, shorts, int16s},
		{schema.Short, schema.Long, shorts, int16s},
		{schema.Integer, schema.Long, ints, int32s},
		{schema.Float, schema.Double, floats, floatsW},
		{schema.Byte, schema.Double, bytes8, toFloats(int8f)},
		{schema.Short, schema.Double, shorts, toFloats(int16f)},
		{schema.Integer, schema.Double, ints, toFloats(int32f)},
		{dec(5, 2), dec(10, 2), decs, `["-999.99","123.45","0.01",null]`},
		{dec(5, 2), dec(7, 4), decs, `["-999.9900","123.4500","0.0100",null]`},
		{dec(5, 2), dec(38, 35), decs, `["-999.99000000000000000000000000000000000","123.45000000000000000000000000000000000","0.01000000000000000000000000000000000",null]`},
		{schema.Byte, dec(10, 0), bytes8, int8s},
		{schema.Byte, dec(12, 2), bytes8, `["-128.00","0.00","127.00",null]`},
		{schema.Short, dec(11, 1), shorts, `["-32768.0","1.0","32767.0",null]`},
		{schema.Integer, dec(10, 0), ints, int32s},
		{schema.Integer, dec(38, 28), ints, `["-2147483648.0000000000000000000000000000","2.0000000000000000000000000000","2147483647.0000000000000000000000000000",null]`},
		{schema.Long, dec(20, 0), longs, int64s},
		{schema.Long, dec(22, 2), longs, `["-9223372036854775808.00","3.00","9223372036854775807.00",null]`},
		{schema.Date, schema.TimestampNTZ, dates, datesW},
	}
	for _, c := range cases {
		t.Run(c.from.TypeName()+"->"+c.to.TypeName(), func(t *testing.T) {
			if !schema.CanWiden(c.from, c.to) {
				t.Fatalf("schema.CanWiden(%s, %s) = false", c.from.TypeName(), c.to.TypeName())
			}
			got, err := readAs(t, writeNarrow(t, c.from, c.rows), c.to)
			if err != nil {
				t.Fatal(err)
			}
			var want []any
			d := json.NewDecoder(strings.NewReader(c.want))
			d.UseNumber()
			if err := d.Decode(&want); err != nil {
				t.Fatal(err)
			}
			// canonical ints are json.Number, decimals strings: compare text.
			if g, w := jsonString(got), jsonString(normWant(want, c.to)); g != w {
				t.Fatalf("got  %s\nwant %s", g, w)
			}
		})
	}
}

// toFloats turns canonical integers into canonical doubles.
func toFloats(ints string) string {
	var v []any
	_ = json.Unmarshal([]byte(ints), &v)
	for i, x := range v {
		if s, ok := x.(string); ok {
			var f float64
			_ = json.Unmarshal([]byte(s), &f)
			v[i] = canonFloat(f)
		}
	}
	return jsonString(v)
}

// normWant converts the expected strings of integer columns into numbers
// (canonValue returns Go integers for them).
func normWant(want []any, to schema.DataType) []any {
	switch to {
	case schema.Short, schema.Integer, schema.Long, schema.TimestampNTZ:
		out := make([]any, len(want))
		for i, w := range want {
			if s, ok := w.(string); ok {
				out[i] = json.Number(s)
			} else {
				out[i] = w
			}
		}
		return out
	}
	return want
}

// Widening inside structs, arrays and maps.
func TestReadWidenedNested(t *testing.T) {
	narrow := schema.NewStruct(
		schema.NewField("a", schema.Byte, true),
		schema.NewField("d", schema.Date, true),
		schema.NewField("l", &schema.ArrayType{ElementType: schema.Float, ContainsNull: true}, true),
		schema.NewField("m", &schema.MapType{KeyType: schema.Integer, ValueType: dec(5, 2), ValueContainsNull: true}, true),
	)
	wide := schema.NewStruct(
		schema.NewField("a", dec(12, 2), true),
		schema.NewField("d", schema.TimestampNTZ, true),
		schema.NewField("l", &schema.ArrayType{ElementType: schema.Double, ContainsNull: true}, true),
		schema.NewField("m", &schema.MapType{KeyType: schema.Long, ValueType: dec(8, 5), ValueContainsNull: true}, true),
	)
	rows := `[{"c":{"a":-7,"d":1,"l":[1.1,null],"m":[{"key":5,"value":"1.25"},{"key":-1,"value":null}]}},{"c":null}]`
	outer := &schema.ArrayType{ElementType: narrow, ContainsNull: true}
	file := writeNarrow(t, outer, `[{"c":[`+strings.TrimSuffix(strings.TrimPrefix(rows, `[{"c":`), `},{"c":null}]`)+`]},{"c":null}]`)
	got, err := readAs(t, file, &schema.ArrayType{ElementType: wide, ContainsNull: true})
	if err != nil {
		t.Fatal(err)
	}
	want := `[[{"a":"-7.00","d":86400000000,"l":["1.1000000238418579",null],"m":[[5,"1.25000"],[-1,null]]}],null]`
	if g := jsonString(got); g != want && !equalJSON(g, want) {
		t.Fatalf("got  %s\nwant %s", g, want)
	}
}

func equalJSON(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// Reading a file whose column type is neither the table type nor a type the
// table type widens is an error naming the column and both types, never a
// panic or a silent conversion.
func TestReadTypeMismatch(t *testing.T) {
	prims := []schema.DataType{schema.Byte, schema.Short, schema.Integer, schema.Long, schema.Float, schema.Double,
		schema.Boolean, schema.String, schema.Binary, schema.Date, schema.Timestamp, schema.TimestampNTZ,
		dec(5, 2), dec(10, 2), dec(4, 3), &schema.ArrayType{ElementType: schema.Integer, ContainsNull: true},
		schema.NewStruct(schema.NewField("x", schema.Integer, true))}
	sample := map[string]string{
		"byte": `1`, "short": `1`, "integer": `1`, "long": `1`, "float": `1.5`, "double": `1.5`, "boolean": `true`,
		"string": `"s"`, "binary": `"AQ=="`, "date": `1`, "timestamp": `"1970-01-01T00:00:00Z"`, "timestamp_ntz": `"1970-01-01T00:00:00"`,
		"decimal(5,2)": `"1.25"`, "decimal(10,2)": `"1.25"`, "decimal(4,3)": `"1.250"`, "array": `[1]`, "struct": `{"x":1}`,
	}
	// Not widening, but tolerated on purpose: same Parquet physical values.
	lenient := map[string]bool{"string->binary": true, "binary->string": true, "timestamp->timestamp_ntz": true, "timestamp_ntz->timestamp": true}
	for _, from := range prims {
		file := writeNarrow(t, from, `[{"c":`+sample[from.TypeName()]+`},{"c":null}]`)
		for _, to := range prims {
			name := from.TypeName() + "->" + to.TypeName()
			if schema.Equal(from, to) || schema.CanWiden(from, to) || lenient[name] {
				continue
			}
			_, err := readAs(t, file, to)
			if err == nil {
				t.Errorf("%s: read without error", name)
				continue
			}
			msg := err.Error()
			if !strings.Contains(msg, `"c"`) || !strings.Contains(msg, "cannot read file type") {
				t.Errorf("%s: error does not name the column and both types: %v", name, err)
			}
		}
	}
}
