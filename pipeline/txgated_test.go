// Model test of consistency: transaction through the real decoder,
// normalizer and merge: random two-table transactions over several
// partitions, ENDs read before or after their data, connector restarts that
// re-send transactions, sink restarts at random points. Every table version
// must hold exactly the whole transactions up to a point of commit order.

package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cdcsink/cdc-sink/consistency"
	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/internal/dbzgen"
	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/source"
	"github.com/cdcsink/cdc-sink/tablerows"
)

// txLogs are the topics as a sink reads them: random partitions, random
// chunk sizes, positions a restart sets from the tables.
type txLogs struct {
	w      *dbzgen.TxWorld
	rng    *rand.Rand
	pos    map[source.TopicPartition]int64
	txAt   int64
	polled int // records returned by both topics
}

// countingDecoder counts Decode calls.
type countingDecoder struct {
	Decoder
	n int
}

func (d *countingDecoder) Decode(ctx context.Context, r *source.Record) (*envelope.Event, error) {
	d.n++
	return d.Decoder.Decode(ctx, r)
}

func (l *txLogs) Poll(ctx context.Context, max int, _ time.Duration) ([]*source.Record, error) {
	var open []source.TopicPartition
	for tp, recs := range l.w.Data {
		if l.pos[tp] < int64(len(recs)) {
			open = append(open, tp)
		}
	}
	if len(open) == 0 {
		return nil, io.EOF
	}
	slices.SortFunc(open, func(a, b source.TopicPartition) int {
		return merge.TP{Topic: a.Topic, Partition: a.Partition}.Compare(merge.TP{Topic: b.Topic, Partition: b.Partition})
	})
	var out []*source.Record
	for range 1 + l.rng.IntN(3) {
		tp := open[l.rng.IntN(len(open))]
		recs := l.w.Data[tp]
		n := min(int64(1+l.rng.IntN(6)), int64(len(recs))-l.pos[tp], int64(max-len(out)))
		out = append(out, recs[l.pos[tp]:l.pos[tp]+n]...)
		l.pos[tp] += n
		l.polled += int(n)
		if len(out) >= max {
			break
		}
	}
	return out, nil
}

type txReader struct{ l *txLogs }

func (r txReader) SeekTo(_ context.Context, off int64) error { r.l.txAt = max(off, 0); return nil }
func (r txReader) Poll(_ context.Context, max int, _ time.Duration) ([]*source.Record, error) {
	n := min(int64(r.l.rng.IntN(4)), int64(len(r.l.w.Tx))-r.l.txAt, int64(max))
	out := r.l.w.Tx[r.l.txAt : r.l.txAt+n]
	r.l.txAt += n
	r.l.polled += int(n)
	return out, nil
}

func TestGatedModel(t *testing.T) {
	seeds := 12
	if testing.Short() {
		seeds = 4
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runGatedModel(t, uint64(seed)) })
	}
}

func runGatedModel(t *testing.T, seed uint64) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 7))
	parts := 1 + rng.IntN(3)
	world := dbzgen.GenerateTx(rng, 40, parts)
	w := world
	stores := map[string]delta.Storage{"orders": delta.NewMemStorage(), "items": delta.NewMemStorage()}
	norm, err := normalize.New(normalize.Options{})
	if err != nil {
		t.Fatal(err)
	}
	logs := &txLogs{w: w, rng: rng, pos: map[source.TopicPartition]int64{}}
	bound := 0
	if seed%3 == 2 {
		bound = 12 // small: the large transactions go in parts
	}
	var checked, restarts, cuts int
	dec := &countingDecoder{Decoder: envelope.NewDecoder(envelope.Options{})}
	for run := 0; ; run++ {
		if run > 60 {
			t.Fatal("no end after 60 sink restarts")
		}
		tables := map[string]*merge.Table{}
		var events []string
		q := &memQuarantine{events: &events}
		var g *Gated
		p := New(Config{Sink: "s", Decoder: dec, Normalizer: norm, Quarantine: q,
			MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond,
			Domains: func(table string) map[string]string { return g.Domains(table) },
			Decoded: func(r *source.Record) (*envelope.Event, bool) { return g.Decoded(r) },
			Route: func(ctx context.Context, topic string) (Table, string, bool, error) {
				tb, ok := strings.CutPrefix(topic, "shop.public.")
				if !ok {
					return nil, "", false, nil
				}
				if tables[tb] == nil {
					m, err := merge.Open(ctx, "mem://"+tb, merge.Options{Sink: "s", Storage: stores[tb]})
					if err != nil {
						return nil, "", false, err
					}
					tables[tb] = m
				}
				return tables[tb], tb, true, nil
			}})
		// a restarted sink reads every partition from its table's offset
		for tp := range w.Data {
			logs.pos[tp] = 0
			tb, _ := strings.CutPrefix(tp.Topic, "shop.public.")
			if m, err := merge.Open(ctx, "mem://"+tb, merge.Options{Sink: "s", Storage: stores[tb]}); err == nil {
				if o, ok := m.NextOffset(tp.Topic, tp.Partition); ok {
					logs.pos[tp] = o
				}
			}
		}
		g = NewGated(GateConfig{Sink: "s", P: p, Data: logs, Tx: txReader{logs}, MaxHeldRecords: bound,
			Seek: func(_ context.Context, offs map[merge.TP]int64) error {
				for tp, o := range offs {
					logs.pos[source.TopicPartition{Topic: tp.Topic, Partition: tp.Partition}] = o
				}
				return nil
			}})
		crashAt := 1 + rng.IntN(8)
		errCrash := errors.New("crash")
		batches := 0
		r := &Runner{P: p, Src: g, Trigger: Trigger{MaxRecords: 1 + rng.IntN(30), MaxInterval: time.Hour}}
		r.AfterBatch = func(ctx context.Context, recs []*source.Record, rep *Report) error {

			if len(q.entries) > 0 {
				t.Fatalf("quarantined: %s %s", q.entries[0].Reason, q.entries[0].Message)
			}
			if held, _ := g.Held(); bound > 0 && held > bound {
				t.Fatalf("the gate holds %d records, over its bound %d", held, bound)
			}
			if w, vs, ok := g.Cut(); ok && bound == 0 {
				checkCut(t, ctx, stores, w, vs, world)
				cuts++
			}
			for _, tr := range rep.Tables {
				if bound == 0 {
					// (with a bound, transactions go in parts: only the end state is checked)
					checkTxVersion(t, ctx, stores[tr.Table], tr.Table, w)
					checked++
				}
			}
			batches++
			if batches == crashAt && run < 20 {
				return errCrash
			}
			return nil
		}
		err := r.Run(ctx)
		if errors.Is(err, errCrash) {
			restarts++
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(q.entries) > 0 {
			t.Fatalf("quarantined: %+v", q.entries[0])
		}
		break
	}
	if dec.n > logs.polled {
		t.Fatalf("%d records decoded %d times: the gate's decoding is not handed on", logs.polled, dec.n)
	}
	for _, tb := range dbzgen.TxTables {
		got := tableState(t, ctx, stores[tb], tb)
		if want := w.States[tb][len(w.Commits)]; !maps.Equal(got, want) {
			t.Fatalf("%s at the end: %d rows, want %d\n got %v\nwant %v", tb, len(got), len(want), got, want)
		}
	}
	if bound == 0 && cuts == 0 {
		t.Fatal("no consistent cut was found")
	}
	t.Logf("%d partitions, bound %d: %d table versions and %d cuts checked, %d sink restarts", parts, bound, checked, cuts, restarts)
}

func tableState(t *testing.T, ctx context.Context, store delta.Storage, tb string) map[int64]string {
	t.Helper()
	rt, err := tablerows.OpenStorage(ctx, store, tb)
	if err != nil {
		t.Fatal(err)
	}
	out, err := dbzgen.TxRows(ctx, rt)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkTxVersion: the table's newest version holds the state after a prefix
// of the transactions whose commit LSN lies between its watermark's through
// and last (whole transactions only), unless it is applying a transaction
// too large for the gate in parts.
func checkTxVersion(t *testing.T, ctx context.Context, store delta.Storage, tb string, w *dbzgen.TxWorld) {
	t.Helper()
	rt, err := tablerows.OpenStorage(ctx, store, tb)
	if err != nil {
		t.Fatal(err)
	}
	cfg, ok := rt.Snap.DomainMetadata(consistency.Domain("s"))
	if !ok {
		t.Fatalf("%s v%d has no watermark", tb, rt.Version())
	}
	wm, _, err := consistency.ReadWatermark(func(string) (string, bool) { return cfg, true }, "s")
	if err != nil {
		t.Fatal(err)
	}
	got := tableState(t, ctx, store, tb)
	if w.IsPrefix(tb, got, wm.Through, wm.Last) {
		return
	}
	i := slices.Index(w.Commits, wm.Through) + 1
	t.Fatalf("%s v%d (through %d = after tx %d, last %d) holds no whole-transaction prefix:\n got %v\nwant %v (commits %v)", tb, rt.Version(), wm.Through, i, wm.Last, got, w.States[tb][i], w.Commits[:i+1])
}

// checkCut: every table at its version of the cut holds exactly the source
// transactions committed up to W.
func checkCut(t *testing.T, ctx context.Context, stores map[string]delta.Storage, w int64, vs map[string]int64, world *dbzgen.TxWorld) {
	t.Helper()
	i := 0 // transactions committed up to w
	for i < len(world.Commits) && world.Commits[i] <= w {
		i++
	}
	for table, v := range vs {
		rt, err := tablerows.OpenStorage(ctx, stores[table], table)
		if err != nil {
			t.Fatal(err)
		}
		at, err := rt.At(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := dbzgen.TxRows(ctx, at)
		if err != nil {
			t.Fatal(err)
		}
		if want := world.States[table][i]; !maps.Equal(got, want) {
			t.Fatalf("cut at W=%d (%d transactions): %s v%d holds\n %v\nwant %v", w, i, table, v, got, want)
		}
	}
	if len(vs) != len(dbzgen.TxTables) {
		// both tables are read from the first batches on
		t.Logf("cut at W=%d covers %d tables", w, len(vs))
	}
}

// A streamed change the gate cannot place (no transaction block, or an id
// that is not <xid>:<lsn>) stops the sink naming the record; a snapshot
// row without a block goes through.
func TestGatedRefusesUnplaceableChanges(t *testing.T) {
	ctx := context.Background()
	norm, err := normalize.New(normalize.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const src = `"source":{"connector":"postgresql","name":"shop","db":"shop","schema":"public","table":"orders","lsn":100,"sequence":"[\"50\",\"100\"]","snapshot":"%s","ts_ms":1}`
	for _, c := range []struct {
		name, value, want string
	}{
		{"no transaction block", `{"before":null,"after":{"id":1,"v":"a"},` + fmt.Sprintf(src, "false") + `,"op":"u","ts_ms":1}`, "without a transaction block"},
		{"bad transaction id", `{"before":null,"after":{"id":1,"v":"a"},` + fmt.Sprintf(src, "false") + `,"op":"u","ts_ms":1,"transaction":{"id":"7","total_order":1,"data_collection_order":1}}`, `transaction id "7"`},
		{"snapshot row", `{"before":null,"after":{"id":1,"v":"a"},` + fmt.Sprintf(src, "true") + `,"op":"r","ts_ms":1}`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			tb, err := merge.Open(ctx, "mem://orders", merge.Options{Sink: "s", Storage: delta.NewMemStorage()})
			if err != nil {
				t.Fatal(err)
			}
			p := New(Config{Sink: "s", Decoder: envelope.NewDecoder(envelope.Options{}), Normalizer: norm,
				Route: func(context.Context, string) (Table, string, bool, error) { return tb, "orders", true, nil }})
			r := &source.Record{Topic: "shop.public.orders", Offset: 0, Key: []byte(`{"id":1}`), Value: []byte(c.value)}
			g := NewGated(GateConfig{Sink: "s", P: p, Data: &onePoll{recs: []*source.Record{r}}, Tx: txReader{&txLogs{w: &dbzgen.TxWorld{}}}})
			out, err := g.Poll(ctx, 10, 0)
			if c.want == "" {
				if err != nil || len(out) != 1 {
					t.Fatalf("released %d, %v", len(out), err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "shop.public.orders/0@0") {
				t.Fatalf("err = %v, want %q naming the record", err, c.want)
			}
		})
	}
}

// onePoll returns its records once, then nothing.
type onePoll struct{ recs []*source.Record }

func (o *onePoll) Poll(context.Context, int, time.Duration) ([]*source.Record, error) {
	r := o.recs
	o.recs = nil
	return r, nil
}
