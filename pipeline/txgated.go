// consistency: transaction — the data records of a sink go through a
// txgate.Gate between the poll and the batch, so that each table commit
// holds whole source transactions only (docs/consistency.md).

package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/cdcsink/cdc-sink/consistency"
	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/source"
	"github.com/cdcsink/cdc-sink/txgate"
)

// TxReader reads the transaction-metadata topic (*source.PartitionReader).
type TxReader interface {
	Poll(ctx context.Context, max int, maxWait time.Duration) ([]*source.Record, error)
	// SeekTo makes the next Poll start at offset (-1: the earliest). An
	// error satisfying errors.Is(err, source.ErrTopicMissing) means the
	// topic is not there yet (Debezium creates it with the first
	// transaction): it is tried again later.
	SeekTo(ctx context.Context, offset int64) error
}

// GateConfig configures a Gated source.
type GateConfig struct {
	Sink string
	// P decodes records (its Decoder, with its retries of transient
	// failures) and routes them (its Router).
	P *Pipeline
	// Data are the data topics (the consumer group); Tx the transaction topic.
	Data Poller
	Tx   TxReader
	// Seek moves data partitions back to the given next offsets, between
	// polls (the gate was rebuilt and its held records are read again).
	Seek func(ctx context.Context, offsets map[merge.TP]int64) error
	// Bounds of what the gate holds (txgate.Config).
	MaxHeldRecords int
	MaxHeldBytes   int64
	// Group and Manifest: the consistency group the tables are in (may be
	// empty), recorded in each watermark so that maintenance finds the
	// manifest whose versions it must keep.
	Group, Manifest string
	// Waited (may be nil) is told how long each released record was held.
	Waited func(time.Duration)
	Logger *slog.Logger
}

// Gated is a Poller of whole transactions: it reads the data topics and the
// transaction topic and returns, per partition, the prefix of records whose
// transactions are complete. Use it as Runner.Src, with Domains as the
// pipeline's Config.Domains. Not safe for concurrent use but for
// Invalidate.
type Gated struct {
	cfg  GateConfig
	gate *txgate.Gate[*source.Record]
	// collOf maps a table to the source collection it follows, tableOf back
	collOf  map[string]string
	tableOf map[string]string
	// txFrom is where the transaction topic is read from (-1: earliest);
	// txOn once it is being read.
	txFrom int64
	txOn   bool
	// txTried: when a missing transaction topic was last looked for
	// (txWarned: last said so)
	txTried, txWarned time.Time
	// invalid, once set (partitions revoked or fenced), is returned by Poll:
	// the gate's view of what the tables hold is no longer exact, and the
	// sink restarts from its tables.
	invalid chan error
	forced  int64
	// past: the counters of gates rebuilt (rewind), so Stats only grows
	past txgate.Stats
	// held: the decoded events of records in the gate; ready: of records
	// released and not yet taken by the pipeline (Decoded), so that a record
	// is decoded once
	held  map[*source.Record]heldEvent
	ready map[*source.Record]*envelope.Event
	// ends: commit LSN and source time of the ENDs read, oldest first
	// (trimmed below the last cut): the lag of a cut
	ends []endTime
	// tables and spans: for Cut, each table and its recent versions
	tables map[string]Table
	spans  map[string][]span
}

type heldEvent struct {
	ev *envelope.Event
	at time.Time // when it was read
}

type endTime struct{ lsn, tsMs int64 }

// span is a table version and the range of source commit points W it is
// the state at: it holds the table's transactions up to last, and none of
// its transactions commit in (last, validTo].
type span struct{ version, last, validTo int64 }

// ErrGateInvalid: partitions left this instance, or a batch was fenced,
// while transactions were being gated. The sink must restart (it resumes
// exactly from its tables).
var ErrGateInvalid = errors.New("consistency: transaction: partitions were revoked or a batch was fenced; restart to resume from the tables")

// NewGated returns a Gated source.
func NewGated(cfg GateConfig) *Gated {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	g := &Gated{cfg: cfg, collOf: map[string]string{}, tableOf: map[string]string{}, txFrom: -1, invalid: make(chan error, 1),
		held: map[*source.Record]heldEvent{}, ready: map[*source.Record]*envelope.Event{},
		tables: map[string]Table{}, spans: map[string][]span{}}
	g.gate = g.newGate()
	return g
}

func (g *Gated) newGate() *txgate.Gate[*source.Record] {
	return txgate.New[*source.Record](txgate.Config{MaxHeldRecords: g.cfg.MaxHeldRecords, MaxHeldBytes: g.cfg.MaxHeldBytes})
}

// Decoded hands the pipeline the event a released record was decoded to
// (Config.Decoded), once.
func (g *Gated) Decoded(r *source.Record) (*envelope.Event, bool) {
	ev, ok := g.ready[r]
	if ok {
		delete(g.ready, r)
	}
	return ev, ok
}

// Invalidate makes the next Poll fail with ErrGateInvalid (from any goroutine).
func (g *Gated) Invalidate(reason string) {
	select {
	case g.invalid <- fmt.Errorf("%w (%s)", ErrGateInvalid, reason):
	default:
	}
}

// Held is what the gate holds back: records, bytes.
func (g *Gated) Held() (int, int64) { return g.gate.Held() }

// Waiting is the number of transactions (per table) held back.
func (g *Gated) Waiting() int { return g.gate.Waiting() }

// Stats are the gate's counters since NewGated.
func (g *Gated) Stats() txgate.Stats { return addStats(g.past, g.gate.Stats()) }

func addStats(a, b txgate.Stats) txgate.Stats {
	return txgate.Stats{Released: a.Released + b.Released, Transactions: a.Transactions + b.Transactions,
		Forced: a.Forced + b.Forced, Redelivered: a.Redelivered + b.Redelivered, EndCopies: a.EndCopies + b.EndCopies}
}

// Domains is the watermark domain metadata of a table at this moment: the
// pipeline calls it when it commits the table's batch, which holds every
// record of the table the gate has released and no other.
func (g *Gated) Domains(table string) map[string]string {
	coll, ok := g.collOf[table]
	if !ok {
		return nil
	}
	w := consistency.Watermark{Collection: coll, Group: g.cfg.Group, Manifest: g.cfg.Manifest, Table: table, Through: g.gate.Through(coll), Last: g.gate.Last(coll),
		Resume: g.gate.ResumeOffset(coll), Forced: g.gate.Forced(coll)}
	b, _ := json.Marshal(w)
	return map[string]string{consistency.Domain(g.cfg.Sink): string(b)}
}

// Poll reads both topics and returns the records released.
func (g *Gated) Poll(ctx context.Context, max int, maxWait time.Duration) ([]*source.Record, error) {
	select {
	case err := <-g.invalid:
		return nil, err
	default:
	}
	held, _ := g.gate.Held()
	wait := maxWait
	if held > 0 {
		// records wait for ENDs: read the transaction topic often
		wait = min(maxWait, 20*time.Millisecond)
	}
	recs, err := g.cfg.Data.Poll(ctx, max, wait)
	eof := errors.Is(err, io.EOF)
	if err != nil && !eof {
		return nil, err
	}
	for i, r := range recs {
		rewound, err := g.add(ctx, r, recs[i:])
		if err != nil {
			return nil, err
		}
		if rewound {
			break
		}
	}
	if !g.txOn && time.Since(g.txTried) >= time.Second {
		if err := g.startTx(ctx); err != nil {
			return nil, fmt.Errorf("read the transaction topic: %w", err)
		}
	}
	if g.txOn {
		tw := time.Duration(0)
		if held, _ := g.gate.Held(); held > 0 && len(recs) == 0 {
			tw = min(maxWait, 20*time.Millisecond)
		}
		ends, err := g.cfg.Tx.Poll(ctx, 10000, tw)
		if err != nil && ctx.Err() == nil {
			return nil, fmt.Errorf("read the transaction topic: %w", err)
		}
		for _, r := range ends {
			ev, err := g.cfg.P.decode(ctx, r)
			if err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				return nil, fmt.Errorf("transaction record %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
			}
			e, ok, err := txgate.EndOf(ev, r.Offset)
			if err != nil {
				return nil, fmt.Errorf("transaction record %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
			}
			if ok {
				g.gate.End(e)
				if n := len(g.ends); n == 0 || e.CommitLSN > g.ends[n-1].lsn {
					g.ends = append(g.ends, endTime{lsn: e.CommitLSN, tsMs: ev.TxMeta.TsMs})
				}
			}
		}
	}
	out := g.gate.Release()
	if g.cfg.Logger.Enabled(ctx, slog.LevelDebug) {
		held, _ := g.gate.Held()
		for c := range g.tableOf {
			g.cfg.Logger.Debug("gate", "collection", c, "through", g.gate.Through(c), "resume", g.gate.ResumeOffset(c), "held", held, "released", len(out), "data_read", len(recs))
		}
	}
	if st := g.Stats(); st.Forced > g.forced {
		held, bytes := g.gate.Held()
		g.cfg.Logger.Warn("transactions too large for the gate's bounds are applied in parts",
			"transactions", st.Forced-g.forced, "held_records", held, "held_bytes", bytes)
		g.forced = st.Forced
	}
	items := make([]*source.Record, len(out))
	now := time.Now()
	for i := range out {
		items[i] = out[i].Item
		if h, ok := g.held[items[i]]; ok {
			delete(g.held, items[i])
			g.ready[items[i]] = h.ev
			if g.cfg.Waited != nil {
				g.cfg.Waited(now.Sub(h.at))
			}
		}
	}
	if eof {
		if held, _ := g.gate.Held(); held == 0 || len(items) == 0 {
			// a bounded source ended: what is still held stays unapplied
			// (its partitions' offsets stay at it)
			return items, io.EOF
		}
	}
	return items, nil
}

// add puts one data record into the gate. When the record's collection
// needs ENDs the gate no longer has (or never read), the gate is rebuilt
// and rest (this record and those after it) read again: rewound is true.
func (g *Gated) add(ctx context.Context, r *source.Record, rest []*source.Record) (rewound bool, err error) {
	plain := txgate.Record[*source.Record]{Item: r, Topic: r.Topic, Partition: r.Partition, Prev: -1, LSN: -1,
		Bytes: int64(len(r.Key) + len(r.Value))}
	t, table, routed, err := g.cfg.P.cfg.Route(ctx, r.Topic)
	if err != nil {
		return false, fmt.Errorf("route topic %s: %w", r.Topic, err)
	}
	ev, derr := g.cfg.P.decode(ctx, r)
	if derr != nil && ctx.Err() != nil {
		return false, ctx.Err()
	}
	rec := plain
	if derr == nil {
		g.held[r] = heldEvent{ev: ev, at: time.Now()}
	}
	if routed && derr == nil && ev.Kind == envelope.KindChange {
		if rec, err = txgate.RecordOf(r, r.Topic, r.Partition, ev, plain.Bytes); err != nil {
			// its transaction cannot be told: applied alone it could split
			// one, quarantined it would hold its transaction back for good
			return false, fmt.Errorf("record %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
		}
	}
	if routed && derr == nil && ev.Kind == envelope.KindChange && !rec.HasTx && streamed(ev) {
		return false, fmt.Errorf("record %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, ErrNoTransactionBlock)
	}
	if rec.HasTx {
		if prev, ok := g.tableOf[rec.Collection]; ok && prev != table {
			return false, fmt.Errorf("record %s/%d@%d: collection %s goes to tables %s and %s; consistency: transaction needs one table per source table",
				r.Topic, r.Partition, r.Offset, rec.Collection, prev, table)
		}
		if prev, ok := g.collOf[table]; ok && prev != rec.Collection {
			return false, fmt.Errorf("record %s/%d@%d: table %s receives collections %s and %s; consistency: transaction needs one source table per table",
				r.Topic, r.Partition, r.Offset, table, prev, rec.Collection)
		}
		if !g.gate.Known(rec.Collection) {
			rewound, err := g.register(ctx, t, table, rec.Collection, r, rest)
			if err != nil || rewound {
				return rewound, err
			}
		}
	}
	return false, g.gate.Add(rec)
}

// ErrNoTransactionBlock: a streamed change without Debezium's transaction
// block under consistency: transaction. Nothing could tell which
// transaction it belongs to, so the sink stops rather than apply it ungated.
var ErrNoTransactionBlock = errors.New("a streamed change without a transaction block: consistency: transaction needs the connector's " +
	"provide.transaction.metadata=true (with the unwrap SMT, also add.fields=op,schema,table,lsn,sequence,transaction.id,transaction.data_collection_order)")

// streamed: not a snapshot row (those carry no transaction block).
func streamed(ev *envelope.Event) bool {
	if ev.Op != 0 {
		return ev.Op != 'r'
	}
	switch ev.Source.Snapshot {
	case "true", "first", "last", "first_in_data_collection", "last_in_data_collection", "incremental":
		return false
	}
	return true
}

func tableVersion(t Table) (int64, bool) {
	vt, ok := t.(interface{ Version() int64 })
	if !ok {
		return -1, false
	}
	v := vt.Version()
	return v, v >= 0
}

// Cut is the newest consistent cut across the tables read so far: a source
// commit point W and, per table, the version holding exactly its
// transactions committed up to W. Call it after a batch committed (no
// released record uncommitted: Runner.AfterBatch). ok is false while a
// table has no version written under the gate yet or is applying a
// transaction in parts.
func (g *Gated) Cut() (w int64, versions map[string]int64, ok bool) {
	if len(g.collOf) == 0 {
		return 0, nil, false
	}
	low := int64(math.MaxInt64)
	for table, coll := range g.collOf {
		if !g.gate.Known(coll) || len(g.gate.Forced(coll)) > 0 {
			return 0, nil, false
		}
		v, ok := tableVersion(g.tables[table])
		if !ok {
			return 0, nil, false
		}
		ss := g.spans[table]
		if n := len(ss); n == 0 || ss[n-1].version != v {
			// committed since: everything released is in it (after a batch)
			ss = append(ss, span{version: v, last: g.gate.Last(coll), validTo: g.gate.Through(coll)})
		}
		cur := &ss[len(ss)-1]
		cur.validTo = max(cur.validTo, g.gate.Through(coll))
		g.spans[table] = ss
		low = min(low, cur.validTo)
	}
	cands := []int64{low}
	for _, ss := range g.spans {
		for _, s := range ss {
			for _, c := range []int64{s.last, s.validTo} {
				if c <= low {
					cands = append(cands, c)
				}
			}
		}
	}
	slices.Sort(cands)
	for i := len(cands) - 1; i >= 0; i-- {
		w := cands[i]
		if i < len(cands)-1 && cands[i+1] == w {
			continue
		}
		versions := map[string]int64{}
		for table := range g.collOf {
			ss := g.spans[table]
			for j := len(ss) - 1; j >= 0; j-- {
				if ss[j].last <= w && w <= ss[j].validTo {
					versions[table] = ss[j].version
					break
				}
			}
			if _, ok := versions[table]; !ok {
				break
			}
		}
		if len(versions) == len(g.collOf) {
			// older versions can only serve cuts below this one
			for table, ss := range g.spans {
				k := 0
				for k < len(ss)-1 && ss[k].validTo < w {
					k++
				}
				g.spans[table] = ss[k:]
			}
			// ENDs below the cut no longer count for a lag
			k := 0
			for k < len(g.ends)-1 && g.ends[k+1].lsn <= w {
				k++
			}
			g.ends = g.ends[k:]
			return w, versions, true
		}
	}
	return 0, nil, false
}

// Lag is how far a cut at w trails the transaction topic as read: in
// source WAL bytes (the newest END's commit LSN minus w) and in source
// time (between that END's commit and the one at or below w).
func (g *Gated) Lag(w int64) (bytes int64, d time.Duration) {
	if len(g.ends) == 0 {
		return 0, 0
	}
	newest := g.ends[len(g.ends)-1]
	bytes = max(0, newest.lsn-w)
	for i := len(g.ends) - 1; i >= 0; i-- {
		if g.ends[i].lsn <= w {
			d = time.Duration(max(0, newest.tsMs-g.ends[i].tsMs)) * time.Millisecond
			break
		}
	}
	return bytes, d
}

// register adds a collection at the state its table's last commit recorded.
func (g *Gated) register(ctx context.Context, t Table, table, coll string, r *source.Record, rest []*source.Record) (bool, error) {
	st := txgate.State{Through: -1, Last: -1, Resume: -1}
	dt, ok := t.(interface{ Domain(string) (string, bool) })
	if !ok {
		return false, fmt.Errorf("table %s cannot hold a transaction watermark", table)
	}
	w, found, err := consistency.ReadWatermark(dt.Domain, g.cfg.Sink)
	if err != nil {
		return false, fmt.Errorf("table %s: %w", table, err)
	}
	switch {
	case found && w.Collection != coll:
		return false, fmt.Errorf("table %s: its watermark follows %s, record %s/%d@%d is of %s",
			table, w.Collection, r.Topic, r.Partition, r.Offset, coll)
	case found:
		st = txgate.State{Through: w.Through, Last: w.Last, Resume: w.Resume, Forced: w.Forced}
	default:
		if _, has := t.NextOffset(r.Topic, r.Partition); has {
			// written before with consistency eventual
			st.FromFirst = true
			g.cfg.Logger.Info("table has no transaction watermark: gating starts at the first transaction read",
				"table", table, "collection", coll)
		}
	}
	g.collOf[table], g.tableOf[coll] = coll, table
	g.tables[table] = t
	if v, ok := tableVersion(t); ok && found && len(w.Forced) == 0 {
		g.spans[table] = []span{{version: v, last: w.Last, validTo: w.Through}}
	}
	g.cfg.Logger.Info("gating transactions of a table", "table", table, "collection", coll,
		"through", st.Through, "resume_offset", st.Resume, "forced", len(st.Forced), "from_first", st.FromFirst)
	// ENDs it needs that were never read (the topic is read from later) or
	// were dropped: rebuild the gate and read both topics again
	unread := g.txOn && !st.FromFirst && g.txFrom >= 0 && (st.Resume < 0 || st.Resume < g.txFrom)
	if !unread {
		err := g.gate.Register(coll, st)
		if err == nil {
			return false, nil
		}
		if !errors.Is(err, txgate.ErrEndsDropped) {
			return false, err
		}
	}
	return true, g.rewind(ctx, coll, st, rest)
}

// rewind rebuilds the gate: every collection at the point the old gate had
// released to, coll at st; held records and rest are read again, and the
// transaction topic from the lowest resume offset.
func (g *Gated) rewind(ctx context.Context, coll string, st txgate.State, rest []*source.Record) error {
	states := map[string]txgate.State{coll: st}
	for c := range g.tableOf {
		if c != coll && g.gate.Known(c) {
			states[c] = txgate.State{Through: g.gate.Through(c), Last: g.gate.Last(c), Resume: g.gate.ResumeOffset(c), Forced: g.gate.Forced(c)}
		}
	}
	seek := map[merge.TP]int64{}
	mark := func(topic string, p int32, off int64) {
		tp := merge.TP{Topic: topic, Partition: p}
		if o, ok := seek[tp]; !ok || off < o {
			seek[tp] = off
		}
	}
	for _, h := range g.gate.Heads() {
		mark(h.Topic, h.Partition, h.Item.Offset)
	}
	for _, r := range rest {
		mark(r.Topic, r.Partition, r.Offset)
	}
	g.past = addStats(g.past, g.gate.Stats())
	g.gate = g.newGate()
	g.held = map[*source.Record]heldEvent{} // its records are read again
	g.txOn = false
	for c, s := range states {
		if err := g.gate.Register(c, s); err != nil {
			return fmt.Errorf("rebuild the transaction gate: %w", err)
		}
	}
	g.cfg.Logger.Info("transaction gate rebuilt: a table needs transaction ENDs from further back",
		"collection", coll, "resume", st.Resume, "partitions_reread", len(seek))
	if len(seek) > 0 {
		if err := g.cfg.Seek(ctx, seek); err != nil {
			return fmt.Errorf("re-read held records: %w", err)
		}
	}
	g.txTried = time.Time{}
	return g.startTx(ctx)
}

// startTx reads the transaction topic from the lowest resume offset of the
// collections (the earliest when one has none).
func (g *Gated) startTx(ctx context.Context) error {
	from := int64(-2)
	for c := range g.tableOf {
		if !g.gate.Known(c) {
			continue
		}
		r := g.gate.ResumeOffset(c)
		if from == -2 || r < from {
			from = r
		}
	}
	if from == -2 {
		return nil // no collection yet
	}
	if from < -1 {
		from = -1
	}
	if err := g.cfg.Tx.SeekTo(ctx, from); err != nil {
		if errors.Is(err, source.ErrTopicMissing) {
			if g.txTried.IsZero() || time.Since(g.txWarned) >= time.Minute {
				held, _ := g.gate.Held()
				g.cfg.Logger.Warn("the transaction topic does not exist yet: streamed changes wait for it (Debezium creates it with the first transaction it streams, when provide.transaction.metadata=true)",
					"err", err, "held_records", held)
				g.txWarned = time.Now()
			}
			g.txTried = time.Now()
			return nil
		}
		return err
	}
	g.txFrom, g.txOn = from, true
	g.cfg.Logger.Info("reading the transaction topic", "from_offset", from)
	return nil
}
