package normalize

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/source"
)

const realDir = "../envelope/testdata/real"

func loadKcat(t testing.TB, path string) []*source.Record {
	t.Helper()
	recs, err := source.ReadFile(path, source.FileOptions{})
	if err != nil {
		t.Fatalf("fixtures: %v", err)
	}
	return recs
}

func realDecoder(t testing.TB) *envelope.Decoder {
	t.Helper()
	return envelope.NewDecoder(envelope.Options{Registry: RealRegistry(t)})
}

// realChanges decodes and normalizes one topic file; nil entries are skipped
// records (heartbeats, tx metadata, messages).
func realChanges(t *testing.T, n *Normalizer, d *envelope.Decoder, file string) []*Change {
	t.Helper()
	var out []*Change
	for _, r := range loadKcat(t, filepath.Join(realDir, file)) {
		ev, err := d.Decode(context.Background(), r)
		if err != nil {
			t.Fatalf("%s@%d: decode: %v", file, r.Offset, err)
		}
		c, err := n.Normalize(ev, r)
		if err != nil {
			t.Fatalf("%s@%d: normalize: %v", file, r.Offset, err)
		}
		out = append(out, c)
	}
	return out
}

func colsOf(s *Schema) []string {
	if s == nil {
		return nil
	}
	var out []string
	for _, c := range s.Columns {
		out = append(out, c.Name+":"+c.Type.String())
	}
	return out
}

// TestRealFixtures runs every real Debezium 3.6.1 record (JSON with schema and
// Avro) through the envelope decoder and Normalize, assigns versions in
// offset order, and checks the invariants the merge relies on.
func TestRealFixtures(t *testing.T) {
	for _, table := range []string{"customers", "order_items", "orders", "products"} {
		for _, conn := range []string{"loja", "loja_avro"} {
			file := conn + ".public." + table + ".jsonl"
			t.Run(file, func(t *testing.T) {
				n := newN(t, Options{})
				cs := realChanges(t, n, realDecoder(t), file)
				if len(cs) == 0 {
					t.Fatal("no records")
				}
				checkVersions(t, cs)
				checkRealValues(t, table, cs)
			})
		}
		t.Run(table+" json==avro", func(t *testing.T) {
			js := realChanges(t, newN(t, Options{}), realDecoder(t), "loja.public."+table+".jsonl")
			av := realChanges(t, newN(t, Options{}), realDecoder(t), "loja_avro.public."+table+".jsonl")
			if len(js) != len(av) {
				t.Fatalf("%d JSON vs %d Avro changes", len(js), len(av))
			}
			for i := range js {
				a, b := js[i], av[i]
				if a.Op != b.Op || a.SourceOp != b.SourceOp || a.Tombstone != b.Tombstone ||
					!sameValue(a.Key, b.Key) || !sameValue(a.OldKey, b.OldKey) || !sameValue(a.Row, b.Row) ||
					fmt.Sprint(a.KeyNames) != fmt.Sprint(b.KeyNames) || fmt.Sprint(colsOf(a.Schema)) != fmt.Sprint(colsOf(b.Schema)) {
					t.Errorf("[%d] JSON and Avro differ:\n json %v %v %#v\n avro %v %v %#v", i, colsOf(a.Schema), a.Key, a.Row, colsOf(b.Schema), b.Key, b.Row)
				}
			}
		})
	}
	t.Run("skipped kinds", func(t *testing.T) {
		for _, f := range []string{"loja.transaction.jsonl", "loja.message.jsonl", "__debezium-heartbeat.loja.jsonl",
			"loja_avro.transaction.jsonl", "loja_avro.message.jsonl", "__debezium-heartbeat.loja_avro.jsonl"} {
			for i, c := range realChanges(t, newN(t, Options{}), realDecoder(t), f) {
				if c != nil {
					t.Errorf("%s[%d]: want skipped, got %+v", f, i, c)
				}
			}
		}
	})
}

// checkVersions: in offset order, versions never decrease; a tombstone equals
// the delete before it; every change of one key is newer than the previous one.
func checkVersions(t *testing.T, cs []*Change) {
	t.Helper()
	tr := versioningTracker()
	var prev *Change
	last := map[string]*Change{}
	for i, c := range cs {
		AssignVersion(tr, c)
		if prev != nil && c.Version.Less(prev.Version) {
			t.Errorf("[%d] version %v < previous %v", i, c.Version, prev.Version)
		}
		if c.Tombstone {
			if prev == nil || prev.Op != OpDelete || c.Version != prev.Version {
				t.Errorf("[%d] tombstone version %v != delete %v", i, c.Version, prev)
			}
		}
		if c.Op != OpTruncate {
			k := string(KeyID(c.Key))
			if p := last[k]; p != nil && !c.Tombstone && !p.Version.Less(c.Version) {
				t.Errorf("[%d] key %v: %v not newer than %v", i, c.Key, c.Version, p.Version)
			}
			last[k] = c
		}
		prev = c
	}
}

func find(cs []*Change, pred func(*Change) bool) *Change {
	for _, c := range cs {
		if pred(c) {
			return c
		}
	}
	return nil
}

func col(c *Change, name string) any {
	i := c.Schema.Index(name)
	if i < 0 {
		return "<no column " + name + ">"
	}
	return c.Row[i]
}

func keyIs(vals ...any) func(*Change) bool {
	return func(c *Change) bool { return sameValue(c.Key, vals) && !c.Tombstone }
}

func checkRealValues(t *testing.T, table string, cs []*Change) {
	t.Helper()
	switch table {
	case "customers":
		c4 := find(cs, keyIs(int32(4)))
		if c4 == nil || col(c4, "birth_date") != int32(-1) || col(c4, "full_name") != "Dóra Ñandú 🐧" ||
			!sameValue(col(c4, "tags"), []any{"a", nil, `c "quoted"`}) {
			t.Errorf("customer 4: %#v", c4)
		}
		// step 5b: vip update of customer 1 with unchanged TOASTed notes
		var toasted bool
		for _, c := range cs {
			if c.SourceOp == 'u' && sameValue(c.Key, []any{int32(1)}) && IsUnavailable(col(c, "notes")) {
				toasted = true
				if col(c, "vip") != false {
					t.Errorf("vip %v", col(c, "vip"))
				}
			}
		}
		if !toasted {
			t.Error("no unavailable TOAST value in customers")
		}
		// step 8: c,u,d,tombstone,c for customer 5 in one transaction
		var ops []byte
		for _, c := range cs {
			if sameValue(c.Key, []any{int32(5)}) {
				ops = append(ops, map[bool]byte{true: 'T', false: c.SourceOp}[c.Tombstone])
			}
		}
		if string(ops) != "cudTc" {
			t.Errorf("customer 5 ops %q", ops)
		}
	case "order_items":
		pk := find(cs, func(c *Change) bool { return c.OldKey != nil })
		if pk == nil || !sameValue(pk.OldKey, []any{int64(1002), int16(1)}) || !sameValue(pk.Key, []any{int64(1002), int16(9)}) {
			t.Errorf("PK change: %+v", pk)
		}
		if d := find(cs, func(c *Change) bool { return c.KeyMoved }); d == nil || d.Op != OpDelete || !sameValue(d.Key, []any{int64(1002), int16(1)}) {
			t.Errorf("PK change delete half (KeyMoved): %+v", d)
		}
		if find(cs, func(c *Change) bool { return c.Op == OpTruncate && c.Key == nil && c.Row == nil }) == nil {
			t.Error("no truncate")
		}
	case "orders":
		for _, c := range cs {
			if c.Op != OpUpsert {
				continue
			}
			for i, cd := range c.Schema.Columns {
				if cd.Type.Kind == Double && c.Row[i] != nil {
					if _, ok := c.Row[i].(float64); !ok {
						t.Errorf("%s: %T", cd.Name, c.Row[i])
					}
				}
			}
		}
		o := find(cs, keyIs(int64(1003)))
		if o == nil {
			t.Fatal("order 1003 missing")
		}
		for name, want := range map[string]any{
			"amount":        dec("9999999999.99", 2),
			"placed_at":     int64(0),           // timestamptz at the epoch
			"delivery_date": days00010101,       // date 0001-01-01
			"delivery_slot": int64(86399999999), // time 23:59:59.999999 → µs of day
			"item_ids":      []any{int32(10), nil, int32(math.MinInt32), int32(math.MaxInt32)},
			"attrs":         "null",   // jsonb null
			"receipt":       []byte{}, // empty bytea
		} {
			if got := col(o, name); !sameValue(got, want) {
				t.Errorf("order 1003 %s = %#v, want %#v", name, got, want)
			}
		}
		for name, typ := range map[string]string{"amount": "decimal(12,2)", "placed_at": "timestamp", "delivery_date": "date",
			"delivery_slot": "long", "item_ids": "array<integer>", "discount_rate": "double", "receipt": "binary"} {
			if got := o.Schema.Columns[o.Schema.Index(name)].Type.String(); got != typ {
				t.Errorf("orders.%s type %s, want %s", name, got, typ)
			}
		}
	case "products":
		u := find(cs, func(c *Change) bool { return c.SourceOp == 'u' })
		if u == nil || u.Row == nil {
			t.Errorf("products update %+v", u)
		}
		pk := find(cs, func(c *Change) bool { return c.OldKey != nil })
		if pk == nil || !sameValue(pk.OldKey, []any{"SKU-3"}) || !sameValue(pk.Key, []any{"SKU-3B"}) {
			t.Errorf("PK change: %+v", pk)
		}
		if d := find(cs, func(c *Change) bool { return c.KeyMoved }); d == nil || d.Op != OpDelete || !sameValue(d.Key, []any{"SKU-3"}) {
			t.Errorf("PK change delete half (KeyMoved): %+v", d)
		}
	}
}

func loadSingle(t *testing.T, path string) *source.Record {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := source.ParseLine(bytes.TrimSpace(b), source.LineDefaults{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestEnvelopeFixturesSchemaVsSchemaless decodes the envelope package's
// synthetic fixtures in both JSON forms and checks that they normalize, and
// that the Changes agree where the schemaless form is lossless.
func TestEnvelopeFixturesSchemaVsSchemaless(t *testing.T) {
	files, _ := filepath.Glob("../envelope/testdata/json_schema/*.json")
	if len(files) == 0 {
		t.Fatal("no fixtures in ../envelope/testdata/json_schema")
	}
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			mode := envelope.FlattenAuto
			if strings.HasPrefix(name, "flat_") {
				mode = envelope.FlattenAlways
			}
			d := envelope.NewDecoder(envelope.Options{Flattened: mode})
			var cs [2]*Change
			for i, dir := range []string{"json_schema", "json_plain"} {
				r := loadSingle(t, filepath.Join("../envelope/testdata", dir, name))
				ev, err := d.Decode(context.Background(), r)
				if err != nil {
					t.Fatalf("decoder: %s: %v", dir, err)
				}
				c, err := newN(t, Options{}).Normalize(ev, r)
				if err != nil {
					t.Fatalf("%s: %v", dir, err)
				}
				cs[i] = c
			}
			a, b := cs[0], cs[1]
			if (a == nil) != (b == nil) {
				t.Fatalf("%v vs %v", a, b)
			}
			if a == nil {
				return
			}
			if a.Op != b.Op || a.SourceOp != b.SourceOp || a.Tombstone != b.Tombstone || a.Position != b.Position ||
				a.Table != b.Table || a.SourceTsMicros != b.SourceTsMicros || fmt.Sprint(a.Key) != fmt.Sprint(b.Key) ||
				fmt.Sprint(a.OldKey) != fmt.Sprint(b.OldKey) || (a.Row == nil) != (b.Row == nil) {
				t.Fatalf("\nschema     %+v\nschemaless %+v", a, b)
			}
			compared := 0
			for i, cd := range colsOrNil(a.Schema) {
				switch cd.Type.Kind {
				case Long, Double, String, Boolean:
				default:
					continue
				}
				j := b.Schema.Index(cd.Name)
				if j < 0 {
					t.Errorf("column %s missing schemaless", cd.Name)
					continue
				}
				if !sameValue(a.Row[i], b.Row[j]) {
					t.Errorf("column %s: %#v vs %#v", cd.Name, a.Row[i], b.Row[j])
				}
				if bt := b.Schema.Columns[j]; bt.Type.String() != cd.Type.String() && !bt.NullOnly {
					t.Errorf("column %s: %s vs %s", cd.Name, cd.Type.String(), bt.Type.String())
				}
				compared++
			}
			t.Logf("%d lossless columns compared", compared)
		})
	}
}

func colsOrNil(s *Schema) []ColumnDef {
	if s == nil {
		return nil
	}
	return s.Columns
}
