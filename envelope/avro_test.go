package envelope

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/cdcsink/cdc-sink/source"
	"github.com/linkedin/goavro/v2"
)

// A schema exercising the Avro types and logical types AvroData can emit.
const kitchenAvsc = `{"type":"record","name":"Value","namespace":"k.public.t","fields":[
 {"name":"i8","type":{"type":"int","connect.type":"int8"}},
 {"name":"d","type":{"type":"int","logicalType":"date","connect.version":1,"connect.name":"org.apache.kafka.connect.data.Date"}},
 {"name":"tm","type":{"type":"int","logicalType":"time-millis","connect.name":"org.apache.kafka.connect.data.Time"}},
 {"name":"ts","type":{"type":"long","logicalType":"timestamp-millis","connect.name":"org.apache.kafka.connect.data.Timestamp"}},
 {"name":"dec","type":{"type":"bytes","logicalType":"decimal","scale":3,"precision":9}},
 {"name":"e","type":{"type":"enum","name":"Color","symbols":["RED","GREEN"]}},
 {"name":"fx","type":{"type":"fixed","name":"Four","size":4}},
 {"name":"m","type":{"type":"map","values":["null","long"]}},
 {"name":"a","type":{"type":"array","items":{"type":"record","name":"Item","fields":[{"name":"n","type":"string"}]}}},
 {"name":"o","type":["null","Item"],"default":null},
 {"name":"f","type":"float"}
]}`

func TestAvroKitchenSink(t *testing.T) {
	reg := NewMemoryRegistry()
	id := reg.Register(kitchenAvsc)
	var g any
	json.Unmarshal([]byte(kitchenAvsc), &g)
	stripLogical(g)
	gs, _ := json.Marshal(g)
	codec, err := goavro.NewCodec(string(gs))
	if err != nil {
		t.Fatal(err)
	}
	native := map[string]any{
		"i8": int32(-5), "d": int32(19675), "tm": int32(45296789), "ts": int64(1700000000123),
		"dec": []byte{0x30, 0x39}, "e": "GREEN", "fx": []byte{1, 2, 3, 4},
		"m": map[string]any{"a": goavro.Union("long", int64(300)), "b": nil},
		"a": []any{map[string]any{"n": "x"}, map[string]any{"n": "y"}},
		"o": goavro.Union("k.public.t.Item", map[string]any{"n": "z"}),
		"f": float32(0.1),
	}
	bin, err := codec.BinaryFromNative(nil, native)
	if err != nil {
		t.Fatal(err)
	}
	d := NewDecoder(Options{Registry: reg, Flattened: FlattenAlways})
	ev, err := d.Decode(context.Background(), &source.Record{Value: frame(id, bin)})
	if err != nil {
		t.Fatal(err)
	}
	r := ev.After
	fs := map[string]*Schema{}
	for _, f := range r.Schema.Fields {
		fs[f.Name] = f.Schema
	}
	check := func(name string, v any, typ, sname string) {
		t.Helper()
		got, _ := r.Get(name)
		if !reflect.DeepEqual(canon(got), canon(v)) {
			t.Errorf("%s = %#v, want %#v", name, got, v)
		}
		if fs[name].Type != typ || fs[name].Name != sname {
			t.Errorf("%s schema = %s/%s, want %s/%s", name, fs[name].Type, fs[name].Name, typ, sname)
		}
	}
	check("i8", int64(-5), "int8", "")
	check("d", int64(19675), "int32", NameDate)
	check("tm", int64(45296789), "int32", NameTime)
	check("ts", int64(1700000000123), "int64", NameTimestamp)
	check("dec", []byte{0x30, 0x39}, "bytes", NameDecimal)
	check("e", "GREEN", "string", "")
	check("fx", []byte{1, 2, 3, 4}, "bytes", "")
	check("m", map[string]any{"a": int64(300), "b": nil}, "map", "")
	check("f", float64(float32(0.1)), "float32", "")
	if p := fs["dec"].Parameters; p["scale"] != "3" || p["connect.decimal.precision"] != "9" {
		t.Errorf("decimal params %v", p)
	}
	a, _ := r.Get("a")
	if l := a.([]any); len(l) != 2 || l[1].(*Row).Values[0] != "y" || l[1].(*Row).Schema.Name != "k.public.t.Item" {
		t.Errorf("array of records: %#v", a)
	}
	o, _ := r.Get("o")
	if or := o.(*Row); or.Values[0] != "z" || !or.Schema.Optional {
		t.Errorf("optional record: %#v", o)
	}
}

func TestAvroWalkerHostile(t *testing.T) {
	reg := NewMemoryRegistry()
	id := reg.Register(`{"type":"record","name":"R","fields":[
		{"name":"a","type":{"type":"array","items":"long"}},
		{"name":"n","type":{"type":"array","items":{"type":"record","name":"Empty","fields":[]}}},
		{"name":"m","type":{"type":"map","values":"string"}},
		{"name":"s","type":"string"}]}`)
	d := NewDecoder(Options{Registry: reg, Flattened: FlattenAlways})
	dec := func(body ...byte) (*Event, error) {
		return d.Decode(context.Background(), &source.Record{Value: frame(id, body)})
	}
	// negative block count with byte size: a = [1, 2] in one block of -2 (size 2)
	ev, err := dec(0x03, 0x04, 0x02, 0x04, 0x00, 0x00, 0x00, 0x00)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := ev.After.Get("a"); !reflect.DeepEqual(v, []any{int64(1), int64(2)}) {
		t.Errorf("negative block: %#v", v)
	}
	for name, body := range map[string][]byte{
		"huge array count":    {0xfe, 0xff, 0xff, 0xff, 0x0f},                   // 2^31-1 longs in 0 bytes
		"huge empty count":    {0x00, 0xfe, 0xff, 0xff, 0xff, 0x0f},             // 2^31-1 empty records
		"huge block size":     {0x03, 0xfe, 0xff, 0xff, 0xff, 0x0f},             // size beyond the record
		"huge string":         {0x00, 0x00, 0x00, 0xfe, 0xff, 0xff, 0xff, 0x0f}, // length beyond the record
		"negative string len": {0x00, 0x00, 0x00, 0x01},
		"huge map count":      {0x00, 0x00, 0xfe, 0xff, 0xff, 0x0f},
		"long varint":         {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01},
		"empty":               {},
	} {
		if _, err := dec(body...); reason(err) != quarantine.MalformedAvro {
			t.Errorf("%s: %v", name, err)
		}
	}
	// a modest number of zero-size items is fine
	if ev, err := dec(0x00, 0x14, 0x00, 0x00, 0x00); err != nil {
		t.Errorf("10 empty records: %v", err)
	} else if v, _ := ev.After.Get("n"); len(v.([]any)) != 10 {
		t.Errorf("10 empty records: %#v", v)
	}
}

func TestAvroBadSchemas(t *testing.T) {
	for name, avsc := range map[string]string{
		"not json":       `{`,
		"general union":  `{"type":"record","name":"R","fields":[{"name":"u","type":["int","string"]}]}`,
		"unknown type":   `{"type":"record","name":"R","fields":[{"name":"u","type":"Nope"}]}`,
		"recursive":      `{"type":"record","name":"R","fields":[{"name":"u","type":["null","R"]}]}`,
		"goavro rejects": `{"type":"record","name":"R","fields":[{"name":"u","type":"int","default":"x"}]}`,
	} {
		reg := NewMemoryRegistry()
		id := reg.Register(avsc)
		d := NewDecoder(Options{Registry: reg})
		if _, err := d.Decode(context.Background(), &source.Record{Value: frame(id, []byte{0})}); reason(err) != quarantine.MalformedAvro {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestAvroRootUnionConcurrent(t *testing.T) {
	reg := NewMemoryRegistry()
	id := reg.Register(`["null",{"type":"record","name":"V","namespace":"x","fields":[{"name":"id","type":"long"},{"name":"__op","type":["null","string"]}],"connect.name":"x.V"}]`)
	d := NewDecoder(Options{Registry: reg})
	body := []byte{0x02, 0x54, 0x02, 0x02, 'c'} // branch 1, id 42, __op "c"
	done := make(chan struct{})
	for g := 0; g < 4; g++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := 0; i < 50; i++ {
				ev, err := d.Decode(context.Background(), &source.Record{Value: frame(id, body)})
				if err != nil {
					t.Error(err)
					return
				}
				if ev.Op != 'c' || !ev.Flattened || ev.After.Values[0] != int64(42) || ev.After.Schema.Name != "x.V" || len(ev.After.Schema.Fields) != 1 || len(ev.After.Names) != 1 {
					t.Errorf("%+v", ev)
					return
				}
			}
		}()
	}
	for g := 0; g < 4; g++ {
		<-done
	}
}
