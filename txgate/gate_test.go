package txgate

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestParseTxID(t *testing.T) {
	for _, c := range []struct {
		in   string
		xid  string
		lsn  int64
		fail bool
	}{
		{in: "741:26477248", xid: "741", lsn: 26477248},
		{in: "1:0", xid: "1", lsn: 0},
		{in: "a:b:5", xid: "a:b", lsn: 5},
		{in: "741", fail: true},
		{in: ":5", fail: true},
		{in: "7:", fail: true},
		{in: "7:x", fail: true},
		{in: "7:-3", fail: true},
		{in: "", fail: true},
	} {
		xid, lsn, err := ParseTxID(c.in)
		if (err != nil) != c.fail || (!c.fail && (xid != c.xid || lsn != c.lsn)) {
			t.Errorf("ParseTxID(%q) = %q, %d, %v", c.in, xid, lsn, err)
		}
	}
}

func FuzzParseTxID(f *testing.F) {
	for _, s := range []string{"741:26477248", "1:0", "a:b:5", ":", "7:-1", "x:9223372036854775807"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		xid, lsn, err := ParseTxID(s)
		if err != nil {
			return
		}
		if xid == "" || lsn < 0 || !strings.HasPrefix(s, xid+":") || strings.Contains(s[len(xid)+1:], ":") {
			t.Fatalf("ParseTxID(%q) = %q, %d", s, xid, lsn)
		}
	})
}

func TestEndCopies(t *testing.T) {
	g := New[int](Config{Collections: []string{"a"}})
	g.End(End{TxID: "1", CommitLSN: 10, Counts: map[string]int64{"a": 1}})
	g.End(End{TxID: "2", CommitLSN: 20, Counts: map[string]int64{"a": 1}})
	g.End(End{TxID: "1", CommitLSN: 10, Counts: map[string]int64{"a": 1}})
	if g.Stats().EndCopies != 1 || len(g.ends) != 2 {
		t.Fatalf("stats %+v, %d ENDs kept", g.Stats(), len(g.ends))
	}
	if err := g.Add(Record[int]{Topic: "t", Collection: "b", HasTx: true, TxID: "1", Order: 1}); !errors.Is(err, ErrUnknownCollection) {
		t.Fatalf("record of a collection the gate does not serve: %v", err)
	}
}

// A transaction's records wait for its END and for all of its records; a
// later complete transaction waits for the earlier one; snapshot rows and
// tombstones go with the records before them.
func TestHoldsUntilWhole(t *testing.T) {
	g := New[string](Config{Collections: []string{"public.a"}})
	add := func(p int32, id string, tx string, order, prev int64) {
		if err := g.Add(Record[string]{Item: id, Topic: "t", Partition: p, Collection: "public.a", HasTx: tx != "", TxID: tx, Order: order, Prev: prev}); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(rs []Record[string]) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.Item)
		}
		return out
	}
	add(0, "snap", "", 0, -1)
	add(0, "x1", "7", 1, 100)
	add(1, "tomb", "", 0, -1) // a tombstone whose delete was released before
	if got := ids(g.Release()); !slices.Equal(got, []string{"snap", "tomb"}) {
		t.Fatalf("before any END: released %v, want the snapshot row and the tombstone", got)
	}
	g.End(End{TxID: "7", CommitLSN: 200, Counts: map[string]int64{"public.a": 2}})
	g.End(End{TxID: "8", CommitLSN: 300, Counts: map[string]int64{"public.a": 1}})
	add(0, "y1", "8", 1, 200) // the next transaction: complete, behind x
	if got := ids(g.Release()); len(got) != 0 {
		t.Fatalf("x has 1 of 2 records: released %v, want nothing (y is after x)", got)
	}
	add(1, "x2", "7", 2, 100)
	add(1, "x2-tomb", "", 0, -1)
	add(1, "x2-copy", "7", 2, 100) // a connector rewind: copies behind later records
	add(1, "y1-copy", "8", 1, 200)
	got := ids(g.Release())
	if !slices.Equal(got, []string{"x1", "x2", "x2-tomb", "x2-copy", "y1", "y1-copy"}) {
		t.Fatalf("released %v", got)
	}
	if th := g.Through("public.a"); th != 300 {
		t.Fatalf("through %d, want 300", th)
	}
	if n, _ := g.Held(); n != 0 {
		t.Fatalf("%d held", n)
	}
	// a copy redelivered after a connector restart goes straight through
	add(0, "y1-copy", "8", 1, 200)
	if got := ids(g.Release()); !slices.Equal(got, []string{"y1-copy"}) || g.Stats().Redelivered != 1 {
		t.Fatalf("copy: released %v, stats %+v", got, g.Stats())
	}
}

// The model: random transactions over three collections with several
// partitions each, emitted by a connector that crashes mid-transaction and
// re-emits from an earlier point (copies at new offsets, ENDs again), read
// in random interleavings of the partitions and the transaction topic, with
// sink restarts that keep only what the table holds (offsets, through,
// resume offset). After every release the table holds, per collection,
// exactly the whole transactions up to its through, in commit order, and
// every partition's applied records are a prefix of the partition.
func TestModel(t *testing.T) {
	for seed := uint64(1); seed <= 300; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			if runModel(t, seed, Config{}) {
				t.Fatal("a transaction was released in parts without a bound reached")
			}
		})
	}
}

// With bounds smaller than the largest transaction, it is released in parts:
// the gate never holds more than its bound after a release, counts the
// forced transactions, and still delivers everything exactly once.
func TestModelBounded(t *testing.T) {
	forced := 0
	for seed := uint64(1); seed <= 100; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			if runModel(t, seed, Config{MaxHeldRecords: 6, MaxHeldBytes: 1 << 40}) {
				forced++
			}
		})
	}
	if forced < 50 {
		t.Fatalf("only %d of 100 runs released a transaction in parts: the bound is not exercised", forced)
	}
}

var debugModel = false

type mEvent struct {
	coll  string
	part  int32
	tx    int // index in txs
	order int64
	tomb  bool // the tombstone after a delete (not counted)
	snap  bool
}

type mTx struct {
	xid    string
	commit int64
	prev   int64
	counts map[string]int64
	events []mEvent
}

type mRec struct {
	ev  mEvent
	off int64
}

type model struct {
	colls   []string
	parts   map[string]int32
	txs     []mTx
	streams map[tp][]mEvent // per partition, in offset order
	ends    []int           // transaction topic: tx index per offset
}

func genModel(rng *rand.Rand) *model {
	m := &model{colls: []string{"public.a", "public.b", "public.c"}, parts: map[string]int32{}, streams: map[tp][]mEvent{}}
	for _, c := range m.colls {
		m.parts[c] = 1 + rng.Int32N(3)
	}
	n := 5 + rng.IntN(30)
	lsn := int64(1000)
	prev := int64(-1)
	for i := 0; i < n; i++ {
		tx := mTx{xid: fmt.Sprint(500 + i), prev: prev, counts: map[string]int64{}}
		for _, c := range m.colls {
			k := 0
			if rng.IntN(3) > 0 {
				k = rng.IntN(5)
			}
			if i%7 == 3 {
				k = 8 + rng.IntN(6) // some large ones
			}
			for j := 0; j < k; j++ {
				tx.counts[c]++
				tx.events = append(tx.events, mEvent{coll: c, part: rng.Int32N(m.parts[c]), tx: i, order: tx.counts[c]})
				if rng.IntN(5) == 0 { // a delete and its tombstone
					e := tx.events[len(tx.events)-1]
					e.tomb = true
					tx.events = append(tx.events, e)
				}
			}
		}
		lsn += 100 + rng.Int64N(100) // > 50 + events: an event's LSN is commit-50+order
		tx.commit = lsn
		prev = lsn
		m.txs = append(m.txs, tx)
	}
	// snapshot rows first, then the connector emits transactions, crashing
	// now and then mid-transaction and re-emitting from an earlier one
	for _, c := range m.colls {
		for p := int32(0); p < m.parts[c]; p++ {
			for j := rng.IntN(3); j > 0; j-- {
				k := tp{"t." + c, p}
				m.streams[k] = append(m.streams[k], mEvent{coll: c, part: p, tx: -1, snap: true})
			}
		}
	}
	emit := func(i int, upto int) {
		for j, e := range m.txs[i].events {
			if j >= upto {
				return
			}
			k := tp{"t." + e.coll, e.part}
			m.streams[k] = append(m.streams[k], e)
		}
		m.ends = append(m.ends, i)
	}
	for i := 0; i < len(m.txs); i++ {
		if i > 0 && rng.IntN(10) == 0 {
			// crash: a prefix of this transaction's events, no END, rewind
			cut := rng.IntN(len(m.txs[i].events) + 1)
			for j, e := range m.txs[i].events {
				if j >= cut {
					break
				}
				k := tp{"t." + e.coll, e.part}
				m.streams[k] = append(m.streams[k], e)
			}
			i = rng.IntN(i + 1)
		}
		emit(i, len(m.txs[i].events))
	}
	return m
}

// runModel reports whether some transaction was released in parts.
func runModel(t *testing.T, seed uint64, cfg Config) bool {
	rng := rand.New(rand.NewPCG(seed, seed*7919))
	m := genModel(rng)
	var tps []tp
	for k := range m.streams {
		tps = append(tps, k)
	}
	slices.SortFunc(tps, func(a, b tp) int {
		return cmp.Or(cmp.Compare(a.topic, b.topic), cmp.Compare(a.partition, b.partition))
	})
	// the table: per collection, the (tx, order) applied; per partition the next offset
	applied := map[string]map[[2]int64]bool{}
	for _, c := range m.colls {
		applied[c] = map[[2]int64]bool{}
	}
	next := map[tp]int64{}
	through := map[string]int64{}
	resume := map[string]int64{}
	forcedTx := map[string][]string{}
	var g *Gate[mRec]
	forced := false // in some incarnation of the gate
	pos := map[tp]int64{}
	txPos := 0
	start := func() {
		cfg.Collections = m.colls
		g = New[mRec](cfg)
		txPos = -1
		for _, c := range m.colls {
			if th, ok := through[c]; ok {
				if err := g.Restore(c, th, resume[c], forcedTx[c]); err != nil {
					t.Fatal(err)
				}
			}
			r, ok := resume[c]
			if !ok || r < 0 {
				r = 0
			}
			if txPos < 0 || int(r) < txPos {
				txPos = int(r)
			}
		}
		for _, k := range tps {
			pos[k] = next[k]
		}
	}
	start()
	commit := func() {
		rel := g.Release()
		if debugModel {
			for _, r := range rel {
				t.Logf("rel %s/%d@%d %d.%d", r.Topic, r.Partition, r.Item.off, r.Item.ev.tx, r.Item.ev.order)
			}
			for _, c := range m.colls {
				t.Logf("  %s through %d resume %d", c, g.Through(c), g.ResumeOffset(c))
			}
		}
		for _, r := range rel {
			k := tp{r.Topic, r.Partition}
			if r.Item.off != next[k] {
				t.Fatalf("partition %v: released offset %d, table is at %d: not a prefix", k, r.Item.off, next[k])
			}
			next[k]++
			if e := r.Item.ev; !e.snap && !e.tomb {
				applied[e.coll][[2]int64{int64(e.tx), e.order}] = true
			}
		}
		if n, _ := g.Held(); cfg.MaxHeldRecords > 0 && n > cfg.MaxHeldRecords {
			t.Fatalf("%d records held after a release, bound %d", n, cfg.MaxHeldRecords)
		}
		for _, c := range m.colls {
			through[c] = g.Through(c)
			resume[c] = g.ResumeOffset(c)
			forcedTx[c] = g.Forced(c)
			if forced = forced || g.Stats().Forced > 0; forced {
				continue // parts: wholeness is given up, exactly-once is checked at the end
			}
			// whole transactions, exactly those committed up to through
			for i, tx := range m.txs {
				whole, none := true, true
				for o := int64(1); o <= tx.counts[c]; o++ {
					if applied[c][[2]int64{int64(i), o}] {
						none = false
					} else {
						whole = false
					}
				}
				if tx.counts[c] == 0 {
					continue
				}
				if tx.commit <= through[c] && !whole || tx.commit > through[c] && !none {
					t.Fatalf("%s: tx %d (commit %d, %d events) applied partly or out of order (through %d, whole %v)", c, i, tx.commit, tx.counts[c], through[c], whole)
				}
			}
		}
	}
	restarts := 0
	for steps := 0; ; steps++ {
		var open []tp
		for _, k := range tps {
			if pos[k] < int64(len(m.streams[k])) {
				open = append(open, k)
			}
		}
		if len(open) == 0 && txPos >= len(m.ends) {
			break
		}
		switch x := rng.IntN(20); {
		case x < 9 && len(open) > 0:
			k := open[rng.IntN(len(open))]
			for n := 1 + rng.IntN(4); n > 0 && pos[k] < int64(len(m.streams[k])); n-- {
				e := m.streams[k][pos[k]]
				r := Record[mRec]{Item: mRec{ev: e, off: pos[k]}, Topic: k.topic, Partition: k.partition, Collection: e.coll, Prev: -1, Bytes: 10}
				if !e.snap && !e.tomb {
					tx := m.txs[e.tx]
					r.HasTx, r.TxID, r.Order, r.Prev, r.LSN = true, tx.xid, e.order, tx.prev, tx.commit-50+e.order
				}
				if debugModel {
					t.Logf("add %v@%d %d.%d", k, pos[k], e.tx, e.order)
				}
				if err := g.Add(r); err != nil {
					t.Fatal(err)
				}
				pos[k]++
			}
		case x < 14 && txPos < len(m.ends):
			for n := 1 + rng.IntN(3); n > 0 && txPos < len(m.ends); n-- {
				tx := m.txs[m.ends[txPos]]
				g.End(End{TxID: tx.xid, CommitLSN: tx.commit, Counts: tx.counts, Offset: int64(txPos)})
				if debugModel {
					t.Logf("END @%d tx %d", txPos, m.ends[txPos])
				}
				txPos++
			}
		case x < 19 || restarts >= 6 || rng.IntN(8) > 0:
			// (restarts are rare: each one drops what the gate held, and a
			// restart every few reads would never let a large transaction
			// complete)
			commit()
		default:
			restarts++
			commit()
			start() // a sink restart: only the table's state survives
			if debugModel {
				t.Logf("restart: txPos %d pos %v", txPos, pos)
			}
		}
		if steps > 100000 {
			for _, k := range g.qorder {
				q := g.queues[k]
				if q.head < len(q.recs) {
					h := q.recs[q.head]
					t.Logf("queue %v: %d held, head %d.%d (off %d) tx %+v", k, len(q.recs)-q.head, h.rec.Item.ev.tx, h.rec.Order, h.rec.Item.off, h.tx)
				}
			}
			for _, c := range g.colls {
				e := "none"
				if i := c.next - g.base; i < len(g.ends) {
					e = fmt.Sprintf("%+v", g.ends[i])
				}
				t.Logf("coll %s through %d next END %s", c.name, c.through, e)
			}
			t.Fatal("no progress")
		}
	}
	commit()
	commit()
	for _, k := range tps {
		if next[k] != int64(len(m.streams[k])) {
			t.Fatalf("partition %v: applied through offset %d of %d (held %v)", k, next[k], len(m.streams[k]), func() int { n, _ := g.Held(); return n }())
		}
	}
	for _, c := range m.colls {
		for i, tx := range m.txs {
			for o := int64(1); o <= tx.counts[c]; o++ {
				if !applied[c][[2]int64{int64(i), o}] {
					t.Fatalf("%s: tx %d event %d never applied", c, i, o)
				}
			}
		}
		if want := m.txs[len(m.txs)-1].commit; through[c] != want {
			t.Fatalf("%s: through %d at the end, want %d", c, through[c], want)
		}
	}
	return forced
}

// A collection registered after the gate dropped ENDs above its through is
// refused (its transactions could not be checked); at or above them, or
// FromFirst, it joins, and FromFirst takes Through from its first record.
func TestRegister(t *testing.T) {
	g := New[int](Config{Collections: []string{"a"}})
	g.End(End{TxID: "1", CommitLSN: 10, Counts: map[string]int64{"a": 1}, Offset: 0})
	if err := g.Add(Record[int]{Item: 1, Topic: "ta", Collection: "a", HasTx: true, TxID: "1", Order: 1, Prev: -1, LSN: 5}); err != nil {
		t.Fatal(err)
	}
	if out := g.Release(); len(out) != 1 || g.Through("a") != 10 {
		t.Fatalf("released %v, through %d", out, g.Through("a"))
	}
	// END 1 is dropped now: a collection behind it cannot join
	if err := g.Register("b", State{Through: 5, Resume: -1}); !errors.Is(err, ErrEndsDropped) {
		t.Fatalf("register behind a dropped END: %v", err)
	}
	if err := g.Register("a", State{Through: 10}); err == nil {
		t.Fatal("a collection registered twice")
	}
	if err := g.Register("b", State{Through: 10, Last: 10, Resume: 1}); err != nil {
		t.Fatal(err)
	}
	if err := g.Register("c", State{Through: -1, Resume: -1, FromFirst: true}); err != nil {
		t.Fatal(err)
	}
	// c's first record is of a transaction after 30: through is 30, the
	// transactions before it go straight through (copies), the next is gated
	if err := g.Add(Record[int]{Item: 2, Topic: "tc", Collection: "c", HasTx: true, TxID: "4", Order: 1, Prev: 30, LSN: 35}); err != nil {
		t.Fatal(err)
	}
	if err := g.Add(Record[int]{Item: 3, Topic: "tc2", Collection: "c", HasTx: true, TxID: "3", Order: 1, Prev: 20, LSN: 25}); err != nil {
		t.Fatal(err)
	}
	if g.Through("c") != 30 || !g.Known("c") || g.Known("d") {
		t.Fatalf("through c = %d", g.Through("c"))
	}
	out := g.Release()
	if len(out) != 1 || out[0].Item != 3 {
		t.Fatalf("released %v, want only the record before c's first transaction", out)
	}
	if h := g.Heads(); len(h) != 1 || h[0].Item != 2 || g.Waiting() != 1 {
		t.Fatalf("heads %v (%d transactions waiting), want the held record of tx 4", h, g.Waiting())
	}
	g.End(End{TxID: "4", CommitLSN: 40, Counts: map[string]int64{"c": 1}, Offset: 1})
	if out := g.Release(); len(out) != 1 || out[0].Item != 2 || g.Through("c") != 40 || g.Through("b") != 40 || len(g.Heads()) != 0 || g.Waiting() != 0 {
		t.Fatalf("released %v, through c %d b %d", out, g.Through("c"), g.Through("b"))
	}
}
