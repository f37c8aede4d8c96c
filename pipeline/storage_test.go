package pipeline

import (
	"context"
	"fmt"
	"io/fs"
	"reflect"
	"testing"
	"time"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/delta/storagetest"
	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/internal/dbzgen"
	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/quarantine"
)

// runOnStore pushes a generated Debezium stream through a real pipeline
// (decoder, normalizer, merge) into a table on store, in batches of 40.
func runOnStore(t *testing.T, s *dbzgen.Stream, store delta.Storage) ([]merge.Row, int64, *memQuarantine, error) {
	t.Helper()
	ctx := context.Background()
	norm, err := normalize.New(normalize.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	q := &memQuarantine{events: &events}
	var tb *merge.Table
	p := New(Config{Sink: "s", Decoder: envelope.NewDecoder(envelope.Options{}), Normalizer: norm, Quarantine: q,
		MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond,
		Route: func(ctx context.Context, _ string) (Table, string, bool, error) {
			if tb == nil {
				t, err := merge.Open(ctx, "mem://orders", merge.Options{Sink: "s", Storage: store, Now: func() time.Time { return time.Unix(1e9, 0) }})
				if err != nil {
					return nil, "", false, err
				}
				tb = t
			}
			return tb, "orders", true, nil
		}})
	for i := 0; i < len(s.Records); i += 40 {
		if _, err := p.Process(ctx, s.Records[i:min(i+40, len(s.Records))]); err != nil {
			return nil, 0, q, err
		}
	}
	rows, err := tb.Rows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return rows, tb.Version(), q, nil
}

// The pipeline is the one place that retries: a transient storage failure
// while merge writes a data file or commits is retried there, and the table
// ends equal to an uninterrupted run's with nothing quarantined; a
// permanent one stops the batch with the storage error.
func TestStorageFailuresThroughPipeline(t *testing.T) {
	s := dbzgen.Generate(dbzgen.Config{Seed: 5, Prefix: "loja", Schema: "public", Table: "orders", Partitions: 1,
		Keys: 60, Events: 300, SnapshotRows: 40, Tombstones: true, TxSize: 4, ToastEvery: 7})
	want, wantV, _, err := runOnStore(t, s, delta.NewMemStorage())
	if err != nil {
		t.Fatal(err)
	}
	if len(want) == 0 || wantV < 3 {
		t.Fatalf("reference run too small: %d rows, v%d", len(want), wantV)
	}
	transient := delta.Transient(fmt.Errorf("connection reset: %w", storagetest.ErrInjected))
	f := storagetest.NewFaulty(delta.NewMemStorage(),
		storagetest.Fault{Op: storagetest.OpPutIfAbsent, Pattern: "*.parquet", Before: transient, Skip: 2, Times: 1},
		storagetest.Fault{Op: storagetest.OpPutIfAbsent, Pattern: "_delta_log/*.json", After: transient, Skip: 4, Times: 1},
		storagetest.Fault{Op: storagetest.OpPutIfAbsent, Pattern: "_delta_log/*.json", Before: transient, Skip: 6, Times: 1})
	got, gotV, q, err := runOnStore(t, s, f)
	if err != nil {
		t.Fatalf("transient storage failures were not retried: %v", err)
	}
	if f.Injected() != 3 {
		t.Fatalf("%d faults fired, want 3", f.Injected())
	}
	if len(q.entries) != 0 {
		t.Errorf("%d records quarantined", len(q.entries))
	}
	if gotV != wantV || !reflect.DeepEqual(got, want) {
		t.Errorf("table after retries (v%d, %d rows) differs from the uninterrupted run (v%d, %d rows)", gotV, len(got), wantV, len(want))
	}

	perm := storagetest.NewFaulty(delta.NewMemStorage(), storagetest.Fault{Op: storagetest.OpPutIfAbsent, Pattern: "*.parquet", Skip: 1,
		Before: &fs.PathError{Op: "put", Path: "part.parquet", Err: fs.ErrPermission}})
	_, _, q, err = runOnStore(t, s, perm)
	if err == nil || quarantine.IsTransient(err) {
		t.Fatalf("permanent storage failure: %v, want a permanent error", err)
	}
	if perm.Injected() != 1 || len(q.entries) != 0 {
		t.Errorf("permanent failure retried (%d injections) or quarantined (%d)", perm.Injected(), len(q.entries))
	}
	t.Logf("permanent failure: %v", err)
}

// A record is quarantined once per batch, however often the batch is
// retried: transient failures around the commit make the pipeline call
// Apply again, and before, every attempt wrote the batch's bad records to
// the quarantine again (and counted them again).
func TestRetriedBatchQuarantinesOnce(t *testing.T) {
	s := dbzgen.Generate(dbzgen.Config{Seed: 9, Prefix: "loja", Schema: "public", Table: "orders", Partitions: 1,
		Keys: 30, Events: 160, SnapshotRows: 20, TxSize: 3, Malformed: 6})
	_, _, ref, err := runOnStore(t, s, delta.NewMemStorage())
	if err != nil {
		t.Fatal(err)
	}
	if len(ref.entries) != 6 {
		t.Fatalf("reference run quarantined %d records, want the 6 malformed ones", len(ref.entries))
	}
	transient := delta.Transient(fmt.Errorf("503 slow down: %w", storagetest.ErrInjected))
	f := storagetest.NewFaulty(delta.NewMemStorage(),
		storagetest.Fault{Op: storagetest.OpPutIfAbsent, Pattern: "_delta_log/*.json", Before: transient, Skip: 1, Times: 3},
		storagetest.Fault{Op: storagetest.OpPutIfAbsent, Pattern: "*.parquet", Before: transient, Skip: 2, Times: 2})
	_, _, q, err := runOnStore(t, s, f)
	if err != nil {
		t.Fatal(err)
	}
	if f.Injected() != 5 {
		t.Fatalf("%d faults fired, want 5", f.Injected())
	}
	seen := map[string]int{}
	for _, e := range q.entries {
		seen[fmt.Sprintf("%s/%d@%d", e.Record.Topic, e.Record.Partition, e.Record.Offset)]++
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("%s quarantined %d times", k, n)
		}
	}
	if len(q.entries) != len(ref.entries) {
		t.Errorf("%d quarantine entries after retries, want %d", len(q.entries), len(ref.entries))
	}
}
