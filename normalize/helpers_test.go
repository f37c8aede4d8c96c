package normalize

import (
	"testing"

	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/cdcsink/cdc-sink/source"
	"github.com/cdcsink/cdc-sink/versioning"
)

// Builders for events shaped exactly as the envelope decoder produces them
// from Debezium 3.6 PostgreSQL output.

func sch(typ string) *envelope.Schema { return &envelope.Schema{Type: typ} }
func opt(typ string) *envelope.Schema { return &envelope.Schema{Type: typ, Optional: true} }
func named(typ, name string) *envelope.Schema {
	return &envelope.Schema{Type: typ, Name: name, Optional: true}
}
func withParams(s *envelope.Schema, kv ...string) *envelope.Schema {
	s.Parameters = map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		s.Parameters[kv[i]] = kv[i+1]
	}
	return s
}
func decimalSchema(p, s string) *envelope.Schema {
	return withParams(named("bytes", "org.apache.kafka.connect.data.Decimal"), "scale", s, "connect.decimal.precision", p)
}
func arrayOf(el *envelope.Schema) *envelope.Schema {
	return &envelope.Schema{Type: "array", Optional: true, Items: el}
}
func mapOf(k, v *envelope.Schema) *envelope.Schema {
	return &envelope.Schema{Type: "map", Optional: true, Keys: k, Values: v}
}

// structOf builds a struct schema from name/schema pairs.
func structOf(name string, kv ...any) *envelope.Schema {
	s := &envelope.Schema{Type: "struct", Name: name}
	for i := 0; i < len(kv); i += 2 {
		s.Fields = append(s.Fields, envelope.Field{Name: kv[i].(string), Schema: kv[i+1].(*envelope.Schema)})
	}
	return s
}

// rowOf builds a Row for s from values aligned with its fields.
func rowOf(s *envelope.Schema, vals ...any) *envelope.Row {
	r := &envelope.Row{Schema: s, Values: vals}
	for _, f := range s.Fields {
		r.Names = append(r.Names, f.Name)
	}
	if len(r.Names) != len(vals) {
		panic("rowOf: arity")
	}
	return r
}

// plain builds a schemaless row from name/value pairs.
func plain(kv ...any) *envelope.Row {
	r := &envelope.Row{}
	for i := 0; i < len(kv); i += 2 {
		r.Names = append(r.Names, kv[i].(string))
		r.Values = append(r.Values, kv[i+1])
	}
	return r
}

var (
	keySchema   = structOf("dbz.public.items.Key", "id", sch("int32"))
	valueSchema = structOf("dbz.public.items.Value",
		"id", sch("int32"),
		"name", opt("string"),
		"price", decimalSchema("10", "2"),
		"updated_at", named("int64", "io.debezium.time.MicroTimestamp"),
		"doc", named("string", "io.debezium.data.Json"),
	)
)

func itemsSource(snapshot, sequence string, lsn int64) envelope.Source {
	return envelope.Source{Version: "3.6.1.Final", Connector: "postgresql", Name: "dbz", DB: "app",
		Schema: "public", Table: "items", TsMs: 1767225600123, TsUs: 1767225600123456,
		Snapshot: snapshot, Sequence: sequence, LSN: lsn, HasLSN: lsn != 0, TxID: 771, HasTxID: true}
}

func rec(offset int64) *source.Record {
	return &source.Record{Topic: "dbz.public.items", Partition: 0, Offset: offset}
}

func item(id int64, name any, priceUnscaled []byte, ts int64) *envelope.Row {
	var p any
	if priceUnscaled != nil {
		p = priceUnscaled
	}
	return rowOf(valueSchema, id, name, p, ts, `{"a":1}`)
}

func changeEvent(op byte, before, after *envelope.Row, src envelope.Source) *envelope.Event {
	return &envelope.Event{Kind: envelope.KindChange, Format: envelope.FormatJSONSchema, Op: op,
		Key: rowOf(keySchema, int64(1)), Before: before, After: after, Source: src, TsMs: src.TsMs + 5}
}

func newN(t testing.TB, o Options) *Normalizer {
	t.Helper()
	n, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func wantReason(t *testing.T, err error, r quarantine.Reason, contains ...string) {
	t.Helper()
	got, ok := quarantine.ReasonOf(err)
	if !ok || got != r {
		t.Fatalf("error %v: want reason %s", err, r)
	}
	for _, c := range contains {
		if !containsStr(err.Error(), c) {
			t.Fatalf("error %q does not mention %q", err, c)
		}
	}
}

func containsStr(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func versioningTracker() *versioning.Tracker { return versioning.NewTracker() }
