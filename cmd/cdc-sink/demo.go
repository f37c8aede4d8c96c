package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/shopspring/decimal"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/internal/dbzgen"
	"github.com/cdcsink/cdc-sink/layout"
	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/cdcsink/cdc-sink/rules"
	"github.com/cdcsink/cdc-sink/source"
)

// cmdDemo runs the embedded default: an in-process Kafka-protocol broker,
// a generated Debezium stream for an orders table, and the same sink code
// path as `cdc-sink run`, into ./cdc-sink-demo/.
func cmdDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("demo", stderr)
	dir := fs.String("dir", "cdc-sink-demo", "where the table (lake/) goes")
	seed := fs.Int64("seed", 1, "stream seed (deterministic)")
	events := fs.Int("events", 3000, "streamed changes after the snapshot")
	snapshot := fs.Int("snapshot-rows", 500, "rows in the initial snapshot")
	partitions := fs.Int("partitions", 3, "topic partitions")
	httpAddr := fs.String("http", "", "serve /metrics /progress here while the demo runs (e.g. 127.0.0.1:8081)")
	verbose := fs.Bool("v", false, "log at info level")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := tableArg("demo", *dir); err != nil {
		return err
	}
	base, _ := checkLocation(*dir) // file:///x → /x, so Join below stays a path
	start := time.Now()
	gen := dbzgen.Config{Seed: *seed, Prefix: "loja", Schema: "public", Table: "orders", Partitions: *partitions,
		Keys: *snapshot + *events/4, Events: *events, SnapshotRows: *snapshot, Tombstones: true, TxSize: 4,
		InFlightAtSnapshot: true, Duplicates: 0.05, ToastEvery: 7, PKChangeEvery: 50, Malformed: 4}
	stream := dbzgen.Generate(gen)
	topic := stream.Topic
	sink := "demo"
	qtopic := sink + ".quarantine"

	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(*partitions), topic), kfake.SeedTopics(1, qtopic))
	if err != nil {
		return fmt.Errorf("start embedded broker: %w", err)
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()
	if err := produceAll(ctx, brokers, stream.Records); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "embedded Kafka on %s: produced %d Debezium records to %s (%d partitions)\n",
		strings.Join(brokers, ","), len(stream.Records), topic, *partitions)

	lvl := "warn"
	if *verbose {
		lvl = "info"
	}
	logger := newLogger(LogConf{Level: lvl, Format: "text"}, stderr)
	cfg := defaultConfig()
	cfg.Sink = sink
	cfg.Kafka.Brokers = brokers
	cfg.Kafka.Topics = []string{topic}
	cfg.Table.PathTemplate = filepath.Join(base, "lake", "{schema}.{table}")
	cfg.Quar.Topic = qtopic
	cfg.HTTP.Listen = *httpAddr
	cfg.Batch = BatchConf{MaxRecords: 1000, MaxBytes: 64 << 20, MaxInterval: 200 * time.Millisecond}
	cfg.Kafka.Properties = map[string]string{"topic.metadata.refresh.interval.ms": "1000"}
	// One data-quality rule (docs/rules.md): the generator emits negative
	// amounts, which this rule holds back in quarantine.
	cfg.Rules = []rules.Rule{{Name: "positive_amount", Table: "public.orders", Expr: "row.amount > 0"}}
	if err := cfg.validate(); err != nil {
		return err
	}
	var tables *tableSet
	if err := runSink(ctx, &cfg, logger, runHooks{stdout: stdout, Bounded: true, Quiet: true,
		Tables: func(ts *tableSet) { tables = ts }}); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	tdir, _ := routeTemplate(cfg.Table.PathTemplate)(topic)
	t, err := tables.open(ctx, tdir)
	if err != nil {
		return err
	}
	rows, err := t.Rows(ctx)
	if err != nil {
		return err
	}
	live, deleted := t.LiveRows()
	abs, _ := filepath.Abs(tdir)
	fmt.Fprintf(stdout, "\nDelta table: %s (version %d)\n", abs, t.Version())
	fmt.Fprintf(stdout, "  %d live rows, %d deleted (tombstones, _cdc_deleted = true)\n", live, deleted)
	entries, err := quarantine.ReadKafka(ctx, quarantine.KafkaConfig{Brokers: brokers, Topic: qtopic}, quarantine.Filter{})
	if err != nil {
		return fmt.Errorf("read quarantine: %w", err)
	}
	// Keys with a change held back by the rule differ from the source until
	// it is redriven: compare the others.
	held, err := heldKeys(ctx, stream.Records, cfg.Rules)
	if err != nil {
		return err
	}
	want := stream.Expected()
	cmpRows := rows[:0:0]
	for _, r := range rows {
		if !held[fmt.Sprint(r["id"])] {
			cmpRows = append(cmpRows, r)
		}
	}
	for k := range held {
		delete(want, k)
	}
	if bad := compareExpected(cmpRows, want); bad != "" {
		fmt.Fprintf(stdout, "  MISMATCH with the source model: %s\n", bad)
		return &exitError{code: 1, msg: "demo table does not match the source model"}
	}
	fmt.Fprintf(stdout, "  matches the source's final state for all %d keys without a change held back by a rule (%d held: see quarantine below)\n", len(cmpRows), len(held))
	printSample(stdout, rows, 5)
	fmt.Fprintf(stdout, "\nQuarantine topic %s: %d records\n", qtopic, len(entries))
	sum := quarantine.Stats(entries)
	reasons := make([]string, 0, len(sum.ByReason))
	for r := range sum.ByReason {
		reasons = append(reasons, string(r))
	}
	sort.Strings(reasons)
	for _, r := range reasons {
		fmt.Fprintf(stdout, "  %-18s %d\n", r, sum.ByReason[quarantine.Reason(r)])
	}
	shown := map[quarantine.Reason]int{}
	for _, e := range entries {
		if shown[e.Reason] == 2 {
			continue
		}
		shown[e.Reason]++
		fmt.Fprintf(stdout, "  %s/%d@%d %s: %.100s\n", e.Record.Topic, e.Record.Partition, e.Record.Offset, e.Reason, e.Message)
	}
	if len(sum.ByRule) > 0 {
		fmt.Fprintf(stdout, "  by rule:")
		for r, n := range sum.ByRule {
			fmt.Fprintf(stdout, " %s=%d", r, n)
		}
		fmt.Fprintf(stdout, " (redrive them once fixed: cdc-sink quarantine redrive)\n")
	}
	fmt.Fprintf(stdout, "\nQuery it:\n")
	fmt.Fprintf(stdout, "  cdc-sink table show %s --limit 5\n", tdir)
	fmt.Fprintf(stdout, "  python -c \"from deltalake import DeltaTable, QueryBuilder; import pyarrow as pa; "+
		"print(pa.RecordBatchReader.from_stream(QueryBuilder().register('t', DeltaTable('%s')).execute("+
		"'SELECT status, count(*) FROM t WHERE NOT _cdc_deleted GROUP BY status')).read_all())\"\n", abs)
	fmt.Fprintf(stdout, "  duckdb -c \"INSTALL delta; LOAD delta; SELECT count(*) FROM delta_scan('%s') WHERE NOT _cdc_deleted\"\n", abs)
	fmt.Fprintf(stdout, "  offline (pip install duckdb duckdb-extension-delta): python -c \"import duckdb, glob, os, duckdb_extension_delta as d; "+
		"c = duckdb.connect(config={'allow_unsigned_extensions': 'true'}); "+
		"c.load_extension(glob.glob(os.path.join(os.path.dirname(d.__file__), 'extensions', '*', 'delta.duckdb_extension'))[0]); "+
		"print(c.sql(\\\"SELECT count(*) FROM delta_scan('%s') WHERE NOT _cdc_deleted\\\"))\"\n", abs)
	fmt.Fprintf(stdout, "done in %s; run it again: nothing changes (the table already covers these offsets)\n",
		time.Since(start).Round(time.Millisecond))
	return nil
}

// produceAll writes records to their partitions in order and waits for acks.
func produceAll(ctx context.Context, brokers []string, recs []*source.Record) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.MaxBufferedRecords(1<<20), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	for _, r := range recs {
		kr := &kgo.Record{Topic: r.Topic, Partition: r.Partition, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}
		for _, h := range r.Headers {
			kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
		}
		cl.Produce(ctx, kr, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		return fmt.Errorf("produce demo stream: %w", err)
	}
	return nil
}

// compareExpected checks the table against the generator's model of the
// source's final state and describes the first difference.
func compareExpected(rows []merge.Row, want map[string]dbzgen.Row) string {
	got := map[string]merge.Row{}
	for _, r := range rows {
		got[fmt.Sprint(r["id"])] = r
	}
	if len(got) != len(want) {
		return fmt.Sprintf("%d keys in the table, %d in the source", len(got), len(want))
	}
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		w, g := want[k], got[k]
		if g == nil {
			return "key " + k + " missing"
		}
		if g[layout.ColDeleted] != w.Deleted {
			return fmt.Sprintf("key %s: deleted=%v, source says %v", k, g[layout.ColDeleted], w.Deleted)
		}
		if w.Deleted {
			continue
		}
		for i, col := range dbzgen.Columns {
			if !merge.ValuesEqual(normalizeForCompare(g[col]), normalizeForCompare(w.Values[i])) {
				return fmt.Sprintf("key %s column %s: table %v, source %v", k, col, g[col], w.Values[i])
			}
		}
	}
	return ""
}

func normalizeForCompare(v any) any {
	if d, ok := v.(decimal.Decimal); ok {
		return d.String()
	}
	return v
}

func printSample(w io.Writer, rows []merge.Row, n int) {
	fmt.Fprintln(w, "  sample rows:")
	shown := 0
	for _, r := range rows {
		if shown == n {
			break
		}
		if r[layout.ColDeleted] == true && shown > 0 {
			continue
		}
		fmt.Fprintf(w, "    id=%v status=%v amount=%v created_at=%v deleted=%v version=%v\n", r["id"], r["status"],
			fmtVal(r["amount"]), fmtTS(r["created_at"]), r[layout.ColDeleted], r[layout.ColVersion])
		shown++
	}
}

func fmtVal(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case decimal.Decimal:
		return x.String()
	case []byte:
		return base64.StdEncoding.EncodeToString(x)
	}
	return fmt.Sprint(v)
}

func fmtTS(v any) string {
	if us, ok := v.(int64); ok {
		return time.UnixMicro(us).UTC().Format("2006-01-02T15:04:05.000000Z")
	}
	return fmtVal(v)
}

// heldKeys returns the ids of the keys with a change the rules hold back
// (decided from the stream, so a second run, which reads nothing new,
// compares the same keys).
func heldKeys(ctx context.Context, recs []*source.Record, rs []rules.Rule) (map[string]bool, error) {
	set, err := rules.Compile(rs)
	if err != nil {
		return nil, err
	}
	dec := envelope.NewDecoder(envelope.Options{})
	norm, err := normalize.New(normalize.Options{})
	if err != nil {
		return nil, err
	}
	held := map[string]bool{}
	for _, r := range recs {
		ev, err := dec.Decode(ctx, r)
		if err != nil || (ev.Kind != envelope.KindChange && ev.Kind != envelope.KindTombstone) {
			continue
		}
		c, err := norm.Normalize(ev, r)
		if err != nil || c == nil || len(c.Key) == 0 {
			continue
		}
		v, err := set.Check(c)
		if err != nil {
			return nil, err
		}
		if v.Action == rules.Quarantine || v.Action == rules.Drop {
			held[fmt.Sprint(c.Key[0])] = true
		}
	}
	return held, nil
}
