package envelope

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/cdcsink/cdc-sink/source"
	"github.com/linkedin/goavro/v2"
)

// decodeVia is Decode with the Avro sides decoded by avro (the direct
// reader or the goavro reference).
// The value side gets the event (the envelope fast path of the direct
// reader; the reference ignores it) where decodeSide would give it.
func decodeVia(d *Decoder, rec *source.Record, avro func(context.Context, string, []byte, *Event) (side, error)) (*Event, error) {
	ctx := context.Background()
	ev := &Event{}
	if rec.Key != nil {
		k, err := avro(ctx, "key", rec.Key, nil)
		if err != nil {
			return nil, err
		}
		if k.row == nil {
			return nil, quarantine.Errorf(quarantine.MalformedEvent, "key: expected a struct key")
		}
		ev.Key, ev.Format = k.row, k.format
	}
	var fast *Event
	if !d.noEnvFast && d.opts.Flattened != FlattenAlways && !strings.HasPrefix(rec.Topic, "__debezium-heartbeat") {
		fast = ev
	}
	v, err := avro(ctx, "value", rec.Value, fast)
	if err != nil {
		return nil, err
	}
	ev.Format = v.format
	if v.row == nil {
		return nil, quarantine.Errorf(quarantine.MalformedEvent, "value: expected a struct, got %s", typeName(v.val))
	}
	if err := d.interpret(ev, v, rec.Topic); err != nil {
		return nil, err
	}
	return ev, nil
}

// sameValue compares decoded values exactly: Rows by schema pointer, names
// and values; floats by bits (NaN payloads included); nil and empty slices
// apart.
func sameValue(a, b any) error {
	switch x := a.(type) {
	case *Row:
		y, ok := b.(*Row)
		if !ok {
			return fmt.Errorf("%T vs %T", a, b)
		}
		if x.Schema != y.Schema && !reflect.DeepEqual(x.Schema, y.Schema) {
			return fmt.Errorf("row schemas differ: %+v vs %+v", x.Schema, y.Schema)
		}
		if !reflect.DeepEqual(x.Names, y.Names) || len(x.Values) != len(y.Values) {
			return fmt.Errorf("row names %v vs %v", x.Names, y.Names)
		}
		for i := range x.Values {
			if err := sameValue(x.Values[i], y.Values[i]); err != nil {
				return fmt.Errorf("%s: %w", x.Names[i], err)
			}
		}
		return nil
	case float64:
		y, ok := b.(float64)
		if !ok || math.Float64bits(x) != math.Float64bits(y) {
			return fmt.Errorf("%v vs %v", a, b)
		}
		return nil
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) || (x == nil) != (y == nil) {
			return fmt.Errorf("%#v vs %#v", a, b)
		}
		for i := range x {
			if err := sameValue(x[i], y[i]); err != nil {
				return fmt.Errorf("[%d]: %w", i, err)
			}
		}
		return nil
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) || (x == nil) != (y == nil) {
			return fmt.Errorf("%#v vs %#v", a, b)
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok {
				return fmt.Errorf("key %q missing", k)
			}
			if err := sameValue(v, w); err != nil {
				return fmt.Errorf("[%q]: %w", k, err)
			}
		}
		return nil
	}
	if !reflect.DeepEqual(a, b) {
		return fmt.Errorf("%#v vs %#v", a, b)
	}
	return nil
}

func sameEvent(a, b *Event) error {
	for _, p := range [][2]*Row{{a.Key, b.Key}, {a.Before, b.Before}, {a.After, b.After}} {
		if (p[0] == nil) != (p[1] == nil) {
			return fmt.Errorf("row presence differs")
		}
		if p[0] != nil {
			if err := sameValue(p[0], p[1]); err != nil {
				return err
			}
		}
	}
	ca, cb := *a, *b
	ca.Key, ca.Before, ca.After, cb.Key, cb.Before, cb.After = nil, nil, nil, nil, nil, nil
	if !reflect.DeepEqual(ca, cb) {
		return fmt.Errorf("events differ:\n%+v\n%+v", ca, cb)
	}
	return nil
}

// checkSameOutcome: the direct reader and the goavro reference agree — equal
// Events, or errors of the same class and reason.
func checkSameOutcome(t *testing.T, d *Decoder, rec *source.Record) {
	t.Helper()
	got, gerr := decodeVia(d, rec, d.decodeAvro)
	want, werr := decodeVia(d, rec, d.decodeAvroRef)
	if (gerr == nil) != (werr == nil) {
		t.Fatalf("direct err %v, goavro err %v", gerr, werr)
	}
	if gerr != nil {
		gr, _ := quarantine.ReasonOf(gerr)
		wr, _ := quarantine.ReasonOf(werr)
		if gr != wr || quarantine.IsTransient(gerr) != quarantine.IsTransient(werr) {
			t.Fatalf("direct err %v, goavro err %v", gerr, werr)
		}
		return
	}
	if err := sameEvent(got, want); err != nil {
		t.Fatal(err)
	}
}

// diffSchemas: every Avro schema of the tests (the fixtures, the real
// Debezium/Apicurio captures and the kitchen sink) in one registry.
func diffSchemas(t testing.TB) (*MemoryRegistry, []int) {
	af := loadAvro(t)
	reg := af.reg
	var ids []int
	for _, id := range af.ids {
		ids = append(ids, id)
	}
	files, _ := filepath.Glob(filepath.Join(realDir, "avro-schemas", "*.avsc"))
	real := realRegistry(t)
	for _, f := range files {
		var id int
		if _, err := fmt.Sscanf(filepath.Base(f), "%d.avsc", &id); err != nil {
			continue
		}
		s, err := real.Schema(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		reg.Set(id, s)
		ids = append(ids, id)
	}
	ids = append(ids, 900)
	reg.Set(900, kitchenAvsc)
	sort.Ints(ids)
	return reg, ids
}

// randNative builds a random goavro native value of n.
func randNative(rng *rand.Rand, n *aNode, depth int) any {
	switch n.kind {
	case aNull:
		return nil
	case aBool:
		return rng.Intn(2) == 1
	case aInt:
		return int32(rng.Uint32())
	case aLong:
		if rng.Intn(4) == 0 {
			return int64(rng.Intn(300) - 150)
		}
		return int64(rng.Uint64())
	case aFloat:
		return math.Float32frombits(rng.Uint32())
	case aDouble:
		return math.Float64frombits(rng.Uint64())
	case aBytes, aString:
		b := make([]byte, rng.Intn(12))
		rng.Read(b)
		if n.kind == aString {
			return string(b)
		}
		return b
	case aFixed:
		b := make([]byte, n.size)
		rng.Read(b)
		return b
	case aEnum:
		return n.syms[rng.Intn(len(n.syms))]
	case aUnion:
		b := n.branch[rng.Intn(len(n.branch))]
		if b.kind == aNull {
			return nil
		}
		return goavro.Union(b.gname, randNative(rng, b, depth+1))
	case aRecord:
		m := make(map[string]any, len(n.rec.fields))
		for i, f := range n.rec.fields {
			m[n.rec.names[i]] = randNative(rng, f, depth+1)
		}
		return m
	case aArray:
		l := make([]any, rng.Intn(4))
		for i := range l {
			l[i] = randNative(rng, n.items, depth+1)
		}
		return l
	case aMap:
		m := map[string]any{}
		for i := rng.Intn(4); i > 0; i-- {
			m[fmt.Sprint(rng.Intn(10))] = randNative(rng, n.values, depth+1)
		}
		return m
	}
	panic(fmt.Sprintf("kind %d", n.kind))
}

// TestAvroDirectMatchesGoavro: on thousands of random values of every test
// schema (all nullable branches, NaNs, empty strings, random bytes), the
// direct reader yields the Events the goavro path yields; and on each value
// cut short or with a byte flipped, the same outcome class.
func TestAvroDirectMatchesGoavro(t *testing.T) {
	reg, ids := diffSchemas(t)
	d := NewDecoder(Options{Registry: reg, Flattened: FlattenAlways})
	de := NewDecoder(Options{Registry: reg})
	rng := rand.New(rand.NewSource(1))
	ctx := context.Background()
	n := 0
	for _, id := range ids {
		c, err := d.acache.get(ctx, id, d.prefix)
		if err != nil {
			t.Fatalf("schema %d: %v", id, err)
		}
		for i := 0; i < 300; i++ {
			bin, err := c.codec.BinaryFromNative(nil, randNative(rng, c.root, 0))
			if err != nil {
				t.Fatalf("schema %d: encode: %v", id, err)
			}
			rec := &source.Record{Topic: "dbz.public.t", Value: frame(id, bin)}
			checkSameOutcome(t, d, rec)
			checkSameOutcome(t, de, rec)
			if len(bin) > 0 {
				cut := &source.Record{Topic: rec.Topic, Value: frame(id, bin[:rng.Intn(len(bin))])}
				checkSameOutcome(t, d, cut)
				flip := append([]byte(nil), bin...)
				flip[rng.Intn(len(flip))] ^= byte(1 + rng.Intn(255))
				checkSameOutcome(t, d, &source.Record{Topic: rec.Topic, Value: frame(id, flip)})
			}
			n++
		}
	}
	// hand-made edge bodies: {b boolean, i int, m map<int>}
	small := reg.Register(`{"type":"record","name":"S","fields":[{"name":"b","type":"boolean"},{"name":"i","type":"int"},{"name":"m","type":{"type":"map","values":"int"}}]}`)
	for name, tc := range map[string]struct {
		body []byte
		ok   bool
	}{
		"plain":          {[]byte{0x01, 0x02, 0x02, 0x02, 'a', 0x04, 0x00}, true},
		"bool byte 2":    {[]byte{0x02, 0x02, 0x00}, false},
		"int 6 bytes":    {[]byte{0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x00}, true}, // low 32 bits kept
		"duplicate key":  {[]byte{0x00, 0x02, 0x04, 0x02, 'a', 0x02, 0x02, 'a', 0x04, 0x00}, false},
		"two map blocks": {[]byte{0x00, 0x02, 0x02, 0x02, 'a', 0x02, 0x01, 0x04, 0x02, 'b', 0x04, 0x00}, true},
		"trailing byte":  {[]byte{0x00, 0x02, 0x00, 0x00}, false},
	} {
		rec := &source.Record{Topic: "dbz.public.t", Value: frame(small, tc.body)}
		checkSameOutcome(t, d, rec)
		if _, err := d.Decode(ctx, rec); (err == nil) != tc.ok {
			t.Errorf("%s: err %v, want ok=%v", name, err, tc.ok)
		}
	}
	// the real captures, keys and values
	files, _ := filepath.Glob(filepath.Join(realDir, "*avro*.jsonl"))
	for _, f := range files {
		for _, rec := range loadKcat(t, filepath.Base(f)) {
			if len(rec.Value) < 5 || rec.Value[0] != 0 {
				continue
			}
			checkSameOutcome(t, de, rec)
			n++
		}
	}
	if n < 3000 {
		t.Fatalf("only %d records compared", n)
	}
}

// FuzzAvroDirectMatchesGoavro: on arbitrary bodies under every test schema,
// the direct reader and the goavro reference agree (equal Events or the same
// error reason), and the direct reader never panics.
func FuzzAvroDirectMatchesGoavro(f *testing.F) {
	reg, ids := diffSchemas(f)
	d := NewDecoder(Options{Registry: reg})
	rng := rand.New(rand.NewSource(2))
	for i, id := range ids {
		c, err := d.acache.get(context.Background(), id, d.prefix)
		if err != nil {
			f.Fatal(err)
		}
		for j := 0; j < 3; j++ {
			bin, err := c.codec.BinaryFromNative(nil, randNative(rng, c.root, 0))
			if err != nil {
				f.Fatal(err)
			}
			f.Add(uint8(i), false, bin)
		}
	}
	if raw, err := os.ReadFile("testdata/bench/items_u.avro.json"); err == nil {
		af := loadAvro(f)
		for i, id := range ids {
			if id == af.ids["items_envelope"] {
				f.Add(uint8(i), false, af.encode(f, "items_envelope", raw)[5:])
			}
		}
	}
	df := NewDecoder(Options{Registry: reg, Flattened: FlattenAlways})
	f.Fuzz(func(t *testing.T, which uint8, flat bool, body []byte) {
		dd := d
		if flat {
			dd = df
		}
		checkSameOutcome(t, dd, &source.Record{Topic: "t", Value: frame(ids[int(which)%len(ids)], body)})
	})
}
