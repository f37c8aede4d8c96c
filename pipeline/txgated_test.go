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

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/source"
	"github.com/cdcsink/cdc-sink/tablerows"
)

// txWorld is a generated source history: data records per partition, the
// transaction topic, and each table's state after every transaction.
type txWorld struct {
	data    map[merge.TP][]*source.Record
	tx      []*source.Record
	commits []int64                       // commit LSN of transaction i, ascending
	states  map[string][]map[int64]string // table → state after transactions [0, i) (index i)
}

var txTables = []string{"orders", "items"}

func txTopic(table string) string { return "shop.public." + table }

func genTxWorld(rng *rand.Rand, txs, parts int) *txWorld {
	w := &txWorld{data: map[merge.TP][]*source.Record{}, states: map[string][]map[int64]string{}}
	cur := map[string]map[int64]string{}
	for _, tb := range txTables {
		cur[tb] = map[int64]string{}
		w.states[tb] = []map[int64]string{{}}
	}
	type ev struct {
		table string
		key   int64
		order int64
		lsn   int64
	}
	emit := func(xid int, prev int64, commit int64, evs []ev, counts map[string]int64) {
		for i, e := range evs {
			tp := merge.TP{Topic: txTopic(e.table), Partition: int32(e.key % int64(parts))}
			seq := "null"
			if prev >= 0 {
				seq = fmt.Sprintf(`"%d"`, prev)
			}
			val := fmt.Sprintf(`{"before":null,"after":{"id":%d,"v":"tx%d"},"source":{"connector":"postgresql","name":"shop","db":"shop","schema":"public","table":"%s","lsn":%d,"txId":%d,"sequence":"[%s,\"%d\"]","snapshot":"false","ts_ms":1},"op":"u","ts_ms":1,"transaction":{"id":"%d:%d","total_order":%d,"data_collection_order":%d}}`,
				e.key, xid, e.table, e.lsn, xid, strings.ReplaceAll(seq, `"`, `\"`), e.lsn, xid, e.lsn, i+1, e.order)
			recs := w.data[tp]
			w.data[tp] = append(recs, &source.Record{Topic: tp.Topic, Partition: tp.Partition, Offset: int64(len(recs)),
				Key: fmt.Appendf(nil, `{"id":%d}`, e.key), Value: []byte(val)})
		}
		var dcs []string
		for _, tb := range txTables {
			if counts[tb] > 0 {
				dcs = append(dcs, fmt.Sprintf(`{"data_collection":"public.%s","event_count":%d}`, tb, counts[tb]))
			}
		}
		end := fmt.Sprintf(`{"status":"END","id":"%d:%d","event_count":%d,"data_collections":[%s],"ts_ms":1}`,
			xid, commit, len(evs), strings.Join(dcs, ","))
		w.tx = append(w.tx, &source.Record{Topic: "shop.transaction", Offset: int64(len(w.tx)),
			Key: fmt.Appendf(nil, `{"id":"%d:%d"}`, xid, commit), Value: []byte(end)})
	}
	type sent struct {
		xid          int
		prev, commit int64
		evs          []ev
		counts       map[string]int64
	}
	var history []sent
	lsn, prev := int64(1000), int64(-1)
	for x := 0; x < txs; x++ {
		n := 1 + rng.IntN(6)
		if rng.IntN(8) == 0 {
			n = 15 + rng.IntN(20) // a large one
		}
		var evs []ev
		counts := map[string]int64{}
		for range n {
			tb := txTables[rng.IntN(2)]
			counts[tb]++
			lsn += 8
			k := int64(rng.IntN(40))
			evs = append(evs, ev{table: tb, key: k, order: counts[tb], lsn: lsn})
			cur[tb][k] = fmt.Sprintf("tx%d", 500+x)
		}
		lsn += 8
		commit := lsn
		emit(500+x, prev, commit, evs, counts)
		history = append(history, sent{500 + x, prev, commit, evs, counts})
		w.commits = append(w.commits, commit)
		for _, tb := range txTables {
			w.states[tb] = append(w.states[tb], maps.Clone(cur[tb]))
		}
		prev = commit
		if x > 3 && rng.IntN(12) == 0 {
			// the connector restarts: the last few transactions are sent again
			for _, h := range history[len(history)-1-rng.IntN(3):] {
				emit(h.xid, h.prev, h.commit, h.evs, h.counts)
			}
		}
	}
	return w
}

// txLogs are the topics as a sink reads them: random partitions, random
// chunk sizes, positions a restart sets from the tables.
type txLogs struct {
	w    *txWorld
	rng  *rand.Rand
	pos  map[merge.TP]int64
	txAt int64
}

func (l *txLogs) Poll(ctx context.Context, max int, _ time.Duration) ([]*source.Record, error) {
	var open []merge.TP
	for tp, recs := range l.w.data {
		if l.pos[tp] < int64(len(recs)) {
			open = append(open, tp)
		}
	}
	if len(open) == 0 {
		return nil, io.EOF
	}
	slices.SortFunc(open, merge.TP.Compare)
	var out []*source.Record
	for range 1 + l.rng.IntN(3) {
		tp := open[l.rng.IntN(len(open))]
		recs := l.w.data[tp]
		n := min(int64(1+l.rng.IntN(6)), int64(len(recs))-l.pos[tp], int64(max-len(out)))
		out = append(out, recs[l.pos[tp]:l.pos[tp]+n]...)
		l.pos[tp] += n
		if len(out) >= max {
			break
		}
	}
	return out, nil
}

type txReader struct{ l *txLogs }

func (r txReader) SeekTo(off int64) error { r.l.txAt = max(off, 0); return nil }
func (r txReader) Poll(_ context.Context, max int, _ time.Duration) ([]*source.Record, error) {
	n := min(int64(r.l.rng.IntN(4)), int64(len(r.l.w.tx))-r.l.txAt, int64(max))
	out := r.l.w.tx[r.l.txAt : r.l.txAt+n]
	r.l.txAt += n
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
	w := genTxWorld(rng, 40, parts)
	stores := map[string]delta.Storage{"orders": delta.NewMemStorage(), "items": delta.NewMemStorage()}
	norm, err := normalize.New(normalize.Options{})
	if err != nil {
		t.Fatal(err)
	}
	logs := &txLogs{w: w, rng: rng, pos: map[merge.TP]int64{}}
	bound := 0
	if seed%3 == 2 {
		bound = 12 // small: the large transactions go in parts
	}
	var checked, restarts int
	for run := 0; ; run++ {
		if run > 60 {
			t.Fatal("no end after 60 sink restarts")
		}
		tables := map[string]*merge.Table{}
		var events []string
		q := &memQuarantine{events: &events}
		var g *Gated
		p := New(Config{Sink: "s", Decoder: envelope.NewDecoder(envelope.Options{}), Normalizer: norm, Quarantine: q,
			MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond,
			Domains: func(table string) map[string]string { return g.Domains(table) },
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
		for tp := range w.data {
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
					logs.pos[tp] = o
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
	for _, tb := range txTables {
		got := tableState(t, ctx, stores[tb], tb)
		if want := w.states[tb][len(w.commits)]; !maps.Equal(got, want) {
			t.Fatalf("%s at the end: %d rows, want %d\n got %v\nwant %v", tb, len(got), len(want), got, want)
		}
	}
	t.Logf("%d partitions, bound %d: %d table versions checked, %d sink restarts", parts, bound, checked, restarts)
}

func tableState(t *testing.T, ctx context.Context, store delta.Storage, tb string) map[int64]string {
	t.Helper()
	rt, err := tablerows.OpenStorage(ctx, store, tb)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]string{}
	if err := rt.Scan(ctx, tablerows.ScanOptions{Columns: []string{"id", "v"}}, func(r tablerows.Row) error {
		var id int64
		fmt.Sscan(r[0], &id)
		out[id] = strings.Trim(r[1], `"`)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkTxVersion: the table's newest version holds the state after a prefix
// of the transactions whose commit LSN lies between its watermark's through
// and last (whole transactions only), unless it is applying a transaction
// too large for the gate in parts.
func checkTxVersion(t *testing.T, ctx context.Context, store delta.Storage, tb string, w *txWorld) {
	t.Helper()
	rt, err := tablerows.OpenStorage(ctx, store, tb)
	if err != nil {
		t.Fatal(err)
	}
	cfg, ok := rt.Snap.DomainMetadata(ConsistencyDomain("s"))
	if !ok {
		t.Fatalf("%s v%d has no watermark", tb, rt.Version())
	}
	wm, _, err := ReadWatermark(func(string) (string, bool) { return cfg, true }, "s")
	if err != nil {
		t.Fatal(err)
	}
	got := tableState(t, ctx, store, tb)
	for i := 0; i <= len(w.commits); i++ {
		c := int64(-1)
		if i > 0 {
			c = w.commits[i-1]
		}
		if c < wm.Through || c > wm.Last && i > 0 && c > wm.Through {
			continue
		}
		if maps.Equal(got, w.states[tb][i]) {
			return
		}
	}
	i := slices.Index(w.commits, wm.Through) + 1
	t.Fatalf("%s v%d (through %d = after tx %d, last %d) holds no whole-transaction prefix:\n got %v\nwant %v (commits %v)", tb, rt.Version(), wm.Through, i, wm.Last, got, w.states[tb][i], w.commits[:i+1])
}
