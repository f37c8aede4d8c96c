package envelope

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"

	"github.com/cdcsink/cdc-sink/source"
	"github.com/linkedin/goavro/v2"
)

// fixture is one record of testdata in kcat -J form.
type fixture struct {
	Topic   string   `json:"topic"`
	Headers []string `json:"headers"`
	Key     *string  `json:"key"`
	Payload *string  `json:"payload"`
}

func loadRecord(t testing.TB, path string) *source.Record {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", path))
	if err != nil {
		t.Fatal(err)
	}
	var f fixture
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	rec := &source.Record{Topic: f.Topic}
	if f.Key != nil {
		rec.Key = []byte(*f.Key)
	}
	if f.Payload != nil {
		rec.Value = []byte(*f.Payload)
	}
	for i := 0; i+1 < len(f.Headers); i += 2 {
		rec.Headers = append(rec.Headers, source.Header{Key: f.Headers[i], Value: []byte(f.Headers[i+1])})
	}
	return rec
}

func mustDecode(t testing.TB, d *Decoder, rec *source.Record) *Event {
	t.Helper()
	ev, err := d.Decode(context.Background(), rec)
	if err != nil {
		t.Fatalf("decode %s: %v", rec.Topic, err)
	}
	return ev
}

// avroFixtures holds the Avro schemas of testdata/avro registered in a MemoryRegistry.
type avroFixtures struct {
	reg    *MemoryRegistry
	ids    map[string]int
	codecs map[string]*goavro.Codec
}

func loadAvro(t testing.TB) *avroFixtures {
	t.Helper()
	a := &avroFixtures{reg: NewMemoryRegistry(), ids: map[string]int{}, codecs: map[string]*goavro.Codec{}}
	for i, name := range []string{"orders_key", "orders_envelope", "orders_flat"} {
		a.add(t, name, filepath.Join("testdata", "avro", name+".avsc"), 100+i)
	}
	a.add(t, "items_envelope", filepath.Join("testdata", "bench", "items_envelope.avsc"), 200)
	return a
}

func (a *avroFixtures) add(t testing.TB, name, path string, id int) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	a.reg.Set(id, string(b))
	a.ids[name] = id
	// the writer side encodes raw ints/bytes; logical types do not change the wire form
	var g any
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	stripLogical(g)
	gs, _ := json.Marshal(g)
	c, err := goavro.NewCodec(string(gs))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	a.codecs[name] = c
}

// encode turns the Avro JSON encoding of a value into a Confluent-framed record.
func (a *avroFixtures) encode(t testing.TB, schema string, avroJSON []byte) []byte {
	t.Helper()
	c := a.codecs[schema]
	native, _, err := c.NativeFromTextual(avroJSON)
	if err != nil {
		t.Fatalf("%s: textual: %v", schema, err)
	}
	bin, err := c.BinaryFromNative(nil, native)
	if err != nil {
		t.Fatalf("%s: binary: %v", schema, err)
	}
	return frame(a.ids[schema], bin)
}

func frame(id int, body []byte) []byte {
	out := make([]byte, 5, 5+len(body))
	binary.BigEndian.PutUint32(out[1:], uint32(id))
	return append(out, body...)
}

type avroCase struct {
	KeySchema   string          `json:"key_schema"`
	Key         json.RawMessage `json:"key"`
	ValueSchema string          `json:"value_schema"`
	Value       json.RawMessage `json:"value"`
}

func (a *avroFixtures) records(t testing.TB) map[string]*source.Record {
	b, err := os.ReadFile("testdata/avro/cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases map[string]avroCase
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	out := map[string]*source.Record{}
	for name, c := range cases {
		rec := &source.Record{Topic: "dbz.public.orders"}
		if string(c.Key) != "null" {
			rec.Key = a.encode(t, c.KeySchema, c.Key)
		}
		rec.Value = a.encode(t, c.ValueSchema, c.Value)
		out[name] = rec
	}
	return out
}

// ---- comparison helpers ----

// canonSchema drops Optional and Default (which legitimately differ between
// JsonConverter and AvroData output).
func canonSchema(s *Schema) any {
	if s == nil {
		return nil
	}
	m := map[string]any{"type": s.Type, "name": s.Name}
	if len(s.Parameters) > 0 {
		m["params"] = s.Parameters
	}
	var fs []any
	for _, f := range s.Fields {
		fs = append(fs, []any{f.Name, canonSchema(f.Schema)})
	}
	m["fields"] = fs
	m["items"] = canonSchema(s.Items)
	m["keys"] = canonSchema(s.Keys)
	m["values"] = canonSchema(s.Values)
	return m
}

func canon(v any) any {
	switch x := v.(type) {
	case *Row:
		if x == nil {
			return nil
		}
		vals := make([]any, len(x.Values))
		for i, y := range x.Values {
			vals[i] = canon(y)
		}
		return map[string]any{"schema": canonSchema(x.Schema), "names": x.Names, "values": vals}
	case []any:
		out := make([]any, len(x))
		for i, y := range x {
			out[i] = canon(y)
		}
		return out
	case map[string]any:
		out := map[string]any{}
		for k, y := range x {
			out[k] = canon(y)
		}
		return out
	case []byte:
		return "bytes:" + base64.StdEncoding.EncodeToString(x)
	case float64:
		if math.IsNaN(x) {
			return "NaN"
		}
	}
	return v
}

// coerce applies a schema to a schemaless value the way JsonConverter would
// have typed it (numbers → int64/float64, base64 → []byte, objects → *Row).
func coerce(t testing.TB, v any, s *Schema) any {
	if v == nil {
		return nil
	}
	switch s.Type {
	case "int8", "int16", "int32", "int64":
		n, err := strconv.ParseInt(string(v.(Number)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	case "float32", "float64":
		bits := 64
		if s.Type == "float32" {
			bits = 32
		}
		f, err := strconv.ParseFloat(string(v.(Number)), bits)
		if err != nil {
			t.Fatal(err)
		}
		return f
	case "bytes":
		b, err := base64.StdEncoding.DecodeString(v.(string))
		if err != nil {
			t.Fatal(err)
		}
		return b
	case "array":
		l := v.([]any)
		out := make([]any, len(l))
		for i, x := range l {
			out[i] = coerce(t, x, s.Items)
		}
		return out
	case "map":
		r := v.(*Row)
		out := map[string]any{}
		for i, n := range r.Names {
			out[n] = coerce(t, r.Values[i], s.Values)
		}
		return out
	case "struct":
		r := v.(*Row)
		out := &Row{Schema: s}
		for _, f := range s.Fields {
			x, _ := r.Get(f.Name)
			out.Names = append(out.Names, f.Name)
			out.Values = append(out.Values, coerce(t, x, f.Schema))
		}
		return out
	}
	return v
}

func diff(a, b any) string {
	if reflect.DeepEqual(a, b) {
		return ""
	}
	ja, _ := json.MarshalIndent(a, "", " ")
	jb, _ := json.MarshalIndent(b, "", " ")
	la, lb := splitLines(string(ja)), splitLines(string(jb))
	for i := 0; i < len(la) || i < len(lb); i++ {
		var x, y string
		if i < len(la) {
			x = la[i]
		}
		if i < len(lb) {
			y = lb[i]
		}
		if x != y {
			return fmt.Sprintf("first difference at line %d:\n- %s\n+ %s", i+1, x, y)
		}
	}
	return "differ (not visible in JSON)"
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}
