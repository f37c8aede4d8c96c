package normalize

import (
	"encoding/hex"
	"testing"

	"github.com/cdcsink/cdc-sink/envelope"
)

const ph = "__debezium_unavailable_value"

func phInts() []any {
	out := make([]any, len(ph))
	for i := range ph {
		out[i] = int64(ph[i])
	}
	return out
}

func TestToastForms(t *testing.T) {
	// Every form Debezium 3.6 uses for an unchanged TOASTed column.
	vs := structOf("dbz.public.docs.Value",
		"id", sch("int32"),
		"body", opt("string"),
		"js", named("string", "io.debezium.data.Json"),
		"blob", opt("bytes"),
		"tags", arrayOf(opt("string")),
		"blobs", arrayOf(opt("bytes")),
		"nums", arrayOf(opt("int32")),
		"bigs", arrayOf(opt("int64")),
		"ids", arrayOf(named("string", "io.debezium.data.Uuid")),
		"hs_map", mapOf(sch("string"), opt("string")),
		"hs_json", named("string", "io.debezium.data.Json"),
		"amount", decimalSchema("10", "2"), // never TOASTed: stays a value
	)
	n := newN(t, Options{})
	after := rowOf(vs, int64(1), ph, ph, []byte(ph), []any{ph}, []any{[]byte(ph)}, phInts(), phInts(),
		[]any{"b68a35a7-17ad-35b3-af2a-ae46edb4545a"},
		map[string]any{ph: ph}, `{"`+ph+`":"`+ph+`"}`, twos("1"))
	c, err := n.Normalize(&envelope.Event{Kind: envelope.KindChange, Op: 'u', Key: rowOf(keySchema, int64(1)), After: after,
		Source: itemsSource("", `["1","2"]`, 2)}, rec(0))
	if err != nil {
		t.Fatal(err)
	}
	for i, col := range c.Schema.Columns {
		want := i != 0 && col.Name != "amount"
		if IsUnavailable(c.Row[i]) != want {
			t.Errorf("column %s: %#v unavailable=%v", col.Name, c.Row[i], !want)
		}
	}
	// near misses stay values
	after = rowOf(vs, int64(1), ph+"x", "__debezium_unavailable_valuE", []byte(ph[1:]), []any{ph, ph}, []any{[]byte("x")}, phInts()[1:], []any{int64(1)},
		[]any{"b68a35a7-17ad-35b3-af2a-ae46edb4545b"}, map[string]any{ph: "x"}, `{"a":"b"}`, twos("1"))
	c, err = n.Normalize(&envelope.Event{Kind: envelope.KindChange, Op: 'u', Key: rowOf(keySchema, int64(1)), After: after,
		Source: itemsSource("", `["1","2"]`, 2)}, rec(0))
	if err != nil {
		t.Fatal(err)
	}
	for i, col := range c.Schema.Columns {
		if IsUnavailable(c.Row[i]) {
			t.Errorf("column %s: near miss %#v taken for the placeholder", col.Name, c.Row[i])
		}
	}
}

func TestToastUUIDComputed(t *testing.T) {
	tt, _ := newToast("")
	if !tt.is(`{"`+ph+`": "`+ph+`"}`) || tt.is(`{"`+ph+`": "x"}`) || tt.is(`{"a": 1, "b": 2, "c": 3, "d": 4, "e": 5, "f": 6, "g": 777777}`) {
		t.Fatal("hstore JSON with whitespace")
	}
	if tt.uuid != "b68a35a7-17ad-35b3-af2a-ae46edb4545a" {
		t.Fatalf("uuid placeholder %s", tt.uuid)
	}
}

func TestToastHexPlaceholder(t *testing.T) {
	raw := []byte{0xde, 0xad, 0xbe, 0xef}
	n := newN(t, Options{UnavailablePlaceholder: "hex:" + hex.EncodeToString(raw)})
	vs := structOf("v", "id", sch("int32"), "blob", opt("bytes"), "body", opt("string"), "nums", arrayOf(opt("int16")))
	ints := []any{int64(0xde), int64(0xad), int64(0xbe), int64(0xef)}
	c, err := n.Normalize(&envelope.Event{Kind: envelope.KindChange, Op: 'u', Key: rowOf(keySchema, int64(1)),
		After: rowOf(vs, int64(1), raw, string(raw), ints), Source: itemsSource("", "", 1)}, rec(0))
	if err != nil {
		t.Fatal(err)
	}
	if !IsUnavailable(c.Row[1]) || !IsUnavailable(c.Row[2]) || !IsUnavailable(c.Row[3]) {
		t.Fatalf("%#v", c.Row)
	}
	// the default placeholder is now an ordinary value
	c, err = n.Normalize(&envelope.Event{Kind: envelope.KindChange, Op: 'u', Key: rowOf(keySchema, int64(1)),
		After: rowOf(vs, int64(1), []byte(ph), ph, nil), Source: itemsSource("", "", 1)}, rec(0))
	if err != nil || IsUnavailable(c.Row[1]) || IsUnavailable(c.Row[2]) {
		t.Fatalf("%#v %v", c.Row, err)
	}
	if _, err := New(Options{UnavailablePlaceholder: "hex:zz"}); err == nil {
		t.Fatal("bad hex accepted")
	}
}

func TestToastCustomPlaceholderAndSchemaless(t *testing.T) {
	n := newN(t, Options{UnavailablePlaceholder: "<toast>"})
	ints := []any{}
	for _, b := range []byte("<toast>") {
		ints = append(ints, envelope.Number(string(rune('0'+b/100))+string(rune('0'+b/10%10))+string(rune('0'+b%10))))
	}
	// schemaless: Numbers in an int array, strings, objects
	c, err := n.Normalize(&envelope.Event{Kind: envelope.KindChange, Format: envelope.FormatJSONPlain, Op: 'u',
		Key: plain("id", envelope.Number("1")), After: plain("id", envelope.Number("1"), "body", "<toast>", "nums", ints,
			"hs", plain("<toast>", "<toast>"), "tags", []any{"<toast>"}),
		Source: itemsSource("", "", 1)}, rec(0))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Row) != 5 {
		t.Fatalf("row %#v", c.Row)
	}
	for i := 1; i < len(c.Row); i++ {
		if !IsUnavailable(c.Row[i]) {
			t.Errorf("%s: %#v", c.Schema.Columns[i].Name, c.Row[i])
		}
	}
	// TOAST carries no type information: columns seen only as placeholders stay null-only
	for _, col := range c.Schema.Columns[1:] {
		if !col.NullOnly {
			t.Errorf("%s should be NullOnly", col.Name)
		}
	}
}
