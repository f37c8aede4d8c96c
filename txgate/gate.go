// Package txgate holds a table's changes back until they form whole source
// transactions and releases them in commit order: the core of
// `consistency: transaction` (issue #18, docs/consistency.md).
//
// Debezium's transaction metadata (provide.transaction.metadata=true) gives
// every streamed data event a transaction block (id, data_collection_order)
// and writes an END record per transaction on <prefix>.transaction with its
// number of events per table ("data collection"). A collection's part of a
// transaction is complete once that many distinct data_collection_order
// values have been read, over all partitions; redelivered copies carry the
// same order and count once. Postgres streams whole transactions in commit
// order and the transaction topic carries the ENDs in that order, so the gate
// releases each collection's transactions as a prefix of commit order, and on
// every partition the records it releases are a prefix of the records read:
// a partition's table offset then stays at its first record held back, and
// what was held back is simply read again after a restart.
//
// The gate knows records only by the fields of Record; it does not decode,
// apply or commit anything. It is not safe for concurrent use.
package txgate

import (
	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/versioning"
	"slices"

	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Record is what the gate needs of one data record. Records of a partition
// are added in offset order.
type Record[T any] struct {
	Item      T // the caller's record, handed back by Release
	Topic     string
	Partition int32
	// Collection is the record's data collection as Debezium names it in END
	// records ("schema.table", from the source block).
	Collection string
	// HasTx is false for records without a transaction block: snapshot rows,
	// Kafka tombstones (they follow their delete on the partition and are
	// released right after it). Such a record is released as soon as every
	// record before it on its partition is.
	HasTx bool
	TxID  string // the transaction id's part before ':' (Postgres: the xid)
	Order int64  // data_collection_order: 1-based position among the collection's events of the transaction
	// Prev is source.sequence[0] of Postgres: the commit LSN of the
	// transaction streamed before this one (-1: unknown). A record whose Prev
	// is below the collection's Through belongs to a transaction already
	// released: a copy redelivered after a connector restart.
	Prev int64
	// LSN is the event's own source.lsn (-1: unknown). Only the first
	// transaction a connector streams has no Prev; a record of it is a copy
	// when its LSN is below Through.
	LSN   int64
	Bytes int64 // counted against Config.MaxHeldBytes
}

// End is an END record of the transaction topic.
type End struct {
	TxID      string           // the id's part before ':'
	CommitLSN int64            // the id's part after ':' (Postgres: the commit LSN)
	Counts    map[string]int64 // data_collections: events per collection
	Offset    int64            // its offset on the transaction topic (ResumeOffset)
}

// ParseTxID splits a Debezium Postgres transaction id "<xid>:<lsn>".
func ParseTxID(id string) (xid string, lsn int64, err error) {
	i := strings.LastIndexByte(id, ':')
	if i <= 0 || i == len(id)-1 {
		return "", -1, fmt.Errorf("transaction id %q: want <xid>:<lsn>", id)
	}
	lsn, err = strconv.ParseInt(id[i+1:], 10, 64)
	if err != nil || lsn < 0 {
		return "", -1, fmt.Errorf("transaction id %q: the part after ':' is not an LSN", id)
	}
	return id[:i], lsn, nil
}

// Config configures a gate.
type Config struct {
	// Collections are the data collections ("schema.table") whose records
	// the gate holds: every table of the sink. ENDs are kept until all of
	// them have passed; a collection the gate does not know could not be
	// checked against ENDs already dropped, so its records are refused.
	Collections []string
	// The bounds of what the gate holds. A transaction too large for them is
	// released in parts (Stats.Forced): the bounds win over wholeness.
	MaxHeldRecords int   // 0: 1,000,000
	MaxHeldBytes   int64 // 0: 256 MiB
}

// Stats are the gate's counters since New.
type Stats struct {
	Released     int64 // records released
	Transactions int64 // transactions released whole (per collection)
	Forced       int64 // transactions released in parts because the bounds were reached
	Redelivered  int64 // records of transactions released before (copies)
	EndCopies    int64 // ENDs at or below the newest commit LSN read (copies)
}

// Gate holds records back until their transactions are complete.
type Gate[T any] struct {
	cfg Config

	ends    []End // ENDs read and not yet passed by every collection
	base    int   // sequence number of ends[0] among all ENDs read
	lastLSN int64 // commit LSN of the newest END read
	lastOff int64 // offset of the newest END read (-1: none)
	horizon int64 // commit LSN of the newest END dropped from ends (-1: none)

	colls  map[string]*coll
	queues map[tp]*queue[T]
	qorder []tp // queues in first-seen order: Release's output order

	seq       int64 // arrival counter, orders queue heads for forcing
	held      int
	heldBytes int64
	stats     Stats
}

type tp struct {
	topic     string
	partition int32
}

type coll struct {
	name    string
	next    int   // sequence number of the first END not passed yet
	through int64 // commit LSN through which every transaction is released
	last    int64 // highest commit LSN of a transaction released (whole or in parts)
	resume  int64 // Restore's resume offset, until an END is read
	txs     map[string]*txState
	// fromFirst: Through comes from the first transaction record (State.FromFirst)
	fromFirst bool
}

type txState struct {
	seen     map[int64]struct{} // data_collection_orders read; nil once released
	done     map[int64]struct{} // data_collection_orders released
	released bool               // whole, or forced: every record of it goes through
	forced   bool               // released in parts: passed without done
	held     int                // records of it in the queues
	queues   []tp               // the partitions holding its records (few: a transaction's rows of one table)
}

type queue[T any] struct {
	recs []held[T]
	head int
}

type held[T any] struct {
	seq int64
	rec Record[T]
	tx  *txState // nil: released with the records before it
}

// New returns an empty gate.
func New[T any](cfg Config) *Gate[T] {
	if cfg.MaxHeldRecords <= 0 {
		cfg.MaxHeldRecords = 1_000_000
	}
	if cfg.MaxHeldBytes <= 0 {
		cfg.MaxHeldBytes = 256 << 20
	}
	g := &Gate[T]{cfg: cfg, lastLSN: -1, lastOff: -1, horizon: -1, colls: map[string]*coll{}, queues: map[tp]*queue[T]{}}
	for _, c := range cfg.Collections {
		g.colls[c] = &coll{name: c, through: -1, last: -1, resume: -1, txs: map[string]*txState{}}
	}
	return g
}

// Restore sets where a collection stands after a restart, as its table's
// last commit recorded it: every transaction with a commit LSN up to through
// is in the table, its ENDs are read from offset resume of the transaction
// topic, and the transactions forced were being released in parts (Through,
// ResumeOffset and Forced when the table committed). Call it before the
// first End or Add.
func (g *Gate[T]) Restore(collection string, through, resume int64, forced []string) error {
	c, ok := g.colls[collection]
	if !ok {
		return fmt.Errorf("restore %s: %w", collection, ErrUnknownCollection)
	}
	if len(c.txs) > 0 || g.base > 0 || len(g.ends) > 0 {
		return fmt.Errorf("restore %s: the gate has read records or ENDs already", collection)
	}
	c.through, c.last, c.resume = through, through, resume
	for _, id := range forced {
		c.txs[id] = &txState{released: true, forced: true}
	}
	return nil
}

// State is where a collection stands, as its table's last commit recorded
// it (Register).
type State struct {
	Through int64    // every transaction with a commit LSN up to it is in the table (-1: none)
	Last    int64    // the highest commit LSN of a transaction in the table (Last)
	Resume  int64    // transaction-topic offset to read its ENDs from (-1: unknown)
	Forced  []string // transactions being released in parts (Forced)
	// FromFirst: the table holds changes but no watermark (it was written
	// with consistency eventual). Its Through is then taken from the first
	// record of a transaction read (that record's Prev): the transactions
	// before it are treated as released, so the table is gated from the
	// first transaction read whole on.
	FromFirst bool
}

// ErrEndsDropped is returned by Register for a collection whose table is
// behind ENDs the gate has already dropped: the caller must read the
// transaction topic again from the collection's resume offset, with a new
// gate.
var ErrEndsDropped = errors.New("txgate: ENDs the collection needs were already dropped")

// Register adds a collection at any time (a table first seen after the
// gate has read records and ENDs). It fails with ErrEndsDropped when ENDs
// above st.Through were dropped already.
func (g *Gate[T]) Register(collection string, st State) error {
	if _, ok := g.colls[collection]; ok {
		return fmt.Errorf("register %s: already registered", collection)
	}
	if g.horizon > st.Through && !st.FromFirst {
		return fmt.Errorf("register %s at commit LSN %d: %w (through %d)", collection, st.Through, ErrEndsDropped, g.horizon)
	}
	c := &coll{name: collection, next: g.base, through: st.Through, last: max(st.Last, st.Through), resume: st.Resume,
		txs: map[string]*txState{}, fromFirst: st.FromFirst}
	for _, id := range st.Forced {
		c.txs[id] = &txState{released: true, forced: true}
	}
	g.colls[collection] = c
	return nil
}

// Known reports whether the gate holds a collection.
func (g *Gate[T]) Known(collection string) bool { _, ok := g.colls[collection]; return ok }

// Heads returns, per partition, the first record held back (in the order
// partitions were first seen): where a partition must be read again from
// when the gate is rebuilt.
func (g *Gate[T]) Heads() []Record[T] {
	var out []Record[T]
	for _, k := range g.qorder {
		if q := g.queues[k]; q.head < len(q.recs) {
			out = append(out, q.recs[q.head].rec)
		}
	}
	return out
}

// ErrUnknownCollection is returned for a record of a collection that is not
// in Config.Collections.
var ErrUnknownCollection = errors.New("txgate: data collection not among the gate's collections")

// End adds an END record, in transaction-topic order. An END at or below the
// newest commit LSN read is a copy (Debezium re-sends ENDs after a connector
// restart, and a restarted sink reads the topic from its resume offset) and
// is ignored: ENDs are written in commit order, on one partition.
func (g *Gate[T]) End(e End) {
	if e.CommitLSN <= g.lastLSN {
		g.stats.EndCopies++
		return
	}
	g.ends = append(g.ends, e)
	g.lastLSN, g.lastOff = e.CommitLSN, e.Offset
}

// Add holds a data record back until Release finds it releasable.
func (g *Gate[T]) Add(r Record[T]) error {
	var c *coll
	if r.HasTx {
		if c = g.colls[r.Collection]; c == nil {
			return fmt.Errorf("record of %s/%d: %s: %w", r.Topic, r.Partition, r.Collection, ErrUnknownCollection)
		}
	}
	k := tp{r.Topic, r.Partition}
	q := g.queues[k]
	if q == nil {
		q = &queue[T]{}
		g.queues[k] = q
		g.qorder = append(g.qorder, k)
	}
	g.seq++
	h := held[T]{seq: g.seq, rec: r}
	if r.HasTx {
		if c.fromFirst {
			c.fromFirst = false
			// ENDs the gate dropped before the collection registered cannot
			// be checked: their transactions' records go straight through too
			if t := max(r.Prev, g.horizon); t > c.through {
				c.through, c.last = t, max(c.last, t)
			}
		}
		tx := c.txs[r.TxID]
		switch {
		case tx != nil:
		case r.Prev >= 0 && r.Prev < c.through,
			r.Prev < 0 && r.LSN >= 0 && r.LSN < c.through:
			// its transaction committed at or before through: released before
			g.stats.Redelivered++
		default:
			tx = &txState{seen: map[int64]struct{}{}, done: map[int64]struct{}{}}
			c.txs[r.TxID] = tx
		}
		if tx != nil {
			if !tx.released {
				tx.seen[r.Order] = struct{}{}
			}
			tx.held++
			if n := len(tx.queues); n == 0 || tx.queues[n-1] != k {
				tx.queues = append(tx.queues, k)
			}
			h.tx = tx
		}
	}
	q.recs = append(q.recs, h)
	g.held++
	g.heldBytes += r.Bytes
	return nil
}

// Release returns the records that may be applied now: per partition, the
// longest prefix of held records whose transactions are complete and are
// next in their collection's commit order (and records without a
// transaction block behind them). Over the bounds, the transactions of the
// oldest held records are released in parts until the gate is within them.
func (g *Gate[T]) Release() []Record[T] {
	// Every releasable head goes first (records without a transaction
	// block, copies); then each collection walks its ENDs, popping the
	// partitions of each transaction it releases; a last sweep takes what
	// those uncovered behind them on other partitions' heads.
	out := g.popAll(nil)
	for {
		n, passed := len(out), 0
		for _, c := range g.colls {
			var p int
			out, p = g.advance(c, out)
			passed += p
		}
		out = g.popAll(out)
		if passed == 0 && len(out) == n {
			break
		}
	}
	for g.held > g.cfg.MaxHeldRecords || g.heldBytes > g.cfg.MaxHeldBytes {
		h := g.oldestHeld()
		if h == nil || h.tx == nil || h.tx.released {
			break // cannot happen: pop released every releasable head
		}
		h.tx.released, h.tx.forced = true, true
		h.tx.seen, h.tx.done = nil, nil
		g.stats.Forced++
		out = g.popTx(h.tx, out)
	}
	g.trim()
	return out
}

// advance passes the collection over the ENDs whose transactions are out of
// the gate, in commit order: the transaction at the collection's position is
// released once complete (or forced), and passed once its records have all
// gone out once (pop), so that Through never counts a transaction the table
// does not hold. It returns the number of ENDs passed or transactions
// released.
func (g *Gate[T]) advance(c *coll, out []Record[T]) (_ []Record[T], n int) {
	for c.next < g.base+len(g.ends) {
		e := &g.ends[c.next-g.base]
		if e.CommitLSN <= c.through {
			c.next++
			n++
			continue
		}
		want := e.Counts[c.name]
		if want == 0 {
			c.through = e.CommitLSN
			c.next++
			n++
			continue
		}
		tx := c.txs[e.TxID]
		if tx == nil {
			return out, n // none of its records read yet
		}
		if !tx.released {
			if int64(len(tx.seen)) < want {
				return out, n
			}
			tx.released = true
			tx.seen = nil
			g.stats.Transactions++
			n++
			out = g.popTx(tx, out)
		}
		if !tx.forced && int64(len(tx.done)) < want {
			return out, n // records of it behind others still held (copies go out later)
		}
		// From here on its copies are recognised by Prev < through.
		delete(c.txs, e.TxID)
		c.through = e.CommitLSN
		c.last = max(c.last, e.CommitLSN)
		c.next++
		n++
	}
	return out, n
}

// popAll pops every queue's releasable head records.
func (g *Gate[T]) popAll(out []Record[T]) []Record[T] {
	for _, k := range g.qorder {
		out = g.pop(g.queues[k], out)
	}
	return out
}

// popTx pops the queues holding records of a transaction just released.
func (g *Gate[T]) popTx(tx *txState, out []Record[T]) []Record[T] {
	for _, k := range tx.queues {
		if q := g.queues[k]; q != nil {
			out = g.pop(q, out)
		}
	}
	tx.queues = nil
	return out
}

// pop takes a queue's releasable head records.
func (g *Gate[T]) pop(q *queue[T], out []Record[T]) []Record[T] {
	for q.head < len(q.recs) {
		h := &q.recs[q.head]
		if h.tx != nil && !h.tx.released {
			break
		}
		out = append(out, h.rec)
		if h.tx != nil {
			h.tx.held--
			if h.tx.done != nil {
				h.tx.done[h.rec.Order] = struct{}{}
			}
		}
		g.held--
		g.heldBytes -= h.rec.Bytes
		g.stats.Released++
		*h = held[T]{}
		q.head++
	}
	// reuse the queue's array once drained, compact it once mostly consumed
	if q.head == len(q.recs) {
		q.recs, q.head = q.recs[:0], 0
	} else if q.head > 1024 && q.head*2 > len(q.recs) {
		n := copy(q.recs, q.recs[q.head:])
		clear(q.recs[n:])
		q.recs, q.head = q.recs[:n], 0
	}
	return out
}

// oldestHeld is the held queue head read first.
func (g *Gate[T]) oldestHeld() *held[T] {
	var best *held[T]
	for _, k := range g.qorder {
		q := g.queues[k]
		if q.head < len(q.recs) {
			if h := &q.recs[q.head]; best == nil || h.seq < best.seq {
				best = h
			}
		}
	}
	return best
}

// trim drops the ENDs every collection has passed.
func (g *Gate[T]) trim() {
	low := g.base + len(g.ends)
	for _, c := range g.colls {
		low = min(low, c.next)
	}
	if n := low - g.base; n > 0 {
		g.horizon = g.ends[n-1].CommitLSN
		g.ends = append(g.ends[:0], g.ends[n:]...)
		g.base = low
	}
}

// Through is the commit LSN up to which every transaction of the collection
// has been released (-1: none known). A table commit records it as the
// `through` of its consistency watermark.
func (g *Gate[T]) Through(collection string) int64 {
	if c, ok := g.colls[collection]; ok {
		return c.through
	}
	return -1
}

// Last is the highest commit LSN of a transaction of the collection released
// whole (≥ Through; a transaction released in parts counts once its END is
// passed).
func (g *Gate[T]) Last(collection string) int64 {
	if c, ok := g.colls[collection]; ok {
		return c.last
	}
	return -1
}

// ResumeOffset is the transaction-topic offset to read the collection's ENDs
// from after a restart: its first END not passed yet, or the one after the
// newest END read (Restore's offset, or -1, when no END was read yet). A
// table commit records it beside Through; after a restart the topic is read
// from the lowest of the tables'.
func (g *Gate[T]) ResumeOffset(collection string) int64 {
	c, ok := g.colls[collection]
	if !ok {
		return -1
	}
	if i := c.next - g.base; i < len(g.ends) {
		return g.ends[i].Offset
	}
	if g.lastOff < 0 {
		return c.resume
	}
	return g.lastOff + 1
}

// Forced lists the collection's transactions released in parts whose END
// has not been passed yet (sorted). A table commit records them with
// Through: after a restart their remaining records go through at once, and
// their ENDs do not wait for records already in the table.
func (g *Gate[T]) Forced(collection string) []string {
	c, ok := g.colls[collection]
	if !ok {
		return nil
	}
	var out []string
	for id, tx := range c.txs {
		if tx.forced {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// Held returns the records and bytes held back.
func (g *Gate[T]) Held() (records int, bytes int64) { return g.held, g.heldBytes }

// Waiting counts the transactions (per collection) with records held back
// that are not released yet: waiting for their END or for records of them
// still to be read.
func (g *Gate[T]) Waiting() int {
	n := 0
	for _, c := range g.colls {
		for _, tx := range c.txs {
			if !tx.released && tx.held > 0 {
				n++
			}
		}
	}
	return n
}

// Stats returns the counters.
func (g *Gate[T]) Stats() Stats { return g.stats }

// EndOf reads an END record of the transaction topic; ok is false for
// BEGIN and for records that are not transaction metadata.
func EndOf(ev *envelope.Event, offset int64) (e End, ok bool, err error) {
	if ev == nil || ev.Kind != envelope.KindTxMetadata || ev.TxMeta == nil || ev.TxMeta.Status != "END" {
		return End{}, false, nil
	}
	xid, lsn, err := ParseTxID(ev.TxMeta.ID)
	if err != nil {
		return End{}, false, err
	}
	e = End{TxID: xid, CommitLSN: lsn, Offset: offset, Counts: make(map[string]int64, len(ev.TxMeta.DataCollections))}
	for _, d := range ev.TxMeta.DataCollections {
		e.Counts[d.DataCollection] += d.EventCount
	}
	return e, true, nil
}

// RecordOf builds the gate's record of a decoded data event (a change or a
// Kafka tombstone, ev nil for the latter).
func RecordOf[T any](item T, topic string, partition int32, ev *envelope.Event, bytes int64) (Record[T], error) {
	r := Record[T]{Item: item, Topic: topic, Partition: partition, Prev: -1, LSN: -1, Bytes: bytes}
	if ev == nil || ev.Kind != envelope.KindChange {
		return r, nil
	}
	r.Collection = ev.Source.Schema + "." + ev.Source.Table
	if ev.Source.Schema == "" {
		r.Collection = ev.Source.Table
	}
	if ev.Tx == nil {
		return r, nil
	}
	xid, _, err := ParseTxID(ev.Tx.ID)
	if err != nil {
		return r, err
	}
	r.HasTx, r.TxID, r.Order = true, xid, ev.Tx.DataCollectionOrder
	if ev.Source.HasLSN {
		r.LSN = ev.Source.LSN
	}
	if ev.Source.Sequence != "" {
		if p, err := versioning.ParseSequence(ev.Source.Sequence); err == nil && p.HasCommit {
			r.Prev = int64(p.Commit)
		}
	}
	return r, nil
}
