package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
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
type Runner struct {
	P       *Pipeline
	Src     Poller
	Trigger Trigger
	// AfterBatch runs after every successful batch (e.g. commit consumer
	// group offsets, print progress). An error stops the runner.
	AfterBatch func(ctx context.Context, recs []*source.Record, rep *Report) error
	// OnIdle, if set, runs on Run's goroutine (no batch in flight) after a
	// poll that returned nothing while nothing was buffered.
	OnIdle func()
	// ShutdownGrace bounds how long the buffered batch may take to finish
	// after ctx is cancelled (SIGTERM). Default 30s.
	ShutdownGrace time.Duration
	// OnError is told about each failed batch before the runner retries it
	// (transient) or stops (permanent). May be nil.
	OnError func(err error)
	// Reseek is called when a batch was fenced (merge.ErrFenced: another
	// instance advanced these partitions while this one held records of
	// them). The runner has dropped every record of them; Reseek must move
	// the source back to the table's offsets for those still assigned (and
	// leave the others to their new owner). The rest of the batch is then
	// applied. Nil: the fenced records are dropped and nothing is re-read
	// (only right for a source that cannot seek and has no other writer).
	Reseek func(ctx context.Context, tps []merge.TP) error

	mu  sync.Mutex
	buf []*source.Record
}

// Revoke drops buffered records of partitions this process no longer owns.
// Dropping is safe: the new owner resumes from the offsets in the table.
func (r *Runner) Revoke(tps []source.TopicPartition) {
	r.mu.Lock()
	defer r.mu.Unlock()
	gone := map[source.TopicPartition]bool{}
	for _, tp := range tps {
		gone[tp] = true
	}
	kept := r.buf[:0]
	for _, rec := range r.buf {
		if !gone[source.TopicPartition{Topic: rec.Topic, Partition: rec.Partition}] {
			kept = append(kept, rec)
		}
	}
	for i := len(kept); i < len(r.buf); i++ {
		r.buf[i] = nil
	}
	r.buf = kept
}

// Run consumes until the source is exhausted (io.EOF: returns nil), ctx is
// cancelled (the buffered batch is finished within ShutdownGrace, then nil),
// or a batch fails permanently (returned).
func (r *Runner) Run(ctx context.Context) error {
	r.Trigger.defaults()
	if r.ShutdownGrace <= 0 {
		r.ShutdownGrace = 30 * time.Second
	}
	var (
		first time.Time
		bytes int64
		eof   bool
	)
	for {
		r.mu.Lock()
		n := len(r.buf)
		r.mu.Unlock()
		due := n > 0 && (n >= r.Trigger.MaxRecords || bytes >= r.Trigger.MaxBytes ||
			time.Since(first) >= r.Trigger.MaxInterval || eof || ctx.Err() != nil)
		if due {
			if err := r.flush(ctx); err != nil {
				return err
			}
			bytes = 0
			continue
		}
		if eof || ctx.Err() != nil {
			return nil
		}
		wait := r.Trigger.MaxInterval
		if n > 0 {
			wait = max(r.Trigger.MaxInterval-time.Since(first), time.Millisecond)
		}
		recs, err := r.Src.Poll(ctx, r.Trigger.MaxRecords-n, wait)
		switch {
		case errors.Is(err, io.EOF):
			eof = true
		case err != nil && ctx.Err() != nil:
			// shutting down: finish what is buffered
		case err != nil:
			return err
		}
		if len(recs) == 0 && n == 0 && r.OnIdle != nil {
			r.OnIdle()
		}
		if len(recs) > 0 {
			r.mu.Lock()
			if len(r.buf) == 0 {
				first = time.Now()
			}
			r.buf = append(r.buf, recs...)
			r.mu.Unlock()
			for _, rec := range recs {
				bytes += int64(len(rec.Key) + len(rec.Value))
			}
		}
	}
}

// flush processes the buffered records as one batch, retrying transient
// failures; once ctx is cancelled (before or during the batch) it gets
// ShutdownGrace to finish.
func (r *Runner) flush(ctx context.Context) error {
	r.mu.Lock()
	recs := r.buf
	r.buf = nil
	r.mu.Unlock()
	// A batch is finished even if ctx is cancelled while it runs (SIGTERM
	// mid-batch): it gets ShutdownGrace from the cancellation on.
	bctx, cancel := graceContext(ctx, r.ShutdownGrace)
	defer cancel()
	back := r.P.cfg.MinBackoff
	for {
		rep, err := r.P.Process(bctx, recs)
		if err == nil {
			if r.AfterBatch != nil {
				return r.AfterBatch(bctx, recs, rep)
			}
			return nil
		}
		var fe *merge.FencedError
		if errors.As(err, &fe) {
			// Never re-planned on top of the new owner's commits: the fenced
			// partitions' records are dropped and re-read from the table's
			// offsets (if still ours); the other partitions' records go on.
			recs = r.dropFenced(recs, fe)
			r.P.cfg.Logger.Warn("batch fenced: another instance advanced partitions of it; re-reading them from the table",
				"err", err, "records_kept", len(recs))
			if r.Reseek != nil {
				if err := r.Reseek(bctx, fe.Sorted()); err != nil {
					return fmt.Errorf("re-seek fenced partitions: %w", err)
				}
			}
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

// dropFenced removes the fenced partitions' records from recs and from the
// buffer (records polled meanwhile).
func (r *Runner) dropFenced(recs []*source.Record, fe *merge.FencedError) []*source.Record {
	tps := make([]source.TopicPartition, 0, len(fe.Partitions))
	for tp := range fe.Partitions {
		tps = append(tps, source.TopicPartition{Topic: tp.Topic, Partition: tp.Partition})
	}
	r.Revoke(tps)
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
