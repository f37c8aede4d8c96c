package versioning

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

func seq(t *testing.T, s, snapshot string) Position {
	t.Helper()
	p, err := ParseSequence(s)
	if err != nil {
		t.Fatalf("ParseSequence(%q): %v", s, err)
	}
	p.Snapshot = snapshot
	return p
}

func TestParseSequence(t *testing.T) {
	for _, tc := range []struct {
		in      string
		hc      bool
		c       uint64
		hl      bool
		l       uint64
		wantErr bool
	}{
		{in: `["24023119","24023128"]`, hc: true, c: 24023119, hl: true, l: 24023128},
		{in: `[null,"24023128"]`, hl: true, l: 24023128},
		{in: `["1",null]`, hc: true, c: 1},
		{in: `[null,null]`},
		{in: ` [ "18446744073709551615" , 7 ] `, hc: true, c: 18446744073709551615, hl: true, l: 7},
		{in: `["18446744073709551616","1"]`, wantErr: true},
		{in: `["1"]`, wantErr: true},
		{in: `["1","2","3"]`, wantErr: true},
		{in: `["1","2"]x`, wantErr: true},
		{in: `["-1","2"]`, wantErr: true},
		{in: `["","2"]`, wantErr: true},
		{in: `["1,"2"]`, wantErr: true},
		{in: ``, wantErr: true},
		{in: `nul`, wantErr: true},
	} {
		p, err := ParseSequence(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("%q: err=%v want err=%v", tc.in, err, tc.wantErr)
			continue
		}
		if err == nil && (p.HasCommit != tc.hc || p.Commit != tc.c || p.HasLSN != tc.hl || p.LSN != tc.l) {
			t.Errorf("%q: got %+v", tc.in, p)
		}
	}
}

func FuzzParseSequence(f *testing.F) {
	for _, s := range []string{`["24023119","24023128"]`, `[null,"1"]`, `[null,null]`, `[1,2]`, `["18446744073709551615","0"]`, `[`, `]`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseSequence(s)
		if err != nil {
			return
		}
		// A successful parse must re-render to an equivalent sequence.
		var sb strings.Builder
		sb.WriteByte('[')
		if p.HasCommit {
			sb.WriteString(`"` + u64(p.Commit) + `"`)
		} else {
			sb.WriteString("null")
		}
		sb.WriteByte(',')
		if p.HasLSN {
			sb.WriteString(`"` + u64(p.LSN) + `"`)
		} else {
			sb.WriteString("null")
		}
		sb.WriteByte(']')
		q, err := ParseSequence(sb.String())
		if err != nil || q != p {
			t.Fatalf("%q → %+v → %q → %+v, %v", s, p, sb.String(), q, err)
		}
	})
}

func u64(x uint64) string {
	if x == 0 {
		return "0"
	}
	var b []byte
	for x > 0 {
		b = append([]byte{byte('0' + x%10)}, b...)
		x /= 10
	}
	return string(b)
}

func TestVersionStringRoundTrip(t *testing.T) {
	v := Version{Epoch: 3, Phase: PhaseStream, Commit: 0x1234, LSN: 0xabcdef, Seq: 9}
	s := v.String()
	if s != "00000003-1-0000000000001234-0000000000abcdef-0000000000000009" {
		t.Fatalf("String() = %s", s)
	}
	if len(s) != VersionStringLen {
		t.Fatal("length")
	}
	p, err := ParseVersion(s)
	if err != nil || p != v {
		t.Fatalf("ParseVersion = %+v, %v", p, err)
	}
	for _, bad := range []string{"", s[:60], s + "0", strings.ToUpper(s), strings.Replace(s, "-", "_", 1), "0000000g" + s[8:]} {
		if _, err := ParseVersion(bad); err == nil {
			t.Errorf("ParseVersion(%q) accepted", bad)
		}
	}
	j, _ := json.Marshal(v)
	if string(j) != `"`+s+`"` {
		t.Fatalf("json %s", j)
	}
	var back Version
	if err := json.Unmarshal(j, &back); err != nil || back != v {
		t.Fatalf("json back %+v %v", back, err)
	}
}

func randVersion(r *rand.Rand) Version {
	pick := func() uint64 {
		switch r.IntN(4) {
		case 0:
			return 0
		case 1:
			return ^uint64(0) - uint64(r.IntN(3))
		case 2:
			return uint64(r.IntN(4))
		}
		return r.Uint64()
	}
	return Version{Epoch: uint32(pick()), Phase: Phase(r.IntN(2)), Commit: pick(), LSN: pick(), Seq: pick()}
}

func TestVersionStringOrderProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		a, b := randVersion(r), randVersion(r)
		if got, want := strings.Compare(a.String(), b.String()), a.Compare(b); got != want {
			t.Fatalf("%v vs %v: string order %d, Compare %d", a, b, got, want)
		}
	}
}

func FuzzVersionOrder(f *testing.F) {
	f.Add(uint32(0), uint8(0), uint64(0), uint64(0), uint64(0), uint32(1), uint8(1), uint64(5), uint64(6), uint64(7))
	f.Fuzz(func(t *testing.T, e1 uint32, p1 uint8, c1, l1, s1 uint64, e2 uint32, p2 uint8, c2, l2, s2 uint64) {
		a := Version{Epoch: e1, Phase: Phase(p1 % 2), Commit: c1, LSN: l1, Seq: s1}
		b := Version{Epoch: e2, Phase: Phase(p2 % 2), Commit: c2, LSN: l2, Seq: s2}
		if got, want := strings.Compare(a.String(), b.String()), a.Compare(b); got != want {
			t.Fatalf("%v vs %v: string order %d, Compare %d", a, b, got, want)
		}
		if pa, err := ParseVersion(a.String()); err != nil || pa != a {
			t.Fatalf("round trip %v: %v %v", a, pa, err)
		}
	})
}

// --- ordering cases (a)–(g) -------------------------------------------------

const T, P = "dbz.public.items", int32(0)

// (a) T1 writes @100, T2 writes @108 and commits @118, T1 commits @130.
// Stream order: T2's row (seq [C0,108]) then T1's row (seq [118,100]).
func TestOrderInterleavedTransactions(t *testing.T) {
	tr := NewTracker()
	t2 := tr.Assign(T, P, 10, seq(t, `["90","108"]`, "false"))
	t1 := tr.Assign(T, P, 11, seq(t, `["118","100"]`, "false"))
	if !t2.Less(t1) {
		t.Fatalf("T1 (emitted later, lsn 100) must rank above T2 (lsn 108): %v vs %v", t1, t2)
	}
	// A consumer ordering by bare LSN would get this wrong:
	if !(t1.LSN < t2.LSN) {
		t.Fatal("test premise")
	}
}

// (b) several changes of one key inside one transaction.
func TestOrderSameKeyOneTransaction(t *testing.T) {
	tr := NewTracker()
	var prev Version
	for i, s := range []string{`["200","210"]`, `["200","220"]`, `["200","230"]`} {
		v := tr.Assign(T, P, int64(i), seq(t, s, ""))
		if i > 0 && !prev.Less(v) {
			t.Fatalf("change %d %v not above %v", i, v, prev)
		}
		prev = v
	}
}

// (c) snapshot→stream handoff: a tx in flight during the snapshot commits
// after it; its change LSN < the snapshot's LSN and sequence[0] is null.
func TestOrderSnapshotHandoff(t *testing.T) {
	tr := NewTracker()
	snap := tr.Assign(T, P, 0, seq(t, `[null,"500"]`, "last"))
	inflight := tr.Assign(T, P, 1, seq(t, `[null,"480"]`, "false"))
	if !snap.Less(inflight) {
		t.Fatalf("in-flight tx %v must rank above the snapshot row %v", inflight, snap)
	}
	if snap.Epoch != inflight.Epoch || snap.Phase != PhaseSnapshot || inflight.Phase != PhaseStream {
		t.Fatalf("phases %v %v", snap, inflight)
	}
	// Snapshot markers all map to the snapshot phase.
	for _, s := range []string{"true", "first", "first_in_data_collection", "last_in_data_collection", "last"} {
		if PhaseOf(s) != PhaseSnapshot {
			t.Errorf("%s", s)
		}
	}
	for _, s := range []string{"false", "", "incremental", "bogus"} {
		if PhaseOf(s) != PhaseStream {
			t.Errorf("%s", s)
		}
	}
}

// (d) redelivered duplicates compare equal.
func TestOrderRedeliveredDuplicates(t *testing.T) {
	tr := NewTracker()
	a := tr.Assign(T, P, 5, seq(t, `["300","310"]`, ""))
	tr.Assign(T, P, 6, seq(t, `["300","320"]`, ""))
	// restart: the connector re-sends the same event at a later offset
	b := tr.Assign(T, P, 40, seq(t, `["300","310"]`, ""))
	if a.Compare(b) != 0 || a.String() != b.String() {
		t.Fatalf("duplicate versions differ: %v %v", a, b)
	}
	// and a consumer re-reading the same offsets after a crash, with restored state
	st := tr.State()
	tr2 := NewTracker()
	tr2.Restore(st)
	if c := tr2.Assign(T, P, 40, seq(t, `["300","310"]`, "")); c != a {
		t.Fatalf("after restore %v != %v", c, a)
	}
}

// (e) a re-snapshot after streaming wins over older streamed changes, even if
// its LSN is lower (e.g. after an offset reset).
func TestOrderResnapshot(t *testing.T) {
	tr := NewTracker()
	s0 := tr.Assign(T, P, 0, seq(t, `[null,"100"]`, "last"))
	st := tr.Assign(T, P, 1, seq(t, `["900","950"]`, "false"))
	r1 := tr.Assign(T, P, 2, seq(t, `[null,"400"]`, "first"))
	r2 := tr.Assign(T, P, 3, seq(t, `[null,"400"]`, "last"))
	if !(s0.Less(st) && st.Less(r1)) || r1 != r2 {
		t.Fatalf("%v %v %v %v", s0, st, r1, r2)
	}
	if r1.Epoch != 1 {
		t.Fatalf("epoch %d", r1.Epoch)
	}
	// streaming after the re-snapshot ranks above it
	after := tr.Assign(T, P, 4, seq(t, `[null,"390"]`, "false"))
	if !r2.Less(after) {
		t.Fatalf("%v !< %v", r2, after)
	}
	// a second snapshot directly after the first does not bump again
	tr2 := NewTracker()
	a := tr2.Assign(T, P, 0, seq(t, `[null,"10"]`, "first"))
	b := tr2.Assign(T, P, 1, seq(t, `[null,"10"]`, "true"))
	if a.Epoch != 0 || b.Epoch != 0 {
		t.Fatal("no bump inside one snapshot")
	}
}

// (f) incremental-snapshot rows carry no LSN: they rank just after the last
// record of the partition and before anything later.
func TestOrderIncrementalSnapshot(t *testing.T) {
	tr := NewTracker()
	prev := tr.Assign(T, P, 5, seq(t, `["300","310"]`, "false"))
	i1 := tr.Assign(T, P, 6, Position{Snapshot: "incremental"})
	i2 := tr.Assign(T, P, 7, Position{Snapshot: "incremental"})
	next := tr.Assign(T, P, 8, seq(t, `["320","330"]`, "false"))
	if !(prev.Less(i1) && i1.Less(i2) && i2.Less(next)) {
		t.Fatalf("%v %v %v %v", prev, i1, i2, next)
	}
	if i1.Commit != 300 || i1.LSN != 310 || i1.Seq != 7 || i1.Phase != PhaseStream {
		t.Fatalf("i1 %v", i1)
	}
	// no epoch bump for incremental rows
	if i1.Epoch != prev.Epoch {
		t.Fatal("epoch")
	}
}

// (g) unwrap form with __lsn only: LSN order, Commit 0.
func TestOrderUnwrapLSNOnly(t *testing.T) {
	tr := NewTracker()
	a := tr.Assign(T, P, 0, Position{HasLSN: true, LSN: 1000})
	b := tr.Assign(T, P, 1, Position{HasLSN: true, LSN: 1010})
	noLSN := tr.Assign(T, P, 2, Position{})
	c := tr.Assign(T, P, 3, Position{HasLSN: true, LSN: 1020})
	if !(a.Less(b) && b.Less(noLSN) && noLSN.Less(c)) {
		t.Fatalf("%v %v %v %v", a, b, noLSN, c)
	}
	if a.Commit != 0 || noLSN.LSN != 1010 || noLSN.Seq != 3 {
		t.Fatalf("%v %v", a, noLSN)
	}
	// redelivery with __lsn is an exact duplicate
	if d := tr.Assign(T, P, 9, Position{HasLSN: true, LSN: 1010}); d != b {
		t.Fatal("duplicate")
	}
}

func TestTombstoneAfterDelete(t *testing.T) {
	tr := NewTracker()
	del := tr.AssignDelete(T, P, 10, seq(t, `["50","60"]`, ""), []byte("k1"))
	tomb := tr.AssignTombstone(T, P, 11, []byte("k1"))
	if del != tomb {
		t.Fatalf("%v != %v", del, tomb)
	}
	// a tombstone for another key (or not directly after its delete) ranks after the last record
	other := tr.AssignTombstone(T, P, 12, []byte("k2"))
	if !del.Less(other) || other.Seq != 13 {
		t.Fatalf("%v", other)
	}
	// delete state survives State/Restore (crash between delete and tombstone)
	tr2 := NewTracker()
	d2 := tr2.AssignDelete(T, P, 20, seq(t, `["70","80"]`, ""), []byte("k3"))
	js, _ := json.Marshal(tr2.State())
	var st []PartitionState
	if err := json.Unmarshal(js, &st); err != nil {
		t.Fatal(err)
	}
	tr3 := NewTracker()
	tr3.Restore(st)
	if got := tr3.AssignTombstone(T, P, 21, []byte("k3")); got != d2 {
		t.Fatalf("restored %v != %v (%s)", got, d2, js)
	}
	// an upsert between delete and tombstone forgets the delete
	tr3.AssignDelete(T, P, 22, seq(t, `["70","90"]`, ""), []byte("k4"))
	tr3.Assign(T, P, 23, seq(t, `["70","95"]`, ""))
	if got := tr3.AssignTombstone(T, P, 24, []byte("k4")); got.Seq != 25 {
		t.Fatalf("%v", got)
	}
}

func TestPartitionsIndependent(t *testing.T) {
	tr := NewTracker()
	tr.Assign(T, 0, 0, seq(t, `["1","2"]`, ""))
	v := tr.Assign(T, 1, 0, seq(t, `[null,"5"]`, "true"))
	if v.Epoch != 0 {
		t.Fatal("stream in partition 0 must not bump partition 1")
	}
	st := tr.State()
	if len(st) != 2 || st[0].Partition != 0 || st[1].Partition != 1 {
		t.Fatalf("%+v", st)
	}
	tr.Forget(T, 0)
	if len(tr.State()) != 1 {
		t.Fatal("forget")
	}
}

func BenchmarkAssign(b *testing.B) {
	tr := NewTracker()
	p := Position{HasCommit: true, Commit: 100, HasLSN: true, LSN: 200}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		p.LSN++
		tr.Assign(T, 0, int64(i), p)
	}
}

func BenchmarkParseSequence(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		ParseSequence(`["24023119","24023128"]`)
	}
}

func BenchmarkVersionString(b *testing.B) {
	v := Version{Epoch: 1, Phase: 1, Commit: 24023119, LSN: 24023128}
	b.ReportAllocs()
	for b.Loop() {
		_ = v.String()
	}
}
