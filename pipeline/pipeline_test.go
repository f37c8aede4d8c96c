package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/cdcsink/cdc-sink/source"
	"github.com/cdcsink/cdc-sink/versioning"
)

// fakeDecoder: value "bad" is malformed, "hb" a heartbeat, "flaky" fails
// transiently the first time, anything else a change keyed by the value.
type fakeDecoder struct{ flaky int }

func (d *fakeDecoder) Decode(_ context.Context, r *source.Record) (*envelope.Event, error) {
	switch string(r.Value) {
	case "bad":
		return nil, quarantine.Errorf(quarantine.MalformedJSON, "offset %d: not JSON", r.Offset)
	case "hb":
		return &envelope.Event{Kind: envelope.KindHeartbeat}, nil
	case "flaky":
		d.flaky++
		if d.flaky == 1 {
			return nil, quarantine.Transient(errors.New("registry down"))
		}
	}
	return &envelope.Event{Kind: envelope.KindChange, Op: 'u'}, nil
}

type fakeNorm struct{}

func (fakeNorm) Normalize(_ *envelope.Event, r *source.Record) (*normalize.Change, error) {
	return &normalize.Change{Op: normalize.OpUpsert, SourceOp: 'u', KeyNames: []string{"k"}, Key: []any{string(r.Key)},
		Position: versioning.Position{HasLSN: true, LSN: uint64(r.Offset + 1)},
		Coord:    normalize.Coord{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}}, nil
}

// fakeTable records what it is asked to apply and calls reject first, as
// merge.Table does.
type fakeTable struct {
	next     map[merge.TP]int64
	applied  []*merge.Batch
	events   *[]string
	fail     error
	always   error // returned by every Apply (counted in attempts)
	attempts int
}

func (t *fakeTable) NextOffset(topic string, p int32) (int64, bool) {
	o, ok := t.next[merge.TP{Topic: topic, Partition: p}]
	return o, ok
}
func (t *fakeTable) TrackerState() []versioning.PartitionState { return nil }
func (t *fakeTable) Apply(ctx context.Context, b *merge.Batch, reject func(context.Context, int64, []merge.Reject) error) (*merge.Result, error) {
	if err := reject(ctx, 7, nil); err != nil {
		return nil, err
	}
	if t.always != nil {
		t.attempts++
		return nil, t.always
	}
	if t.fail != nil {
		err := t.fail
		t.fail = nil
		return nil, err
	}
	*t.events = append(*t.events, "commit")
	t.applied = append(t.applied, b)
	for tp, o := range b.Offsets {
		t.next[tp] = o
	}
	return &merge.Result{Committed: true}, nil
}

type memQuarantine struct {
	entries []quarantine.Entry
	events  *[]string
	fails   int
}

func (q *memQuarantine) Write(_ context.Context, es []quarantine.Entry) error {
	if q.fails > 0 {
		q.fails--
		return quarantine.Transient(errors.New("quarantine topic unavailable"))
	}
	q.entries = append(q.entries, es...)
	*q.events = append(*q.events, fmt.Sprintf("quarantine %d", len(es)))
	return nil
}
func (q *memQuarantine) Close() error { return nil }

func rec(topic string, off int64, key, val string) *source.Record {
	return &source.Record{Topic: topic, Offset: off, Key: []byte(key), Value: []byte(val)}
}

func newTest(t *testing.T) (*Pipeline, *fakeTable, *memQuarantine) {
	var events []string
	tb := &fakeTable{next: map[merge.TP]int64{}, events: &events}
	q := &memQuarantine{events: &events}
	p := New(Config{Sink: "s", Decoder: &fakeDecoder{}, Normalizer: fakeNorm{}, Quarantine: q,
		MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond,
		Route: func(_ context.Context, topic string) (Table, string, bool, error) {
			if topic == "__debezium-heartbeat.x" {
				return nil, "", false, nil
			}
			return tb, "tbl", true, nil
		}})
	return p, tb, q
}

func TestProcessQuarantinesBeforeCommitAndCountsEverything(t *testing.T) {
	p, tb, q := newTest(t)
	recs := []*source.Record{rec("t", 0, "a", "x"), rec("t", 1, "b", "bad"), rec("t", 2, "c", "hb"),
		rec("__debezium-heartbeat.x", 0, "", "hb"), rec("__debezium-heartbeat.x", 1, "", "oops"), rec("t", 3, "a", "flaky")}
	rep, err := p.Process(context.Background(), recs)
	if err != nil {
		t.Fatal(err)
	}
	if got := *tb.events; len(got) != 3 || got[0] != "quarantine 1" || got[1] != "quarantine 1" || got[2] != "commit" {
		t.Fatalf("event order %v: quarantine writes must precede the commit", got)
	}
	if len(q.entries) != 2 || q.entries[0].Reason != quarantine.UnknownTable || q.entries[1].Reason != quarantine.MalformedJSON {
		t.Fatalf("quarantine %+v", q.entries)
	}
	if q.entries[1].BatchID != 7 || q.entries[1].Message != "offset 1: not JSON" {
		t.Errorf("entry %+v: batch id from merge, message without the class prefix", q.entries[1])
	}
	b := tb.applied[0]
	if len(b.Changes) != 2 || b.Offsets[merge.TP{Topic: "t"}] != 4 {
		t.Fatalf("batch changes=%d offsets=%v: the offset covers skipped and quarantined records", len(b.Changes), b.Offsets)
	}
	if b.Changes[0].Version.LSN != 1 || b.Changes[1].Version.LSN != 4 {
		t.Errorf("versions not assigned: %+v %+v", b.Changes[0].Version, b.Changes[1].Version)
	}
	if rep.Ignored != 2 || rep.Quarantined[quarantine.MalformedJSON] != 1 || rep.Records != 6 {
		t.Errorf("report %+v", rep)
	}
	// The same records again: all covered by the table's offsets, no work.
	rep, err = p.Process(context.Background(), recs[:3])
	if err != nil {
		t.Fatal(err)
	}
	if rep.AlreadyDone != 3 || len(tb.applied) != 1 {
		t.Errorf("re-process: alreadyDone=%d applies=%d", rep.AlreadyDone, len(tb.applied))
	}
}

func TestProcessRetriesTransientQuarantineAndApply(t *testing.T) {
	p, tb, q := newTest(t)
	q.fails = 2
	tb.fail = quarantine.Transient(errors.New("storage hiccup"))
	if _, err := p.Process(context.Background(), []*source.Record{rec("t", 0, "a", "bad"), rec("t", 1, "b", "x")}); err != nil {
		t.Fatal(err)
	}
	if len(tb.applied) != 1 || len(q.entries) == 0 {
		t.Fatalf("applied=%d quarantined=%d", len(tb.applied), len(q.entries))
	}
	// A RetryObserver hears of the transient apply failure it retried.
	ro := &retryObs{}
	p.cfg.Observer = ro
	tb.fail = quarantine.Transient(errors.New("store unreachable"))
	if _, err := p.Process(context.Background(), []*source.Record{rec("t", 2, "b", "y")}); err != nil {
		t.Fatal(err)
	}
	if len(ro.retried) != 1 || ro.retried[0] != "tbl: transient: store unreachable" || ro.done != 1 {
		t.Errorf("observer heard retries %q and %d batches, want one retry of tbl and one batch", ro.retried, ro.done)
	}
	p.cfg.Observer = nil
	// A permanent apply failure is returned, nothing acknowledged.
	tb.fail = errors.New("corrupt table")
	if _, err := p.Process(context.Background(), []*source.Record{rec("t", 3, "c", "x")}); err == nil {
		t.Fatal("permanent failure swallowed")
	}
	if o, _ := tb.NextOffset("t", 0); o != 3 {
		t.Errorf("offset advanced to %d past a failed batch", o)
	}
}

type retryObs struct {
	retried []string
	done    int
}

func (o *retryObs) BatchDone(*Report) { o.done++ }
func (o *retryObs) ApplyRetried(table string, err error) {
	o.retried = append(o.retried, table+": "+err.Error())
}

type sliceSource struct{ batches [][]*source.Record }

func (s *sliceSource) Poll(context.Context, int, time.Duration) ([]*source.Record, error) {
	if len(s.batches) == 0 {
		return nil, io.EOF
	}
	b := s.batches[0]
	s.batches = s.batches[1:]
	return b, nil
}

func TestRunnerCutsBatchesAndDropsRevoked(t *testing.T) {
	p, tb, _ := newTest(t)
	var seen int
	r := &Runner{P: p, Trigger: Trigger{MaxRecords: 3, MaxInterval: time.Hour},
		Src: &sliceSource{batches: [][]*source.Record{{rec("t", 0, "a", "x"), rec("t", 1, "b", "x")},
			{rec("t", 2, "c", "x"), rec("u", 0, "d", "x")}, {rec("t", 3, "e", "x")}}},
		AfterBatch: func(_ context.Context, recs []*source.Record, _ *Report) error { seen += len(recs); return nil }}
	if err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if seen != 5 || len(tb.applied) != 2 {
		t.Fatalf("seen=%d batches=%d", seen, len(tb.applied))
	}
	r.buf = []*source.Record{rec("t", 9, "x", "x"), rec("u", 9, "y", "x")}
	r.Revoke([]source.TopicPartition{{Topic: "u"}})
	if len(r.buf) != 1 || r.buf[0].Topic != "t" {
		t.Fatalf("revoke left %v", r.buf)
	}
}
