package pipeline

import (
	"context"
	"fmt"
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/delta/storagetest"
	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/internal/dbzgen"
	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/source"
)

// hookSource delivers batches and runs a hook after handing out each one.
type hookSource struct {
	batches [][]*source.Record
	after   func(i int)
	n       int
}

func (s *hookSource) Poll(context.Context, int, time.Duration) ([]*source.Record, error) {
	if s.n >= len(s.batches) {
		return nil, io.EOF
	}
	b := s.batches[s.n]
	if s.after != nil {
		s.after(s.n)
	}
	s.n++
	return b, nil
}

// TestRunnerFencedBatchReseeks: instance A holds a batch of partitions 0 and
// 1 when instance B takes partition 0 over and commits it to its end. A's
// batch is fenced (never re-planned on top of B's commit): A drops its
// partition 0 records, asks to re-seek partition 0, and applies its
// partition 1 records. The log shows every commit advanced its partitions
// from the offsets the table had, and the table equals a single writer's.
func TestRunnerFencedBatchReseeks(t *testing.T) {
	ctx := context.Background()
	s := dbzgen.Generate(dbzgen.Config{Seed: 13, Prefix: "loja", Schema: "public", Table: "orders", Partitions: 2,
		Keys: 60, Events: 400, SnapshotRows: 40, Tombstones: true, TxSize: 4, ToastEvery: 7})
	want, _, _, err := runOnStore(t, s, delta.NewMemStorage())
	if err != nil {
		t.Fatal(err)
	}
	store := delta.NewMemStorage()
	norm, err := normalize.New(normalize.Options{})
	if err != nil {
		t.Fatal(err)
	}
	newPipeline := func(inst string) *Pipeline {
		var tb *merge.Table
		var events []string
		p := New(Config{Sink: "s", Fence: true, Decoder: envelope.NewDecoder(envelope.Options{}), Normalizer: norm,
			Quarantine: &memQuarantine{events: &events}, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond,
			Route: func(ctx context.Context, _ string) (Table, string, bool, error) {
				if tb == nil {
					t, err := merge.Open(ctx, "mem://orders", merge.Options{Sink: "s", Instance: inst, Storage: store})
					if err != nil {
						return nil, "", false, err
					}
					tb = t
				}
				return tb, "orders", true, nil
			}})
		return p
	}
	pa := newPipeline("A")
	pb := newPipeline("B")
	p0, p1 := s.Partition(0), s.Partition(1)
	h0, h1 := len(p0)/3, len(p1)/3
	if _, err := pa.Process(ctx, append(append([]*source.Record(nil), p0[:h0]...), p1[:h1]...)); err != nil {
		t.Fatal(err)
	}
	held := append(append([]*source.Record(nil), p0[h0:2*h0]...), p1[h1:2*h1]...)
	var reseeks [][]merge.TP
	r := &Runner{P: pa, Trigger: Trigger{MaxRecords: len(held), MaxInterval: time.Hour},
		Src: &hookSource{batches: [][]*source.Record{held, p1[2*h1:]}, after: func(i int) {
			if i == 0 {
				// A was paused holding the batch; B took partition 0 over
				if _, err := pb.Process(ctx, p0[h0:]); err != nil {
					t.Errorf("B: %v", err)
				}
			}
		}},
		Reseek: func(_ context.Context, tps []merge.TP) error { reseeks = append(reseeks, tps); return nil },
	}
	r.Trigger.MaxRecords = len(held)
	if err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(reseeks) != fmt.Sprint([][]merge.TP{{{Topic: s.Topic, Partition: 0}}}) {
		t.Fatalf("re-seeks %v, want partition 0 once", reseeks)
	}
	audit, err := merge.AuditFencing(ctx, store, "s")
	if err != nil {
		t.Fatal(err)
	}
	if len(audit.Violations) > 0 || audit.ByInstance["A"] < 2 || audit.ByInstance["B"] < 1 {
		t.Fatalf("log audit %+v", audit)
	}
	final, err := merge.Open(ctx, "mem://orders", merge.Options{Sink: "s", Storage: store})
	if err != nil {
		t.Fatal(err)
	}
	o0, _ := final.NextOffset(s.Topic, 0)
	o1, _ := final.NextOffset(s.Topic, 1)
	if o0 != int64(len(p0)) || o1 != int64(len(p1)) {
		t.Fatalf("partitions at %d, %d, want %d, %d", o0, o1, len(p0), len(p1))
	}
	got, err := final.Rows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(stripBatchColumns(got), stripBatchColumns(want)) {
		for i := range got {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Fatalf("table differs from a single writer's at row %d:\n got %v\nwant %v", i, got[i], want[i])
			}
		}
		t.Fatalf("table differs from a single writer's: %d rows, want %d", len(got), len(want))
	}
}

// A commit that landed but was reported failed (ambiguous outcome) is
// retried; with fencing the retry finds the partitions already advanced (by
// our own commit) and is fenced instead of re-planned: the records are
// dropped, the partitions re-seeked to where the table is, and the table
// ends identical to an uninterrupted run's (same versions, same rows).
func TestFencedAfterAmbiguousCommit(t *testing.T) {
	ctx := context.Background()
	s := dbzgen.Generate(dbzgen.Config{Seed: 5, Prefix: "loja", Schema: "public", Table: "orders", Partitions: 2,
		Keys: 60, Events: 300, SnapshotRows: 40, Tombstones: true, TxSize: 4, ToastEvery: 7})
	want, wantV, _, err := runOnStore(t, s, delta.NewMemStorage())
	if err != nil {
		t.Fatal(err)
	}
	transient := delta.Transient(fmt.Errorf("response lost: %w", storagetest.ErrInjected))
	f := storagetest.NewFaulty(delta.NewMemStorage(),
		storagetest.Fault{Op: storagetest.OpPutIfAbsent, Pattern: "_delta_log/*.json", After: transient, Skip: 3, Times: 1})
	norm, err := normalize.New(normalize.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	var tb *merge.Table
	p := New(Config{Sink: "s", Fence: true, Decoder: envelope.NewDecoder(envelope.Options{}), Normalizer: norm,
		Quarantine: &memQuarantine{events: &events}, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond,
		Route: func(ctx context.Context, _ string) (Table, string, bool, error) {
			if tb == nil {
				t, err := merge.Open(ctx, "mem://orders", merge.Options{Sink: "s", Storage: f, Now: func() time.Time { return time.Unix(1e9, 0) }})
				if err != nil {
					return nil, "", false, err
				}
				tb = t
			}
			return tb, "orders", true, nil
		}})
	var batches [][]*source.Record
	for i := 0; i < len(s.Records); i += 40 {
		batches = append(batches, s.Records[i:min(i+40, len(s.Records))])
	}
	reseeks := 0
	r := &Runner{P: p, Trigger: Trigger{MaxRecords: 40, MaxInterval: time.Hour}, Src: &hookSource{batches: batches},
		Reseek: func(context.Context, []merge.TP) error { reseeks++; return nil }}
	if err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if f.Injected() != 1 || reseeks != 1 {
		t.Fatalf("%d faults, %d re-seeks: want the ambiguous commit fenced once", f.Injected(), reseeks)
	}
	got, err := tb.Rows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tb.Version() != wantV || !reflect.DeepEqual(got, want) {
		t.Fatalf("table v%d (%d rows) differs from the uninterrupted run (v%d, %d rows)", tb.Version(), len(got), wantV, len(want))
	}
}

// stripBatchColumns drops the columns that differ between runs of the same
// changes in other batches (batch id, ingest time).
func stripBatchColumns(rows []merge.Row) []merge.Row {
	for _, r := range rows {
		delete(r, "_cdc_batch_id")
		delete(r, "_cdc_ingest_ts")
	}
	return rows
}
