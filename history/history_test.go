package history_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/history"
	"github.com/cdcsink/cdc-sink/internal/dbzgen"
	"github.com/cdcsink/cdc-sink/internal/deltacheck"
	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/pipeline"
	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/cdcsink/cdc-sink/source"
)

type memQ struct{ n int }

func (q *memQ) Write(_ context.Context, es []quarantine.Entry) error { q.n += len(es); return nil }
func (q *memQ) Close() error                                         { return nil }

var errCrash = errors.New("injected crash")

// sink is one process: a pipeline writing a current table and its history.
type sink struct {
	p  *pipeline.Pipeline
	tr *history.Tracked
	q  *memQ
}

func newSink(t *testing.T, cur, hist string, priv history.Privacy, fault func(merge.FaultPoint) error) *sink {
	t.Helper()
	ctx := context.Background()
	norm, err := normalize.New(normalize.Options{KeepBefore: true})
	if err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return time.Unix(1.7e9, 0) }
	tb, err := merge.Open(ctx, cur, merge.Options{Sink: "s", Now: now, Fault: fault})
	if err != nil {
		t.Fatal(err)
	}
	hw, err := history.Open(ctx, hist, history.Options{Sink: "s", Privacy: priv, Now: now, Fault: fault})
	if err != nil {
		t.Fatal(err)
	}
	s := &sink{tr: &history.Tracked{Table: tb, History: hw}, q: &memQ{}}
	s.p = pipeline.New(pipeline.Config{Sink: "s", Decoder: envelope.NewDecoder(envelope.Options{}), Normalizer: norm, Quarantine: s.q,
		MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond,
		Route: func(context.Context, string) (pipeline.Table, string, bool, error) { return s.tr, "orders", true, nil }})
	return s
}

func stream() *dbzgen.Stream {
	return dbzgen.Generate(dbzgen.Config{Seed: 21, Prefix: "loja", Schema: "public", Table: "orders", Partitions: 2,
		Keys: 50, Events: 400, SnapshotRows: 30, Tombstones: true, TxSize: 3, ToastEvery: 5, PKChangeEvery: 11,
		Duplicates: 0.1})
}

func batches(s *dbzgen.Stream, n int) [][]*source.Record {
	var out [][]*source.Record
	for i := 0; i < len(s.Records); i += n {
		out = append(out, s.Records[i:min(i+n, len(s.Records))])
	}
	return out
}

// run applies the batches; at crashBatch the fault fires once at point, the
// process "dies" and a new one (fresh Opens) carries on from the tables.
func run(t *testing.T, bs [][]*source.Record, cur, hist string, crashBatch int, point merge.FaultPoint) {
	t.Helper()
	runWith(t, bs, func(fault func(merge.FaultPoint) error) *sink { return newSink(t, cur, hist, history.Privacy{}, fault) }, crashBatch, point)
}

// runWith is run with the sinks mk makes (one per process).
func runWith(t *testing.T, bs [][]*source.Record, mk func(fault func(merge.FaultPoint) error) *sink, crashBatch int, point merge.FaultPoint) {
	t.Helper()
	ctx := context.Background()
	armed := false
	fault := func(p merge.FaultPoint) error {
		if armed && p == point {
			armed = false
			return errCrash
		}
		return nil
	}
	s := mk(fault)
	for i, b := range bs {
		armed = i == crashBatch
		if _, err := s.p.Process(ctx, b); err != nil {
			if !errors.Is(err, errCrash) {
				t.Fatalf("batch %d: %v", i, err)
			}
			s = mk(fault)
			if _, err := s.p.Process(ctx, b); err != nil {
				t.Fatalf("batch %d after restart: %v", i, err)
			}
		}
		if armed {
			t.Fatalf("fault %s never reached in batch %d", point, i)
		}
	}
}

func entries(t *testing.T, hist string) []history.Entry {
	t.Helper()
	h, err := history.OpenRead(context.Background(), hist, nil, delta.StorageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	es, err := h.Entries(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// TestHistoryHoldsEveryAcceptedChange: a stream with duplicates, late
// (redelivered) events, primary-key changes, TOAST and tombstones, through a
// real pipeline: the history holds exactly one row per record, and its
// outcomes agree with an independent model: the applied rows, replayed per
// key in version order, end in the generator's expected state; every
// stale or duplicate row is at or below its key's newest applied version,
// and every duplicate repeats an applied version. No TOAST placeholder is
// stored; delta-rs reads the same rows.
func TestHistoryHoldsEveryAcceptedChange(t *testing.T) {
	s := stream()
	cur, hist := t.TempDir(), t.TempDir()
	run(t, batches(s, 37), cur, hist, -1, "")
	es := entries(t, hist)

	seen := map[normalize.Coord]int{}
	for _, e := range es {
		seen[e.Change.Coord]++
	}
	for _, r := range s.Records {
		c := normalize.Coord{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}
		if seen[c] != 1 {
			t.Fatalf("record %v is %d times in the history, want once", c, seen[c])
		}
	}
	if len(es) != len(s.Records) {
		t.Fatalf("history has %d rows, stream %d records", len(es), len(s.Records))
	}

	type keyState struct {
		applied  map[string]bool
		last     history.Entry
		hasLast  bool
		maxStale string
	}
	keys := map[string]*keyState{}
	outcomes := map[string]int{}
	unavailable := 0
	for _, e := range es {
		outcomes[e.Outcome]++
		c := e.Change
		k := fmt.Sprint(c.Key...)
		ks := keys[k]
		if ks == nil {
			ks = &keyState{applied: map[string]bool{}}
			keys[k] = ks
		}
		v := c.Version.String()
		switch e.Outcome {
		case "applied":
			ks.applied[v] = true
			if !ks.hasLast || ks.last.Change.Version.Less(c.Version) {
				ks.last, ks.hasLast = e, true
			}
		case "stale", "duplicate":
			if v > ks.maxStale {
				ks.maxStale = v
			}
		default:
			t.Fatalf("outcome %q", e.Outcome)
		}
		for j, x := range c.Row {
			if normalize.IsUnavailable(x) {
				unavailable++
				if c.Schema.Columns[j].Name != "note" {
					t.Fatalf("unavailable column %s", c.Schema.Columns[j].Name)
				}
			}
			if str, ok := x.(string); ok && strings.Contains(str, "__debezium_unavailable_value") {
				t.Fatalf("TOAST placeholder stored in history: %v", c.Coord)
			}
		}
	}
	t.Logf("%d rows, outcomes %v, %d unavailable values", len(es), outcomes, unavailable)
	if outcomes["applied"] == 0 || outcomes["duplicate"] == 0 {
		t.Fatalf("outcomes %v: want applied and duplicate rows", outcomes)
	}
	if unavailable < s.Counts().ToastUpdates {
		t.Fatalf("%d unavailable values, stream has %d TOAST updates", unavailable, s.Counts().ToastUpdates)
	}
	for _, e := range es {
		if e.Outcome == "duplicate" && !keys[fmt.Sprint(e.Change.Key...)].applied[e.Change.Version.String()] {
			t.Fatalf("duplicate %v at version %s repeats no applied change", e.Change.Coord, e.Change.Version)
		}
	}
	// the newest applied change per key is the expected final state
	exp := s.Expected()
	idCol := -1
	for k, ks := range keys {
		if !ks.hasLast {
			continue
		}
		if ks.maxStale > ks.last.Change.Version.String() {
			t.Fatalf("key %s: a skipped change (%s) is newer than every applied one (%s)", k, ks.maxStale, ks.last.Change.Version)
		}
		want, ok := exp[k]
		if !ok {
			t.Fatalf("key %s not in the expected state", k)
		}
		c := ks.last.Change
		if want.Deleted != (c.Op == normalize.OpDelete) {
			t.Fatalf("key %s: deleted=%v, last applied op %c", k, want.Deleted, c.SourceOp)
		}
		if want.Deleted {
			continue
		}
		if idCol < 0 {
			idCol = c.Schema.Index("status")
		}
		if got := c.Row[idCol]; got != want.Get("status") {
			t.Fatalf("key %s: status %v, want %v", k, got, want.Get("status"))
		}
	}
	if len(keys) != len(exp) {
		t.Fatalf("%d keys in history, %d expected", len(keys), len(exp))
	}
	rs := deltacheck.ReadDeltaRS(t, hist, "")
	if len(rs.Rows) != len(es) {
		t.Fatalf("delta-rs reads %d rows, we read %d", len(rs.Rows), len(es))
	}
	for _, r := range rs.Rows {
		if strings.Contains(r, "__debezium_unavailable_value") {
			t.Fatalf("delta-rs row holds the TOAST placeholder: %s", r)
		}
	}
}

// canonical is the history as comparable text, without the ingest time.
func canonical(t *testing.T, hist string) []string {
	es := entries(t, hist)
	out := make([]string, len(es))
	for i, e := range es {
		c := e.Change
		out[i] = fmt.Sprintf("%v %s %s b%d op=%c/%d key=%v row=%v before=%v old=%v moved=%v tomb=%v ts=%d tx=%d",
			c.Coord, c.Version, e.Outcome, e.BatchID, c.SourceOp, c.Op, c.Key, c.Row, c.Before, c.OldKey, c.KeyMoved, c.Tombstone, c.SourceTsMicros, c.TxID)
	}
	sort.Strings(out)
	return out
}

// canonicalRS is canonical as delta-rs reads it.
func canonicalRS(t *testing.T, hist string) []string {
	rs := deltacheck.ReadDeltaRS(t, hist, "")
	rows := deltacheck.Decode(t, rs.Rows)
	out := make([]string, len(rows))
	for i, r := range rows {
		delete(r, "_cdc_ingest_ts")
		keys := make([]string, 0, len(r))
		for k := range r {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var b strings.Builder
		for _, k := range keys {
			fmt.Fprintf(&b, "%s=%v;", k, r[k])
		}
		out[i] = b.String()
	}
	sort.Strings(out)
	return out
}

// TestHistoryCrashBetweenCommits: a crash at every step of a batch — while
// the history is written, after the history committed but before the
// current table's data, deletion vectors or commit, after both — then a
// restart: the history equals an uncrashed run's, row for row (no row
// missing, none twice), read through delta-rs.
func TestHistoryCrashBetweenCommits(t *testing.T) {
	s := stream()
	bs := batches(s, 53)
	refCur, refHist := t.TempDir(), t.TempDir()
	run(t, bs, refCur, refHist, -1, "")
	want := canonical(t, refHist)
	wantRS := canonicalRS(t, refHist)
	points := []merge.FaultPoint{history.FaultHistoryDataWritten, history.FaultHistoryAfterCommit,
		merge.FaultDataWritten, merge.FaultBeforeCommit, merge.FaultAfterCommit}
	for _, point := range points {
		for _, b := range []int{0, len(bs) / 2, len(bs) - 1} {
			t.Run(fmt.Sprintf("%s@%d", point, b), func(t *testing.T) {
				cur, hist := t.TempDir(), t.TempDir()
				run(t, bs, cur, hist, b, point)
				got := canonical(t, hist)
				if len(got) != len(want) {
					t.Fatalf("%d history rows, uncrashed run has %d", len(got), len(want))
				}
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("row %d differs:\n got %s\nwant %s", i, got[i], want[i])
					}
				}
				if point == merge.FaultBeforeCommit && b == len(bs)/2 {
					// and once through delta-rs
					got := canonicalRS(t, hist)
					if strings.Join(got, "\n") != strings.Join(wantRS, "\n") {
						t.Fatalf("delta-rs reads a different history after the crash")
					}
				}
			})
		}
	}
}
