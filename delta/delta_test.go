// Tests of log replay, snapshots, checkpoints and commits.

package delta

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

const testSchema = `{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}},{"name":"v","type":"string","nullable":true,"metadata":{}}]}`

var dvProtocol = Protocol{MinReaderVersion: 3, MinWriterVersion: 7,
	ReaderFeatures: []string{"deletionVectors"}, WriterFeatures: []string{"deletionVectors", "domainMetadata"}}

func newTable(t testing.TB, proto Protocol, conf map[string]string) (*Table, string) {
	t.Helper()
	dir := t.TempDir()
	store := NewLocalStorage(dir)
	tb, err := Create(context.Background(), store, "t", Metadata{SchemaString: testSchema, Configuration: conf}, proto)
	if err != nil {
		t.Fatal(err)
	}
	return tb, filepath.Join(dir, "t")
}

func snap(t testing.TB, tb *Table) *Snapshot {
	t.Helper()
	s, err := tb.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func add(p string) Add {
	return Add{Path: p, Size: 10, ModificationTime: 1, DataChange: true, Stats: `{"numRecords":1}`}
}

func i32(v int32) *int32 { return &v }

func dvDesc(id string, card int64) *DeletionVector {
	// 20-char Z85 UUID as Spark writes for 'u' DVs
	return &DeletionVector{StorageType: "u", PathOrInlineDv: id, Offset: i32(1), SizeInBytes: 34, Cardinality: card}
}

func paths(adds []Add) []string {
	out := make([]string, 0, len(adds))
	for _, a := range adds {
		k := a.Path
		if a.DeletionVector != nil {
			k += "#" + a.DeletionVector.UniqueID()
		}
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func commit(t testing.TB, tx *Transaction) int64 {
	t.Helper()
	v, err := tx.Commit(context.Background(), "WRITE", nil)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestParseCommit(t *testing.T) {
	cases := []struct {
		name    string
		in      string
		n       int
		wantErr string
	}{
		{"empty", "", 0, ""},
		{"blank lines", "\n\n", 0, ""},
		{"protocol", `{"protocol":{"minReaderVersion":1,"minWriterVersion":2}}`, 1, ""},
		{"crlf and unknown action", "{\"protocol\":{\"minReaderVersion\":1,\"minWriterVersion\":2}}\r\n{\"futureAction\":{\"x\":1}}\n", 2, ""},
		{"unknown field", `{"add":{"path":"a","partitionValues":{},"size":1,"modificationTime":1,"dataChange":true,"newField":[1,2]}}`, 1, ""},
		{"truncated", "{\"protocol\":{\"minReaderVersion\":1,\"minWriterVersion\":2}}\n{\"add\":{\"path\":\"a\",\"si", 0, "line 2"},
		{"garbage", "{\"commitInfo\":{}}\nnot json\n", 0, "line 2"},
		{"add without path", `{"add":{"size":1}}`, 0, "add without path"},
		{"txn without appId", `{"txn":{"version":1}}`, 0, "txn without appId"},
		{"protocol no versions", `{"protocol":{}}`, 0, "protocol without"},
		{"wrong type", `{"add":{"path":1}}`, 0, "line 1"},
		{"dv", `{"add":{"path":"a","partitionValues":{"p":null},"size":1,"modificationTime":1,"dataChange":true,"deletionVector":{"storageType":"u","pathOrInlineDv":"ab^-aqEH.-t@S}K{vb[*k^","offset":1,"sizeInBytes":34,"cardinality":1}}}`, 1, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			acts, err := ParseCommit("00000000000000000001.json", []byte(c.in))
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || !errors.Is(err, ErrCorruptLog) || !strings.Contains(err.Error(), "00000000000000000001.json") {
					t.Fatalf("err = %v, want containing %q and file name", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(acts) != c.n {
				t.Fatalf("got %d actions, want %d", len(acts), c.n)
			}
		})
	}
}

func TestMarshalParseRoundTrip(t *testing.T) {
	ts := int64(5)
	acts := []Action{
		{CommitInfo: map[string]any{"operation": "WRITE"}},
		{Protocol: &dvProtocol},
		{Metadata: &Metadata{ID: "x", SchemaString: testSchema}},
		{Txn: &Txn{AppID: "a", Version: 3, LastUpdated: &ts}},
		{DomainMetadata: &DomainMetadata{Domain: "d", Configuration: "{}"}},
		{Add: &Add{Path: "p%20q", Size: 1, DeletionVector: dvDesc("0X9F0q2<2yJ-f)Gm2!e0", 1)}},
		{Remove: &Remove{Path: "r", DeletionTimestamp: &ts, DataChange: true}},
	}
	b, err := MarshalCommit(acts)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"partitionColumns":[]`) || !strings.Contains(string(b), `"partitionValues":{}`) {
		t.Fatalf("required empty fields missing: %s", b)
	}
	got, err := ParseCommit("x", b)
	if err != nil || len(got) != len(acts) {
		t.Fatalf("%v %d", err, len(got))
	}
	if got[5].Add.DeletionVector.UniqueID() != "u0X9F0q2<2yJ-f)Gm2!e0@1" {
		t.Fatal(got[5].Add.DeletionVector.UniqueID())
	}
}

// writeLog writes raw commit files to build replay scenarios.
func writeLog(t *testing.T, commits ...string) *Table {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "_delta_log"), 0o750); err != nil {
		t.Fatal(err)
	}
	for i, c := range commits {
		if err := os.WriteFile(filepath.Join(dir, "_delta_log", commitName(int64(i))), []byte(c), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	return OpenTable(NewLocalStorage(dir), "")
}

const v0 = `{"protocol":{"minReaderVersion":3,"minWriterVersion":7,"readerFeatures":["deletionVectors"],"writerFeatures":["deletionVectors"]}}
{"metaData":{"id":"m","format":{"provider":"parquet","options":{}},"schemaString":"{\"type\":\"struct\",\"fields\":[]}","partitionColumns":[],"configuration":{}}}
`

func jadd(p, dv string) string {
	d := ""
	if dv != "" {
		d = `,"deletionVector":{"storageType":"u","pathOrInlineDv":"` + dv + `","offset":1,"sizeInBytes":34,"cardinality":1}`
	}
	return `{"add":{"path":"` + p + `","partitionValues":{},"size":1,"modificationTime":1,"dataChange":true` + d + "}}\n"
}

func jrem(p, dv string) string {
	d := ""
	if dv != "" {
		d = `,"deletionVector":{"storageType":"u","pathOrInlineDv":"` + dv + `","offset":1,"sizeInBytes":34,"cardinality":1}`
	}
	return `{"remove":{"path":"` + p + `","deletionTimestamp":9999999999999,"dataChange":true` + d + "}}\n"
}

func TestReplayReconciliation(t *testing.T) {
	const A, B = "AAAAAAAAAAAAAAAAAAAA", "BBBBBBBBBBBBBBBBBBBB"
	cases := []struct {
		name    string
		commits []string
		files   []string
		tombs   int
	}{
		{"add", []string{v0 + jadd("a", "")}, []string{"a"}, 0},
		{"add remove", []string{v0 + jadd("a", ""), jrem("a", "")}, []string{}, 1},
		{"remove re-add", []string{v0 + jadd("a", ""), jrem("a", ""), jadd("a", "")}, []string{"a"}, 0},
		{"dv replace", []string{v0 + jadd("a", ""), jrem("a", "") + jadd("a", A)}, []string{"a#u" + A + "@1"}, 1},
		{"dv replace twice", []string{v0 + jadd("a", ""), jrem("a", "") + jadd("a", A), jrem("a", A) + jadd("a", B)}, []string{"a#u" + B + "@1"}, 2},
		{"remove other dv is noop", []string{v0 + jadd("a", A), jrem("a", B)}, []string{"a#u" + A + "@1"}, 1},
		{"re-add same key replaces", []string{v0 + jadd("a", "") + jadd("b", ""), jadd("a", "")}, []string{"a", "b"}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tb := writeLog(t, c.commits...)
			s := snap(t, tb)
			got := paths(s.Files())
			if fmt.Sprint(got) != fmt.Sprint(c.files) {
				t.Fatalf("files %v, want %v", got, c.files)
			}
			if len(s.AllTombstones()) != c.tombs {
				t.Fatalf("tombstones %d, want %d", len(s.AllTombstones()), c.tombs)
			}
			// same result via a checkpoint at the last version
			if err := WriteCheckpoint(context.Background(), s); err != nil {
				t.Fatal(err)
			}
			s2 := snap(t, tb)
			if s2.CheckpointVersion() != s.Version() || fmt.Sprint(paths(s2.Files())) != fmt.Sprint(c.files) || len(s2.AllTombstones()) != c.tombs {
				t.Fatalf("after checkpoint: cp=%d files %v tombs %d", s2.CheckpointVersion(), paths(s2.Files()), len(s2.AllTombstones()))
			}
		})
	}
}

func TestTxnLatestWins(t *testing.T) {
	txn := func(app string, v int) string {
		return fmt.Sprintf(`{"txn":{"appId":%q,"version":%d,"lastUpdated":1}}`+"\n", app, v)
	}
	cases := []struct {
		name    string
		commits []string
		want    map[string]int64
	}{
		{"single", []string{v0 + txn("a", 1)}, map[string]int64{"a": 1}},
		{"increasing", []string{v0 + txn("a", 1), txn("a", 5)}, map[string]int64{"a": 5}},
		{"not monotonic: latest wins", []string{v0 + txn("a", 5), txn("a", 2)}, map[string]int64{"a": 2}},
		{"two apps", []string{v0 + txn("a", 1) + txn("b", 7), txn("a", 3)}, map[string]int64{"a": 3, "b": 7}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tb := writeLog(t, c.commits...)
			for pass := 0; pass < 2; pass++ {
				s := snap(t, tb)
				for app, want := range c.want {
					if got, ok := s.TxnVersion(app); !ok || got != want {
						t.Fatalf("pass %d: txn %s = %d,%v want %d", pass, app, got, ok, want)
					}
				}
				if _, ok := s.TxnVersion("nope"); ok {
					t.Fatal("unknown app found")
				}
				if len(s.Txns()) != len(c.want) {
					t.Fatal(s.Txns())
				}
				if err := WriteCheckpoint(context.Background(), s); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func TestCheckpointRoundTrip(t *testing.T) {
	ctx := context.Background()
	tb, _ := newTable(t, dvProtocol, map[string]string{"delta.checkpointInterval": "1000"})
	s := snap(t, tb)
	pv := "x"
	a1 := add("p=x/a.parquet")
	a1.PartitionValues = map[string]*string{"p": &pv, "q": nil}
	a1.Tags = map[string]string{"k": "v"}
	commit(t, s.Begin().Add(a1, add("b.parquet"), add("c.parquet")).SetAppTransaction("app", 4).SetDomainMetadata("dom", `{"a":1}`).SetDomainMetadata("gone", "x"))
	s = snap(t, tb)
	a1dv := a1
	a1dv.DeletionVector = dvDesc("0X9F0q2<2yJ-f)Gm2!e0", 1)
	mr := int64(2)
	a1dv.DeletionVector.MaxRowIndex = &mr
	commit(t, s.Begin().Remove(RemoveFile(a1, time.Now()), RemoveFile(s.Files()[1], time.Now())).Add(a1dv).RemoveDomainMetadata("gone"))
	before := snap(t, tb)
	if err := WriteCheckpoint(ctx, before); err != nil {
		t.Fatal(err)
	}
	after := snap(t, tb)
	if after.CheckpointVersion() != 2 {
		t.Fatalf("checkpoint not used: %d", after.CheckpointVersion())
	}
	if fmt.Sprint(paths(after.Files())) != fmt.Sprint(paths(before.Files())) {
		t.Fatalf("files %v vs %v", paths(after.Files()), paths(before.Files()))
	}
	var got Add
	for _, f := range after.Files() {
		if f.Path == a1.Path {
			got = f
		}
	}
	if got.DeletionVector == nil || got.DeletionVector.UniqueID() != a1dv.DeletionVector.UniqueID() || *got.DeletionVector.MaxRowIndex != 2 ||
		got.DeletionVector.Cardinality != 1 || *got.PartitionValues["p"] != "x" || got.PartitionValues["q"] != nil || got.Tags["k"] != "v" || got.Stats != a1.Stats {
		t.Fatalf("add not preserved: %+v dv=%+v", got, got.DeletionVector)
	}
	if len(after.Tombstones()) != 2 {
		t.Fatalf("tombstones %d", len(after.Tombstones()))
	}
	if v, ok := after.TxnVersion("app"); !ok || v != 4 {
		t.Fatal("txn lost")
	}
	if c, ok := after.DomainMetadata("dom"); !ok || c != `{"a":1}` {
		t.Fatal("domain lost")
	}
	if _, ok := after.DomainMetadata("gone"); ok {
		t.Fatal("removed domain resurrected")
	}
	if after.Protocol().MinReaderVersion != 3 || len(after.Protocol().ReaderFeatures) != 1 || after.Metadata().SchemaString != testSchema {
		t.Fatalf("protocol/metadata: %+v", after.Protocol())
	}
	b, err := os.ReadFile(filepath.Join(tb.store.(*LocalStorage).Root, "t/_delta_log/_last_checkpoint"))
	if err != nil || !strings.Contains(string(b), `"version":2`) || !strings.Contains(string(b), `"numOfAddFiles":2`) {
		t.Fatalf("_last_checkpoint: %s %v", b, err)
	}
}

func TestAutoCheckpointAndTimeTravel(t *testing.T) {
	ctx := context.Background()
	tb, dir := newTable(t, Protocol{MinReaderVersion: 1, MinWriterVersion: 2}, map[string]string{"delta.checkpointInterval": "3"})
	for i := 1; i <= 7; i++ {
		s := snap(t, tb)
		if v := commit(t, s.Begin().Add(add(fmt.Sprintf("f%d.parquet", i)))); v != int64(i) {
			t.Fatalf("v%d", v)
		}
	}
	for _, v := range []int64{3, 6} {
		if _, err := os.Stat(filepath.Join(dir, "_delta_log", checkpointName(v))); err != nil {
			t.Fatalf("checkpoint v%d missing: %v", v, err)
		}
	}
	for v := int64(0); v <= 7; v++ {
		s, err := tb.SnapshotAt(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		if s.Version() != v || len(s.Files()) != int(v) {
			t.Fatalf("v%d: version %d files %d", v, s.Version(), len(s.Files()))
		}
	}
	if _, err := tb.SnapshotAt(ctx, 8); err == nil {
		t.Fatal("future version loaded")
	}
	// a corrupt _last_checkpoint must not break readers
	os.WriteFile(filepath.Join(dir, "_delta_log", "_last_checkpoint"), []byte("{garbage"), 0o640)
	if s := snap(t, tb); s.Version() != 7 || s.CheckpointVersion() != 6 {
		t.Fatalf("v%d cp%d", s.Version(), s.CheckpointVersion())
	}
	// _last_checkpoint pointing at a missing checkpoint
	os.WriteFile(filepath.Join(dir, "_delta_log", "_last_checkpoint"), []byte(`{"version":99,"size":1}`), 0o640)
	if s := snap(t, tb); s.Version() != 7 {
		t.Fatal(s.Version())
	}
	// missing commit after checkpoint → error
	os.Remove(filepath.Join(dir, "_delta_log", checkpointName(6)))
	os.Remove(filepath.Join(dir, "_delta_log", commitName(5)))
	if _, err := tb.Snapshot(ctx); !errors.Is(err, ErrCorruptLog) {
		t.Fatalf("gap not detected: %v", err)
	}
}

func TestCreateExists(t *testing.T) {
	tb, _ := newTable(t, Protocol{}, nil)
	_, err := Create(context.Background(), tb.store, "t", Metadata{SchemaString: testSchema}, Protocol{})
	if !errors.Is(err, ErrTableExists) {
		t.Fatal(err)
	}
	_, err = OpenTable(tb.store, "nope").Snapshot(context.Background())
	if !errors.Is(err, ErrNotATable) {
		t.Fatal(err)
	}
}

func TestCommitValidation(t *testing.T) {
	tb, _ := newTable(t, Protocol{MinReaderVersion: 1, MinWriterVersion: 2}, map[string]string{"delta.appendOnly": "true"})
	s := snap(t, tb)
	cases := []struct {
		name string
		tx   *Transaction
		want string
	}{
		{"dup add", s.Begin().Add(add("a"), add("a")), "twice"},
		{"add+remove same key", s.Begin().Add(add("a")).Remove(Remove{Path: "a"}), "reconciles"},
		{"dup txn", s.Begin().SetAppTransaction("x", 1).SetAppTransaction("x", 2), "two txn"},
		{"domain needs feature", s.Begin().SetDomainMetadata("d", "c"), "domainMetadata"},
		{"dv needs feature", s.Begin().Add(Add{Path: "a", DeletionVector: dvDesc("AAAAAAAAAAAAAAAAAAAA", 1)}), "deletionVectors"},
		{"append only", s.Begin().Remove(Remove{Path: "a", DataChange: true}), "append-only"},
		{"unknown writer feature", s.Begin().SetProtocol(Protocol{MinReaderVersion: 1, MinWriterVersion: 7, WriterFeatures: []string{"rowTracking"}}), "rowTracking"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.tx.Commit(context.Background(), "WRITE", nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %q", err, c.want)
			}
		})
	}
}

func TestConflictMatrix(t *testing.T) {
	type setup func(s *Snapshot) *Transaction
	blind := func(s *Snapshot) *Transaction {
		return s.Begin().Add(add(fmt.Sprintf("n-%d.parquet", time.Now().UnixNano())))
	}
	rmBase := func(s *Snapshot) *Transaction { return s.Begin().Remove(RemoveFile(s.Files()[0], time.Now())) }
	rewrite := func(s *Snapshot) *Transaction {
		a := s.Files()[0]
		a2 := a
		a2.DeletionVector = dvDesc(fmt.Sprintf("%020d", time.Now().UnixNano()%1e15), 1)
		return s.Begin().Remove(RemoveFile(a, time.Now())).Add(a2)
	}
	meta := func(s *Snapshot) *Transaction {
		m := s.Metadata()
		m.Configuration = map[string]string{"x": "y"}
		return s.Begin().SetMetadata(m)
	}
	txnA := func(s *Snapshot) *Transaction { return blind(s).SetAppTransaction("A", s.version+1) }
	txnB := func(s *Snapshot) *Transaction { return blind(s).SetAppTransaction("B", s.version+1) }
	domX := func(s *Snapshot) *Transaction { return blind(s).SetDomainMetadata("X", "1") }
	domY := func(s *Snapshot) *Transaction { return blind(s).SetDomainMetadata("Y", "1") }
	readAll := func(s *Snapshot) *Transaction { return blind(s).ReadWholeTable() }
	readA := func(s *Snapshot) *Transaction { tx := blind(s); tx.TxnVersion("A"); return tx }
	cases := []struct {
		name            string
		winner, loser   setup
		wantConflict    bool
		reasonSubstring string
	}{
		{"blind vs blind", blind, blind, false, ""},
		{"blind vs remove", blind, rmBase, false, ""},
		{"remove vs blind", rmBase, blind, false, ""},
		{"remove vs remove same file", rmBase, rmBase, true, "concurrent remove"},
		{"remove vs dv rewrite same file", rmBase, rewrite, true, "concurrent remove"},
		{"dv rewrite vs dv rewrite", rewrite, rewrite, true, "concurrent remove"},
		{"metadata vs blind", meta, blind, true, "metaData"},
		{"blind vs metadata", blind, meta, false, ""},
		{"txn A vs txn A", txnA, txnA, true, "appId \"A\""},
		{"txn A vs txn B", txnA, txnB, false, ""},
		{"txn A vs reader of A", txnA, readA, true, "appId \"A\""},
		{"domain X vs X", domX, domX, true, "domain \"X\""},
		{"domain X vs Y", domX, domY, false, ""},
		{"blind vs whole-table reader", blind, readAll, true, "concurrent add"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			proto := dvProtocol
			tb, _ := newTable(t, proto, nil)
			commit(t, snap(t, tb).Begin().Add(add("base.parquet")))
			s := snap(t, tb)
			w, l := c.winner(s), c.loser(s)
			commit(t, w)
			v, err := l.Commit(context.Background(), "WRITE", nil)
			if !c.wantConflict {
				if err != nil || v != 3 {
					t.Fatalf("v=%d err=%v", v, err)
				}
				return
			}
			var ce *ConflictError
			if !errors.Is(err, ErrConflict) || !errors.As(err, &ce) || !strings.Contains(ce.Reason, c.reasonSubstring) || ce.WinnerVersion != 2 {
				t.Fatalf("want conflict %q, got %v", c.reasonSubstring, err)
			}
			if s2 := snap(t, tb); s2.Version() != 2 {
				t.Fatalf("loser committed: v%d", s2.Version())
			}
		})
	}
}

func TestBoundedRetries(t *testing.T) {
	tb, _ := newTable(t, Protocol{}, nil)
	s := snap(t, tb)
	for i := 0; i < 3; i++ {
		commit(t, snap(t, tb).Begin().Add(add(fmt.Sprintf("w%d", i))))
	}
	tx := s.Begin().Add(add("late"))
	tx.MaxAttempts = 2
	_, err := tx.Commit(context.Background(), "WRITE", nil)
	var ce *ConflictError
	if !errors.As(err, &ce) || ce.Attempts != 2 {
		t.Fatalf("%v", err)
	}
	tx = s.Begin().Add(add("late"))
	if v, err := tx.Commit(context.Background(), "WRITE", nil); err != nil || v != 4 {
		t.Fatalf("v%d %v", v, err)
	}
}

func TestUnsupportedFeatures(t *testing.T) {
	cases := []struct{ proto, feature string }{
		{`{"protocol":{"minReaderVersion":4,"minWriterVersion":7,"readerFeatures":[],"writerFeatures":[]}}`, "readerVersion 4"},
		{`{"protocol":{"minReaderVersion":3,"minWriterVersion":7,"readerFeatures":["variantType"],"writerFeatures":["variantType"]}}`, "variantType"},
	}
	meta := `{"metaData":{"id":"m","format":{"provider":"parquet","options":{}},"schemaString":"{}","partitionColumns":[],"configuration":{}}}` + "\n"
	for _, c := range cases {
		tb := writeLog(t, c.proto+"\n"+meta)
		_, err := tb.Snapshot(context.Background())
		var ue *UnsupportedFeatureError
		if !errors.As(err, &ue) || ue.Feature != c.feature || !errors.Is(err, ErrUnsupportedFeature) {
			t.Fatalf("%s: %v", c.feature, err)
		}
	}
}

// Readers must fail on type changes they do not support (protocol, "Reader
// Requirements for Type Widening"), and accept the supported ones.
func TestTypeChangesValidated(t *testing.T) {
	proto := `{"protocol":{"minReaderVersion":3,"minWriterVersion":7,"readerFeatures":["typeWidening"],"writerFeatures":["typeWidening"]}}`
	field := func(typ, from, to, path string) string {
		fp := ""
		if path != "" {
			fp = `,\"fieldPath\":\"` + path + `\"`
		}
		return `{\"name\":\"c\",\"type\":` + typ + `,\"nullable\":true,\"metadata\":{\"delta.typeChanges\":[{\"fromType\":\"` + from + `\",\"toType\":\"` + to + `\"` + fp + `}]}}`
	}
	cases := []struct {
		field string
		ok    bool
	}{
		{field(`\"long\"`, "integer", "long", ""), true},
		{field(`\"decimal(12,4)\"`, "decimal(10, 2)", "decimal(12,4)", ""), true},
		{field(`\"timestamp_ntz\"`, "date", "timestamp_ntz", ""), true},
		{field(`{\"type\":\"array\",\"elementType\":\"double\",\"containsNull\":true}`, "float", "double", "element"), true},
		{field(`\"integer\"`, "long", "integer", ""), false},
		{field(`\"string\"`, "integer", "string", ""), false},
		{field(`\"timestamp\"`, "date", "timestamp", ""), false},
	}
	for _, c := range cases {
		meta := `{"metaData":{"id":"m","format":{"provider":"parquet","options":{}},"schemaString":"{\"type\":\"struct\",\"fields\":[` + c.field + `]}","partitionColumns":[],"configuration":{}}}` + "\n"
		tb := writeLog(t, proto+"\n"+meta)
		_, err := tb.Snapshot(context.Background())
		var ue *UnsupportedFeatureError
		if c.ok != (err == nil) || (!c.ok && (!errors.As(err, &ue) || !strings.Contains(ue.Feature, "type change"))) {
			t.Errorf("%s: %v", c.field, err)
		}
	}
}

func TestParseInterval(t *testing.T) {
	cases := map[string]time.Duration{
		"interval 1 week": 7 * 24 * time.Hour, "interval 30 days": 30 * 24 * time.Hour, "7 days": 7 * 24 * time.Hour,
		"interval 2 hours 30 minutes": 150 * time.Minute, "168h": 168 * time.Hour, "INTERVAL 1 DAY": 24 * time.Hour,
	}
	for in, want := range cases {
		if got, err := ParseInterval(in); err != nil || got != want {
			t.Errorf("%q: %v %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "interval", "1 fortnight", "x days"} {
		if _, err := ParseInterval(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestVacuumAndCleanup(t *testing.T) {
	ctx := context.Background()
	tb, dir := newTable(t, Protocol{}, map[string]string{"delta.checkpointInterval": "2"})
	old := time.Now().Add(-30 * 24 * time.Hour)
	for _, f := range []string{"live.parquet", "dead.parquet", "orphan.parquet", "recent-orphan.parquet", "_hidden/x.parquet"} {
		p := filepath.Join(dir, f)
		os.MkdirAll(filepath.Dir(p), 0o750)
		os.WriteFile(p, []byte("x"), 0o640)
		if f != "recent-orphan.parquet" {
			os.Chtimes(p, old, old)
		}
	}
	commit(t, snap(t, tb).Begin().Add(add("live.parquet"), add("dead.parquet")))
	s := snap(t, tb)
	tx := s.Begin().Remove(RemoveFile(s.Files()[1], time.Now()))
	commit(t, tx)
	res, err := Vacuum(ctx, tb, VacuumOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.DryRun || fmt.Sprint(res.Files) != "[orphan.parquet]" {
		t.Fatalf("dry run: %+v", res)
	}
	// after the tombstone expires, dead.parquet goes too
	res, err = Vacuum(ctx, tb, VacuumOptions{Execute: true, Now: time.Now().Add(8 * 24 * time.Hour)})
	if err != nil || fmt.Sprint(res.Files) != "[dead.parquet orphan.parquet recent-orphan.parquet]" {
		t.Fatalf("%+v %v", res, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "live.parquet")); err != nil {
		t.Fatal("live file deleted")
	}
	// log cleanup: make everything old, expect commits before the newest old checkpoint removed
	logd := filepath.Join(dir, "_delta_log")
	ents, _ := os.ReadDir(logd)
	for _, e := range ents {
		os.Chtimes(filepath.Join(logd, e.Name()), old, old)
	}
	deleted, err := CleanupLog(ctx, tb, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(deleted) != 2 { // v0.json, v1.json (checkpoint at v2)
		t.Fatalf("deleted %v", deleted)
	}
	if s := snap(t, tb); s.Version() != 2 || len(s.Files()) != 1 {
		t.Fatalf("after cleanup v%d files %d", s.Version(), len(s.Files()))
	}
}

func TestPermissions(t *testing.T) {
	_, dir := newTable(t, Protocol{}, nil)
	for _, p := range []string{filepath.Join(dir, "_delta_log"), filepath.Join(dir, "_delta_log", commitName(0))} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm()&0o007 != 0 {
			t.Fatalf("%s is world-accessible: %v", p, st.Mode())
		}
	}
}

func TestCorruptCheckpointFallback(t *testing.T) {
	ctx := context.Background()
	tb, dir := newTable(t, Protocol{}, map[string]string{"delta.checkpointInterval": "3"})
	for i := 1; i <= 7; i++ {
		commit(t, snap(t, tb).Begin().Add(add(fmt.Sprintf("f%d", i))).SetAppTransaction("a", int64(i)))
	}
	logd := filepath.Join(dir, "_delta_log")
	truncate := func(v int64) {
		p := filepath.Join(logd, checkpointName(v))
		b, _ := os.ReadFile(p)
		os.WriteFile(p, b[:len(b)/2], 0o640)
	}
	truncate(6) // partial newest checkpoint: use v3's
	s := snap(t, tb)
	if s.Version() != 7 || s.CheckpointVersion() != 3 || len(s.Files()) != 7 {
		t.Fatalf("v%d cp%d files %d", s.Version(), s.CheckpointVersion(), len(s.Files()))
	}
	if v, _ := s.TxnVersion("a"); v != 7 {
		t.Fatal(v)
	}
	truncate(3) // no good checkpoint: replay from v0
	if s = snap(t, tb); s.CheckpointVersion() != -1 || len(s.Files()) != 7 {
		t.Fatalf("cp%d files %d", s.CheckpointVersion(), len(s.Files()))
	}
	os.Remove(filepath.Join(logd, commitName(1))) // and the history is gone: clear error
	_, err := tb.Snapshot(ctx)
	if !errors.Is(err, ErrCorruptLog) || !strings.Contains(err.Error(), "checkpoint v6") {
		t.Fatalf("%v", err)
	}
}

// failPut refuses Put of keys whose base name contains match: a store where
// checkpoints (written with Put) cannot be stored but commits can.
type failPut struct {
	Storage
	match string
}

func (f failPut) Put(ctx context.Context, key string, data []byte) error {
	if strings.Contains(path.Base(key), f.match) {
		return fmt.Errorf("put %s: refused by test", key)
	}
	return f.Storage.Put(ctx, key, data)
}

// A checkpoint failure does not fail the commit: CommitWithResult reports it
// beside the version, only on the commits where one was due, and the table
// reads back at every version without it.
func TestCommitResultCheckpointErr(t *testing.T) {
	ctx := context.Background()
	store := failPut{Storage: NewMemStorage(), match: ".checkpoint."}
	tb, err := Create(ctx, store, "", Metadata{SchemaString: testSchema, Configuration: map[string]string{"delta.checkpointInterval": "2"}}, Protocol{MinReaderVersion: 1, MinWriterVersion: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := int64(1); i <= 4; i++ {
		res, err := snap(t, tb).Begin().Add(add(fmt.Sprintf("f%d.parquet", i))).CommitWithResult(ctx, "WRITE", nil)
		if err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
		if res.Version != i {
			t.Fatalf("commit %d: version %d", i, res.Version)
		}
		if due := i%2 == 0; due != (res.CheckpointErr != nil) {
			t.Fatalf("v%d: checkpoint due %v, CheckpointErr %v", i, due, res.CheckpointErr)
		}
	}
	s := snap(t, tb)
	if s.Version() != 4 || s.CheckpointVersion() >= 0 || len(s.Files()) != 4 {
		t.Fatalf("v%d cp%d files %d", s.Version(), s.CheckpointVersion(), len(s.Files()))
	}
	// Commit keeps its (version, error) shape and drops the checkpoint error.
	if v, err := snap(t, tb).Begin().Add(add("f5.parquet")).Commit(ctx, "WRITE", nil); err != nil || v != 5 {
		t.Fatalf("Commit = %d, %v", v, err)
	}
	// A refused commit reports version -1 and writes nothing.
	if res, err := snap(t, tb).Begin().Add(add("f6.parquet")).ExpectTxn("sink/t/0", 7).CommitWithResult(ctx, "WRITE", nil); !errors.Is(err, ErrFenced) || res.Version != -1 {
		t.Fatalf("fenced commit: %+v, %v", res, err)
	}
	if v := snap(t, tb).Version(); v != 5 {
		t.Fatalf("after the fenced commit: v%d", v)
	}
}

// Versions a consistency group's cut names stay readable: vacuum keeps the
// files they reference and log cleanup the log from their checkpoint.
func TestVacuumAndCleanupKeepVersions(t *testing.T) {
	ctx := context.Background()
	tb, dir := newTable(t, Protocol{}, map[string]string{"delta.checkpointInterval": "2"})
	old := time.Now().Add(-30 * 24 * time.Hour)
	for _, f := range []string{"a.parquet", "b.parquet", "c.parquet"} {
		p := filepath.Join(dir, f)
		os.WriteFile(p, []byte("x"), 0o640)
		os.Chtimes(p, old, old)
	}
	commit(t, snap(t, tb).Begin().Add(add("a.parquet")))                                    // v1
	s := snap(t, tb)                                                                        //
	commit(t, s.Begin().Remove(RemoveFile(s.Files()[0], time.Now())).Add(add("b.parquet"))) // v2
	s = snap(t, tb)
	commit(t, s.Begin().Remove(RemoveFile(s.Files()[0], time.Now())).Add(add("c.parquet"))) // v3
	later := time.Now().Add(8 * 24 * time.Hour)
	res, err := Vacuum(ctx, tb, VacuumOptions{Now: later})
	if err != nil || fmt.Sprint(res.Files) != "[a.parquet b.parquet]" {
		t.Fatalf("without kept versions: %+v %v", res, err)
	}
	res, err = Vacuum(ctx, tb, VacuumOptions{Now: later, Execute: true, KeepVersions: []int64{2}})
	if err != nil || fmt.Sprint(res.Files) != "[a.parquet]" {
		t.Fatalf("keeping v2: %+v %v", res, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "b.parquet")); err != nil {
		t.Fatal("v2's file deleted")
	}
	if _, err := Vacuum(ctx, tb, VacuumOptions{KeepVersions: []int64{9}}); err == nil {
		t.Fatal("a version that does not exist is not reported")
	}
	logd := filepath.Join(dir, "_delta_log")
	ents, _ := os.ReadDir(logd)
	for _, e := range ents {
		os.Chtimes(filepath.Join(logd, e.Name()), old, old)
	}
	// checkpoints at v2: keeping v1 keeps the whole log, keeping v2 the log from v2
	if deleted, err := CleanupLogKeeping(ctx, tb, time.Now(), []int64{1}); err != nil || len(deleted) != 0 {
		t.Fatalf("keeping v1: deleted %v %v", deleted, err)
	}
	if deleted, err := CleanupLogKeeping(ctx, tb, time.Now(), []int64{2}); err != nil || len(deleted) != 2 {
		t.Fatalf("keeping v2: deleted %v %v", deleted, err)
	}
	if _, err := tb.SnapshotAt(ctx, 2); err != nil {
		t.Fatalf("v2 after cleanup: %v", err)
	}
}
