package dbzgen

import (
	"math/rand/v2"
)

// event is one emitted change (or bare tombstone), in emission order.
type event struct {
	tomb       bool
	op         byte      // 'r','c','u','d'
	id         int64     // the record key
	row        *rowState // after (c,u,r); before for d (nil: key-only image)
	toast      bool      // note is unavailable
	snap       string    // source.snapshot for op=r; "" for streamed changes
	hasCommit  bool
	commit     uint64 // sequence[0]
	lsn        uint64 // sequence[1] and source.lsn
	xid        int64
	tsUs       int64 // source commit (or snapshot read) time
	procNs     int64 // envelope ts (connector processing time)
	totalOrder int64 // transaction block position; 0: no block
	newKey     int64 // __debezium.newkey header (0: none)
	oldKey     int64 // __debezium.oldkey header (0: none)
	pkChange   bool
}

// txMeta is what the END record of a streamed transaction says.
type txMeta struct {
	xid    int64
	commit uint64 // the commit LSN (the next transaction's sequence[0])
	tsUs   int64
	events int64 // data events (tombstones are not counted)
}

type tx struct {
	xid     int64
	target  int
	changes []event
	locks   []int64
}

type keyState struct {
	row    *rowState
	exists bool
	seen   bool
	lock   *tx
	// version of the change that decided the current state
	snap   bool
	commit uint64
	lsn    uint64
}

// idSet is a set of ids with O(1) add, remove and random pick.
type idSet struct {
	items []int64
	pos   []int32 // by id; -1 when absent
}

func newIDSet(n int) idSet {
	s := idSet{pos: make([]int32, n+1)}
	for i := range s.pos {
		s.pos[i] = -1
	}
	return s
}

func (s *idSet) add(id int64) {
	if s.pos[id] >= 0 {
		return
	}
	s.pos[id] = int32(len(s.items))
	s.items = append(s.items, id)
}

func (s *idSet) remove(id int64) {
	p := s.pos[id]
	if p < 0 {
		return
	}
	last := s.items[len(s.items)-1]
	s.items[p] = last
	s.pos[last] = p
	s.items = s.items[:len(s.items)-1]
	s.pos[id] = -1
}

type gen struct {
	cfg     Config
	rng     *rand.Rand
	wal     uint64
	clockUs int64
	procNs  int64
	nextXid int64
	noteSeq int
	keys    []keyState // by id
	live    idSet
	free    idSet
	open    []*tx
	updates int

	events   []event
	txStarts []int // index in events of each streamed transaction's first event
	txEnds   []int // index after its last event
	txMeta   []txMeta
	resnapAt int // index of the first resnapshot event, -1 if none

	lastEnd    uint64
	hasLastEnd bool
	counts     Counts
}

// baseClockUs is 2026-11-01T00:00:00Z, the simulated start time.
const baseClockUs = 1793491200 * 1_000_000

// initialWAL is the simulated WAL position at start (about where a fresh
// cluster's first user writes land).
const initialWAL = 0x1946000

func align8(n uint64) uint64 { return (n + 7) &^ 7 }

// walWrite reserves a WAL record of about size bytes and returns its LSN.
func (g *gen) walWrite(size int) uint64 {
	lsn := g.wal
	g.wal += align8(uint64(size))
	return lsn
}

func (g *gen) tick(minUs, maxUs int) {
	g.clockUs += int64(minUs + g.rng.IntN(maxUs-minUs+1))
}

// proc returns the envelope processing time of an event whose source time is
// tsUs: a little after the previous one, and at least ~40 ms after tsUs.
func (g *gen) proc(tsUs int64) int64 {
	p := g.procNs + int64(200_000+g.rng.IntN(800_000)) + int64(g.rng.IntN(1000))
	if min := tsUs*1000 + 40_000_000 + int64(g.rng.IntN(1000)); p < min {
		p = min
	}
	g.procNs = p
	return p
}

func (g *gen) begin(target int) *tx {
	t := &tx{xid: g.nextXid, target: target}
	g.nextXid++
	return t
}

func (g *gen) lock(t *tx, id int64) {
	k := &g.keys[id]
	if k.lock != t {
		k.lock = t
		t.locks = append(t.locks, id)
	}
}

// rowBytes approximates the heap tuple size of r.
func rowBytes(r *rowState, toasted bool) int {
	n := 120 + len(r.payload) + len(r.filler) + 12*len(r.tags)
	if toasted {
		n += 18 // TOAST pointer
	} else {
		n += len(r.note)
	}
	return n
}

// writeRow writes the WAL of an insert/update of r: TOAST chunks for a new
// large note first, then the heap record. It returns the change LSN.
func (g *gen) writeRow(r *rowState, noteChanged bool) uint64 {
	big := len(r.note) > 2000
	if big && noteChanged {
		for left := len(r.note); left > 0; left -= 1996 {
			g.walWrite(2048)
		}
	}
	g.tick(10, 400)
	return g.walWrite(24 + rowBytes(r, big))
}

func (g *gen) setRow(id int64, r *rowState) {
	k := &g.keys[id]
	k.row, k.exists, k.seen = r, true, true
	g.live.add(id)
	g.free.remove(id)
}

func (g *gen) clearRow(id int64) {
	k := &g.keys[id]
	k.row, k.exists, k.seen = nil, false, true
	g.live.remove(id)
	g.free.add(id)
}

// insert writes op=c of row r (r.id) in t.
func (g *gen) insert(t *tx, r *rowState) {
	g.lock(t, r.id)
	lsn := g.writeRow(r, true)
	g.setRow(r.id, r)
	t.changes = append(t.changes, event{op: 'c', id: r.id, row: r, lsn: lsn})
	g.counts.Inserts++
}

// update writes op=u turning id's row into r in t; toast marks the note as
// unchanged and unavailable.
func (g *gen) update(t *tx, r *rowState, toast bool) {
	g.lock(t, r.id)
	lsn := g.writeRow(r, !toast)
	g.setRow(r.id, r)
	t.changes = append(t.changes, event{op: 'u', id: r.id, row: r, lsn: lsn, toast: toast})
	g.counts.Updates++
	if toast {
		g.counts.ToastUpdates++
	}
}

// remove writes op=d of id in t (REPLICA IDENTITY DEFAULT: before holds the
// key only).
func (g *gen) remove(t *tx, id int64) {
	g.lock(t, id)
	g.tick(10, 300)
	lsn := g.walWrite(54)
	g.clearRow(id)
	t.changes = append(t.changes, event{op: 'd', id: id, lsn: lsn})
	g.counts.Deletes++
}

// pkChange writes an update that moves row old to key r.id: delete(old) +
// create(new), one WAL record, one source position.
func (g *gen) pkChange(t *tx, old int64, r *rowState) {
	g.lock(t, old)
	g.lock(t, r.id)
	lsn := g.writeRow(r, true)
	g.clearRow(old)
	g.setRow(r.id, r)
	t.changes = append(t.changes,
		event{op: 'd', id: old, lsn: lsn, newKey: r.id, pkChange: true},
		event{op: 'c', id: r.id, row: r, lsn: lsn, oldKey: old, pkChange: true})
	g.counts.PKChanges++
}

// commit commits t: its changes are emitted now, in WAL order, with
// sequence[0] = the end LSN of the previous commit.
func (g *gen) commit(t *tx) {
	for i, o := range g.open {
		if o == t {
			g.open = append(g.open[:i], g.open[i+1:]...)
			break
		}
	}
	g.tick(5, 100)
	g.walWrite(32)
	end := g.wal
	ts := g.clockUs
	g.txStarts = append(g.txStarts, len(g.events))
	order := int64(0)
	for i := range t.changes {
		e := t.changes[i]
		e.hasCommit, e.commit = g.hasLastEnd, g.lastEnd
		e.xid, e.tsUs = t.xid, ts
		e.procNs = g.proc(ts)
		if g.cfg.TxSize > 0 {
			order++
			e.totalOrder = order
		}
		k := &g.keys[e.id]
		k.snap, k.commit, k.lsn = false, e.commit, e.lsn
		g.events = append(g.events, e)
		if e.op == 'd' && g.cfg.Tombstones && !g.cfg.Format.unwrap() {
			g.events = append(g.events, event{tomb: true, id: e.id, newKey: e.newKey, procNs: e.procNs, tsUs: ts})
			g.counts.Tombstones++
		}
	}
	g.txEnds = append(g.txEnds, len(g.events))
	g.txMeta = append(g.txMeta, txMeta{xid: t.xid, commit: end, tsUs: ts, events: int64(len(t.changes))})
	for _, id := range t.locks {
		g.keys[id].lock = nil
	}
	g.lastEnd, g.hasLastEnd = end, true
	g.counts.Transactions++
}

// pick returns a random id of s not locked by another transaction than t, or 0.
func (g *gen) pick(s *idSet, t *tx) int64 {
	n := len(s.items)
	if n == 0 {
		return 0
	}
	for i := 0; i < 8; i++ {
		id := s.items[g.rng.IntN(n)]
		if l := g.keys[id].lock; l == nil || l == t {
			return id
		}
	}
	start := g.rng.IntN(n)
	for i := 0; i < n; i++ {
		id := s.items[(start+i)%n]
		if l := g.keys[id].lock; l == nil || l == t {
			return id
		}
	}
	return 0
}

// randomOp performs one random change in t; false if no key is available.
func (g *gen) randomOp(t *tx) bool {
	m := g.cfg.Mix
	x := g.rng.Float64() * (m.Insert + m.Update + m.Delete)
	first := 0
	switch {
	case x < m.Insert:
		first = 0
	case x < m.Insert+m.Update:
		first = 1
	default:
		first = 2
	}
	for i := 0; i < 3; i++ {
		switch (first + i) % 3 {
		case 0:
			if id := g.pick(&g.free, t); id != 0 {
				g.insert(t, g.newRow(id))
				return true
			}
		case 1:
			if id := g.pick(&g.live, t); id != 0 {
				g.randomUpdate(t, id)
				return true
			}
		case 2:
			if id := g.pick(&g.live, t); id != 0 {
				g.remove(t, id)
				return true
			}
		}
	}
	return false
}

func (g *gen) randomUpdate(t *tx, id int64) {
	g.updates++
	old := g.keys[id].row
	if g.cfg.PKChangeEvery > 0 && g.updates%g.cfg.PKChangeEvery == 0 {
		if nid := g.pick(&g.free, t); nid != 0 {
			r := g.mutate(old, false)
			r.id = nid
			g.pkChange(t, id, r)
			return
		}
	}
	toast := g.cfg.ToastEvery > 0 && g.updates%g.cfg.ToastEvery == 0 && !old.noteNil && len(old.note) > 2000
	g.update(t, g.mutate(old, toast), toast)
}

func (g *gen) txTarget() int {
	if g.cfg.TxSize > 0 {
		return g.cfg.TxSize
	}
	return 1
}

// stream performs n random changes in (possibly interleaved) transactions
// and commits every transaction it opened.
func (g *gen) stream(n int) {
	left := n
	for left > 0 || len(g.open) > 0 {
		if left > 0 && len(g.open) < g.cfg.Concurrency && (len(g.open) == 0 || g.rng.IntN(2) == 0) {
			g.tick(50, 3000)
			g.open = append(g.open, g.begin(g.txTarget()))
		}
		t := g.open[g.rng.IntN(len(g.open))]
		if len(t.changes) >= t.target || left == 0 {
			g.commit(t)
			continue
		}
		if g.randomOp(t) {
			left--
			continue
		}
		// Every key is locked by other open transactions: commit one.
		var victim *tx
		for _, o := range g.open {
			if len(o.changes) > 0 {
				victim = o
				break
			}
		}
		if victim == nil {
			left-- // no key at all (cannot happen with Keys >= 1)
			continue
		}
		g.commit(victim)
	}
}

// snapshot emits op=r rows for ids (in order) at the current WAL position.
func (g *gen) snapshot(ids []int64, rows []*rowState, resnap bool) {
	if len(ids) == 0 {
		return
	}
	g.tick(1000, 50000)
	lsn := g.wal
	xid := g.nextXid
	g.nextXid++
	ts := g.clockUs
	for i, id := range ids {
		snap := "true"
		switch {
		case i == len(ids)-1:
			snap = "last"
		case i == 0:
			snap = "first"
		}
		e := event{op: 'r', id: id, row: rows[i], snap: snap, lsn: lsn, xid: xid, tsUs: ts}
		if resnap {
			e.hasCommit, e.commit = g.hasLastEnd, g.lastEnd
		}
		e.procNs = g.proc(ts)
		k := &g.keys[id]
		k.snap, k.commit, k.lsn = true, e.commit, lsn
		g.events = append(g.events, e)
	}
	if resnap {
		g.counts.Resnapshot += len(ids)
	} else {
		g.counts.Snapshot += len(ids)
	}
}

func (g *gen) run() {
	cfg := g.cfg
	// Rows that exist before the snapshot.
	ids := make([]int64, 0, cfg.SnapshotRows)
	rows := make([]*rowState, 0, cfg.SnapshotRows)
	for id := int64(1); id <= int64(cfg.SnapshotRows); id++ {
		r := g.newRow(id)
		g.setRow(id, r)
		ids = append(ids, id)
		rows = append(rows, r)
	}
	g.walWrite(4096) // the seed load, long committed
	left := cfg.Events
	var inflight *tx
	if cfg.InFlightAtSnapshot && left > 0 {
		// Writes before the slot's consistent point, committed after it.
		target := min(max(cfg.TxSize, 2), left)
		inflight = g.begin(target)
		g.open = append(g.open, inflight)
		if id := g.pick(&g.live, inflight); id != 0 {
			g.randomUpdate(inflight, id)
			left--
		}
		for len(inflight.changes) < target && left > 0 && g.randomOp(inflight) {
			left--
		}
		if len(inflight.changes) > target {
			inflight.target = len(inflight.changes)
		}
	}
	g.walWrite(64) // running-xacts record: the slot's consistent point
	g.snapshot(ids, rows, false)
	if inflight != nil {
		g.commit(inflight)
	}
	first := left
	if cfg.Resnapshot {
		first = left - left/5
	}
	g.stream(first)
	if cfg.Resnapshot {
		g.resnapAt = len(g.events)
		live := make([]int64, 0, len(g.live.items))
		for id := int64(1); id < int64(len(g.keys)); id++ {
			if g.keys[id].exists {
				live = append(live, id)
			}
		}
		rs := make([]*rowState, len(live))
		for i, id := range live {
			rs[i] = g.keys[id].row
		}
		g.snapshot(live, rs, true)
	}
	g.stream(left - first)
}
