package envelope

import (
	"context"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/cdcsink/cdc-sink/source"
)

// want describes the expected event of one fixture.
type want struct {
	kind      Kind
	op        byte
	flattened bool
	deleted   bool
	keyID     any // value of key field "id" (int64 or Number), nil = no key
	before    bool
	after     bool
	lsn       int64
	seq       string
	snapshot  string
	txID      int64
	tx        *TxInfo
	newKey    string
	oldKey    string
}

var fixtureWants = map[string]want{
	"orders_c": {kind: KindChange, op: 'c', keyID: 1, after: true, lsn: 24023128,
		seq: `["24023119","24023128"]`, snapshot: "false", txID: 771,
		tx: &TxInfo{ID: "771:24023128", TotalOrder: 1, DataCollectionOrder: 1}},
	"orders_u": {kind: KindChange, op: 'u', keyID: 1, after: true, lsn: 24023200,
		seq: `["24023190","24023200"]`, snapshot: "false", txID: 772,
		tx: &TxInfo{ID: "771:24023128", TotalOrder: 1, DataCollectionOrder: 1}},
	"orders_d": {kind: KindChange, op: 'd', keyID: 7, before: true, lsn: 24023300,
		seq: `["24023290","24023300"]`, snapshot: "false", txID: 773,
		tx: &TxInfo{ID: "771:24023128", TotalOrder: 1, DataCollectionOrder: 1}},
	"orders_r": {kind: KindChange, op: 'r', keyID: 2, after: true, lsn: 24000000,
		seq: `[null,"24000000"]`, snapshot: "first", txID: 760},
	"orders_t": {kind: KindChange, op: 't', lsn: 24023400, seq: `["24023390","24023400"]`,
		snapshot: "false", txID: 774},
	"orders_pk_d": {kind: KindChange, op: 'd', keyID: 5, before: true, lsn: 24023500,
		seq: `["24023490","24023500"]`, snapshot: "false", txID: 775, newKey: `{"id":6}`,
		tx: &TxInfo{ID: "771:24023128", TotalOrder: 1, DataCollectionOrder: 1}},
	"orders_pk_c": {kind: KindChange, op: 'c', keyID: 6, after: true, lsn: 24023500,
		seq: `["24023490","24023500"]`, snapshot: "false", txID: 775, oldKey: `{"id":5}`,
		tx: &TxInfo{ID: "771:24023128", TotalOrder: 2, DataCollectionOrder: 2}},
	"orders_tombstone": {kind: KindTombstone, keyID: 7},
	"message_m":        {kind: KindMessage, op: 'm', lsn: 24023600, seq: `["24023590","24023600"]`, snapshot: "false", txID: 776},
	"heartbeat":        {kind: KindHeartbeat},
	"tx_begin":         {kind: KindTxMetadata, keyID: "771:24023100"},
	"tx_end":           {kind: KindTxMetadata, keyID: "771:24023130"},
	"flat_rewrite_c": {kind: KindChange, op: 'c', flattened: true, keyID: 1, after: true, lsn: 24023128,
		seq: `["24023119","24023128"]`, snapshot: "false", txID: 771},
	"flat_rewrite_d": {kind: KindChange, op: 'd', flattened: true, deleted: true, keyID: 7, after: true,
		lsn: 24023300, seq: `["24023119","24023300"]`, snapshot: "false", txID: 771},
	"flat_tombstone_u": {kind: KindChange, flattened: true, keyID: 1, after: true},
	"flat_tombstone_d": {kind: KindTombstone, keyID: 7},
}

func keyID(t *testing.T, ev *Event) any {
	if ev.Key == nil {
		return nil
	}
	v, ok := ev.Key.Get("id")
	if !ok {
		return nil
	}
	switch x := v.(type) {
	case int64:
		return int(x)
	case Number:
		return int(mustInt(t, x))
	}
	return v
}

func mustInt(t *testing.T, n Number) int64 {
	i, ok := asInt(n)
	if !ok {
		t.Fatalf("not an int: %q", n)
	}
	return i
}

func checkWant(t *testing.T, ev *Event, w want) {
	t.Helper()
	if ev.Kind != w.kind || ev.Op != w.op || ev.Flattened != w.flattened || ev.Deleted != w.deleted {
		t.Errorf("kind/op/flattened/deleted = %d/%q/%v/%v, want %d/%q/%v/%v",
			ev.Kind, ev.Op, ev.Flattened, ev.Deleted, w.kind, w.op, w.flattened, w.deleted)
	}
	if got := keyID(t, ev); !reflect.DeepEqual(got, w.keyID) {
		t.Errorf("key id = %v, want %v", got, w.keyID)
	}
	if (ev.Before != nil) != w.before || (ev.After != nil) != w.after {
		t.Errorf("before/after present = %v/%v, want %v/%v", ev.Before != nil, ev.After != nil, w.before, w.after)
	}
	if w.lsn != 0 && (ev.Source.LSN != w.lsn || !ev.Source.HasLSN) {
		t.Errorf("lsn = %d (%v), want %d", ev.Source.LSN, ev.Source.HasLSN, w.lsn)
	}
	if ev.Source.Sequence != w.seq {
		t.Errorf("sequence = %q, want %q", ev.Source.Sequence, w.seq)
	}
	if ev.Source.Snapshot != w.snapshot {
		t.Errorf("snapshot = %q, want %q", ev.Source.Snapshot, w.snapshot)
	}
	if w.txID != 0 && (ev.Source.TxID != w.txID || !ev.Source.HasTxID) {
		t.Errorf("txId = %d, want %d", ev.Source.TxID, w.txID)
	}
	if !reflect.DeepEqual(ev.Tx, w.tx) {
		t.Errorf("tx = %+v, want %+v", ev.Tx, w.tx)
	}
	if string(ev.NewKey) != w.newKey || string(ev.OldKey) != w.oldKey {
		t.Errorf("newkey/oldkey = %q/%q, want %q/%q", ev.NewKey, ev.OldKey, w.newKey, w.oldKey)
	}
	if ev.After != nil && ev.Flattened {
		for _, n := range ev.After.Names {
			if strings.HasPrefix(n, "__") {
				t.Errorf("flattened After still has %s", n)
			}
		}
		if ev.After.Schema != nil && len(ev.After.Schema.Fields) != len(ev.After.Names) {
			t.Errorf("flattened After schema has %d fields for %d names", len(ev.After.Schema.Fields), len(ev.After.Names))
		}
	}
}

func TestDecodeJSONFixtures(t *testing.T) {
	d := NewDecoder(Options{})
	// schemaless unwrap output in tombstone mode without add.fields carries
	// nothing to recognise it by: it needs Flattened=always
	always := NewDecoder(Options{Flattened: FlattenAlways})
	for _, dir := range []string{"json_schema", "json_plain"} {
		format := FormatJSONSchema
		if dir == "json_plain" {
			format = FormatJSONPlain
		}
		for name, w := range fixtureWants {
			t.Run(dir+"/"+name, func(t *testing.T) {
				rec := loadRecord(t, dir+"/"+name+".json")
				d := d
				if name == "flat_tombstone_u" && dir == "json_plain" {
					d = always
				}
				ev := mustDecode(t, d, rec)
				checkWant(t, ev, w)
				if ev.Format != format {
					t.Errorf("format = %d, want %d", ev.Format, format)
				}
				if w.kind == KindChange && (ev.Source.Version != "" || ev.Flattened) {
					if !ev.Flattened && (ev.Source.Version != "3.6.1.Final" || ev.Source.Connector != "postgresql" ||
						ev.Source.Name != "dbz" || ev.Source.DB != "app" || ev.Source.Schema != "public" ||
						ev.Source.Table != "orders" || ev.Source.TsMs == 0 || ev.Source.TsUs != ev.Source.TsMs*1000+456 ||
						ev.Source.TsNs != ev.Source.TsUs*1000) {
						t.Errorf("source = %+v", ev.Source)
					}
					if !ev.Flattened && ev.TsMs != 1700000000200 {
						t.Errorf("ts_ms = %d", ev.TsMs)
					}
				}
			})
		}
	}
}

func TestSpecialRecords(t *testing.T) {
	d := NewDecoder(Options{})
	for _, dir := range []string{"json_schema", "json_plain"} {
		ev := mustDecode(t, d, loadRecord(t, dir+"/heartbeat.json"))
		if ev.TsMs != 1700000000400 {
			t.Errorf("%s heartbeat ts_ms = %d", dir, ev.TsMs)
		}
		if v, _ := ev.Key.Get("serverName"); v != "dbz" {
			t.Errorf("%s heartbeat key = %v", dir, v)
		}
		ev = mustDecode(t, d, loadRecord(t, dir+"/tx_begin.json"))
		if ev.TxMeta == nil || ev.TxMeta.Status != "BEGIN" || ev.TxMeta.ID != "771:24023100" || ev.TxMeta.TsMs != 1700000000123 {
			t.Errorf("%s BEGIN = %+v", dir, ev.TxMeta)
		}
		ev = mustDecode(t, d, loadRecord(t, dir+"/tx_end.json"))
		wantEnd := &TxMetadata{Status: "END", ID: "771:24023130", EventCount: 2, TsMs: 1700000000123,
			DataCollections: []TxDataCollection{{DataCollection: "public.orders", EventCount: 2}}}
		if !reflect.DeepEqual(ev.TxMeta, wantEnd) {
			t.Errorf("%s END = %+v", dir, ev.TxMeta)
		}
		ev = mustDecode(t, d, loadRecord(t, dir+"/message_m.json"))
		if ev.Message == nil || ev.Message.Prefix != "audit" || string(ev.Message.Content) != "hello" {
			t.Errorf("%s message = %+v", dir, ev.Message)
		}
		if v, _ := ev.Key.Get("prefix"); v != "audit" {
			t.Errorf("%s message key = %v", dir, v)
		}
	}
}

// TestValueRepresentation pins what normalize receives for every Connect type.
func TestValueRepresentation(t *testing.T) {
	d := NewDecoder(Options{})
	ev := mustDecode(t, d, loadRecord(t, "json_schema/orders_c.json"))
	a := ev.After
	get := func(n string) any {
		v, ok := a.Get(n)
		if !ok {
			t.Fatalf("no field %s", n)
		}
		return v
	}
	wkb := []byte{1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f, 0, 0, 0, 0, 0, 0, 4, 0x40}
	cases := map[string]any{
		"id":          int64(1),
		"customer_id": int64(9007199254740993), // > 2^53: exact
		"status":      "new",
		"qty":         int64(3),           // int16
		"price":       []byte{0x04, 0xd2}, // Decimal 12.34, unscaled big-endian two's complement
		"weight":      float64(float32(1.1)),
		"ratio":       0.3333333333333333,
		"active":      true,
		"created_at":  int64(1700000000123456),
		"updated_at":  "2023-11-14T22:13:20.123456Z",
		"ship_date":   int64(19675),
		"ship_time":   int64(45296789012),
		"note":        "café \"quoted\" \\ line\nnext 😀",
		"tags":        []any{"a", nil, "c"},
		"attrs":       `{"k": [1, 2]}`,
		"uid":         "b68a35a7-17ad-35b3-af2a-ae46edb4545a",
		"data":        []byte{0, 1, 0xfe, 0xff},
		"kind":        "retail",
		"duration":    int64(3600000000),
		"props":       map[string]any{"color": "red", "size": nil},
	}
	for n, w := range cases {
		if got := get(n); !reflect.DeepEqual(got, w) {
			t.Errorf("%s = %#v, want %#v", n, got, w)
		}
	}
	disc := get("discount").(*Row)
	if disc.Schema.Name != "io.debezium.data.VariableScaleDecimal" || !reflect.DeepEqual(disc.Values, []any{int64(3), []byte{0x30, 0x34}}) {
		t.Errorf("discount = %+v", disc)
	}
	loc := get("location").(*Row)
	if !reflect.DeepEqual(loc.Values, []any{1.5, 2.5, wkb, nil}) {
		t.Errorf("location = %#v", loc.Values)
	}
	// schema details
	fs := map[string]*Schema{}
	for _, f := range a.Schema.Fields {
		fs[f.Name] = f.Schema
	}
	if s := fs["price"]; s.Type != "bytes" || s.Name != NameDecimal || s.Parameters["scale"] != "2" || s.Parameters["connect.decimal.precision"] != "10" {
		t.Errorf("price schema = %+v", s)
	}
	if s := fs["qty"]; s.Type != "int16" || !s.Optional {
		t.Errorf("qty schema = %+v", s)
	}
	if s := fs["created_at"]; s.Name != "io.debezium.time.MicroTimestamp" {
		t.Errorf("created_at schema = %+v", s)
	}
	if s := fs["status"]; s.Default != "new" || s.Optional {
		t.Errorf("status schema = %+v", s)
	}
	if s := fs["kind"]; s.Parameters["allowed"] != "retail,wholesale,internal" {
		t.Errorf("kind schema = %+v", s)
	}
	if a.Schema.Name != "dbz.public.orders.Value" || len(a.Names) != 22 {
		t.Errorf("after schema %q with %d names", a.Schema.Name, len(a.Names))
	}
	// TOAST placeholders come through untouched
	ev = mustDecode(t, d, loadRecord(t, "json_schema/orders_u.json"))
	if v, _ := ev.After.Get("note"); v != "__debezium_unavailable_value" {
		t.Errorf("toast note = %v", v)
	}
	if v, _ := ev.After.Get("data"); string(v.([]byte)) != "__debezium_unavailable_value" {
		t.Errorf("toast data = %v", v)
	}
	if v, _ := ev.After.Get("tags"); !reflect.DeepEqual(v, []any{"__debezium_unavailable_value"}) {
		t.Errorf("toast tags = %v", v)
	}
	// schemaless: Numbers, strings, *Row without schema
	ev = mustDecode(t, d, loadRecord(t, "json_plain/orders_c.json"))
	if v, _ := ev.After.Get("customer_id"); v != Number("9007199254740993") {
		t.Errorf("plain customer_id = %#v", v)
	}
	if v, _ := ev.After.Get("price"); v != "BNI=" {
		t.Errorf("plain price = %#v", v)
	}
	if v, _ := ev.After.Get("location"); v.(*Row).Schema != nil {
		t.Errorf("plain nested row has a schema")
	}
}

// TestSameChangeAllForms: JSON with schema, Avro and schemaless JSON (typed
// with the JSON schema) decode the same change to the same Rows and Schemas.
func TestSameChangeAllForms(t *testing.T) {
	af := loadAvro(t)
	d := NewDecoder(Options{Registry: af.reg})
	avro := af.records(t)
	for _, name := range []string{"orders_c", "orders_u", "orders_d", "orders_r", "orders_t", "flat_rewrite_c"} {
		t.Run(name, func(t *testing.T) {
			js := mustDecode(t, d, loadRecord(t, "json_schema/"+name+".json"))
			pl := mustDecode(t, d, loadRecord(t, "json_plain/"+name+".json"))
			av := mustDecode(t, d, avro[name])
			if av.Format != FormatAvro {
				t.Fatalf("format %d", av.Format)
			}
			for _, pair := range [][2]*Row{{js.Key, av.Key}, {js.Before, av.Before}, {js.After, av.After}} {
				if dd := diff(canon(pair[0]), canon(pair[1])); dd != "" {
					t.Errorf("json vs avro: %s", dd)
				}
			}
			// everything but the rows must be equal too
			strip := func(e *Event) Event {
				c := *e
				c.Key, c.Before, c.After, c.Format = nil, nil, nil, 0
				return c
			}
			if a, b := strip(js), strip(av); !reflect.DeepEqual(a, b) {
				t.Errorf("json vs avro event:\n%+v\n%+v", a, b)
			}
			if a, b := strip(js), strip(pl); !reflect.DeepEqual(a, b) {
				t.Errorf("json vs plain event:\n%+v\n%+v", a, b)
			}
			for _, pair := range [][2]*Row{{js.Before, pl.Before}, {js.After, pl.After}} {
				if pair[0] == nil {
					if pair[1] != nil {
						t.Errorf("plain has a row json has not")
					}
					continue
				}
				typed := coerce(t, pair[1], pair[0].Schema)
				if dd := diff(canon(pair[0]), canon(typed)); dd != "" {
					t.Errorf("json vs plain: %s", dd)
				}
			}
		})
	}
}

func TestAvroSpecifics(t *testing.T) {
	af := loadAvro(t)
	d := NewDecoder(Options{Registry: af.reg})
	recs := af.records(t)
	ev := mustDecode(t, d, recs["orders_c"])
	fs := map[string]*Schema{}
	for _, f := range ev.After.Schema.Fields {
		fs[f.Name] = f.Schema
	}
	if s := fs["price"]; s.Name != NameDecimal || s.Parameters["scale"] != "2" || !s.Optional {
		t.Errorf("avro price schema = %+v", s)
	}
	if s := fs["qty"]; s.Type != "int16" {
		t.Errorf("avro qty schema = %+v", s)
	}
	if s := fs["status"]; s.Default != "new" {
		t.Errorf("avro status default = %#v", s.Default)
	}
	// tombstone with Avro key
	tomb := &source.Record{Topic: "dbz.public.orders", Key: recs["orders_d"].Key}
	ev = mustDecode(t, d, tomb)
	if ev.Kind != KindTombstone || ev.Format != FormatAvro || keyID(t, ev) != 7 {
		t.Errorf("avro tombstone = %+v", ev)
	}
	// unknown id → unknown_schema_id (permanent); no registry → unknown_schema_id
	bad := &source.Record{Value: frame(999, []byte{0})}
	if _, err := d.Decode(context.Background(), bad); reason(err) != quarantine.UnknownSchemaID {
		t.Errorf("unknown id: %v", err)
	}
	if _, err := NewDecoder(Options{}).Decode(context.Background(), recs["orders_c"]); reason(err) != quarantine.UnknownSchemaID {
		t.Errorf("no registry: %v", err)
	}
	// truncated body, trailing bytes, short framing
	v := recs["orders_c"].Value
	for name, b := range map[string][]byte{
		"truncated": v[:len(v)-3],
		"trailing":  append(append([]byte{}, v...), 0, 0),
		"short":     {0, 0, 0},
	} {
		if _, err := d.Decode(context.Background(), &source.Record{Value: b}); reason(err) != quarantine.MalformedAvro {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// transient registry failures are not cached and surface as transient.
type flakyRegistry struct {
	mu    sync.Mutex
	fails int
	calls int
	inner Registry
}

func (f *flakyRegistry) Schema(ctx context.Context, id int) (string, error) {
	f.mu.Lock()
	f.calls++
	fail := f.calls <= f.fails
	f.mu.Unlock()
	if fail {
		return "", quarantine.Transient(context.DeadlineExceeded)
	}
	return f.inner.Schema(ctx, id)
}

func TestAvroRegistryTransientAndCoalescing(t *testing.T) {
	af := loadAvro(t)
	fr := &flakyRegistry{fails: 1, inner: af.reg}
	d := NewDecoder(Options{Registry: fr})
	rec := af.records(t)["orders_c"]
	rec.Key = nil
	if _, err := d.Decode(context.Background(), rec); !quarantine.IsTransient(err) {
		t.Fatalf("want transient, got %v", err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := d.Decode(context.Background(), rec); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if fr.calls != 2 {
		t.Errorf("registry calls = %d, want 2 (one failure, one coalesced fetch)", fr.calls)
	}
}

func reason(err error) quarantine.Reason {
	r, _ := quarantine.ReasonOf(err)
	return r
}

func TestErrors(t *testing.T) {
	d := NewDecoder(Options{})
	schemaOrders := string(loadRecord(t, "json_schema/orders_c.json").Value)
	deep := strings.Repeat(`{"a":`, 200) + "1" + strings.Repeat("}", 200)
	cases := []struct {
		name  string
		value string
		key   string
		want  quarantine.Reason
		msg   string
	}{
		{"garbage", "hello", "", quarantine.MalformedJSON, "value"},
		{"truncated", `{"before":null,"after":{"id":1`, "", quarantine.MalformedJSON, "offset"},
		{"trailing", `{"op":"c","source":{}} x`, "", quarantine.MalformedJSON, "end of input"},
		{"not an object", `[1,2]`, "", quarantine.MalformedEvent, "not an object"},
		{"no op", `{"before":null,"after":{"id":1},"source":{}}`, "", quarantine.MalformedEvent, "not a Debezium envelope"},
		{"unknown op", `{"before":null,"after":{"id":1},"source":{},"op":"x"}`, "", quarantine.UnknownOp, `"x"`},
		{"after not object", `{"after":5,"source":{},"op":"c"}`, "", quarantine.MalformedEvent, "expected object at payload.after"},
		{"schema type mismatch", strings.Replace(schemaOrders, `"customer_id":9007199254740993`, `"customer_id":"x"`, 1), "",
			quarantine.TypeMismatch, "payload.after.customer_id"},
		{"int out of range", strings.Replace(schemaOrders, `"qty":3`, `"qty":70000`, 1), "",
			quarantine.TypeMismatch, "payload.after.qty"},
		{"bad base64", strings.Replace(schemaOrders, `"price":"BNI="`, `"price":"!!"`, 1), "",
			quarantine.TypeMismatch, "payload.after.price"},
		{"bad schema", `{"schema":{"type":"nope"},"payload":{}}`, "", quarantine.MalformedEvent, "invalid Connect schema"},
		{"deep", deep, "", quarantine.MalformedJSON, "nesting"},
		{"invalid utf8", "{\"op\":\"c\",\"source\":{},\"after\":{\"s\":\"\xff\"}}", "", quarantine.MalformedJSON, "UTF-8"},
		{"control char", "{\"op\":\"c\",\"after\":{\"s\":\"a\x01\"}}", "", quarantine.MalformedJSON, "control"},
		{"bad key", `{"op":"c","source":{}}`, `{"id":`, quarantine.MalformedJSON, "key:"},
		{"scalar key", `{"op":"c","source":{}}`, `5`, quarantine.MalformedEvent, "key:"},
		{"empty", "", "", quarantine.MalformedJSON, "empty"},
		{"flat bad deleted", `{"id":1,"__deleted":"maybe"}`, "", quarantine.MalformedEvent, "__deleted"},
		{"flat bad op", `{"id":1,"__op":"z"}`, "", quarantine.UnknownOp, "__op"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := &source.Record{Value: []byte(c.value)}
			if c.key != "" {
				rec.Key = []byte(c.key)
			}
			_, err := d.Decode(context.Background(), rec)
			if reason(err) != c.want {
				t.Fatalf("err = %v, want reason %s", err, c.want)
			}
			if !strings.Contains(err.Error(), c.msg) {
				t.Errorf("err %q does not mention %q", err, c.msg)
			}
		})
	}
}

func TestFlattenModes(t *testing.T) {
	// a flattened row without any __ fields and without a *.Value schema name
	rec := &source.Record{Value: []byte(`{"id":1,"name":"x"}`)}
	if _, err := NewDecoder(Options{}).Decode(context.Background(), rec); reason(err) != quarantine.MalformedEvent {
		t.Errorf("auto: %v", err)
	}
	ev, err := NewDecoder(Options{Flattened: FlattenAlways}).Decode(context.Background(), rec)
	if err != nil || !ev.Flattened || ev.After == nil || len(ev.After.Names) != 2 {
		t.Errorf("always: %+v %v", ev, err)
	}
	// never: a flattened row is not an envelope
	rec = loadRecord(t, "json_schema/flat_rewrite_c.json")
	if _, err := NewDecoder(Options{Flattened: FlattenNever}).Decode(context.Background(), rec); reason(err) != quarantine.MalformedEvent {
		t.Errorf("never: %v", err)
	}
	// custom prefix
	rec = &source.Record{Value: []byte(`{"id":1,"_x_op":"u","_x_deleted":false,"__op":"kept"}`)}
	ev, err = NewDecoder(Options{UnwrapPrefix: "_x_"}).Decode(context.Background(), rec)
	if err != nil || ev.Op != 'u' || ev.Deleted || !reflect.DeepEqual(ev.After.Names, []string{"id", "__op"}) {
		t.Errorf("prefix: %+v %v", ev, err)
	}
	// tombstone in always mode is flagged flattened
	ev, _ = NewDecoder(Options{Flattened: FlattenAlways}).Decode(context.Background(), &source.Record{Key: []byte(`{"id":1}`)})
	if ev.Kind != KindTombstone || !ev.Flattened {
		t.Errorf("always tombstone: %+v", ev)
	}
	// bool __deleted
	ev, err = NewDecoder(Options{}).Decode(context.Background(), &source.Record{Value: []byte(`{"id":1,"__deleted":true}`)})
	if err != nil || !ev.Deleted {
		t.Errorf("bool deleted: %+v %v", ev, err)
	}
}

func TestJSONScannerDetails(t *testing.T) {
	d := NewDecoder(Options{Flattened: FlattenAlways})
	dec := func(v string) *Row {
		t.Helper()
		ev, err := d.Decode(context.Background(), &source.Record{Value: []byte(v)})
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		return ev.After
	}
	r := dec(`{"s":"\u00e9\ud83d\ude00\n\"\/","t":"\ud800x", "n": -1.5e3 , "e":{}, "a":[] ,"b":[{"x":null}]}`)
	if v, _ := r.Get("s"); v != "é😀\n\"/" {
		t.Errorf("escapes: %q", v)
	}
	if v, _ := r.Get("t"); v != "\uFFFDx" {
		t.Errorf("lone surrogate: %q", v)
	}
	if v, _ := r.Get("n"); v != Number("-1.5e3") {
		t.Errorf("number: %#v", v)
	}
	// schema'd floats: Jackson's quoted non-finite values, float32 rounding
	r = dec(`{"schema":{"type":"struct","fields":[{"type":"float64","optional":true,"field":"f"},{"type":"float64","optional":true,"field":"g"},{"type":"float32","optional":true,"field":"h"},{"type":"int8","optional":true,"field":"i"}],"optional":false,"name":"x.Value"},` +
		`"payload":{"h":0.1,"f":"NaN","g":"-Infinity","unknown":{"deep":[1,2,{"x":"y"}]},"i":-128}}`)
	f, _ := r.Get("f")
	g, _ := r.Get("g")
	h, _ := r.Get("h")
	i, _ := r.Get("i")
	if !math.IsNaN(f.(float64)) || g.(float64) != math.Inf(-1) || h.(float64) != float64(float32(0.1)) || i != int64(-128) {
		t.Errorf("floats: %v %v %v %v", f, g, h, i)
	}
	// payload before schema, schema null
	r = dec(`{"payload":{"a":1},"schema":{"type":"struct","fields":[{"type":"int64","optional":false,"field":"a"}],"optional":false,"name":"x.Value"}}`)
	if v, _ := r.Get("a"); v != int64(1) {
		t.Errorf("payload first: %#v", v)
	}
	r = dec(`{"schema":null,"payload":{"a":1}}`)
	if v, _ := r.Get("a"); v != Number("1") {
		t.Errorf("null schema: %#v", v)
	}
	// decimal.format=NUMERIC
	r = dec(`{"schema":{"type":"struct","fields":[{"type":"bytes","optional":false,"name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"2"},"field":"p"}],"optional":false,"name":"x.Value"},"payload":{"p":12.34}}`)
	if v, _ := r.Get("p"); v != Number("12.34") {
		t.Errorf("numeric decimal: %#v", v)
	}
	// plain strings and numbers are views of the record (no copy of it);
	// escaped strings are unescaped into the arena
	in := []byte(`{"s":"abc","n":12.5,"e":"a\"b"}`)
	ev, _ := d.Decode(context.Background(), &source.Record{Value: in})
	within := func(p *byte) bool {
		a := uintptr(unsafe.Pointer(p))
		return a >= uintptr(unsafe.Pointer(&in[0])) && a < uintptr(unsafe.Pointer(&in[0]))+uintptr(len(in))
	}
	sv, _ := ev.After.Get("s")
	nv, _ := ev.After.Get("n")
	ev2, _ := ev.After.Get("e")
	if s, ok := sv.(string); !ok || s != "abc" || !within(unsafe.StringData(s)) {
		t.Errorf("plain string: %#v, not a view of the record", sv)
	}
	if n, ok := nv.(Number); !ok || n != "12.5" || !within(unsafe.StringData(string(n))) {
		t.Errorf("number: %#v, not a view of the record", nv)
	}
	if e, ok := ev2.(string); !ok || e != `a"b` || within(unsafe.StringData(e)) {
		t.Errorf("escaped string: %#v", ev2)
	}
}

func TestSchemaCacheBoundedAndShared(t *testing.T) {
	d := NewDecoder(Options{MaxSchemaCache: 4, Flattened: FlattenAlways})
	mk := func(n int) []byte {
		return []byte(`{"schema":{"type":"struct","fields":[{"type":"int64","optional":false,"field":"f` +
			strings.Repeat("x", n) + `"}],"optional":false,"name":"x.Value"},"payload":{"f` + strings.Repeat("x", n) + `":1}}`)
	}
	for i := 0; i < 20; i++ {
		ev := mustDecode(t, d, &source.Record{Value: mk(i)})
		if v := ev.After.Values[0]; v != int64(1) {
			t.Fatalf("%d: %v", i, v)
		}
	}
	if d.jcache.n > 4 {
		t.Errorf("cache holds %d entries", d.jcache.n)
	}
	// the same schema bytes share one *Schema
	a := mustDecode(t, d, &source.Record{Value: mk(30)})
	b := mustDecode(t, d, &source.Record{Value: mk(30)})
	if a.After.Schema != b.After.Schema {
		t.Errorf("schema not shared")
	}
	// short schemas (below the prefix length) are cached too
	short := []byte(`{"schema":{"type":"struct","fields":[]},"payload":{}}`)
	mustDecode(t, d, &source.Record{Value: short})
	mustDecode(t, d, &source.Record{Value: short})
}

func TestConcurrentDecode(t *testing.T) {
	af := loadAvro(t)
	d := NewDecoder(Options{Registry: af.reg})
	recs := []*source.Record{
		loadRecord(t, "json_schema/orders_c.json"), loadRecord(t, "json_plain/orders_u.json"),
		loadRecord(t, "json_schema/flat_rewrite_d.json"), af.records(t)["orders_c"],
	}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				if _, err := d.Decode(context.Background(), recs[i%len(recs)]); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// Many schemas that differ only late (same columns, different names), on
// different topics and interleaved on one topic: each record must get its own.
func TestSchemaCacheSimilarSchemas(t *testing.T) {
	base := string(loadRecord(t, "json_schema/orders_c.json").Value)
	d := NewDecoder(Options{MaxSchemaCache: 8})
	for round := 0; round < 3; round++ {
		for i := 0; i < 12; i++ {
			name := "dbz.public.orders" + strings.Repeat("x", i)
			v := strings.ReplaceAll(base, "dbz.public.orders.Envelope", name+".Envelope")
			topics := []string{name, "shared"}
			for _, topic := range topics {
				ev, err := d.Decode(context.Background(), &source.Record{Topic: topic, Value: []byte(v)})
				if err != nil {
					t.Fatal(err)
				}
				if ev.After == nil || ev.After.Schema.Name != "dbz.public.orders.Value" {
					t.Fatalf("after schema %+v", ev.After)
				}
			}
			// the envelope schema name is only visible through the cache entry
			e := d.jcache.lookupExact([]byte(v[len(`{"schema":`) : len(v)-len(`,"payload":`)-payloadLen(v)]))
			if e != nil && e.node.s.Name != name+".Envelope" {
				t.Fatalf("cache entry for %s has %s", name, e.node.s.Name)
			}
		}
	}
}

func payloadLen(v string) int {
	i := strings.Index(v, `,"payload":`)
	return len(v) - i - len(`,"payload":`)
}
