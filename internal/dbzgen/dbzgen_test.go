package dbzgen

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/cdcsink/cdc-sink/source"
	"github.com/cdcsink/cdc-sink/txgate"
	"github.com/cdcsink/cdc-sink/versioning"
)

// full is a config that turns every feature on.
func full(f Format, seed int64) Config {
	return Config{
		Seed: seed, Format: f, Partitions: 3, Keys: 60, Events: 600, SnapshotRows: 25,
		Tombstones: true, TxSize: 4, InFlightAtSnapshot: true, Duplicates: 0.1,
		ToastEvery: 5, PKChangeEvery: 7, Malformed: 8, Resnapshot: true, RowWidth: 40,
	}
}

var allFormats = []Format{JSONSchema, JSONPlain, Unwrap, UnwrapPlain}

func sameRecords(t *testing.T, a, b []*source.Record) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("record count %d != %d", len(a), len(b))
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Topic != y.Topic || x.Partition != y.Partition || x.Offset != y.Offset ||
			!bytes.Equal(x.Key, y.Key) || !bytes.Equal(x.Value, y.Value) || (x.Value == nil) != (y.Value == nil) ||
			!x.Timestamp.Equal(y.Timestamp) || !reflect.DeepEqual(x.Headers, y.Headers) {
			t.Fatalf("record %d differs", i)
		}
	}
}

func TestDeterministic(t *testing.T) {
	for _, f := range allFormats {
		a, b := Generate(full(f, 42)), Generate(full(f, 42))
		sameRecords(t, a.Records, b.Records)
		if !reflect.DeepEqual(a.Expected(), b.Expected()) || !reflect.DeepEqual(a.Malformed(), b.Malformed()) || a.Counts() != b.Counts() {
			t.Fatalf("%v: model differs between runs", f)
		}
		c := Generate(full(f, 43))
		if len(c.Records) == len(a.Records) && bytes.Equal(c.Records[len(c.Records)-1].Value, a.Records[len(a.Records)-1].Value) {
			t.Fatalf("%v: seed does not matter", f)
		}
	}
	sameRecords(t, Lab().Records, Lab().Records)
}

// LazySnapshot must give the same stream as the eager form, byte for byte,
// with the same offsets and the same reference model.
func TestLazySnapshotSameStream(t *testing.T) {
	for _, f := range allFormats {
		cfg := full(f, 9)
		cfg.Malformed = 0
		eager := Generate(cfg)
		cfg.LazySnapshot = true
		lazy := Generate(cfg)
		n := eager.Counts().Snapshot
		if n == 0 || lazy.Counts() != eager.Counts() {
			t.Fatalf("%v: counts %+v vs %+v", f, lazy.Counts(), eager.Counts())
		}
		var snap []*source.Record
		if err := lazy.EachSnapshot(func(r *source.Record) error { snap = append(snap, r); return nil }); err != nil {
			t.Fatal(err)
		}
		var eagerSnap []*source.Record
		if err := eager.EachSnapshot(func(r *source.Record) error { eagerSnap = append(eagerSnap, r); return nil }); err != nil {
			t.Fatal(err)
		}
		sameRecords(t, snap, eager.Records[:n])
		sameRecords(t, eagerSnap, eager.Records[:n])
		sameRecords(t, lazy.Records, eager.Records[n:])
		if !reflect.DeepEqual(lazy.Expected(), eager.Expected()) {
			t.Fatalf("%v: Expected differs", f)
		}
		var a, b []Row
		_ = lazy.EachExpected(func(r Row) error { a = append(a, r); return nil })
		_ = eager.EachExpected(func(r Row) error { b = append(b, r); return nil })
		if len(a) != len(eager.Expected()) || !reflect.DeepEqual(a, b) {
			t.Fatalf("%v: EachExpected differs (%d vs %d rows)", f, len(a), len(b))
		}
		for i := 1; i < len(a); i++ {
			if a[i-1].ID >= a[i].ID {
				t.Fatalf("%v: EachExpected not in id order at %d", f, i)
			}
		}
	}
}

func TestOffsetsPerPartition(t *testing.T) {
	s := Generate(full(JSONSchema, 1))
	next := map[int32]int64{}
	for _, r := range s.Records {
		if r.Offset != next[r.Partition] {
			t.Fatalf("partition %d: offset %d, want %d", r.Partition, r.Offset, next[r.Partition])
		}
		next[r.Partition]++
		if r.Topic != "loja.public.orders" {
			t.Fatalf("topic %q", r.Topic)
		}
	}
	if len(next) != 3 {
		t.Fatalf("partitions used: %v", next)
	}
}

func TestMurmur2(t *testing.T) {
	// Kafka's Utils.murmur2 test vectors (UtilsTest.testMurmur2).
	cases := map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	}
	for in, want := range cases {
		if got := int32(murmur2([]byte(in))); got != want {
			t.Errorf("murmur2(%q) = %d, want %d", in, got, want)
		}
	}
}

// orderedKeys returns the keys of a JSON object in document order.
func orderedKeys(t *testing.T, raw json.RawMessage) []string {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %s", raw)
	}
	var keys []string
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := d.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

func field(t *testing.T, raw json.RawMessage, name string) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	v, ok := m[name]
	if !ok {
		t.Fatalf("no %q in %s", name, raw)
	}
	return v
}

var (
	envelopeKeys = []string{"before", "after", "source", "transaction", "op", "ts_ms", "ts_us", "ts_ns"}
	sourceKeys   = []string{"version", "connector", "name", "ts_ms", "snapshot", "db", "sequence", "ts_us", "ts_ns", "schema", "table", "txId", "lsn", "xmin", "origin", "origin_lsn"}
)

func TestShape(t *testing.T) {
	for _, f := range allFormats {
		s := Generate(full(f, 7))
		ops := map[string]int{}
		for _, r := range s.Records {
			c := Coord{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}
			if s.IsMalformed(c) {
				continue
			}
			var key, val json.RawMessage
			if err := json.Unmarshal(r.Key, &key); err != nil {
				t.Fatalf("%v %v key: %v", f, c, err)
			}
			if f.schemas() {
				if got := orderedKeys(t, key); !reflect.DeepEqual(got, []string{"schema", "payload"}) {
					t.Fatalf("key keys %v", got)
				}
				key = field(t, key, "payload")
			}
			if got := orderedKeys(t, key); !reflect.DeepEqual(got, []string{"id"}) {
				t.Fatalf("key payload %s", key)
			}
			if r.Value == nil {
				if f.unwrap() {
					t.Fatalf("%v: tombstone in rewrite mode", f)
				}
				ops["tombstone"]++
				continue
			}
			if err := json.Unmarshal(r.Value, &val); err != nil {
				t.Fatalf("%v %v value: %v", f, c, err)
			}
			if f.schemas() {
				if got := orderedKeys(t, val); !reflect.DeepEqual(got, []string{"schema", "payload"}) {
					t.Fatalf("value keys %v", got)
				}
				val = field(t, val, "payload")
			}
			if f.unwrap() {
				keys := orderedKeys(t, val)
				want := append(append([]string(nil), Columns...), "__op", "__lsn", "__source_ts_ms", "__source_sequence", "__snapshot", "__deleted")
				if !reflect.DeepEqual(keys, want) {
					t.Fatalf("unwrap keys %v", keys)
				}
				var op string
				json.Unmarshal(field(t, val, "__op"), &op)
				ops[op]++
				continue
			}
			if got := orderedKeys(t, val); !reflect.DeepEqual(got, envelopeKeys) {
				t.Fatalf("envelope keys %v", got)
			}
			src := field(t, val, "source")
			if got := orderedKeys(t, src); !reflect.DeepEqual(got, sourceKeys) {
				t.Fatalf("source keys %v", got)
			}
			var op string
			json.Unmarshal(field(t, val, "op"), &op)
			ops[op]++
			img := field(t, val, "after")
			if op == "d" {
				img = field(t, val, "before")
			}
			if got := orderedKeys(t, img); !reflect.DeepEqual(got, Columns) {
				t.Fatalf("row keys %v", got)
			}
		}
		for _, op := range []string{"r", "c", "u", "d"} {
			if ops[op] == 0 {
				t.Errorf("%v: no op %s (%v)", f, op, ops)
			}
		}
	}
}

// TestMatchesRealCapture compares the constant parts with the records
// captured from a live Debezium 3.6.1 stack, when they are present.
func TestMatchesRealCapture(t *testing.T) {
	b, err := os.ReadFile("../../envelope/testdata/real/loja.public.orders.jsonl")
	if err != nil {
		t.Fatal("no real capture:", err)
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	real, err := source.ParseLine(line, source.LineDefaults{})
	if err != nil {
		t.Fatal(err)
	}
	var rv, gv struct {
		Schema struct {
			Fields []json.RawMessage `json:"fields"`
			Name   string            `json:"name"`
		} `json:"schema"`
		Payload json.RawMessage `json:"payload"`
	}
	gen := Generate(Config{Events: 20, SnapshotRows: 3, TxSize: 2})
	if err := json.Unmarshal(real.Value, &rv); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(gen.Records[0].Value, &gv); err != nil {
		t.Fatal(err)
	}
	if rv.Schema.Name != gv.Schema.Name {
		t.Errorf("envelope name %q vs real %q", gv.Schema.Name, rv.Schema.Name)
	}
	// source, transaction, op, ts_* schemas: byte-identical to the real ones.
	for i := 2; i < len(rv.Schema.Fields); i++ {
		if !bytes.Equal(rv.Schema.Fields[i], gv.Schema.Fields[i]) {
			t.Errorf("schema field %d:\n got %s\nreal %s", i, gv.Schema.Fields[i], rv.Schema.Fields[i])
		}
	}
	// row columns of the same PostgreSQL type: same field schema
	rowFields := func(f json.RawMessage) map[string]string {
		var st struct{ Fields []json.RawMessage }
		json.Unmarshal(f, &st)
		m := map[string]string{}
		for _, x := range st.Fields {
			var n struct{ Field string }
			json.Unmarshal(x, &n)
			m[n.Field] = strings.Replace(string(x), `"field":"`+n.Field+`"`, `"field":"?"`, 1)
		}
		return m
	}
	rf, gf := rowFields(rv.Schema.Fields[1]), rowFields(gv.Schema.Fields[1])
	for ours, theirs := range map[string]string{"id": "id", "customer_id": "customer_id", "amount": "amount",
		"created_at": "placed_at", "ship_date": "delivery_date", "payload": "attrs", "tags": "labels",
		"note": "note", "uuid": "order_uuid", "paid": "paid"} {
		if gf[ours] == "" || gf[ours] != rf[theirs] {
			t.Errorf("column %s: %s, real %s: %s", ours, gf[ours], theirs, rf[theirs])
		}
	}
	// envelope schema: everything but the row fields identical
	strip := func(raw []byte) string {
		var m map[string]any
		json.Unmarshal(raw, &m)
		delete(m["schema"].(map[string]any), "fields")
		out, _ := json.Marshal(m["schema"])
		return string(out)
	}
	if a, b := strip(gen.Records[0].Value), strip(real.Value); a != b {
		t.Errorf("envelope schema attributes %s vs real %s", a, b)
	}
	if got, want := orderedKeys(t, gv.Payload), orderedKeys(t, rv.Payload); !reflect.DeepEqual(got, want) {
		t.Errorf("payload keys %v vs real %v", got, want)
	}
	if got, want := orderedKeys(t, field(t, gv.Payload, "source")), orderedKeys(t, field(t, rv.Payload, "source")); !reflect.DeepEqual(got, want) {
		t.Errorf("source keys %v vs real %v", got, want)
	}
	// key schema and header names
	var rk, gk struct{ Schema json.RawMessage }
	json.Unmarshal(real.Key, &rk)
	json.Unmarshal(gen.Records[0].Key, &gk)
	if !bytes.Equal(rk.Schema, gk.Schema) {
		t.Errorf("key schema %s vs real %s", gk.Schema, rk.Schema)
	}
	var rh, gh []string
	for _, h := range real.Headers {
		rh = append(rh, h.Key)
	}
	for _, h := range gen.Records[0].Headers {
		gh = append(gh, h.Key)
	}
	if !reflect.DeepEqual(rh, gh) {
		t.Errorf("headers %v vs real %v", gh, rh)
	}
}

// decodeAll decodes and normalizes every record in partition order and
// assigns versions; it checks that exactly the malformed records fail, each
// with a quarantine reason.
func decodeAll(t *testing.T, s *Stream) map[*source.Record]*normalize.Change {
	t.Helper()
	dec := envelope.NewDecoder(envelope.Options{})
	n, err := normalize.New(normalize.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tr := versioning.NewTracker()
	out := make(map[*source.Record]*normalize.Change, len(s.Records))
	reasons := map[quarantine.Reason]int{}
	for _, r := range s.Records {
		coord := Coord{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}
		bad := s.IsMalformed(coord)
		ev, err := dec.Decode(context.Background(), r)
		var c *normalize.Change
		if err == nil {
			c, err = n.Normalize(ev, r)
		}
		if bad {
			if err == nil {
				t.Fatalf("%v: malformed record %v accepted: %.300s", s.Config.Format, coord, r.Value)
			}
			reason, ok := quarantine.ReasonOf(err)
			if !ok {
				t.Fatalf("%v: malformed record %v: error without reason: %v", s.Config.Format, coord, err)
			}
			reasons[reason]++
			continue
		}
		if err != nil {
			t.Fatalf("%v: record %v: %v\n%.400s", s.Config.Format, coord, err, r.Value)
		}
		if c == nil {
			t.Fatalf("record %v: no change", coord)
		}
		normalize.AssignVersion(tr, c)
		out[r] = c
	}
	if len(reasons) > 0 {
		t.Logf("%v: quarantine reasons %v", s.Config.Format, reasons)
	}
	return out
}

type sinkRow struct {
	v       versioning.Version
	deleted bool
	schema  *normalize.Schema
	row     []any
}

// apply folds changes in arrival order with the version guard (a change wins
// iff its version is greater than the stored one), keeping stored values
// for unavailable TOAST columns.
func apply(t *testing.T, state map[int64]*sinkRow, changes map[*source.Record]*normalize.Change, batches [][]*source.Record) {
	t.Helper()
	for _, b := range batches {
		for _, r := range b {
			c := changes[r]
			if c == nil || c.Tombstone {
				continue
			}
			id := c.Key[0].(int64)
			cur := state[id]
			if cur != nil && !cur.v.Less(c.Version) {
				continue
			}
			nr := &sinkRow{v: c.Version, deleted: c.Op == normalize.OpDelete, schema: c.Schema, row: c.Row}
			if !nr.deleted {
				row := append([]any(nil), c.Row...)
				for i, v := range row {
					if normalize.IsUnavailable(v) {
						if cur == nil || cur.deleted {
							t.Fatalf("key %d: unavailable %s without a stored value", id, c.Schema.Columns[i].Name)
						}
						row[i] = cur.row[cur.schema.Index(c.Schema.Columns[i].Name)]
					}
				}
				nr.row = row
			}
			state[id] = nr
		}
	}
}

func equalValue(a, b any) bool {
	if da, ok := a.(decimal.Decimal); ok {
		db, ok := b.(decimal.Decimal)
		return ok && da.Equal(db) && da.Exponent() == db.Exponent()
	}
	return reflect.DeepEqual(a, b)
}

// check compares the sink state with Expected. typed: compare every column
// value (schema'd formats); otherwise only presence and status.
func check(t *testing.T, s *Stream, state map[int64]*sinkRow, typed bool) {
	t.Helper()
	exp := s.Expected()
	if len(exp) != len(state) {
		t.Errorf("%v: %d keys in sink, %d expected", s.Config.Format, len(state), len(exp))
	}
	for k, want := range exp {
		got := state[want.ID]
		if got == nil {
			t.Errorf("key %s missing", k)
			continue
		}
		if got.deleted != want.Deleted {
			t.Errorf("key %s: deleted %v, want %v", k, got.deleted, want.Deleted)
			continue
		}
		if got.v.Commit != want.Commit || got.v.LSN != want.LSN || (got.v.Phase == versioning.PhaseSnapshot) != want.Snapshot {
			t.Errorf("key %s: version %v, want commit %d lsn %d snapshot %v", k, got.v, want.Commit, want.LSN, want.Snapshot)
		}
		if want.Deleted {
			continue
		}
		for i, col := range Columns {
			j := got.schema.Index(col)
			if j < 0 {
				t.Fatalf("column %s missing", col)
			}
			if !typed && i != ColStatus {
				continue
			}
			if !equalValue(got.row[j], want.Values[i]) {
				t.Errorf("key %s column %s: %#v (%T), want %#v (%T)", k, col, got.row[j], got.row[j], want.Values[i], want.Values[i])
			}
		}
	}
}

// TestExpectedMatchesSink decodes every record with the team's decoder and
// normalizer, versions them in partition order and folds them with the
// version guard, in partition order and with at-least-once redelivery: the
// result must equal Expected, column by column.
func TestExpectedMatchesSink(t *testing.T) {
	for _, f := range allFormats {
		for seed := int64(1); seed <= 4; seed++ {
			cfg := full(f, seed)
			if seed%2 == 0 {
				// sparse: few changes per key, so every ordering mistake shows
				cfg.Keys, cfg.SnapshotRows, cfg.Events, cfg.TxSize, cfg.Concurrency = 800, 300, 500, 6, 5
				cfg.Resnapshot = false // it would supersede most of the history
			}
			s := Generate(cfg)
			changes := decodeAll(t, s)
			for _, mode := range []Delivery{InOrder, AtLeastOnce} {
				state := map[int64]*sinkRow{}
				apply(t, state, changes, s.DeliveryOrder(rand.New(rand.NewPCG(uint64(seed), 9)), mode))
				check(t, s, state, f.schemas())
			}
		}
	}
}

// TestShuffledDelivery: with arbitrary reordering and redelivery, versions
// alone still give Expected (TOAST off: an unavailable value needs its
// predecessor applied first).
func TestShuffledDelivery(t *testing.T) {
	cfg := full(JSONSchema, 5)
	cfg.ToastEvery = 0
	s := Generate(cfg)
	changes := decodeAll(t, s)
	for i := uint64(0); i < 5; i++ {
		batches := s.DeliveryOrder(rand.New(rand.NewPCG(i, 1)), Shuffled)
		n := 0
		for _, b := range batches {
			n += len(b)
		}
		if n <= len(s.Records) {
			t.Errorf("no redelivery: %d records delivered of %d", n, len(s.Records))
		}
		state := map[int64]*sinkRow{}
		apply(t, state, changes, batches)
		check(t, s, state, true)
	}
}

func TestDeliveryModes(t *testing.T) {
	s := Generate(full(JSONSchema, 3))
	rng := rand.New(rand.NewPCG(1, 2))
	// InOrder: every record once, partition order kept.
	var seen []*source.Record
	last := map[int32]int64{}
	for _, b := range s.DeliveryOrder(rng, InOrder) {
		for _, r := range b {
			if o, ok := last[r.Partition]; ok && r.Offset != o+1 {
				t.Fatalf("partition %d: offset %d after %d", r.Partition, r.Offset, o)
			}
			last[r.Partition] = r.Offset
			seen = append(seen, r)
		}
	}
	if len(seen) != len(s.Records) {
		t.Fatalf("in-order delivered %d of %d", len(seen), len(s.Records))
	}
	// AtLeastOnce: per partition, each record's successor is the next offset
	// or a rewind.
	rewinds := 0
	last = map[int32]int64{}
	for _, b := range s.DeliveryOrder(rng, AtLeastOnce) {
		for _, r := range b {
			if o, ok := last[r.Partition]; ok && r.Offset != o+1 {
				if r.Offset > o {
					t.Fatalf("partition %d: skipped from %d to %d", r.Partition, o, r.Offset)
				}
				rewinds++
			}
			last[r.Partition] = r.Offset
		}
	}
	if rewinds == 0 {
		t.Error("at-least-once: no rewind")
	}
}

// TestLab hand-checks the article's lab stream.
func TestLab(t *testing.T) {
	s := Lab()
	var ops []string
	for _, r := range s.Records {
		var v struct {
			Payload struct {
				Op     string
				After  *struct{ ID int64 }
				Before *struct{ ID int64 }
			}
		}
		if r.Value == nil {
			ops = append(ops, "tombstone")
			continue
		}
		if err := json.Unmarshal(r.Value, &v); err != nil {
			t.Fatal(err)
		}
		id := int64(0)
		if v.Payload.After != nil {
			id = v.Payload.After.ID
		} else {
			id = v.Payload.Before.ID
		}
		ops = append(ops, fmt.Sprintf("%s%d", v.Payload.Op, id))
	}
	if got := strings.Join(ops, " "); got != "c101 c102 u101 c103 d102 tombstone u101" {
		t.Fatalf("lab ops: %s", got)
	}
	exp := s.Expected()
	if len(exp) != 3 {
		t.Fatalf("expected %d keys", len(exp))
	}
	if r := exp["101"]; r.Deleted || r.Get("status") != "ENVIADO" || r.Get("paid") != true ||
		!r.Get("amount").(decimal.Decimal).Equal(decimal.RequireFromString("150.00")) {
		t.Errorf("101: %+v", r)
	}
	if r := exp["102"]; !r.Deleted || r.Values != nil {
		t.Errorf("102: %+v", r)
	}
	if r := exp["103"]; r.Deleted || r.Get("status") != "CRIADO" || r.Get("customer_id") != int32(3) ||
		!r.Get("amount").(decimal.Decimal).Equal(decimal.RequireFromString("42.00")) {
		t.Errorf("103: %+v", r)
	}
	c := s.Counts()
	if c.Inserts != 3 || c.Updates != 2 || c.Deletes != 1 || c.Tombstones != 1 || c.Records != 7 || c.Transactions != 6 {
		t.Errorf("counts %+v", c)
	}
	changes := decodeAll(t, s)
	state := map[int64]*sinkRow{}
	apply(t, state, changes, [][]*source.Record{s.Records})
	check(t, s, state, true)
}

// sourceOf parses the source block of an envelope record.
type srcInfo struct {
	Op     string
	Source struct {
		Snapshot string
		Sequence string
		TxID     int64 `json:"txId"`
		LSN      uint64
	}
	Transaction *struct {
		ID         string
		TotalOrder int64 `json:"total_order"`
	}
}

func parseSrc(t *testing.T, r *source.Record) (srcInfo, bool) {
	var v struct{ Payload srcInfo }
	if r.Value == nil {
		return srcInfo{}, false
	}
	if err := json.Unmarshal(r.Value, &v); err != nil {
		return srcInfo{}, false
	}
	return v.Payload, true
}

// TestScenarios checks the hard cases are really in the stream: the
// in-flight transaction at the snapshot handoff, interleaved transactions
// (a change LSN lower than one emitted before it), PK change headers, the
// TOAST placeholder, snapshot markers and redeliveries.
func TestScenarios(t *testing.T) {
	s := Generate(full(JSONSchema, 11))
	var snapLSN uint64
	handoff, interleaved, placeholder, newkey, oldkey := false, false, false, false, false
	markers := map[string]int{}
	var maxLSN uint64
	seenStream := false
	for _, r := range s.Records {
		if s.IsMalformed(Coord{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}) {
			continue
		}
		if _, ok := r.Header("__debezium.newkey"); ok {
			newkey = true
		}
		if _, ok := r.Header("__debezium.oldkey"); ok {
			oldkey = true
		}
		p, ok := parseSrc(t, r)
		if !ok {
			continue
		}
		if bytes.Contains(r.Value, []byte(`"note":"`+Unavailable+`"`)) {
			placeholder = true
		}
		if p.Op == "r" {
			markers[p.Source.Snapshot]++
			if snapLSN == 0 {
				snapLSN = p.Source.LSN
			}
			if p.Transaction != nil {
				t.Error("snapshot row with a transaction block")
			}
			continue
		}
		if !seenStream && strings.HasPrefix(p.Source.Sequence, "[null,") && p.Source.LSN < snapLSN {
			handoff = true
		}
		seenStream = true
		if p.Source.LSN < maxLSN {
			interleaved = true
		}
		maxLSN = max(maxLSN, p.Source.LSN)
		if p.Transaction == nil || p.Transaction.ID != fmt.Sprintf("%d:%d", p.Source.TxID, p.Source.LSN) {
			t.Fatalf("transaction block %+v", p.Transaction)
		}
	}
	if !handoff || !interleaved || !placeholder || !newkey || !oldkey {
		t.Errorf("handoff %v interleaved %v placeholder %v newkey %v oldkey %v", handoff, interleaved, placeholder, newkey, oldkey)
	}
	if markers["first"] != 2 || markers["last"] != 2 || markers["true"] == 0 {
		t.Errorf("snapshot markers %v", markers)
	}
	c := s.Counts()
	if c.Duplicates == 0 || c.PKChanges == 0 || c.ToastUpdates == 0 || c.Resnapshot == 0 || c.Malformed != 8 || len(s.Malformed()) != 8 {
		t.Errorf("counts %+v", c)
	}
	if got := c.Snapshot + c.Resnapshot + c.Inserts + c.Updates + c.Deletes + 2*c.PKChanges + c.Tombstones + c.Duplicates + c.Malformed; got != c.Records || c.Records != len(s.Records) {
		t.Errorf("counts do not add up: %d vs %d (%+v)", got, len(s.Records), c)
	}
	if n := c.Inserts + c.Updates + c.Deletes + c.PKChanges; n != 600 {
		t.Errorf("%d events, want 600", n)
	}
}

func TestWriteKcatFile(t *testing.T) {
	s := Generate(Config{Events: 50, SnapshotRows: 5, Tombstones: true, Partitions: 2, PKChangeEvery: 3, Malformed: 2})
	path := filepath.Join(t.TempDir(), "orders.jsonl")
	if err := WriteKcatFile(path, s.Records); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))
	if len(lines) != len(s.Records) {
		t.Fatalf("%d lines, %d records", len(lines), len(s.Records))
	}
	for i, l := range lines {
		r, err := source.ParseLine(l, source.LineDefaults{})
		if err != nil {
			t.Fatal(err)
		}
		w := s.Records[i]
		if r.Partition != w.Partition || r.Offset != w.Offset || !bytes.Equal(r.Key, w.Key) || !bytes.Equal(r.Value, w.Value) || (r.Value == nil) != (w.Value == nil) || len(r.Headers) != len(w.Headers) {
			t.Fatalf("line %d does not round-trip", i)
		}
	}
}

// BenchmarkGenerate reports records per wall-clock second and per second of
// process CPU time (the latter is stable on a shared machine).
func BenchmarkGenerate(b *testing.B) {
	for _, f := range []Format{JSONSchema, JSONPlain} {
		b.Run(f.String(), func(b *testing.B) {
			cfg := Config{Format: f, Events: 20000, SnapshotRows: 1000, Keys: 5000, Partitions: 6, TxSize: 5, Tombstones: true}
			b.ReportAllocs()
			cpu0 := cpuTime()
			events := 0
			for i := 0; b.Loop(); i++ {
				cfg.Seed = int64(i)
				events += Generate(cfg).Counts().Records
			}
			b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
			if d := cpuTime() - cpu0; d > 0 {
				b.ReportMetric(float64(events)/d.Seconds(), "events/cpu-s")
			}
		})
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestEdgeConfigs: tiny key spaces, everything locked, empty streams.
func TestEdgeConfigs(t *testing.T) {
	cfgs := []Config{
		{},
		{SnapshotRows: 1},
		{Events: 1, InFlightAtSnapshot: true},
		{Keys: 1, Events: 200, TxSize: 3, Concurrency: 4, PKChangeEvery: 2, ToastEvery: 2, Tombstones: true},
		{Keys: 3, SnapshotRows: 3, Events: 300, TxSize: 8, Concurrency: 8, PKChangeEvery: 3, InFlightAtSnapshot: true, Resnapshot: true, Duplicates: 0.5, Malformed: 3},
		{Events: 100, Mix: Mix{Delete: 1}, SnapshotRows: 10, Tombstones: true},
		{Events: 100, Mix: Mix{Insert: 1}, Keys: 20},
		{Events: 50, Format: Unwrap, UnwrapLSNOnly: true, Malformed: 4},
	}
	for i, cfg := range cfgs {
		s := Generate(cfg)
		if s.Counts().Records != len(s.Records) {
			t.Fatalf("config %d: counts %+v", i, s.Counts())
		}
		if cfg.Events > 0 && s.Counts().Inserts+s.Counts().Updates+s.Counts().Deletes+s.Counts().PKChanges == 0 {
			t.Errorf("config %d: no changes", i)
		}
		changes := decodeAll(t, s)
		state := map[int64]*sinkRow{}
		apply(t, state, changes, [][]*source.Record{s.Records})
		if !cfg.UnwrapLSNOnly {
			check(t, s, state, cfg.Format.schemas())
		}
	}
	if s := Generate(Config{SnapshotRows: 1}); len(s.Records) != 1 || !bytes.Contains(s.Records[0].Value, []byte(`"snapshot":"last"`)) {
		t.Errorf("one-row snapshot must be marked last")
	}
}

func ExampleGenerate() {
	s := Generate(Config{Seed: 1, Events: 100, SnapshotRows: 10, Partitions: 2, TxSize: 3, Tombstones: true})
	fmt.Println(s.Topic, s.Counts().Snapshot, s.Counts().Inserts+s.Counts().Updates+s.Counts().Deletes)
	// Output: loja.public.orders 10 100
}

// TxEnds: one END per committed transaction, after its last record; fed
// with the data to a transaction gate in that order, every record comes out
// once and every transaction whole (the counts match the events, tombstones
// not counted).
func TestTxEnds(t *testing.T) {
	s := Generate(Config{Seed: 9, Partitions: 3, Keys: 200, Events: 2000, SnapshotRows: 100, Tombstones: true,
		TxSize: 4, InFlightAtSnapshot: true, Duplicates: 0.05, Format: JSONPlain})
	ends := s.TxEnds("loja.transaction")
	if len(ends) != s.Counts().Transactions || len(ends) == 0 {
		t.Fatalf("%d ENDs for %d transactions", len(ends), s.Counts().Transactions)
	}
	dec := envelope.NewDecoder(envelope.Options{})
	g := txgate.New[*source.Record](txgate.Config{Collections: []string{"public.orders"}})
	ctx := context.Background()
	released, off := 0, int64(0)
	for _, r := range s.Records {
		ev, err := dec.Decode(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		var ev2 *envelope.Event
		if ev.Kind == envelope.KindChange {
			ev2 = ev
		}
		rec, err := txgate.RecordOf(r, r.Topic, r.Partition, ev2, 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Add(rec); err != nil {
			t.Fatal(err)
		}
		if e, ok := ends[r]; ok {
			eev, err := dec.Decode(ctx, e)
			if err != nil {
				t.Fatal(err)
			}
			end, ok, err := txgate.EndOf(eev, off)
			if err != nil || !ok {
				t.Fatalf("END %s: %v %v", e.Value, ok, err)
			}
			off++
			g.End(end)
		}
		released += len(g.Release())
	}
	if held, _ := g.Held(); held != 0 || released != len(s.Records) {
		t.Fatalf("released %d of %d records, %d held", released, len(s.Records), held)
	}
	if st := g.Stats(); st.Transactions != int64(len(ends)) {
		t.Fatalf("%d transactions released whole, %d ENDs", st.Transactions, len(ends))
	}
}
