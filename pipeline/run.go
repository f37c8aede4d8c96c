package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"time"

	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/cdcsink/cdc-sink/source"
)

// Poller is a record source: *source.Consumer and *source.FileReader.
// Poll returns io.EOF when a bounded source is exhausted.
type Poller interface {
	Poll(ctx context.Context, max int, maxWait time.Duration) ([]*source.Record, error)
}

// Trigger decides when a micro-batch is cut: whichever limit is reached first.
type Trigger struct {
	MaxRecords  int           // default 10,000
	MaxBytes    int64         // key+value bytes; default 64 MiB
	MaxInterval time.Duration // since the first buffered record; default 1s
}

func (t *Trigger) defaults() {
	if t.MaxRecords <= 0 {
		t.MaxRecords = 10000
	}
	if t.MaxBytes <= 0 {
		t.MaxBytes = 64 << 20
	}
	if t.MaxInterval <= 0 {
		t.MaxInterval = time.Second
	}
}

// Runner feeds a Poller into a Pipeline in micro-batches.
//
// A batch is applied on a goroutine of its own. With Overlap, Run's
// goroutine meanwhile polls the next batch and decodes and normalizes its
// records (Pipeline.stage), so that reading batch N+1 and applying batch N
// use both cores; otherwise it waits for each batch. Either way batches are
// applied one at a time and in order, offsets advance only with the table
// commits (AfterBatch runs after them), and a crash loses nothing the tables
// did not record: the next run reads again from the tables' offsets.
type Runner struct {
	P       *Pipeline
	Src     Poller
	Trigger Trigger
	// Overlap reads (polls, decodes, normalizes) the next batch while the
	// current one is applied and committed, and cuts batches at the
	// trigger's limits even inside a poll's records. The source, decoder and
	// normalizer are then used on Run's goroutine while the tables are used
	// on the batch's: a source that reads tables (pipeline.Gated) must not
	// overlap.
	Overlap bool
	// MaxHeldBytes bounds the key+value bytes of the records the runner
	// holds with Overlap: the batch being applied plus the one being read
	// (polling stops at the budget and waits for the batch; one poll may
	// overshoot it by a poll's records). Default 2 × Trigger.MaxBytes; never
	// below Trigger.MaxBytes. Decoded records cost a few times their bytes.
	MaxHeldBytes int64
	// DecodeWorkers is how many goroutines decode a poll's records with
	// Overlap (normalizing stays sequential). Default GOMAXPROCS.
	DecodeWorkers int
	// AfterBatch runs after every successful batch (e.g. commit consumer
	// group offsets, print progress), on the batch's goroutine, before the
	// next batch starts. An error stops the runner.
	AfterBatch func(ctx context.Context, recs []*source.Record, rep *Report) error
	// OnIdle, if set, runs on Run's goroutine (no batch in flight) after a
	// poll that returned nothing while nothing was buffered.
	OnIdle func()
	// ShutdownGrace bounds how long the batches held may take to finish
	// after ctx is cancelled (SIGTERM): the one in flight and the one
	// buffered, together. Default 30s.
	ShutdownGrace time.Duration
	// OnError is told about each failed batch before the runner retries it
	// (transient) or stops (permanent). May be nil.
	OnError func(err error)
	// Reseek is called when a batch was fenced (merge.ErrFenced: another
	// instance advanced these partitions while this one held records of
	// them). The runner has dropped every record of them; Reseek must move
	// the source back to the table's offsets for those still assigned (and
	// leave the others to their new owner). It runs on Run's goroutine
	// after the rest of the batch was applied, before anything more is
	// polled. Nil: the fenced records are dropped and nothing is re-read
	// (only right for a source that cannot seek and has no other writer).
	Reseek func(ctx context.Context, tps []merge.TP) error

	mu       sync.Mutex
	buf      []*source.Record
	bufBytes int64
	staged   map[*source.Record]staged // Overlap: buf's records read ahead
	partial  bool                      // staging stopped (ctx ended): the rest of buf is not staged
	fenced   []merge.TP                // set by a fenced batch, re-seeked by Run's goroutine
	cur      *inflight                 // the batch being applied
}

// inflight is a batch being applied.
type inflight struct {
	bytes int64
	done  chan struct{}
	err   error // set before done is closed
}

// overlapPoll bounds a poll while a batch is in flight, so that the next
// batch starts soon after it ends.
const overlapPoll = 20 * time.Millisecond

// pollRecords bounds the records one Poll returns.
const pollRecords = 4096

// Revoke drops buffered records of partitions this process no longer owns.
// Dropping is safe: the new owner resumes from the offsets in the table.
// A caller on a rebalance callback first calls Quiesce: a batch in flight
// may hold records of them.
func (r *Runner) Revoke(tps []source.TopicPartition) {
	r.mu.Lock()
	defer r.mu.Unlock()
	gone := map[source.TopicPartition]bool{}
	for _, tp := range tps {
		gone[tp] = true
	}
	r.dropLocked(func(rec *source.Record) bool {
		return gone[source.TopicPartition{Topic: rec.Topic, Partition: rec.Partition}]
	})
}

func (r *Runner) dropLocked(drop func(*source.Record) bool) {
	kept := r.buf[:0]
	for _, rec := range r.buf {
		if !drop(rec) {
			kept = append(kept, rec)
			continue
		}
		r.bufBytes -= int64(len(rec.Key) + len(rec.Value))
		delete(r.staged, rec)
	}
	clear(r.buf[len(kept):])
	r.buf = kept
}

// Quiesce waits until no batch is being applied (its commit and AfterBatch
// done). Rebalance callbacks, which run inside Poll on Run's goroutine while
// a batch may be in flight (Overlap), call it before they read or change
// tables or drop records. It does not report the batch's outcome: Run does.
func (r *Runner) Quiesce() {
	r.mu.Lock()
	c := r.cur
	r.mu.Unlock()
	if c != nil {
		<-c.done
	}
}

// Run consumes until the source is exhausted (io.EOF: returns nil), ctx is
// cancelled (the batches held are finished within ShutdownGrace, then nil),
// or a batch fails permanently (returned).
func (r *Runner) Run(ctx context.Context) error {
	r.Trigger.defaults()
	if r.ShutdownGrace <= 0 {
		r.ShutdownGrace = 30 * time.Second
	}
	if r.MaxHeldBytes <= 0 {
		r.MaxHeldBytes = 2 * r.Trigger.MaxBytes
	}
	r.MaxHeldBytes = max(r.MaxHeldBytes, r.Trigger.MaxBytes)
	if r.DecodeWorkers <= 0 {
		r.DecodeWorkers = runtime.GOMAXPROCS(0)
	}
	// Batches finish even if ctx is cancelled while they run (SIGTERM
	// mid-batch): together they get ShutdownGrace from the cancellation on.
	bctx, cancel := graceContext(ctx, r.ShutdownGrace)
	defer cancel()
	// Never return with a batch running: it ends by the grace at the latest.
	defer r.Quiesce()
	var (
		first time.Time
		eof   bool
	)
	for {
		if err := r.collect(bctx, false); err != nil {
			return err
		}
		r.mu.Lock()
		n, bytes, busy := len(r.buf), r.bufBytes, r.cur
		r.mu.Unlock()
		stopping := eof || ctx.Err() != nil
		full := n >= r.Trigger.MaxRecords || bytes >= r.Trigger.MaxBytes
		if busy != nil {
			if !r.Overlap || stopping || full || busy.bytes+bytes >= r.MaxHeldBytes {
				if err := r.collect(bctx, true); err != nil {
					return err
				}
				continue
			}
		} else {
			if n > 0 && (full || time.Since(first) >= r.Trigger.MaxInterval || stopping) {
				r.start(bctx)
				continue
			}
			if stopping {
				return nil
			}
		}
		wait := r.Trigger.MaxInterval
		if n > 0 {
			wait = max(r.Trigger.MaxInterval-time.Since(first), time.Millisecond)
		}
		if busy != nil {
			wait = min(wait, overlapPoll)
		}
		// polls of at most pollRecords, so that the byte limits cut batches
		// (a file reader returns all it is asked for at once)
		recs, err := r.Src.Poll(ctx, min(r.Trigger.MaxRecords-n, pollRecords), wait)
		switch {
		case errors.Is(err, io.EOF):
			eof = true
		case err != nil && ctx.Err() != nil:
			// shutting down: finish what is held
		case err != nil:
			return err
		}
		if len(recs) == 0 && n == 0 && busy == nil && r.OnIdle != nil {
			r.OnIdle()
		}
		if len(recs) > 0 {
			r.add(ctx, recs, &first)
		}
	}
}

// add buffers polled records, staging them first with Overlap.
func (r *Runner) add(ctx context.Context, recs []*source.Record, first *time.Time) {
	r.mu.Lock()
	partial := r.partial
	r.mu.Unlock()
	var st []staged
	if r.Overlap && !partial {
		// outside the lock, which the batch's goroutine takes when fenced
		st = r.P.stageAll(ctx, recs, r.DecodeWorkers)
		// stream order: nothing after an unstaged record is staged
		partial = len(st) < len(recs)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.buf) == 0 {
		*first = time.Now()
	}
	if len(st) > 0 && r.staged == nil {
		r.staged = make(map[*source.Record]staged, r.Trigger.MaxRecords)
	}
	for i, rec := range recs {
		if i < len(st) {
			r.staged[rec] = st[i]
		}
		r.bufBytes += int64(len(rec.Key) + len(rec.Value))
	}
	r.buf = append(r.buf, recs...)
	r.partial = partial
}

// start hands the buffered records to a new batch goroutine. With Overlap,
// as many as the trigger allows (at least one): a poll's records past its
// limits stay buffered for the next batch. Without, all of them: a source
// that does not overlap may need each poll applied whole (the transaction
// gate's watermark covers exactly what it released).
func (r *Runner) start(bctx context.Context) {
	r.mu.Lock()
	n, bytes := len(r.buf), r.bufBytes
	if r.Overlap {
		n, bytes = 0, 0
		for n < len(r.buf) && n < r.Trigger.MaxRecords && (n == 0 || bytes < r.Trigger.MaxBytes) {
			bytes += int64(len(r.buf[n].Key) + len(r.buf[n].Value))
			n++
		}
	}
	recs, pre := r.buf[:n:n], r.staged
	c := &inflight{bytes: bytes, done: make(chan struct{})}
	if n == len(r.buf) {
		r.buf, r.staged, r.bufBytes, r.partial = nil, nil, 0, false
	} else {
		rest := append([]*source.Record(nil), r.buf[n:]...)
		var restStaged map[*source.Record]staged
		if pre != nil {
			restStaged = make(map[*source.Record]staged, max(len(rest), r.Trigger.MaxRecords))
			for _, rec := range rest {
				if st, ok := pre[rec]; ok {
					restStaged[rec] = st
					delete(pre, rec)
				}
			}
		}
		r.buf, r.staged, r.bufBytes = rest, restStaged, r.bufBytes-bytes
	}
	r.cur = c
	r.mu.Unlock()
	go func() {
		defer close(c.done)
		c.err = r.flush(bctx, recs, pre)
	}()
}

// collect takes the outcome of the batch in flight once it has ended
// (waiting for it if block), then re-seeks the partitions it was fenced on.
func (r *Runner) collect(bctx context.Context, block bool) error {
	r.mu.Lock()
	c := r.cur
	r.mu.Unlock()
	if c == nil {
		return nil
	}
	if block {
		<-c.done
	} else {
		select {
		case <-c.done:
		default:
			return nil
		}
	}
	r.mu.Lock()
	r.cur = nil
	tps := r.fenced
	r.fenced = nil
	if len(tps) > 0 {
		// Records of them polled meanwhile follow the dropped ones: re-read
		// from the table's offsets instead.
		gone := map[merge.TP]bool{}
		for _, tp := range tps {
			gone[tp] = true
		}
		r.dropLocked(func(rec *source.Record) bool { return gone[merge.TP{Topic: rec.Topic, Partition: rec.Partition}] })
	}
	r.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	if len(tps) > 0 && r.Reseek != nil {
		if err := r.Reseek(bctx, tps); err != nil {
			return fmt.Errorf("re-seek fenced partitions: %w", err)
		}
	}
	return nil
}

// flush applies one batch, retrying transient failures, on the batch's
// goroutine.
func (r *Runner) flush(bctx context.Context, recs []*source.Record, pre map[*source.Record]staged) error {
	back := r.P.cfg.MinBackoff
	for {
		rep, err := r.P.process(bctx, recs, pre)
		if err == nil {
			if r.AfterBatch != nil {
				return r.AfterBatch(bctx, recs, rep)
			}
			return nil
		}
		var fe *merge.FencedError
		if errors.As(err, &fe) {
			// Never re-planned on top of the new owner's commits: the fenced
			// partitions' records are dropped (and re-read from the table's
			// offsets if still ours: Run re-seeks them); the other
			// partitions' records go on.
			recs = dropFenced(recs, fe)
			r.mu.Lock()
			r.fenced = append(r.fenced, fe.Sorted()...)
			r.mu.Unlock()
			r.P.cfg.Logger.Warn("batch fenced: another instance advanced partitions of it; re-reading them from the table",
				"err", err, "records_kept", len(recs))
			if len(recs) == 0 {
				return nil
			}
			continue
		}
		if r.OnError != nil {
			r.OnError(err)
		}
		if !isRetryable(err) || bctx.Err() != nil {
			return err
		}
		r.P.cfg.Logger.Warn("batch failed, retrying", "records", len(recs), "err", err, "backoff", back)
		select {
		case <-bctx.Done():
			return err
		case <-time.After(back):
		}
		back = min(back*2, r.P.cfg.MaxBackoff)
	}
}

// dropFenced removes the fenced partitions' records from recs.
func dropFenced(recs []*source.Record, fe *merge.FencedError) []*source.Record {
	kept := make([]*source.Record, 0, len(recs))
	for _, rec := range recs {
		if _, gone := fe.Partitions[merge.TP{Topic: rec.Topic, Partition: rec.Partition}]; !gone {
			kept = append(kept, rec)
		}
	}
	return kept
}

// graceContext returns a context that is not cancelled with ctx but
// grace after it (or by the returned cancel).
func graceContext(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var (
		mu    sync.Mutex
		timer *time.Timer
	)
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		timer = time.AfterFunc(grace, cancel)
	})
	return bctx, func() {
		stop()
		mu.Lock()
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancel()
	}
}

// isRetryable: transient, and not already retried for its budget below
// (pipeline apply) or given up on by merge (never transient).
func isRetryable(err error) bool {
	return quarantine.IsTransient(err) && !errors.Is(err, ErrRetriesExhausted)
}
