// consistency: transaction through runSink, a real consumer group and the
// transaction topic's reader against an in-process broker.

package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/cdcsink/cdc-sink/consistency"
	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/internal/dbzgen"
	"github.com/cdcsink/cdc-sink/source"
	"github.com/cdcsink/cdc-sink/tablerows"
)

// Two tables written by 300 multi-table transactions (some large, some
// re-sent after a connector restart) over two partitions each; the sink is
// stopped twice mid-stream and restarted. Every version of both tables
// holds exactly the whole transactions up to a point of commit order, its
// watermark names that point, and the final tables equal the source.
func TestRunConsistencyTransaction(t *testing.T) {
	const sink = "rt-tx"
	w := dbzgen.GenerateTx(rand.New(rand.NewPCG(3, 3)), 300, 2)
	_, brokers := newKfakeWith(t, []kfake.Opt{kfake.SeedTopics(2, dbzgen.TxTopic("orders"), dbzgen.TxTopic("items")),
		kfake.SeedTopics(1, "shop.transaction")}, 1, sink+".quarantine")
	lake := t.TempDir()
	cfg := testConfig(brokers, lake, sink)
	cfg.Kafka.Topics = []string{dbzgen.TxTopic("orders"), dbzgen.TxTopic("items")}
	cfg.Table.PathTemplate = filepath.Join(lake, "{table}")
	cfg.Consistency = "transaction"
	cfg.Group = "shop"
	cfg.Tx.Manifest = filepath.Join(lake, "_groups", "shop")
	cfg.Batch.MaxRecords = 40
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	if got := cfg.txTopic(); got != "shop.transaction" {
		t.Fatalf("transaction topic from kafka.topics = %q", got)
	}
	// the transactions are produced 10 at a time, each batch once the sink
	// has committed since the previous one; inside a batch the partitions
	// and the transaction topic interleave at random, so ENDs are read both
	// before and after their data
	p := newProducer(t, brokers)
	rng := rand.New(rand.NewPCG(4, 4))
	var chunks [][]*source.Record
	for i := 0; i < len(w.Emits); i += 10 {
		queues := map[string][]*source.Record{}
		var keys []string
		for _, e := range w.Emits[i:min(i+10, len(w.Emits))] {
			for _, r := range e {
				k := fmt.Sprintf("%s/%d", r.Topic, r.Partition)
				if queues[k] == nil {
					keys = append(keys, k)
				}
				queues[k] = append(queues[k], r)
			}
		}
		var chunk []*source.Record
		for len(keys) > 0 {
			j := rng.IntN(len(keys))
			chunk = append(chunk, queues[keys[j]][0])
			if queues[keys[j]] = queues[keys[j]][1:]; len(queues[keys[j]]) == 0 {
				keys = append(keys[:j], keys[j+1:]...)
			}
		}
		chunks = append(chunks, chunk)
	}
	versions := func() int64 {
		return diskVersion(filepath.Join(lake, "orders")) + diskVersion(filepath.Join(lake, "items"))
	}
	if err := p.produce(chunks[0]); err != nil {
		t.Fatal(err)
	}
	produced := make(chan error, 1)
	go func() {
		last := versions()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		deadline := time.Now().Add(2 * time.Minute)
		for _, c := range chunks[1:] {
			for versions() <= last {
				if time.Now().After(deadline) {
					produced <- fmt.Errorf("producer: tables stuck at %d versions", last)
					return
				}
				<-tick.C
			}
			last = versions()
			for _, r := range c {
				// one at a time: the produce order is the interleaving
				if err := p.produce([]*source.Record{r}); err != nil {
					produced <- err
					return
				}
			}
		}
		produced <- nil
	}()
	dirs := map[string]string{}
	for _, tb := range dbzgen.TxTables {
		dirs[tb] = filepath.Join(lake, tb)
	}
	for i, step := range []int64{2, 3} {
		r := startSink(t, fmt.Sprintf("run%d", i), cfg, runHooks{})
		t.Cleanup(func() {
			if t.Failed() {
				t.Log(r.log.String())
			}
		})
		from := versions()
		waitUntil(t, time.Minute, fmt.Sprintf("run %d: %d new table versions", i, step),
			func() bool { return versions() >= from+step })
		if _, err := r.stop(t, time.Minute); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
	}
	r := startSink(t, "final", cfg, runHooks{})
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(r.log.String())
		}
	})
	waitProduced(t, produced)
	ends := map[string]map[int32]int64{}
	for tp, recs := range w.Data {
		tb := strings.TrimPrefix(tp.Topic, "shop.public.")
		if ends[tb] == nil {
			ends[tb] = map[int32]int64{}
		}
		ends[tb][tp.Partition] = int64(len(recs))
	}
	for _, tb := range dbzgen.TxTables {
		waitUntil(t, 2*time.Minute, tb+" to reach the end offsets", func() bool {
			got, _ := topicProgress(t, dirs[tb], sink, dbzgen.TxTopic(tb))
			for p, e := range ends[tb] {
				if got[p] < e {
					return false
				}
			}
			return true
		})
	}
	mfs := scrapeMetrics(t, r.addr)
	for _, c := range []struct {
		name  string
		match map[string]string
	}{
		{"cdcsink_tx_transactions_total", map[string]string{"kind": "whole"}},
		{"cdcsink_consistency_cuts_total", map[string]string{"group": "shop"}},
	} {
		if v, ok := metricSum(mfs, c.name, c.match); !ok || v <= 0 {
			t.Errorf("%s%v = %v (%v)", c.name, c.match, v, ok)
		}
	}
	if h := mfs["cdcsink_tx_wait_seconds"]; h == nil || h.GetMetric()[0].GetHistogram().GetSampleCount() == 0 {
		t.Errorf("cdcsink_tx_wait_seconds has no samples")
	}
	if _, ok := metricSum(mfs, "cdcsink_tx_held", map[string]string{"unit": "transactions"}); !ok {
		t.Errorf("no cdcsink_tx_held{unit=transactions}")
	}
	if _, ok := metricSum(mfs, "cdcsink_consistency_watermark_lag", map[string]string{"group": "shop", "unit": "bytes"}); !ok {
		t.Errorf("no cdcsink_consistency_watermark_lag")
	}
	if _, err := r.stop(t, time.Minute); err != nil {
		t.Fatalf("final run: %v", err)
	}
	ctx := context.Background()
	for _, tb := range dbzgen.TxTables {
		latest, err := tablerows.Open(ctx, dirs[tb])
		if err != nil {
			t.Fatal(err)
		}
		var lastThrough int64 = -1
		for v := int64(1); v <= latest.Version(); v++ {
			at, err := latest.At(ctx, v)
			if err != nil {
				t.Fatal(err)
			}
			wm, ok, err := consistency.ReadWatermark(at.Snap.DomainMetadata, sink)
			if err != nil || !ok {
				t.Fatalf("%s v%d: watermark %v %v", tb, v, ok, err)
			}
			if wm.Collection != "public."+tb || wm.Through < lastThrough {
				t.Fatalf("%s v%d: watermark %+v after through %d", tb, v, wm, lastThrough)
			}
			lastThrough = wm.Through
			if rows := rowsOf(t, at); !w.IsPrefix(tb, rows, wm.Through, wm.Last) {
				t.Fatalf("%s v%d (through %d, last %d) holds no whole-transaction prefix: %v", tb, v, wm.Through, wm.Last, rows)
			}
		}
		final := rowsOf(t, latest)
		if want := w.States[tb][len(w.Commits)]; len(final) != len(want) || !w.IsPrefix(tb, final, w.Commits[len(w.Commits)-1], w.Commits[len(w.Commits)-1]) {
			t.Fatalf("%s at the end: %d rows, want %d", tb, len(final), len(want))
		}
		t.Logf("%s: %d versions checked", tb, latest.Version())
	}
	// every published cut: both tables at their versions hold exactly the
	// transactions committed up to its watermark
	l := consistency.OpenStorage(mustStorage(t, cfg.Tx.Manifest), "shop")
	seqs, err := l.Entries(ctx)
	if err != nil || len(seqs) < 5 {
		t.Fatalf("%d cuts published (%v)", len(seqs), err)
	}
	lastW := int64(-1)
	for _, seq := range seqs {
		e, err := l.Get(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if e.Watermark <= lastW {
			t.Fatalf("cut %d: watermark %d after %d", seq, e.Watermark, lastW)
		}
		lastW = e.Watermark
		n := 0 // transactions committed up to W
		for n < len(w.Commits) && w.Commits[n] <= e.Watermark {
			n++
		}
		for tb, v := range e.Tables {
			latest, err := tablerows.Open(ctx, tb)
			if err != nil {
				t.Fatal(err)
			}
			at, err := latest.At(ctx, v)
			if err != nil {
				t.Fatal(err)
			}
			name := filepath.Base(tb)
			if got, want := rowsOf(t, at), w.States[name][n]; !maps.Equal(got, want) {
				t.Fatalf("cut %d at W=%d: %s v%d holds %d rows, want the state after %d transactions (%d rows)", seq, e.Watermark, name, v, len(got), n, len(want))
			}
		}
	}
	if end := w.Commits[len(w.Commits)-1]; lastW != end {
		t.Fatalf("the last cut is at W=%d, the last transaction committed at %d", lastW, end)
	}
	var out strings.Builder
	if err := cmdConsistentVersions(ctx, []string{"shop", "--manifest", cfg.Tx.Manifest}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), fmt.Sprintf("cut %d at source commit LSN %d", seqs[len(seqs)-1], lastW)) || !strings.Contains(out.String(), "VERSION AS OF") {
		t.Fatalf("consistent-versions printed:\n%s", out.String())
	}
	// vacuum and log cleanup keep the newest cut readable, even with no retention
	last, err := l.Get(ctx, seqs[len(seqs)-1])
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range dbzgen.TxTables {
		// compaction rewrites every file: the cut's version is then history only
		if err := cmdTable(ctx, []string{"optimize", dirs[tb]}, io.Discard, io.Discard); err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		if err := cmdTable(ctx, []string{"vacuum", "--retention", "0s", "--dry-run=false", dirs[tb]}, &out, io.Discard); err != nil {
			t.Fatal(err)
		}
		v := last.Tables[dirs[tb]]
		if !strings.Contains(out.String(), fmt.Sprintf("kept readable: versions [%d]", v)) || strings.Contains(out.String(), "deleted 0 files") {
			t.Fatalf("vacuum of %s printed:\n%s", tb, out.String())
		}
		latest, err := tablerows.Open(ctx, dirs[tb])
		if err != nil {
			t.Fatal(err)
		}
		at, err := latest.At(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := rowsOf(t, at), w.States[tb][len(w.Commits)]; !maps.Equal(got, want) {
			t.Fatalf("%s v%d after vacuum: %d rows, want %d", tb, v, len(got), len(want))
		}
	}
	t.Logf("%d cuts checked, the last at W=%d", len(seqs), lastW)
}

func mustStorage(t *testing.T, loc string) delta.Storage {
	t.Helper()
	st, err := delta.OpenStorage(context.Background(), loc, delta.StorageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func rowsOf(t *testing.T, tb *tablerows.Table) map[int64]string {
	t.Helper()
	rows, err := dbzgen.TxRows(context.Background(), tb)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// What consistency: transaction cannot work with is refused before
// anything is written, naming the setting.
func TestConsistencyRefusals(t *testing.T) {
	_, brokers := newKfakeWith(t, []kfake.Opt{kfake.SeedTopics(2, "two.transaction")}, 1)
	lake := t.TempDir()
	for _, c := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"unknown mode", func(c *Config) { c.Consistency = "strict" }, `"strict" is not eventual|transaction`},
		{"several instances", func(c *Config) { c.Consistency, c.InstanceID = "transaction", "a" }, "one instance per sink"},
		{"no topic", func(c *Config) { c.Consistency, c.Kafka.TopicRegex, c.Kafka.Topics = "transaction", "loja.*", nil }, "set transactions.topic"},
		{"group without transaction", func(c *Config) { c.Group, c.Tx.Manifest = "g", "lake/_g" }, "needs consistency: transaction"},
		{"group without manifest", func(c *Config) { c.Consistency, c.Group = "transaction", "g" }, "needs a manifest location"},
		{"manifest without group", func(c *Config) { c.Consistency, c.Tx.Manifest = "transaction", "lake/_g" }, "set without consistency_group"},
		{"bad manifest URL", func(c *Config) { c.Consistency, c.Group, c.Tx.Manifest = "transaction", "g", "s3:/x" }, "transactions.manifest"},
		{"two partitions", func(c *Config) { c.Consistency, c.Tx.Topic = "transaction", "two.transaction" }, "has 2 partitions"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig(brokers, lake, "refused")
			c.edit(cfg)
			err := cfg.validate()
			if err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				err = runSink(ctx, cfg, newLogger(cfg.Log, &logSink{tag: c.name}), runHooks{Quiet: true})
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
			if v := diskVersion(tableDir(lake)); v >= 0 {
				t.Fatalf("a table was written (v%d)", v)
			}
		})
	}
}
