// Command gen produces a deterministic Debezium JSON change stream
// (internal/dbzgen) into a real Kafka broker, for the benchmarks in bench/.
//
// The stream is: the initial snapshot (op=r, -snapshot-rows rows), then the
// "changes" part (-events row changes with the -mix insert/update/delete
// weights, dbzgen's redelivered duplicates, and -late extra copies of
// changes delivered -late-distance records later, i.e. stale, out-of-order
// deliveries that cross batch boundaries). -part/-from/-to select which
// records this invocation produces, so one stream can be loaded in phases
// (snapshot, backlog, live) with the same content every time.
//
// Every produced record has source.ts_ms/ts_us/ts_ns (and the envelope's
// ts_*) restamped with the wall-clock produce time (same width, so the bytes
// are otherwise identical), and -offsets appends "partition offset ts_us"
// for each delivered record: the end-to-end latency is measured from there
// to the Delta commit that covers the offset.
//
//	go run ./bench/gen -brokers 127.0.0.1:9092 -topic bench.orders -snapshot-rows 5000 -events 20000
//	go run ./bench/gen ... -expected expected.jsonl   # the reference model only, nothing produced
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/cdcsink/cdc-sink/internal/dbzgen"
	"github.com/cdcsink/cdc-sink/source"
)

type options struct {
	brokers, topic, format, mix, part, offsets, expected, stats string
	seed                                                        int64
	snapshotRows, events, keys, rowWidth, partitions, txSize    int
	from, to, lateDistance                                      int
	duplicates, late, rate                                      float64
	tombstones                                                  bool
}

func main() {
	var o options
	flag.StringVar(&o.brokers, "brokers", "127.0.0.1:9092", "Kafka bootstrap servers")
	flag.StringVar(&o.topic, "topic", "bench.loja.public.orders", "topic to produce to (created with -partitions if missing)")
	flag.StringVar(&o.format, "format", "json-schema", "json-schema (JsonConverter schemas.enable=true) | json-plain (schemaless)")
	flag.Int64Var(&o.seed, "seed", 1, "generator seed")
	flag.IntVar(&o.snapshotRows, "snapshot-rows", 5000, "rows of the initial snapshot (the table size before the changes)")
	flag.IntVar(&o.events, "events", 20000, "row changes after the snapshot")
	flag.IntVar(&o.keys, "keys", 0, "key space (default: snapshot-rows + events/4)")
	flag.StringVar(&o.mix, "mix", "0.2,0.7,0.1", "insert,update,delete weights")
	flag.IntVar(&o.rowWidth, "row-width", 200, "extra bytes per row (filler column)")
	flag.IntVar(&o.partitions, "partitions", 2, "topic partitions (records go to murmur2(key) % partitions)")
	flag.IntVar(&o.txSize, "tx-size", 4, "changes per source transaction (0: autocommit, no transaction block)")
	flag.Float64Var(&o.duplicates, "duplicates", 0.02, "fraction of changes redelivered (whole transactions, after a simulated Connect restart)")
	flag.Float64Var(&o.late, "late", 0.01, "fraction of changes also delivered again -late-distance records later (stale, out of order)")
	flag.IntVar(&o.lateDistance, "late-distance", 15000, "how many records later a late copy arrives")
	flag.BoolVar(&o.tombstones, "tombstones", true, "Kafka tombstone after each delete (tombstones.on.delete)")
	flag.StringVar(&o.part, "part", "all", "all | snapshot | changes")
	flag.IntVar(&o.from, "from", 0, "with -part changes: first record index of the changes part")
	flag.IntVar(&o.to, "to", -1, "with -part changes: end index (exclusive; -1: the end)")
	flag.Float64Var(&o.rate, "rate", 0, "records per second (0: as fast as possible)")
	flag.StringVar(&o.offsets, "offsets", "", "append 'partition offset produce_ts_us' per delivered record to this file")
	flag.StringVar(&o.expected, "expected", "", "write the reference final state (JSON lines) here and exit")
	flag.StringVar(&o.stats, "stats", "", "write the stream's counts (JSON) here")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func config(o options) (dbzgen.Config, error) {
	var mix [3]float64
	parts := strings.Split(o.mix, ",")
	if len(parts) != 3 {
		return dbzgen.Config{}, fmt.Errorf("-mix %q: want insert,update,delete", o.mix)
	}
	for i, p := range parts {
		f, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil {
			return dbzgen.Config{}, fmt.Errorf("-mix %q: %v", o.mix, err)
		}
		mix[i] = f
	}
	f := dbzgen.JSONSchema
	switch o.format {
	case "json-schema":
	case "json-plain":
		f = dbzgen.JSONPlain
	default:
		return dbzgen.Config{}, fmt.Errorf("-format %q: json-schema or json-plain", o.format)
	}
	keys := o.keys
	if keys <= 0 {
		keys = o.snapshotRows + o.events/4 + 1
	}
	return dbzgen.Config{
		Seed: o.seed, Partitions: o.partitions, Keys: keys, Events: o.events, SnapshotRows: o.snapshotRows,
		Mix: dbzgen.Mix{Insert: mix[0], Update: mix[1], Delete: mix[2]}, Format: f, Tombstones: o.tombstones,
		TxSize: o.txSize, Duplicates: o.duplicates, RowWidth: o.rowWidth,
	}, nil
}

// split returns the snapshot records and the changes part with the late
// copies inserted (deterministically from the seed).
func split(s *dbzgen.Stream, o options) (snap, changes []*source.Record) {
	n := s.Counts().Snapshot
	snap = s.Records[:n]
	rest := s.Records[n:]
	if o.late <= 0 {
		return snap, rest
	}
	rng := rand.New(rand.NewPCG(uint64(o.seed), 0x1a7e))
	lateAt := map[int][]*source.Record{} // index in rest → copies to emit before it
	var tail []*source.Record
	for i, r := range rest {
		if r.Value == nil || rng.Float64() >= o.late {
			continue
		}
		if at := i + o.lateDistance; at < len(rest) {
			lateAt[at] = append(lateAt[at], r)
		} else {
			tail = append(tail, r)
		}
	}
	changes = make([]*source.Record, 0, len(rest)+len(rest)/50)
	for i, r := range rest {
		changes = append(changes, lateAt[i]...)
		changes = append(changes, r)
	}
	changes = append(changes, tail...)
	return snap, changes
}

func run(o options) error {
	cfg, err := config(o)
	if err != nil {
		return err
	}
	t0 := time.Now()
	s := dbzgen.Generate(cfg)
	snap, changes := split(s, o)
	fmt.Fprintf(os.Stderr, "gen: %d snapshot + %d change records (%s, %.1fs)\n", len(snap), len(changes), o.format, time.Since(t0).Seconds())
	if o.stats != "" {
		c := s.Counts()
		var bytes int64
		for _, r := range s.Records {
			bytes += int64(len(r.Key) + len(r.Value))
		}
		st := map[string]any{"counts": c, "snapshot_records": len(snap), "change_records": len(changes),
			"avg_record_bytes": float64(bytes) / float64(max(1, len(s.Records))), "config": cfg}
		b, _ := json.MarshalIndent(st, "", "  ")
		if err := os.WriteFile(o.stats, b, 0o644); err != nil {
			return err
		}
	}
	if o.expected != "" {
		return writeExpected(o.expected, s)
	}
	var recs []*source.Record
	switch o.part {
	case "all":
		recs = append(append(recs, snap...), changes...)
	case "snapshot":
		recs = snap
	case "changes":
		to := o.to
		if to < 0 || to > len(changes) {
			to = len(changes)
		}
		from := min(max(o.from, 0), to)
		recs = changes[from:to]
	default:
		return fmt.Errorf("-part %q: all, snapshot or changes", o.part)
	}
	return produce(o, recs)
}

func ensureTopic(o options) error {
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": o.brokers})
	if err != nil {
		return err
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := a.CreateTopics(ctx, []kafka.TopicSpecification{{Topic: o.topic, NumPartitions: o.partitions, ReplicationFactor: 1,
		Config: map[string]string{"retention.ms": "-1", "retention.bytes": "-1"}}})
	if err != nil {
		return err
	}
	for _, r := range res {
		if r.Error.Code() != kafka.ErrNoError && r.Error.Code() != kafka.ErrTopicAlreadyExists {
			return fmt.Errorf("create topic %s: %v", r.Topic, r.Error)
		}
	}
	return nil
}

// restamp returns v with every numeric "ts_ms"/"ts_us"/"ts_ns" field set to
// now (source and envelope). Field names inside the schema block are
// followed by a quote, not a digit, and are left alone.
func restamp(v []byte, now time.Time) []byte {
	if v == nil {
		return nil
	}
	out := make([]byte, 0, len(v)+8)
	vals := map[string]int64{`"ts_ms":`: now.UnixMilli(), `"ts_us":`: now.UnixMicro(), `"ts_ns":`: now.UnixNano()}
	for i := 0; i < len(v); {
		j := bytes.Index(v[i:], []byte(`"ts_`))
		if j < 0 || i+j+8 >= len(v) {
			out = append(out, v[i:]...)
			break
		}
		j += i
		val, ok := vals[string(v[j:j+8])]
		k := j + 8
		if !ok || !(v[k] == '-' || (v[k] >= '0' && v[k] <= '9')) {
			out = append(out, v[i:j+1]...)
			i = j + 1
			continue
		}
		e := k + 1
		for e < len(v) && v[e] >= '0' && v[e] <= '9' {
			e++
		}
		out = append(out, v[i:k]...)
		out = strconv.AppendInt(out, val, 10)
		i = e
	}
	return out
}

func produce(o options, recs []*source.Record) error {
	if err := ensureTopic(o); err != nil {
		return err
	}
	p, err := kafka.NewProducer(&kafka.ConfigMap{
		"bootstrap.servers": o.brokers, "linger.ms": 5, "batch.size": 1 << 20, "compression.type": "lz4",
		"acks": "all", "enable.idempotence": true, "queue.buffering.max.messages": 200000,
	})
	if err != nil {
		return err
	}
	defer p.Close()
	var offW *bufio.Writer
	if o.offsets != "" {
		f, err := os.OpenFile(o.offsets, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		offW = bufio.NewWriterSize(f, 1<<20)
		defer offW.Flush()
	}
	done := make(chan error, 1)
	go func() {
		var firstErr error
		n := 0
		for e := range p.Events() {
			m, ok := e.(*kafka.Message)
			if !ok {
				continue
			}
			if m.TopicPartition.Error != nil && firstErr == nil {
				firstErr = m.TopicPartition.Error
			}
			if offW != nil && m.TopicPartition.Error == nil {
				fmt.Fprintf(offW, "%d %d %d\n", m.TopicPartition.Partition, int64(m.TopicPartition.Offset), m.Opaque.(int64))
			}
			n++
			if n == len(recs) {
				break
			}
		}
		done <- firstErr
	}()
	t0 := time.Now()
	for i, r := range recs {
		if o.rate > 0 {
			due := t0.Add(time.Duration(float64(i) / o.rate * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				time.Sleep(d)
			}
		}
		now := time.Now()
		hs := make([]kafka.Header, len(r.Headers))
		for j, h := range r.Headers {
			hs[j] = kafka.Header{Key: h.Key, Value: h.Value}
		}
		part := r.Partition
		m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &o.topic, Partition: part},
			Key: r.Key, Value: restamp(r.Value, now), Headers: hs, Timestamp: now, Opaque: now.UnixMicro()}
		for {
			err := p.Produce(m, nil)
			if err == nil {
				break
			}
			if ke, ok := err.(kafka.Error); ok && ke.Code() == kafka.ErrQueueFull {
				p.Flush(100)
				continue
			}
			return err
		}
	}
	if len(recs) == 0 {
		return nil
	}
	for p.Flush(1000) > 0 {
	}
	if err := <-done; err != nil {
		return err
	}
	el := time.Since(t0).Seconds()
	fmt.Fprintf(os.Stderr, "gen: produced %d records to %s in %.1fs (%.0f/s)\n", len(recs), o.topic, el, float64(len(recs))/el)
	return nil
}

// writeExpected writes one JSON line per key: {"id", "deleted", "row": {col: value}}
// with values normalised for comparison (bench/harness.py normalises the tables
// the same way): decimals as strings with their scale, times as integers
// (microseconds since the epoch, days for dates), tags as lists.
func writeExpected(path string, s *dbzgen.Stream) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	enc := json.NewEncoder(w)
	for _, r := range s.Expected() {
		line := map[string]any{"id": r.ID, "deleted": r.Deleted}
		if !r.Deleted {
			row := map[string]any{}
			for i, c := range dbzgen.Columns {
				v := r.Values[i]
				if d, ok := v.(interface{ StringFixed(int32) string }); ok {
					v = d.StringFixed(2)
				}
				row[c] = v
			}
			line["row"] = row
		}
		if err := enc.Encode(line); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
