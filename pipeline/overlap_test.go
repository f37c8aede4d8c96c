package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/internal/dbzgen"
	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/source"
)

// eventLog is a log of what happened, in order, from several goroutines.
type eventLog struct {
	mu sync.Mutex
	ev []string
}

func (l *eventLog) add(format string, a ...any) {
	l.mu.Lock()
	l.ev = append(l.ev, fmt.Sprintf(format, a...))
	l.mu.Unlock()
}

func (l *eventLog) index(e string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, x := range l.ev {
		if x == e {
			return i
		}
	}
	return -1
}

// loggedSource hands out one record per Poll and logs each Poll.
type loggedSource struct {
	recs []*source.Record
	log  *eventLog
}

func (s *loggedSource) Poll(context.Context, int, time.Duration) ([]*source.Record, error) {
	if len(s.recs) == 0 {
		return nil, io.EOF
	}
	r := s.recs[0]
	s.recs = s.recs[1:]
	s.log.add("poll %d", r.Offset)
	return []*source.Record{r}, nil
}

// signalDecoder logs each decode and signals when offset `at` is decoded.
type signalDecoder struct {
	log  *eventLog
	at   int64
	seen chan struct{}
}

func (d *signalDecoder) Decode(_ context.Context, r *source.Record) (*envelope.Event, error) {
	d.log.add("decode %d", r.Offset)
	if r.Offset == d.at {
		close(d.seen)
	}
	return &envelope.Event{Kind: envelope.KindChange, Op: 'u'}, nil
}

// blockingTable blocks its first Apply until release is closed.
type blockingTable struct {
	fakeTable
	log     *eventLog
	started chan struct{} // closed when the first Apply starts
	release chan struct{}
	n       int
}

func (t *blockingTable) Apply(ctx context.Context, b *merge.Batch, reject func(context.Context, int64, []merge.Reject) error) (*merge.Result, error) {
	t.n++
	t.log.add("apply %d start", t.n)
	if t.n == 1 {
		close(t.started)
		<-t.release
	}
	res, err := t.fakeTable.Apply(ctx, b, reject)
	t.log.add("apply %d end", t.n)
	return res, err
}

// TestRunnerOverlap: while batch 1 is being applied (its Apply blocked), an
// overlapping runner polls and decodes the next records, up to the trigger
// and the byte budget, and no further; a runner without Overlap polls
// nothing until batch 1 is done. Batches are applied in order, each once,
// with offsets that only advance.
func TestRunnerOverlap(t *testing.T) {
	for _, tc := range []struct {
		name     string
		overlap  bool
		maxBytes int64 // Trigger.MaxBytes: every record is 10 bytes
		held     int64 // MaxHeldBytes
		ahead    int   // records read while batch 1 is applied
	}{
		{"overlap, cut by the trigger", true, 30, 0, 3},
		{"overlap, cut by the byte budget", true, 30, 50, 2},
		{"no overlap", false, 30, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := &eventLog{}
			var recs []*source.Record
			for i := range 9 {
				recs = append(recs, rec("t", int64(i), fmt.Sprintf("k%d", i), "value---"))
			}
			dec := &signalDecoder{log: log, at: int64(3 + tc.ahead - 1), seen: make(chan struct{})}
			var events []string
			tb := &blockingTable{fakeTable: fakeTable{next: map[merge.TP]int64{}, events: &events}, log: log,
				started: make(chan struct{}), release: make(chan struct{})}
			p := New(Config{Sink: "s", Decoder: dec, Normalizer: fakeNorm{}, Quarantine: &memQuarantine{events: &events},
				Route: func(context.Context, string) (Table, string, bool, error) { return tb, "tbl", true, nil }})
			var after []int64
			r := &Runner{P: p, Src: &loggedSource{recs: recs, log: log}, Overlap: tc.overlap, MaxHeldBytes: tc.held,
				Trigger: Trigger{MaxRecords: 100, MaxBytes: tc.maxBytes, MaxInterval: time.Hour},
				AfterBatch: func(_ context.Context, recs []*source.Record, _ *Report) error {
					after = append(after, recs[len(recs)-1].Offset)
					return nil
				}}
			done := make(chan error, 1)
			go func() { done <- r.Run(context.Background()) }()
			if tc.ahead > 0 {
				select {
				case <-dec.seen: // the last record the runner may read ahead is decoded
				case err := <-done:
					t.Fatalf("runner ended (%v) before reading ahead", err)
				case <-time.After(20 * time.Second):
					t.Fatal("the runner did not read ahead while batch 1 was applied")
				}
			} else {
				select {
				case <-tb.started:
				case err := <-done:
					t.Fatalf("runner ended (%v) before applying", err)
				}
			}
			log.add("release")
			close(tb.release)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			rel := log.index("release")
			// every poll before the release happened while batch 1 was applied or before
			var ahead int
			for i := 3; i < 9; i++ {
				if j := log.index(fmt.Sprintf("poll %d", i)); j >= 0 && j < rel {
					ahead++
				}
			}
			if ahead != tc.ahead {
				t.Fatalf("%d records polled while batch 1 was applied, want %d; log %v", ahead, tc.ahead, log.ev)
			}
			if len(tb.applied) != 3 || fmt.Sprint(after) != "[2 5 8]" {
				t.Fatalf("batches ending at %v (%d applied), want [2 5 8]", after, len(tb.applied))
			}
			for i, b := range tb.applied {
				if o := b.Offsets[merge.TP{Topic: "t"}]; o != int64(3*i+3) {
					t.Fatalf("batch %d commits offset %d, want %d", i, o, 3*i+3)
				}
			}
			// every record decoded once: staged records are not decoded again
			for i := range 9 {
				n := 0
				for _, e := range log.ev {
					if e == fmt.Sprintf("decode %d", i) {
						n++
					}
				}
				if n != 1 {
					t.Fatalf("record %d decoded %d times", i, n)
				}
			}
		})
	}
}

// seekSource reads a stream from per-partition start offsets, 20 records
// per Poll, as a consumer seeked to a table's offsets does.
type seekSource struct {
	recs    []*source.Record
	mu      sync.Mutex
	read    int
	changed chan struct{} // closed and replaced by every Poll
}

func newSeekSource(all []*source.Record, next func(p int32) int64) *seekSource {
	s := &seekSource{changed: make(chan struct{})}
	for _, r := range all {
		if r.Offset >= next(r.Partition) {
			s.recs = append(s.recs, r)
		}
	}
	return s
}

func (s *seekSource) Poll(context.Context, int, time.Duration) ([]*source.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.read >= len(s.recs) {
		return nil, io.EOF
	}
	n := min(20, len(s.recs)-s.read)
	out := s.recs[s.read : s.read+n]
	s.read += n
	close(s.changed)
	s.changed = make(chan struct{})
	return out, nil
}

// waitFor reports whether n records (or all) were read within timeout.
func (s *seekSource) waitFor(n int, timeout time.Duration) bool {
	deadline := time.After(timeout)
	for {
		s.mu.Lock()
		read, ch := s.read, s.changed
		s.mu.Unlock()
		if read >= min(n, len(s.recs)) {
			return true
		}
		select {
		case <-ch:
		case <-deadline:
			return false
		}
	}
}

// crashStore fails the n-th commit (log entry) permanently, before or after
// writing it, once ready says the runner has read the next batch.
type crashStore struct {
	delta.Storage
	n        int
	after    bool
	ready    func() bool
	mu       sync.Mutex
	commits  int
	fired    bool
	notReady bool
}

var errCrash = &fs.PathError{Op: "put", Path: "_delta_log", Err: fs.ErrPermission}

func (s *crashStore) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	if !strings.HasPrefix(key, "_delta_log/") || !strings.HasSuffix(key, ".json") {
		return s.Storage.PutIfAbsent(ctx, key, data)
	}
	s.mu.Lock()
	s.commits++
	fire := s.commits == s.n
	s.mu.Unlock()
	if !fire {
		return s.Storage.PutIfAbsent(ctx, key, data)
	}
	// The crash comes while batch N+1 is in flight: wait until it is read.
	ready := s.ready()
	s.mu.Lock()
	s.fired, s.notReady = true, !ready
	s.mu.Unlock()
	if s.after {
		if err := s.Storage.PutIfAbsent(ctx, key, data); err != nil {
			return err
		}
	}
	return errCrash
}

// TestRunnerCrashWhileNextBatchInFlight: the process dies (a permanent
// failure stops the runner, and nothing it held survives) while batch N is
// committed — before its log entry is written, or after — and batch N+1 has
// been read, decoded and normalized. A new process resumes from the table's
// offsets and the table ends equal to an uninterrupted run's, every change
// applied once.
func TestRunnerCrashWhileNextBatchInFlight(t *testing.T) {
	s := dbzgen.Generate(dbzgen.Config{Seed: 21, Prefix: "loja", Schema: "public", Table: "orders", Partitions: 2,
		Keys: 60, Events: 500, SnapshotRows: 40, Tombstones: true, TxSize: 4, ToastEvery: 7})
	want, _, _, err := runOnStore(t, s, delta.NewMemStorage())
	if err != nil {
		t.Fatal(err)
	}
	want = stripBatchColumns(want)
	const batch = 40
	for _, tc := range []struct {
		commit int
		after  bool
	}{{1, false}, {3, false}, {3, true}, {6, true}, {9, false}} {
		t.Run(fmt.Sprintf("commit %d, after=%v", tc.commit, tc.after), func(t *testing.T) {
			ctx := context.Background()
			mem := delta.NewMemStorage()
			run := func(store delta.Storage) (*merge.Table, *seekSource, error) {
				norm, err := normalize.New(normalize.Options{})
				if err != nil {
					t.Fatal(err)
				}
				tb, err := merge.Open(ctx, "mem://orders", merge.Options{Sink: "s", Storage: store, Now: func() time.Time { return time.Unix(1e9, 0) }})
				if err != nil {
					t.Fatal(err)
				}
				var events []string
				p := New(Config{Sink: "s", Decoder: envelope.NewDecoder(envelope.Options{}), Normalizer: norm,
					Quarantine: &memQuarantine{events: &events}, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond,
					Route: func(context.Context, string) (Table, string, bool, error) { return tb, "orders", true, nil }})
				src := newSeekSource(s.Records, func(p int32) int64 { o, _ := tb.NextOffset(s.Topic, p); return o })
				var done atomic.Int64
				if cs, ok := store.(*crashStore); ok {
					// batch N is the one committing: N+1 is read when the
					// records of the batches done, N and N+1 are
					cs.ready = func() bool { return src.waitFor(int(done.Load()+2)*batch, 20*time.Second) }
				}
				r := &Runner{P: p, Src: src, Overlap: true, Trigger: Trigger{MaxRecords: batch, MaxInterval: time.Hour},
					AfterBatch: func(context.Context, []*source.Record, *Report) error { done.Add(1); return nil }}
				return tb, src, r.Run(ctx)
			}
			cs := &crashStore{Storage: mem, n: tc.commit, after: tc.after}
			_, _, err := run(cs)
			if !errors.Is(err, fs.ErrPermission) {
				t.Fatalf("run: %v, want the injected crash", err)
			}
			if !cs.fired || cs.notReady {
				t.Fatalf("crash fired=%v, next batch read before it=%v", cs.fired, !cs.notReady)
			}
			// restart: a new process on the same storage
			tb, _, err := run(mem)
			if err != nil {
				t.Fatalf("restart: %v", err)
			}
			for p := int32(0); p < 2; p++ {
				if o, _ := tb.NextOffset(s.Topic, p); o != int64(len(s.Partition(p))) {
					t.Fatalf("partition %d at %d after the restart, want %d", p, o, len(s.Partition(p)))
				}
			}
			got, err := tb.Rows(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got = stripBatchColumns(got); !reflect.DeepEqual(got, want) {
				t.Fatalf("table after crash and restart (%d rows) differs from the uninterrupted run's (%d rows)", len(got), len(want))
			}
		})
	}
}
