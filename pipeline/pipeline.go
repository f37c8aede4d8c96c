// Package pipeline drives one micro-batch of Kafka records through the rooms:
// decode (envelope) → normalize → version (versioning.Tracker, in partition
// order) → merge, with bad records sent to quarantine before the batch
// commits. It owns batching decisions, progress offsets and retries; it does
// not know wire formats or Delta.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/cdcsink/cdc-sink/rules"
	"github.com/cdcsink/cdc-sink/source"
	"github.com/cdcsink/cdc-sink/versioning"
)

// Decoder is envelope.Decoder's method set.
type Decoder interface {
	Decode(ctx context.Context, rec *source.Record) (*envelope.Event, error)
}

// Normalizer is normalize.Normalizer's method set.
type Normalizer interface {
	Normalize(ev *envelope.Event, rec *source.Record) (*normalize.Change, error)
}

// unorderedNormalizer is the rest of normalize.Normalizer's: staging
// normalizes a poll's records on the decoding goroutines with Unordered,
// then completes them in stream order with Ordered.
type unorderedNormalizer interface {
	Unordered(ev *envelope.Event, rec *source.Record) normalize.Pending
	Ordered(u normalize.Pending, ev *envelope.Event, rec *source.Record) (*normalize.Change, error)
}

// Rules is rules.Set's method set: the quality rules checked on every change
// after normalization, before versioning and the fold.
type Rules interface {
	Check(c *normalize.Change) (rules.Verdict, error)
}

// Table is the merge side of one Delta table (*merge.Table).
type Table interface {
	// NextOffset is the first offset of (topic, partition) the table does not
	// reflect yet; ok is false when the table has no progress for it.
	NextOffset(topic string, partition int32) (int64, bool)
	TrackerState() []versioning.PartitionState
	Apply(ctx context.Context, b *merge.Batch, reject func(ctx context.Context, batchID int64, rs []merge.Reject) error) (*merge.Result, error)
}

// Router opens (creating lazily) the table a topic routes to. ok is false for
// topics that route nowhere (heartbeat and transaction-metadata topics).
type Router func(ctx context.Context, topic string) (t Table, name string, ok bool, err error)

// Observer receives counts; every method must be cheap and safe for
// concurrent use. A nil Observer is allowed.
type Observer interface {
	BatchDone(r *Report)
}

// RetryObserver is an Observer that also hears of each transient failure
// of a table's apply before it is retried: retries inside a batch must show
// (readiness, error counters), or a sink stuck on an unreachable store looks
// healthy while nothing moves.
type RetryObserver interface {
	ApplyRetried(table string, err error)
}

// Config configures a Pipeline.
type Config struct {
	Sink       string // sink name: txn appId and quarantine attribution
	Decoder    Decoder
	Normalizer Normalizer
	Quarantine quarantine.Writer
	Route      Router
	// Rules (may be nil) decide, per change, quarantine / drop / fail / warn.
	Rules Rules
	// VersionOf (may be nil) gives the version a record was first applied
	// with (a redrive of quarantine entries that carry one); the tracker's
	// version is used otherwise.
	VersionOf func(r *source.Record) (versioning.Version, bool)
	Logger    *slog.Logger
	Observer  Observer
	// Fence makes every batch carry, per partition, the table offset its
	// records were read from (merge.Batch.From), so that a commit after
	// another instance took the partition over fails with merge.ErrFenced
	// instead of landing (see Runner.Reseek). For consumer-group sinks
	// (`run`); single-writer tools leave it off.
	Fence bool
	// Domains (may be nil) gives the domain metadata a table's batch commits
	// with (Gated.Domains: the transaction watermark).
	Domains func(table string) map[string]string
	// Decoded (may be nil) gives the event a record was already decoded to
	// (Gated.Decoded); the Decoder is used otherwise.
	Decoded func(r *source.Record) (*envelope.Event, bool)
	// Backoff for transient failures: starts at MinBackoff, doubles up to
	// MaxBackoff, jittered.
	MinBackoff, MaxBackoff time.Duration
	// RetryBudget bounds how long transient failures of one batch's apply
	// are retried (0 = 10m); then the batch fails with ErrRetriesExhausted,
	// which nothing retries again.
	RetryBudget time.Duration
	Now         func() time.Time
}

// Pipeline applies micro-batches. It is not safe for concurrent Process calls.
type Pipeline struct {
	cfg Config
}

// New returns a Pipeline.
func New(cfg Config) *Pipeline {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 100 * time.Millisecond
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 10 * time.Second
	}
	if cfg.RetryBudget <= 0 {
		cfg.RetryBudget = 10 * time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Pipeline{cfg: cfg}
}

// TableReport is what happened to one table in a batch.
type TableReport struct {
	Table  string
	Result *merge.Result
}

// Report summarises one Process call.
type Report struct {
	Records     int   // records handed in
	Bytes       int64 // key+value bytes handed in
	AlreadyDone int   // skipped: offsets the table already covers
	Ignored     int   // heartbeats, tx metadata, messages, unrouted control records
	Quarantined map[quarantine.Reason]int
	Tables      []TableReport
	// RuleViolations counts violations per (table, rule, action); a change
	// breaking several rules counts once per rule.
	RuleViolations map[RuleCount]int
	DecodeMs       int64
	DurationMs     int64
	MaxSourceTsUs  int64 // newest source commit time among applied changes
	Started        time.Time
}

// RuleCount keys Report.RuleViolations.
type RuleCount struct {
	Table  string
	Rule   string
	Action rules.Action
}

// RuleFailure is a change that broke a rule whose action is fail: the batch
// is not committed and the sink stops, naming the record.
type RuleFailure struct {
	Topic     string
	Partition int32
	Offset    int64
	Verdict   rules.Verdict
}

func (e *RuleFailure) Error() string {
	return fmt.Sprintf("record %s/%d@%d: %s", e.Topic, e.Partition, e.Offset, e.Verdict.Message())
}

type tableWork struct {
	name    string
	t       Table
	recs    []*source.Record
	changes []*normalize.Change
	chRec   []*source.Record // record of each change
	bad     []quarantine.Entry
	offsets map[merge.TP]int64
	from    map[merge.TP]int64 // Config.Fence: table offset each partition was read from
	tracker *versioning.Tracker
}

// Process applies one micro-batch: records of any partitions, each partition
// in offset order. It returns nil only when every record is applied, skipped
// or durably quarantined and every touched table committed its progress.
// On error nothing is acknowledged; calling Process again with the same
// records is safe (already-committed tables skip them by offset).
func (p *Pipeline) Process(ctx context.Context, recs []*source.Record) (*Report, error) {
	return p.process(ctx, recs, nil)
}

// staged is a record decoded and normalized ahead of its batch (Stage).
type staged struct {
	// data: decoded as a change or a tombstone (else ignored: heartbeat,
	// transaction metadata…). The event itself is not kept: held until its
	// batch ends, the decoded rows doubled what the collector scans.
	data bool
	c    *normalize.Change // nil: ignored or err
	err  error             // permanent decode or normalize failure: quarantined
}

func isData(ev *envelope.Event) bool {
	return ev.Kind == envelope.KindChange || ev.Kind == envelope.KindTombstone
}

// stage decodes and normalizes r ahead of its batch, for a Runner that
// overlaps reading with applying. Both steps depend only on the record and
// the records before it in the stream (the normalizer's schema inference),
// never on a table, so doing them early changes nothing as long as records
// are staged in stream order: a transient decode failure is retried here
// (as the batch would), and ok is false only when ctx ends first.
func (p *Pipeline) stage(ctx context.Context, r *source.Record) (st staged, ok bool) {
	ev, err := p.decode(ctx, r)
	if err != nil && ctx.Err() != nil {
		return staged{}, false
	}
	st.err = err
	if st.data = err == nil && isData(ev); st.data {
		st.c, st.err = p.cfg.Normalizer.Normalize(ev, r)
	}
	return st, true
}

// stageAll stages recs (stage) and returns the staged prefix: all of them
// unless ctx ended. Decoding, a pure function of each record, is spread over
// up to workers goroutines; so is normalizing, with a Normalizer that can
// normalize ahead of stream order (Unordered), each record then completed in
// stream order (Ordered: again, in the rare case that an earlier record
// changed what it read).
func (p *Pipeline) stageAll(ctx context.Context, recs []*source.Record, workers int) []staged {
	out := make([]staged, len(recs))
	evs := make([]*envelope.Event, len(recs))
	ok := make([]bool, len(recs))
	un, _ := p.cfg.Normalizer.(unorderedNormalizer)
	var pend []normalize.Pending
	if un != nil {
		pend = make([]normalize.Pending, len(recs))
	}
	decode := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			ev, err := p.decode(ctx, recs[i])
			if err != nil && ctx.Err() != nil {
				return // the rest of the chunk stays unstaged
			}
			evs[i], out[i], ok[i] = ev, staged{err: err}, true
			if un != nil && err == nil && isData(ev) {
				pend[i] = un.Unordered(ev, recs[i])
			}
		}
	}
	if workers = min(workers, len(recs)/minDecodeChunk); workers <= 1 {
		decode(0, len(recs))
	} else {
		var wg sync.WaitGroup
		per := (len(recs) + workers - 1) / workers
		for lo := 0; lo < len(recs); lo += per {
			wg.Add(1)
			go func(lo, hi int) {
				defer wg.Done()
				decode(lo, hi)
			}(lo, min(lo+per, len(recs)))
		}
		wg.Wait()
	}
	for i, r := range recs {
		if !ok[i] {
			return out[:i] // stream order: nothing after an unstaged record
		}
		st := &out[i]
		if st.data = st.err == nil && isData(evs[i]); st.data {
			if un != nil {
				st.c, st.err = un.Ordered(pend[i], evs[i], r)
			} else {
				st.c, st.err = p.cfg.Normalizer.Normalize(evs[i], r)
			}
		}
	}
	return out
}

// minDecodeChunk: fewer records per goroutine cost more to hand out than
// decoding them.
const minDecodeChunk = 256

func (p *Pipeline) process(ctx context.Context, recs []*source.Record, pre map[*source.Record]staged) (*Report, error) {
	start := p.cfg.Now()
	rep := &Report{Records: len(recs), Quarantined: map[quarantine.Reason]int{}, Started: start}
	works := map[string]*tableWork{}
	var order []*tableWork
	var unrouted []*source.Record
	for _, r := range recs {
		rep.Bytes += int64(len(r.Key) + len(r.Value))
		t, name, ok, err := p.cfg.Route(ctx, r.Topic)
		if err != nil {
			return nil, fmt.Errorf("route topic %s: %w", r.Topic, err)
		}
		if !ok {
			unrouted = append(unrouted, r)
			continue
		}
		w := works[name]
		if w == nil {
			w = &tableWork{name: name, t: t, offsets: map[merge.TP]int64{}, tracker: versioning.NewTracker()}
			w.tracker.Restore(t.TrackerState())
			works[name] = w
			order = append(order, w)
		}
		if next, ok := t.NextOffset(r.Topic, r.Partition); ok && r.Offset < next {
			rep.AlreadyDone++
			continue
		}
		w.recs = append(w.recs, r)
		tp := merge.TP{Topic: r.Topic, Partition: r.Partition}
		if _, seen := w.offsets[tp]; !seen && p.cfg.Fence {
			if w.from == nil {
				w.from = map[merge.TP]int64{}
			}
			w.from[tp] = -1
			if next, ok := t.NextOffset(r.Topic, r.Partition); ok {
				w.from[tp] = next
			}
		}
		if r.Offset+1 > w.offsets[tp] {
			w.offsets[tp] = r.Offset + 1
		}
	}
	decStart := time.Now()
	for _, r := range unrouted {
		st, ok := pre[r]
		if !ok {
			ev, err := p.decode(ctx, r)
			st = staged{err: err, data: err == nil && isData(ev)}
		}
		err := st.err
		if err != nil && ctx.Err() != nil {
			return nil, err
		}
		if err == nil && !st.data {
			rep.Ignored++
			continue
		}
		// A data record for a topic with no table cannot be applied: quarantine
		// it (its offset is then tracked by the consumer group only).
		if err := p.cfg.Quarantine.Write(ctx, []quarantine.Entry{p.entry(r, quarantine.UnknownTable,
			fmt.Sprintf("topic %s routes to no table", r.Topic), 0)}); err != nil {
			return nil, fmt.Errorf("quarantine unrouted record %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
		}
		rep.Quarantined[quarantine.UnknownTable]++
	}
	for _, w := range order {
		if err := p.prepare(ctx, w, rep, pre); err != nil {
			return nil, err
		}
	}
	rep.DecodeMs = time.Since(decStart).Milliseconds()
	for _, w := range order {
		if len(w.recs) == 0 {
			continue
		}
		res, err := p.apply(ctx, w, rep)
		if err != nil {
			return nil, fmt.Errorf("table %s: %w", w.name, err)
		}
		rep.Tables = append(rep.Tables, TableReport{Table: w.name, Result: res})
	}
	rep.DurationMs = p.cfg.Now().Sub(start).Milliseconds()
	if p.cfg.Observer != nil {
		p.cfg.Observer.BatchDone(rep)
	}
	return rep, nil
}

// decode retries transient failures (registry down) with backoff until ctx ends.
func (p *Pipeline) decode(ctx context.Context, r *source.Record) (*envelope.Event, error) {
	if p.cfg.Decoded != nil {
		if ev, ok := p.cfg.Decoded(r); ok {
			return ev, nil
		}
	}
	back := p.cfg.MinBackoff
	for {
		ev, err := p.cfg.Decoder.Decode(ctx, r)
		if err == nil || !quarantine.IsTransient(err) {
			return ev, err
		}
		p.cfg.Logger.Warn("transient decode failure, retrying", "topic", r.Topic, "partition", r.Partition,
			"offset", r.Offset, "err", err, "backoff", back)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(back):
		}
		back = min(back*2, p.cfg.MaxBackoff)
	}
}

func (p *Pipeline) prepare(ctx context.Context, w *tableWork, rep *Report, pre map[*source.Record]staged) error {
	var keyBuf []byte
	for _, r := range w.recs {
		st, ok := pre[r]
		if !ok {
			if st, ok = p.stage(ctx, r); !ok {
				return ctx.Err()
			}
		}
		err := st.err
		if err == nil && !st.data {
			rep.Ignored++
			continue
		}
		c := st.c
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			reason, ok := quarantine.ReasonOf(err)
			if !ok {
				// An untyped error is a bug in a decoder; keep the record anyway.
				reason = quarantine.MalformedEvent
			}
			w.bad = append(w.bad, p.entry(r, reason, message(err), 0))
			continue
		}
		if c == nil {
			rep.Ignored++
			continue
		}
		switch {
		case c.Tombstone:
			keyBuf = merge.AppendKey(keyBuf[:0], c.Key)
			c.Version = w.tracker.AssignTombstone(r.Topic, r.Partition, r.Offset, keyBuf)
		case c.Op == normalize.OpDelete:
			keyBuf = merge.AppendKey(keyBuf[:0], c.Key)
			c.Version = w.tracker.AssignDelete(r.Topic, r.Partition, r.Offset, c.Position, keyBuf)
		default:
			c.Version = w.tracker.Assign(r.Topic, r.Partition, r.Offset, c.Position)
		}
		if p.cfg.VersionOf != nil {
			if v, ok := p.cfg.VersionOf(r); ok {
				c.Version = v
			}
		}
		// Rules run after versioning: a rejected change still advances the
		// partition's tracker exactly as the source stream does (snapshot
		// epochs, phases), and its quarantine entry keeps its version.
		if p.cfg.Rules != nil {
			v, err := p.cfg.Rules.Check(c)
			if err != nil {
				return fmt.Errorf("quality rules on record %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
			}
			if v.Action != "" {
				if rep.RuleViolations == nil {
					rep.RuleViolations = map[RuleCount]int{}
				}
				for _, x := range v.Violations {
					rep.RuleViolations[RuleCount{Table: w.name, Rule: x.Rule, Action: x.Action}]++
				}
				switch v.Action {
				case rules.Fail:
					return &RuleFailure{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Verdict: v}
				case rules.Quarantine:
					e := p.entry(r, quarantine.RuleViolation, v.Message(), 0)
					e.Rule, e.Version = v.Rule(), c.Version.String()
					w.bad = append(w.bad, e)
					continue
				case rules.Drop:
					continue
				case rules.Warn:
					p.cfg.Logger.Warn("quality rule violated (warn: applied)", "topic", r.Topic, "partition", r.Partition,
						"offset", r.Offset, "violation", v.Message())
				}
			}
		}
		w.changes = append(w.changes, c)
		w.chRec = append(w.chRec, r)
		if c.SourceTsMicros > rep.MaxSourceTsUs {
			rep.MaxSourceTsUs = c.SourceTsMicros
		}
	}
	return nil
}

func (p *Pipeline) apply(ctx context.Context, w *tableWork, rep *Report) (*merge.Result, error) {
	batch := &merge.Batch{Changes: w.changes, Offsets: w.offsets, Tracker: w.tracker.State(), From: w.from}
	if p.cfg.Domains != nil {
		batch.Domains = p.cfg.Domains(w.name)
	}
	// Each record is quarantined (and counted) once per batch, however often
	// merge calls reject: once per commit attempt after a concurrent writer
	// won, and again when a transient failure makes this loop retry Apply.
	badSent := false
	sent := map[int]bool{}
	reject := func(ctx context.Context, batchID int64, rs []merge.Reject) error {
		var entries []quarantine.Entry
		if !badSent {
			entries = append(entries, w.bad...)
			for i := range entries {
				entries[i].BatchID = batchID
			}
		}
		var idx []int
		for _, rj := range rs {
			if sent[rj.Index] {
				continue
			}
			idx = append(idx, rj.Index)
			entries = append(entries, p.entry(w.chRec[rj.Index], rj.Reason, rj.Message, batchID))
		}
		if len(entries) == 0 {
			return nil
		}
		if err := p.writeQuarantine(ctx, entries); err != nil {
			return err
		}
		badSent = true
		for _, i := range idx {
			sent[i] = true
		}
		for _, e := range entries {
			rep.Quarantined[e.Reason]++
		}
		return nil
	}
	// The one owner of transient-failure retries of a batch's apply, within
	// RetryBudget (merge owns re-plans after conflicts, with its own budget;
	// what it gives up on is permanent and not retried here).
	back := p.cfg.MinBackoff
	start := time.Now()
	for {
		res, err := w.t.Apply(ctx, batch, reject)
		if err == nil {
			return res, nil
		}
		if !quarantine.IsTransient(err) || ctx.Err() != nil {
			return nil, err
		}
		wait := back/2 + rand.N(back)
		if spent := time.Since(start); spent+wait > p.cfg.RetryBudget {
			return nil, fmt.Errorf("table %s: %w (%v): %w", w.name, ErrRetriesExhausted, spent.Round(time.Millisecond), err)
		}
		p.cfg.Logger.Warn("transient apply failure, retrying", "table", w.name, "err", err, "backoff", wait)
		if ro, ok := p.cfg.Observer.(RetryObserver); ok {
			ro.ApplyRetried(w.name, err)
		}
		select {
		case <-ctx.Done():
			return nil, errors.Join(err, ctx.Err())
		case <-time.After(wait):
		}
		back = min(back*2, p.cfg.MaxBackoff)
	}
}

// ErrRetriesExhausted: a batch's apply kept failing transiently for
// Config.RetryBudget. Permanent: the runner does not retry it again.
var ErrRetriesExhausted = errors.New("transient failures outlasted the retry budget")

// writeQuarantine retries until the entries are acknowledged: a record must
// never be counted done before its quarantine copy is durable.
func (p *Pipeline) writeQuarantine(ctx context.Context, entries []quarantine.Entry) error {
	back := p.cfg.MinBackoff
	for {
		err := p.cfg.Quarantine.Write(ctx, entries)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("quarantine write: %w", errors.Join(err, ctx.Err()))
		}
		p.cfg.Logger.Warn("quarantine write failed, retrying", "entries", len(entries), "err", err, "backoff", back)
		select {
		case <-ctx.Done():
			return fmt.Errorf("quarantine write: %w", errors.Join(err, ctx.Err()))
		case <-time.After(back):
		}
		back = min(back*2, p.cfg.MaxBackoff)
	}
}

func (p *Pipeline) entry(r *source.Record, reason quarantine.Reason, msg string, batch int64) quarantine.Entry {
	return quarantine.Entry{Record: r, Reason: reason, Message: msg, Sink: p.cfg.Sink, BatchID: batch, Time: p.cfg.Now().UTC()}
}

// message is the error text without the reason class prefix (the class
// travels separately in the quarantine record).
func message(err error) string {
	var qe *quarantine.Error
	if errors.As(err, &qe) {
		if qe.Err != nil {
			return qe.Msg + ": " + qe.Err.Error()
		}
		return qe.Msg
	}
	return err.Error()
}
