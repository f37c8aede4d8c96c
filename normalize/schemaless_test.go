package normalize

import (
	"strconv"
	"testing"

	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/quarantine"
)

func plainEvent(op byte, key, after *envelope.Row) *envelope.Event {
	return &envelope.Event{Kind: envelope.KindChange, Format: envelope.FormatJSONPlain, Op: op, Key: key, After: after,
		Source: itemsSource("false", `["1","2"]`, 2)}
}

func TestSchemalessInference(t *testing.T) {
	n := newN(t, Options{})
	c, err := n.Normalize(plainEvent('c', plain("id", envelope.Number("1")), plain(
		"id", envelope.Number("1"),
		"qty", envelope.Number("5"),
		"price", envelope.Number("1.5"),
		"exp", envelope.Number("1e3"),
		"huge", envelope.Number("99999999999999999999"),
		"name", "x",
		"ok", true,
		"later", nil,
		"tags", []any{envelope.Number("1"), envelope.Number("2")},
		"empty", []any{},
		"obj", plain("k", envelope.Number("1"), "s", "v"),
	)), rec(0))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"id:long", "qty:long", "price:double", "exp:double", "huge:double", "name:string", "ok:boolean", "later:string", "tags:array<long>", "empty:array<string>", "obj:string"}
	if got := colsOf(c.Schema); len(got) != len(want) {
		t.Fatalf("%v", got)
	} else {
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("column %d: %s want %s", i, got[i], want[i])
			}
		}
	}
	if !c.Schema.Columns[7].NullOnly || c.Schema.Columns[6].NullOnly {
		t.Error("NullOnly")
	}
	if c.Key[0] != int64(1) || c.Row[1] != int64(5) || c.Row[2] != 1.5 || c.Row[3] != 1000.0 || c.Row[9] == nil ||
		c.Row[10] != `{"k":1,"s":"v"}` || !sameValue(c.Row[8], []any{int64(1), int64(2)}) {
		t.Fatalf("%#v", c.Row)
	}
	s1 := c.Schema

	// same shape again: same *Schema
	c, err = n.Normalize(plainEvent('u', plain("id", envelope.Number("2")), plain("id", envelope.Number("2"), "qty", envelope.Number("6"))), rec(1))
	if err != nil || c.Schema != s1 || c.Row[1] != int64(6) || c.Row[2] != nil {
		t.Fatalf("%v %v %#v", err, c.Schema == s1, c.Row)
	}

	// widening: qty Long + Double → Double (new schema); later gets its type
	c, err = n.Normalize(plainEvent('u', plain("id", envelope.Number("3")), plain("id", envelope.Number("3"), "qty", envelope.Number("2.5"), "later", envelope.Number("7"))), rec(2))
	if err != nil {
		t.Fatal(err)
	}
	if c.Schema == s1 || c.Schema.Columns[1].Type.Kind != Double || c.Row[1] != 2.5 || c.Schema.Columns[7].Type.Kind != Long || c.Schema.Columns[7].NullOnly || c.Row[7] != int64(7) {
		t.Fatalf("%v %#v", colsOf(c.Schema), c.Row)
	}
	// an integral value in a widened column is a float64
	c, err = n.Normalize(plainEvent('u', plain("id", envelope.Number("4")), plain("id", envelope.Number("4"), "qty", envelope.Number("3"))), rec(3))
	if err != nil || c.Row[1] != 3.0 {
		t.Fatalf("%v %#v", err, c.Row)
	}

	// conflicting kinds → type_mismatch naming the column; the state is untouched
	before := c.Schema
	_, err = n.Normalize(plainEvent('u', plain("id", envelope.Number("5")), plain("id", envelope.Number("5"), "newcol", "x", "name", envelope.Number("3"))), rec(4))
	wantReason(t, err, quarantine.TypeMismatch, `"name"`, "string")
	c, err = n.Normalize(plainEvent('u', plain("id", envelope.Number("6")), plain("id", envelope.Number("6"))), rec(5))
	if err != nil || c.Schema != before || c.Schema.Index("newcol") >= 0 {
		t.Fatal("failed record changed the inferred schema")
	}
	_, err = n.Normalize(plainEvent('u', plain("id", envelope.Number("7")), plain("id", envelope.Number("7"), "tags", []any{"a"})), rec(6))
	wantReason(t, err, quarantine.TypeMismatch, `"tags"`)
	_, err = n.Normalize(plainEvent('u', plain("id", envelope.Number("7")), plain("id", envelope.Number("7"), "ok", "yes")), rec(6))
	wantReason(t, err, quarantine.TypeMismatch, `"ok"`)

	// another table is independent
	other := plainEvent('c', plain("id", envelope.Number("1")), plain("id", envelope.Number("1"), "name", envelope.Number("1")))
	other.Source.Table = "other"
	if c, err = n.Normalize(other, rec(7)); err != nil || c.Schema.Columns[1].Type.Kind != Long {
		t.Fatalf("%v %v", err, colsOf(c.Schema))
	}
}

// JSON with schema and schemaless JSON give the same Change where the
// schemaless form is lossless (int64, float64, string, boolean, arrays of
// those, nulls).
func TestSchemaAndSchemalessAgree(t *testing.T) {
	vs := structOf("dbz.public.items.Value", "id", sch("int64"), "n", opt("int64"), "f", opt("float64"), "s", opt("string"),
		"b", opt("boolean"), "arr", arrayOf(opt("int64")), "z", opt("string"))
	ks := structOf("dbz.public.items.Key", "id", sch("int64"))
	withSchema := &envelope.Event{Kind: envelope.KindChange, Format: envelope.FormatJSONSchema, Op: 'u',
		Key: rowOf(ks, int64(42)), After: rowOf(vs, int64(42), int64(-9007199254740993), 0.1, "s", false, []any{int64(1), nil}, ph),
		Source: itemsSource("false", `["10","20"]`, 20)}
	schemaless := &envelope.Event{Kind: envelope.KindChange, Format: envelope.FormatJSONPlain, Op: 'u',
		Key: plain("id", envelope.Number("42")), After: plain("id", envelope.Number("42"), "n", envelope.Number("-9007199254740993"), "f", envelope.Number("0.1"),
			"s", "s", "b", false, "arr", []any{envelope.Number("1"), nil}, "z", ph),
		Source: itemsSource("false", `["10","20"]`, 20)}
	a, err := newN(t, Options{}).Normalize(withSchema, rec(3))
	if err != nil {
		t.Fatal(err)
	}
	b, err := newN(t, Options{}).Normalize(schemaless, rec(3))
	if err != nil {
		t.Fatal(err)
	}
	if !sameValue(a.Key, b.Key) || !sameValue(a.Row, b.Row) || a.Op != b.Op || a.Position != b.Position || a.Table != b.Table ||
		a.SourceTsMicros != b.SourceTsMicros || a.KeyNames[0] != b.KeyNames[0] {
		t.Fatalf("\nschema     %#v %#v\nschemaless %#v %#v", a.Key, a.Row, b.Key, b.Row)
	}
	for i := range a.Schema.Columns {
		ca, cb := a.Schema.Columns[i], b.Schema.Columns[i]
		if ca.Name != cb.Name || (ca.Type.String() != cb.Type.String() && !cb.NullOnly) {
			t.Errorf("column %d: %+v vs %+v", i, ca, cb)
		}
	}
}

func TestSchemalessConfiguredTypes(t *testing.T) {
	types := map[string]map[string]*envelope.Schema{"public.items": {
		"amount":  decimalSchema("10", "2"),
		"created": named("int64", microTimestampN),
		"blob":    opt("bytes"),
		"avg":     structOf(varScaleName, "scale", sch("int32"), "value", sch("bytes")),
	}}
	n := newN(t, Options{SchemalessTypes: types})
	c, err := n.Normalize(plainEvent('c', plain("id", envelope.Number("1")), plain("id", envelope.Number("1"),
		"amount", envelope.Number("-12.3"), "created", envelope.Number("-2208988800000000"), "blob", "AAH/",
		"avg", plain("scale", envelope.Number("3"), "value", "MDQ="))), rec(0))
	if err != nil {
		t.Fatal(err)
	}
	if got := colsOf(c.Schema); got[1] != "amount:decimal(10,2)" || got[2] != "created:timestamp" || got[3] != "blob:binary" || got[4] != "avg:decimal(38,18)" {
		t.Fatal(got)
	}
	if !sameValue(c.Row[1], dec("-12.30", 2)) || c.Row[2] != micros1900 || !sameValue(c.Row[3], []byte{0, 1, 255}) || !sameValue(c.Row[4], dec("12.34", 18)) {
		t.Fatalf("%#v", c.Row)
	}
	// base64-looking decimal string without a schema: not guessed
	_, err = n.Normalize(plainEvent('c', plain("id", envelope.Number("1")), plain("id", envelope.Number("1"), "amount", "BNI=")), rec(1))
	wantReason(t, err, quarantine.InvalidDecimal, `"amount"`, "base64", "decimal.handling.mode=string")
	// decimal.handling.mode=string: the string is a literal
	n2 := newN(t, Options{SchemalessTypes: types, DecimalHandling: DecimalString})
	c, err = n2.Normalize(plainEvent('c', plain("id", envelope.Number("1")), plain("id", envelope.Number("1"), "amount", "12.34")), rec(1))
	if err != nil || !sameValue(c.Row[1], dec("12.34", 2)) {
		t.Fatalf("%v %#v", err, c.Row)
	}
	_, err = n2.Normalize(plainEvent('c', plain("id", envelope.Number("1")), plain("id", envelope.Number("1"), "amount", "NAN")), rec(1))
	wantReason(t, err, quarantine.InvalidDecimal, "NAN")
	// a schemaless key is typed like its configured column
	kt := map[string]map[string]*envelope.Schema{"items": {"id": decimalSchema("5", "0")}}
	n3 := newN(t, Options{SchemalessTypes: kt})
	c, err = n3.Normalize(plainEvent('c', plain("id", envelope.Number("7")), plain("id", envelope.Number("7"))), rec(1))
	if err != nil || !sameValue(c.Key[0], dec("7", 0)) || !sameValue(c.Row[0], dec("7", 0)) {
		t.Fatalf("%v %#v %#v", err, c.Key, c.Row)
	}
	// a key with a base64 decimal and no schema
	_, err = n3.Normalize(plainEvent('c', plain("id", "Bw=="), plain("id", envelope.Number("7"))), rec(1))
	wantReason(t, err, quarantine.InvalidDecimal, `"id"`)
}

func TestSchemalessKeyWithSchemaValue(t *testing.T) {
	// key.converter.schemas.enable=false, value with schema: key typed by the value schema
	n := newN(t, Options{})
	ev := changeEvent('c', nil, item(1, "x", nil, 0), itemsSource("", `["1","2"]`, 2))
	ev.Key = plain("id", envelope.Number("1"))
	c, err := n.Normalize(ev, rec(0))
	if err != nil || c.Key[0] != int32(1) {
		t.Fatalf("%v %#v", err, c.Key)
	}
}

// TestSchemalessIntegersAndArraysShared: a schemaless integer below 2^15
// comes boxed from a table and a scalar array element type is shared, so
// neither allocates, and both read back exactly as before.
func TestSchemalessIntegersAndArraysShared(t *testing.T) {
	for _, n := range []string{"0", "1", "255", "256", "20785", "32767", "32768", "-1", "-32768", "9223372036854775807", "-9223372036854775808"} {
		want, _ := strconv.ParseInt(n, 10, 64)
		got, ce := convertItype(itype{kind: Long}, envelope.Number(n))
		if ce != nil || got != any(want) {
			t.Errorf("convertItype(Long, %s) = %#v, %v; want int64 %d", n, got, ce, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { convertItype(itype{kind: Long}, envelope.Number("20785")) }); n != 0 {
		t.Errorf("a small integer: %.0f allocations, want 0", n)
	}
	var tags any = []any{"gift", nil, "promo"} // boxed once, as a decoded row holds it
	a, ok := inferOf(tags)
	b, _ := inferOf([]any{"x"})
	if !ok || a.kind != Array || a.elem.kind != String || a.elem != b.elem {
		t.Errorf("inferOf(strings) = %+v (elem %p, another's %p): want one shared string element type", a, a.elem, b.elem)
	}
	nested, _ := inferOf([]any{[]any{int64(1)}})
	if nested.elem.kind != Array || nested.elem.elem.kind != Long || nested.elem == &scalarElems[Array] {
		t.Errorf("inferOf(nested) = %+v: an array element type is not shared", nested.elem)
	}
	if n := testing.AllocsPerRun(100, func() { inferOf(tags) }); n != 0 {
		t.Errorf("inferOf(array of strings): %.0f allocations, want 0", n)
	}
}
