package normalize

import (
	"testing"

	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/cdcsink/cdc-sink/source"
	"github.com/cdcsink/cdc-sink/versioning"
)

func TestOps(t *testing.T) {
	n := newN(t, Options{})
	src := itemsSource("false", `["24023119","24023128"]`, 24023128)
	after := item(1, "widget", twos("1234"), micros20180620)
	partialBefore := item(1, nil, []byte{0}, 0) // REPLICA IDENTITY DEFAULT: key + fallbacks
	for _, tc := range []struct {
		name   string
		ev     *envelope.Event
		op     Op
		srcOp  byte
		hasRow bool
	}{
		{"create", changeEvent('c', nil, after, src), OpUpsert, 'c', true},
		{"update", changeEvent('u', nil, after, src), OpUpsert, 'u', true},
		{"read (snapshot)", changeEvent('r', nil, after, itemsSource("last", `[null,"500"]`, 500)), OpUpsert, 'r', true},
		{"read (incremental)", changeEvent('r', nil, after, envelope.Source{Name: "dbz", Schema: "public", Table: "items", Snapshot: "incremental", TsMs: 1}), OpUpsert, 'r', true},
		{"delete", changeEvent('d', partialBefore, nil, src), OpDelete, 'd', true},
		{"delete without before", changeEvent('d', nil, nil, src), OpDelete, 'd', false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := n.Normalize(tc.ev, rec(7))
			if err != nil {
				t.Fatal(err)
			}
			if c.Op != tc.op || c.SourceOp != tc.srcOp || (c.Row != nil) != tc.hasRow || c.Tombstone {
				t.Fatalf("%+v", c)
			}
			if len(c.KeyNames) != 1 || c.KeyNames[0] != "id" || c.Key[0] != int32(1) {
				t.Fatalf("key %v %v", c.KeyNames, c.Key)
			}
			if c.Table != (TableID{Server: "dbz", DB: "app", Schema: "public", Table: "items"}) && tc.name != "read (incremental)" {
				t.Fatalf("table %+v", c.Table)
			}
			if c.Coord != (Coord{Topic: "dbz.public.items", Offset: 7}) {
				t.Fatalf("coord %+v", c.Coord)
			}
		})
	}

	// truncate: no key, no row
	tr := &envelope.Event{Kind: envelope.KindChange, Op: 't', Source: src}
	c, err := n.Normalize(tr, rec(8))
	if err != nil || c.Op != OpTruncate || c.Key != nil || c.Row != nil || !c.Position.HasLSN {
		t.Fatalf("truncate %+v %v", c, err)
	}

	// skipped kinds
	for _, ev := range []*envelope.Event{
		{Kind: envelope.KindHeartbeat},
		{Kind: envelope.KindTxMetadata, TxMeta: &envelope.TxMetadata{Status: "BEGIN", ID: "771:24023128"}},
		{Kind: envelope.KindMessage, Op: 'm'},
		{Kind: envelope.KindChange, Op: 'm', Source: src},
	} {
		if c, err := n.Normalize(ev, rec(9)); c != nil || err != nil {
			t.Fatalf("kind %d: %v %v", ev.Kind, c, err)
		}
	}
}

func TestOpErrors(t *testing.T) {
	n := newN(t, Options{})
	src := itemsSource("false", `["1","2"]`, 2)
	_, err := n.Normalize(changeEvent('x', nil, nil, src), rec(0))
	wantReason(t, err, quarantine.UnknownOp, `"x"`, "public.items")
	_, err = n.Normalize(changeEvent(0, nil, nil, src), rec(0))
	wantReason(t, err, quarantine.UnknownOp)
	for _, op := range []byte{'c', 'u', 'r'} {
		_, err = n.Normalize(changeEvent(op, nil, nil, src), rec(0))
		wantReason(t, err, quarantine.MissingAfter, "without after")
	}
	bad := changeEvent('c', nil, item(1, "x", nil, 0), src)
	bad.Source.Sequence = `["1",`
	_, err = n.Normalize(bad, rec(0))
	wantReason(t, err, quarantine.MalformedEvent, "sequence")
	_, err = n.Normalize(&envelope.Event{Kind: 99}, rec(0))
	wantReason(t, err, quarantine.MalformedEvent)
	_, err = n.Normalize(nil, rec(0))
	wantReason(t, err, quarantine.MalformedEvent)
}

func TestPosition(t *testing.T) {
	n := newN(t, Options{})
	for _, tc := range []struct {
		name string
		src  envelope.Source
		want versioning.Position
		ts   int64
	}{
		{"sequence", itemsSource("false", `["24023119","24023128"]`, 24023128),
			versioning.Position{Snapshot: "false", HasCommit: true, Commit: 24023119, HasLSN: true, LSN: 24023128}, 1767225600123456},
		{"snapshot null commit", itemsSource("first", `[null,"500"]`, 500),
			versioning.Position{Snapshot: "first", HasLSN: true, LSN: 500}, 1767225600123456},
		{"lsn only", envelope.Source{Name: "dbz", Schema: "public", Table: "items", LSN: 77, HasLSN: true, TsMs: 1000},
			versioning.Position{HasLSN: true, LSN: 77}, 1000000},
		{"incremental", envelope.Source{Name: "dbz", Schema: "public", Table: "items", Snapshot: "incremental", Sequence: `[null,null]`, TsNs: 5000},
			versioning.Position{Snapshot: "incremental"}, 5},
	} {
		c, err := n.Normalize(changeEvent('u', nil, item(1, "x", nil, 0), tc.src), rec(0))
		if err != nil {
			t.Fatal(err)
		}
		if c.Position != tc.want || c.SourceTsMicros != tc.ts {
			t.Errorf("%s: %+v ts %d", tc.name, c.Position, c.SourceTsMicros)
		}
	}
}

func TestKeys(t *testing.T) {
	// composite key, typed like columns
	ks := structOf("dbz.public.t.Key", "tenant", sch("string"), "day", named("int32", "io.debezium.time.Date"), "amount", decimalSchema("5", "2"))
	vs := structOf("dbz.public.t.Value", "tenant", sch("string"), "day", named("int32", "io.debezium.time.Date"), "amount", decimalSchema("5", "2"), "note", opt("string"))
	n := newN(t, Options{KeyColumns: map[string][]string{"public.nokey": {"a", "b"}}})
	ev := &envelope.Event{Kind: envelope.KindChange, Op: 'c', Key: rowOf(ks, "acme", int64(days1900), twos("-5")),
		After: rowOf(vs, "acme", int64(days1900), twos("-5"), "n"), Source: itemsSource("", `["1","2"]`, 2)}
	c, err := n.Normalize(ev, rec(0))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Key) != 3 || c.Key[0] != "acme" || c.Key[1] != days1900 || !sameValue(c.Key[2], dec("-0.05", 2)) {
		t.Fatalf("key %#v", c.Key)
	}
	if len(c.Row) != 4 || cap(c.Row) != 4 {
		t.Fatalf("row must not share capacity with the key: len %d cap %d", len(c.Row), cap(c.Row))
	}

	// null key + configured key columns (no primary key)
	nk := structOf("dbz.public.nokey.Value", "a", sch("int64"), "b", sch("string"), "c", opt("string"))
	src := envelope.Source{Name: "dbz", DB: "app", Schema: "public", Table: "nokey", Sequence: `["5","6"]`}
	ev = &envelope.Event{Kind: envelope.KindChange, Op: 'c', After: rowOf(nk, int64(9), "x", nil), Source: src}
	c, err = n.Normalize(ev, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.KeyNames) != 2 || c.KeyNames[1] != "b" || c.Key[0] != int64(9) || c.Key[1] != "x" {
		t.Fatalf("%v %v", c.KeyNames, c.Key)
	}
	// delete of such a table takes the key from before (REPLICA IDENTITY FULL)
	ev = &envelope.Event{Kind: envelope.KindChange, Op: 'd', Before: rowOf(nk, int64(9), "x", "old"), Source: src}
	if c, err = n.Normalize(ev, nil); err != nil || c.Key[0] != int64(9) {
		t.Fatalf("%v %v", c, err)
	}
	// delete without before → missing_before
	ev = &envelope.Event{Kind: envelope.KindChange, Op: 'd', Source: src}
	_, err = n.Normalize(ev, nil)
	wantReason(t, err, quarantine.MissingBefore, "nokey")
	// configured column absent → missing_key
	n2 := newN(t, Options{KeyColumns: map[string][]string{"nokey": {"zzz"}}})
	ev = &envelope.Event{Kind: envelope.KindChange, Op: 'c', After: rowOf(nk, int64(9), "x", nil), Source: src}
	_, err = n2.Normalize(ev, nil)
	wantReason(t, err, quarantine.MissingKey, `"zzz"`)
	// no key, no configuration → missing_key
	src.Table = "other"
	ev = &envelope.Event{Kind: envelope.KindChange, Op: 'c', After: rowOf(nk, int64(9), "x", nil), Source: src}
	_, err = n.Normalize(ev, nil)
	wantReason(t, err, quarantine.MissingKey, "KeyColumns")
	// key value that does not fit its type
	ev = changeEvent('c', nil, item(1, "x", nil, 0), itemsSource("", "", 1))
	ev.Key = rowOf(keySchema, "one")
	_, err = n.Normalize(ev, nil)
	wantReason(t, err, quarantine.TypeMismatch, "key", `"id"`)
}

func TestTombstones(t *testing.T) {
	n := newN(t, Options{})
	// the topic → table mapping is learnt from full envelopes
	if _, err := n.Normalize(changeEvent('d', item(1, nil, nil, 0), nil, itemsSource("", `["1","2"]`, 2)), rec(4)); err != nil {
		t.Fatal(err)
	}
	c, err := n.Normalize(&envelope.Event{Kind: envelope.KindTombstone, Key: rowOf(keySchema, int64(1))}, rec(5))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Tombstone || c.Op != OpDelete || c.SourceOp != 0 || c.Row != nil || c.Key[0] != int32(1) || c.Table.DB != "app" {
		t.Fatalf("%+v", c)
	}
	// unknown topic: table from the topic name
	n2 := newN(t, Options{})
	c, err = n2.Normalize(&envelope.Event{Kind: envelope.KindTombstone, Key: rowOf(keySchema, int64(1))}, rec(5))
	if err != nil || c.Table != (TableID{Server: "dbz", Schema: "public", Table: "items"}) {
		t.Fatalf("%+v %v", c, err)
	}
	_, err = n.Normalize(&envelope.Event{Kind: envelope.KindTombstone}, rec(6))
	wantReason(t, err, quarantine.MissingKey, "tombstone")
}

func TestFlattened(t *testing.T) {
	n := newN(t, Options{})
	flat := func(op byte, deleted bool, after *envelope.Row, src envelope.Source) *envelope.Event {
		return &envelope.Event{Kind: envelope.KindChange, Flattened: true, Op: op, Deleted: deleted,
			Key: rowOf(keySchema, int64(1)), After: after, Source: src}
	}
	r := item(1, "w", twos("1"), 0)
	// decoder-stripped metadata: __op/__lsn/__table land in Source/Op
	c, err := n.Normalize(flat('u', false, r, envelope.Source{Table: "items", LSN: 99, HasLSN: true}), rec(1))
	if err != nil || c.Op != OpUpsert || c.SourceOp != 'u' || !c.Position.HasLSN || c.Position.LSN != 99 || c.Table.Table != "items" {
		t.Fatalf("%+v %v", c, err)
	}
	// rewrite mode delete: __deleted=true, row = before values
	c, err = n.Normalize(flat('d', true, r, envelope.Source{LSN: 100, HasLSN: true}), rec(2))
	if err != nil || c.Op != OpDelete || c.Row == nil || c.Table != (TableID{Server: "dbz", Schema: "public", Table: "items"}) {
		t.Fatalf("%+v %v", c, err)
	}
	// no __op at all: upsert, unless __deleted
	c, err = n.Normalize(flat(0, false, r, envelope.Source{}), rec(3))
	if err != nil || c.Op != OpUpsert || c.SourceOp != 0 || c.Position.HasLSN {
		t.Fatalf("%+v %v", c, err)
	}
	c, err = n.Normalize(flat(0, true, r, envelope.Source{}), rec(4))
	if err != nil || c.Op != OpDelete || c.SourceOp != 'd' {
		t.Fatalf("%+v %v", c, err)
	}
	// metadata fields left in the row (decoder did not strip them): read, not columns
	ms := structOf("dbz.public.items.Value", "id", sch("int32"), "name", opt("string"),
		"__op", opt("string"), "__lsn", opt("int64"), "__source_sequence", opt("string"), "__deleted", opt("string"), "__table", opt("string"), "__source_snapshot", opt("string"))
	c, err = n.Normalize(flat(0, false, rowOf(ms, int64(1), "x", "r", int64(500), `[null,"500"]`, "false", "items", "last"), envelope.Source{}), rec(5))
	if err != nil {
		t.Fatal(err)
	}
	if c.Op != OpUpsert || c.SourceOp != 'r' || len(c.Schema.Columns) != 2 || c.Position != (versioning.Position{Snapshot: "last", HasLSN: true, LSN: 500}) {
		t.Fatalf("%+v cols %+v", c, c.Schema.Columns)
	}
	c, err = n.Normalize(flat(0, false, rowOf(ms, int64(1), "x", "d", int64(501), `["1","501"]`, "true", "items", nil), envelope.Source{}), rec(6))
	if err != nil || c.Op != OpDelete || c.Position.Commit != 1 {
		t.Fatalf("%+v %v", c, err)
	}
	// schemaless flattened with metadata
	c, err = n.Normalize(flat(0, false, plain("id", envelope.Number("1"), "__op", "c", "__lsn", envelope.Number("7")), envelope.Source{}), rec(7))
	if err != nil || c.SourceOp != 'c' || c.Position.LSN != 7 || len(c.Schema.Columns) != 1 {
		t.Fatalf("%+v %v", c, err)
	}
	_, err = n.Normalize(flat(0, false, plain("id", envelope.Number("1"), "__op", "zz"), envelope.Source{}), rec(8))
	wantReason(t, err, quarantine.UnknownOp)
}

func TestPrimaryKeyChange(t *testing.T) {
	n := newN(t, Options{})
	src := itemsSource("", `["10","20"]`, 20)
	create := changeEvent('c', nil, item(2, "moved", nil, 0), src)
	create.Key = rowOf(keySchema, int64(2))
	for _, h := range []string{`{"id":1}`, `{"schema":{"type":"struct"},"payload":{"id":1}}`, `Struct{id=1}`, ` {"id": 1} `} {
		create.OldKey = []byte(h)
		c, err := n.Normalize(create, rec(3))
		if err != nil {
			t.Fatalf("%s: %v", h, err)
		}
		if len(c.OldKey) != 1 || c.OldKey[0] != int32(1) || c.Key[0] != int32(2) {
			t.Fatalf("%s: old %#v new %#v", h, c.OldKey, c.Key)
		}
	}
	// the delete half carries __debezium.newkey: nothing to do but it must not fail
	del := changeEvent('d', item(1, nil, nil, 0), nil, src)
	del.NewKey = []byte(`{"id":2}`)
	if c, err := n.Normalize(del, rec(1)); err != nil || c.OldKey != nil {
		t.Fatal(err)
	}
	create.OldKey = []byte(`{"other":1}`)
	_, err := n.Normalize(create, rec(3))
	wantReason(t, err, quarantine.MalformedEvent, "oldkey", `"id"`)
	create.OldKey = []byte(`garbage`)
	_, err = n.Normalize(create, rec(3))
	wantReason(t, err, quarantine.MalformedEvent)
	// composite string key
	ks := structOf("k", "a", sch("string"), "b", sch("int64"))
	vs := structOf("v", "a", sch("string"), "b", sch("int64"))
	ev := &envelope.Event{Kind: envelope.KindChange, Op: 'c', Key: rowOf(ks, "y", int64(2)), After: rowOf(vs, "y", int64(2)),
		Source: src, OldKey: []byte(`{"a":"x","b":1}`)}
	c, err := n.Normalize(ev, rec(4))
	if err != nil || c.OldKey[0] != "x" || c.OldKey[1] != int64(1) {
		t.Fatalf("%v %v", c, err)
	}
}

func TestSchemaCache(t *testing.T) {
	n := newN(t, Options{})
	src := itemsSource("", `["1","2"]`, 2)
	a, err := n.Normalize(changeEvent('c', nil, item(1, "a", nil, 0), src), rec(0))
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.Normalize(changeEvent('u', nil, item(2, "b", nil, 0), src), rec(1))
	if err != nil {
		t.Fatal(err)
	}
	if a.Schema != b.Schema {
		t.Fatal("one *Schema per envelope schema")
	}
	// a structurally equal but distinct envelope schema: same fingerprint
	vs2 := structOf("dbz.public.items.Value", "id", sch("int32"), "name", opt("string"), "price", decimalSchema("10", "2"),
		"updated_at", named("int64", microTimestampN), "doc", named("string", "io.debezium.data.Json"))
	c, err := n.Normalize(changeEvent('u', nil, rowOf(vs2, int64(3), nil, nil, int64(0), nil), src), rec(2))
	if err != nil {
		t.Fatal(err)
	}
	if c.Schema == a.Schema || c.Schema.Fingerprint != a.Schema.Fingerprint {
		t.Fatal("fingerprint")
	}
	if a.Schema.Index("price") != 2 || a.Schema.Index("nope") != -1 {
		t.Fatal("Index")
	}
}

func TestAssignVersion(t *testing.T) {
	n := newN(t, Options{})
	tr := versioning.NewTracker()
	del, err := n.Normalize(changeEvent('d', item(1, nil, nil, 0), nil, itemsSource("", `["10","20"]`, 20)), rec(4))
	if err != nil {
		t.Fatal(err)
	}
	tomb, err := n.Normalize(&envelope.Event{Kind: envelope.KindTombstone, Key: rowOf(keySchema, int64(1))}, rec(5))
	if err != nil {
		t.Fatal(err)
	}
	AssignVersion(tr, del)
	AssignVersion(tr, tomb)
	if del.Version != tomb.Version || del.Version.LSN != 20 {
		t.Fatalf("%v %v", del.Version, tomb.Version)
	}
	up, _ := n.Normalize(changeEvent('c', nil, item(1, "x", nil, 0), itemsSource("", `["30","40"]`, 40)), rec(6))
	AssignVersion(tr, up)
	if !tomb.Version.Less(up.Version) {
		t.Fatal("order")
	}
	if string(KeyID([]any{int32(1)})) == string(KeyID([]any{"1"})) || string(KeyID([]any{"a", "bc"})) == string(KeyID([]any{"ab", "c"})) {
		t.Fatal("KeyID not injective")
	}
	if string(KeyID([]any{dec("1.0", 1)})) != string(KeyID([]any{dec("1.00", 2)})) {
		t.Fatal("KeyID of equal decimals")
	}
}

func TestConcurrentUse(t *testing.T) {
	n := newN(t, Options{})
	tr := versioning.NewTracker()
	done := make(chan error, 4)
	for g := 0; g < 4; g++ {
		go func(g int) {
			for i := 0; i < 200; i++ {
				var ev *envelope.Event
				if i%2 == 0 {
					ev = changeEvent('u', nil, item(int64(i), "x", twos("-1"), 0), itemsSource("", `["1","2"]`, 2))
				} else {
					ev = plainEvent('u', plain("id", envelope.Number("1")), plain("id", envelope.Number("1"), "v", envelope.Number("1.5"), "w", nil))
				}
				c, err := n.Normalize(ev, &source.Record{Topic: "dbz.public.items", Partition: int32(g), Offset: int64(i)})
				if err != nil {
					done <- err
					return
				}
				AssignVersion(tr, c)
			}
			done <- nil
		}(g)
	}
	for g := 0; g < 4; g++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if len(tr.State()) != 4 {
		t.Fatal("partitions")
	}
}

// KeepBefore: an update's typed before image, for rules that read it; off by
// default (merge never needs it).
func TestKeepBefore(t *testing.T) {
	src := itemsSource("false", `["24023119","24023128"]`, 24023128)
	src.TxID, src.HasTxID = 771, true
	before := item(1, "old", twos("1000"), micros20180620)
	after := item(1, "widget", twos("1234"), micros20180620)
	for _, keep := range []bool{false, true} {
		c, err := newN(t, Options{KeepBefore: keep}).Normalize(changeEvent('u', before, after, src), rec(7))
		if err != nil {
			t.Fatal(err)
		}
		if !c.HasTxID || c.TxID != 771 {
			t.Fatalf("txId %v %d", c.HasTxID, c.TxID)
		}
		if !keep {
			if c.Before != nil || c.BeforeSchema != nil {
				t.Fatalf("before kept without KeepBefore: %v", c.Before)
			}
			continue
		}
		if c.BeforeSchema == nil || len(c.Before) != len(c.BeforeSchema.Columns) {
			t.Fatalf("before %v schema %v", c.Before, c.BeforeSchema)
		}
		i := c.BeforeSchema.Index("name")
		if i < 0 || c.Before[i] != "old" || c.Row[c.Schema.Index("name")] != "widget" {
			t.Fatalf("before %v, row %v", c.Before, c.Row)
		}
	}
}
