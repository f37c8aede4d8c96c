package envelope

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/cdcsink/cdc-sink/source"
)

// checkOutcome: decoding never panics, never modifies the record, and fails
// only with a permanent, typed error (there is no registry I/O for JSON).
func checkOutcome(t *testing.T, d *Decoder, rec *source.Record) *Event {
	key := bytes.Clone(rec.Key)
	val := bytes.Clone(rec.Value)
	ev, err := d.Decode(context.Background(), rec)
	if !bytes.Equal(key, rec.Key) || !bytes.Equal(val, rec.Value) {
		t.Fatal("decoder modified the record")
	}
	if err != nil {
		if _, ok := quarantine.ReasonOf(err); !ok {
			t.Fatalf("untyped error: %v", err)
		}
		if ev != nil {
			t.Fatal("event and error")
		}
		return nil
	}
	if ev == nil || ev.Kind == 0 {
		t.Fatalf("no event / no kind: %+v", ev)
	}
	return ev
}

func jsonSeeds(f *testing.F, dirs ...string) {
	for _, dir := range dirs {
		files, _ := filepath.Glob(filepath.Join("testdata", dir, "*.json"))
		for _, p := range files {
			rec := loadRecord(f, strings.TrimPrefix(p, "testdata/"))
			f.Add(rec.Key, rec.Value)
		}
	}
}

func realSeeds(f testing.TB, avro bool) []*source.Record {
	files, _ := filepath.Glob(filepath.Join(realDir, "*.jsonl"))
	var out []*source.Record
	for _, p := range files {
		if strings.Contains(p, "loja_avro") == avro {
			out = append(out, loadKcat(f, filepath.Base(p))...)
		}
	}
	return out
}

func FuzzDecodeJSON(f *testing.F) {
	jsonSeeds(f, "json_schema", "json_plain", "bench")
	for _, r := range realSeeds(f, false) {
		f.Add(r.Key, r.Value)
	}
	f.Add([]byte(nil), []byte(`{"schema":{"type":"struct","fields":[{"type":"map","keys":{"type":"string","optional":false},"values":{"type":"array","items":{"type":"float32","optional":true},"optional":false},"optional":false,"field":"m"}],"optional":false},"payload":{"m":{"a":[1.5,null,"NaN"]}}}`))
	f.Add([]byte(`{"id":"\ud83d\ude00"}`), []byte(`{"op":"m","source":{"lsn":"1"},"message":{"prefix":"p","content":"aGk="}}`))
	d := NewDecoder(Options{MaxSchemaCache: 16})
	f.Fuzz(func(t *testing.T, key, value []byte) {
		checkOutcome(t, d, &source.Record{Topic: "t", Key: key, Value: value})
	})
}

func FuzzDecodeFlattened(f *testing.F) {
	for _, dir := range []string{"json_schema", "json_plain"} {
		files, _ := filepath.Glob(filepath.Join("testdata", dir, "flat_*.json"))
		for _, p := range files {
			rec := loadRecord(f, strings.TrimPrefix(p, "testdata/"))
			f.Add(rec.Value, false)
			f.Add(rec.Value, true)
		}
	}
	f.Add([]byte(`{"id":1,"__deleted":true,"__op":"d","__lsn":"12","__txId":3.0}`), false)
	auto := NewDecoder(Options{MaxSchemaCache: 16})
	always := NewDecoder(Options{MaxSchemaCache: 16, Flattened: FlattenAlways})
	f.Fuzz(func(t *testing.T, value []byte, force bool) {
		d := auto
		if force {
			d = always
		}
		ev := checkOutcome(t, d, &source.Record{Topic: "t", Key: []byte(`{"id":1}`), Value: value})
		if ev != nil && ev.Flattened && ev.After != nil {
			for _, n := range ev.After.Names {
				if _, meta := isMetaName(n, "__"); meta {
					t.Fatalf("meta field %s left in After", n)
				}
			}
			if ev.After.Schema != nil && len(ev.After.Schema.Fields) != len(ev.After.Names) {
				t.Fatal("schema/names mismatch")
			}
		}
	})
}

func FuzzDecodeAvro(f *testing.F) {
	af := loadAvro(f)
	names := []string{"orders_key", "orders_envelope", "orders_flat", "items_envelope"}
	for name, rec := range af.records(f) {
		_ = name
		for i, n := range names {
			if rec.Value != nil && af.ids[n] == int(rec.Value[4]) {
				f.Add(uint8(i), rec.Value[5:])
			}
			if rec.Key != nil && af.ids[n] == int(rec.Key[4]) {
				f.Add(uint8(i), rec.Key[5:])
			}
		}
	}
	if raw, err := os.ReadFile("testdata/bench/items_u.avro.json"); err == nil {
		f.Add(uint8(3), af.encode(f, "items_envelope", raw)[5:])
	}
	// real Apicurio-written records: their schemas join the registry (ids 1..14)
	real := realRegistry(f)
	for _, r := range realSeeds(f, true) {
		for _, b := range [][]byte{r.Key, r.Value} {
			if len(b) < 5 {
				continue
			}
			id := int(b[4])
			s, err := real.Schema(context.Background(), id)
			if err != nil {
				continue
			}
			name := "real" + strconv.Itoa(id)
			if _, ok := af.ids[name]; !ok {
				af.reg.Set(id, s)
				af.ids[name] = id
				names = append(names, name)
			}
			for i, n := range names {
				if n == name {
					f.Add(uint8(i), b[5:])
				}
			}
		}
	}
	f.Add(uint8(1), []byte{0x02, 0xff, 0xff, 0xff, 0xff, 0x0f}) // huge declared lengths
	f.Add(uint8(2), []byte{0x00, 0x01, 0x02})
	d := NewDecoder(Options{Registry: af.reg})
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		id := af.ids[names[int(which)%len(names)]]
		checkOutcome(t, d, &source.Record{Topic: "t", Value: frame(id, body)})
	})
}
