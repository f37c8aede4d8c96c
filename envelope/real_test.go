package envelope

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cdcsink/cdc-sink/source"
)

// Records captured from a real Debezium 3.6.1 / Kafka 4.3.1 / PostgreSQL 15
// stack (testdata/real/README.md): JsonConverter with schemas and the
// Apicurio AvroConverter in Confluent framing.

const realDir = "testdata/real"

func loadKcat(t testing.TB, name string) []*source.Record {
	t.Helper()
	recs, err := source.ReadFile(filepath.Join(realDir, name), source.FileOptions{})
	if err != nil {
		t.Fatalf("fixtures: %v", err)
	}
	return recs
}

func realRegistry(t testing.TB) *MemoryRegistry {
	reg := NewMemoryRegistry()
	files, _ := filepath.Glob(filepath.Join(realDir, "avro-schemas", "*.avsc"))
	for _, f := range files {
		id, err := strconv.Atoi(strings.TrimSuffix(filepath.Base(f), ".avsc"))
		if err != nil {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		reg.Set(id, string(b))
	}
	return reg
}

func TestRealRecordsDecode(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(realDir, "*.jsonl"))
	if len(files) == 0 {
		t.Fatal("no real fixtures in " + realDir)
	}
	d := NewDecoder(Options{Registry: realRegistry(t)})
	kinds := map[Kind]int{}
	for _, f := range files {
		name := filepath.Base(f)
		avro := strings.Contains(name, "loja_avro")
		for _, r := range loadKcat(t, name) {
			ev, err := d.Decode(t.Context(), r)
			if err != nil {
				t.Errorf("%s@%d: %v", name, r.Offset, err)
				continue
			}
			kinds[ev.Kind]++
			want := KindChange
			switch {
			case strings.HasPrefix(name, "__debezium-heartbeat"):
				want = KindHeartbeat
			case strings.Contains(name, ".transaction"):
				want = KindTxMetadata
			case strings.Contains(name, ".message"):
				want = KindMessage
			case r.Value == nil:
				want = KindTombstone
			}
			if ev.Kind != want {
				t.Errorf("%s@%d: kind %d, want %d", name, r.Offset, ev.Kind, want)
			}
			if wantF := map[bool]Format{true: FormatAvro, false: FormatJSONSchema}[avro]; ev.Format != wantF {
				t.Errorf("%s@%d: format %d", name, r.Offset, ev.Format)
			}
			switch ev.Kind {
			case KindChange:
				if ev.Op == 0 || !ev.Source.HasLSN || ev.Source.Sequence == "" || ev.Source.Connector != "postgresql" || ev.Source.DB != "loja" {
					t.Errorf("%s@%d: op %q source %+v", name, r.Offset, ev.Op, ev.Source)
				}
				if ev.Op != 't' && ev.Key == nil {
					t.Errorf("%s@%d: no key", name, r.Offset)
				}
			case KindTxMetadata:
				if ev.TxMeta.Status != "BEGIN" && ev.TxMeta.Status != "END" || ev.TxMeta.ID == "" || ev.TxMeta.TsMs == 0 {
					t.Errorf("%s@%d: %+v", name, r.Offset, ev.TxMeta)
				}
				if ev.TxMeta.Status == "END" && len(ev.TxMeta.DataCollections) == 0 && ev.TxMeta.EventCount > 0 {
					t.Errorf("%s@%d: END without data collections: %+v", name, r.Offset, ev.TxMeta)
				}
			case KindMessage:
				if ev.Message == nil || ev.Message.Prefix != "cdc-sink" || len(ev.Message.Content) == 0 {
					t.Errorf("%s@%d: message %+v", name, r.Offset, ev.Message)
				}
			case KindHeartbeat:
				if ev.TsMs == 0 {
					t.Errorf("%s@%d: heartbeat without ts_ms", name, r.Offset)
				}
			}
			if v, ok := r.Header(HeaderNewKey); ok && !bytes.Equal(ev.NewKey, v) {
				t.Errorf("%s@%d: newkey %q", name, r.Offset, ev.NewKey)
			}
			if v, ok := r.Header(HeaderOldKey); ok && !bytes.Equal(ev.OldKey, v) {
				t.Errorf("%s@%d: oldkey %q", name, r.Offset, ev.OldKey)
			}
		}
	}
	t.Logf("kinds: %v", kinds)
}

// The same workload through the JSON and the Avro connector decodes to the
// same rows (names of named schemas differ only by the topic prefix).
func TestRealJSONvsAvro(t *testing.T) {
	d := NewDecoder(Options{Registry: realRegistry(t)})
	for _, table := range []string{"customers", "orders", "order_items", "products"} {
		js := loadKcat(t, "loja.public."+table+".jsonl")
		av := loadKcat(t, "loja_avro.public."+table+".jsonl")
		if len(js) != len(av) {
			t.Errorf("%s: %d json vs %d avro records", table, len(js), len(av))
			continue
		}
		for i := range js {
			a, err := d.Decode(t.Context(), js[i])
			if err != nil {
				t.Fatal(err)
			}
			b, err := d.Decode(t.Context(), av[i])
			if err != nil {
				t.Fatal(err)
			}
			if a.Kind != b.Kind || a.Op != b.Op || a.Source.Snapshot != b.Source.Snapshot || (a.Tx == nil) != (b.Tx == nil) {
				t.Errorf("%s#%d: kind/op/snapshot/tx %d/%q/%q/%v vs %d/%q/%q/%v", table, i,
					a.Kind, a.Op, a.Source.Snapshot, a.Tx != nil, b.Kind, b.Op, b.Source.Snapshot, b.Tx != nil)
			}
			for _, p := range [][2]*Row{{a.Key, b.Key}, {a.Before, b.Before}, {a.After, b.After}} {
				ca, cb := realCanon(canon(p[0])), realCanon(canon(p[1]))
				if dd := diff(ca, cb); dd != "" {
					t.Errorf("%s#%d (%c): %s", table, i, a.Op, dd)
				}
			}
		}
	}
}

// realCanon replaces the connector's topic prefix in schema names.
func realCanon(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, y := range x {
			out[k] = realCanon(y)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, y := range x {
			out[i] = realCanon(y)
		}
		return out
	case string:
		return strings.Replace(x, "loja_avro.", "loja.", 1)
	}
	return v
}
