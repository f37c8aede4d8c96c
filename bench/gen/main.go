// Command gen produces a deterministic Debezium change stream (JSON with or
// without schemas, or Confluent Avro)
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
//	go run ./bench/gen -format avro -registry http://127.0.0.1:8080/apis/ccompat/v7 ...
//	go run ./bench/gen -format avro -out /tmp/avro.jsonl -decode ...  # dry run: stream file + decode rate
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/internal/dbzgen"
	"github.com/cdcsink/cdc-sink/source"
)

type options struct {
	brokers, topic, format, mix, part, offsets, expected, stats string
	changesFile, registry, out, txTopic                         string
	seed                                                        int64
	snapshotRows, events, keys, rowWidth, partitions, txSize    int
	from, to, lateDistance                                      int
	duplicates, late, rate                                      float64
	tombstones                                                  bool
	decode                                                      bool
	avro                                                        *dbzgen.AvroCodec // -format avro
}

func main() {
	var o options
	flag.StringVar(&o.brokers, "brokers", "127.0.0.1:9092", "Kafka bootstrap servers")
	flag.StringVar(&o.topic, "topic", "bench.loja.public.orders", "topic to produce to (created with -partitions if missing)")
	flag.StringVar(&o.format, "format", "json-schema", "json-schema (JsonConverter schemas.enable=true) | json-plain (schemaless) | avro (AvroConverter, Confluent framing; needs -registry or -out)")
	flag.StringVar(&o.registry, "registry", "", "with -format avro: Confluent-compatible schema registry URL the key/value schemas are registered in (subjects <topic>-key, <topic>-value)")
	flag.BoolVar(&o.decode, "decode", false, "with -out: also decode every written record with the envelope decoder and print events per CPU-second")
	flag.StringVar(&o.out, "out", "", "dry run: write the selected -part as kcat JSON lines to this file instead of producing (Avro: ids 1/2 unless -registry; the schemas go to <out>.key.avsc/.value.avsc)")
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
	flag.StringVar(&o.txTopic, "tx-topic", "", "also write Debezium's transaction metadata: the END record of each transaction to this topic (one partition) right after the transaction's last record (provide.transaction.metadata=true; JSON formats, needs -tx-size ≥ 1)")
	flag.StringVar(&o.changesFile, "changes-file", "", "cache of the changes part (kcat JSON lines): written when the stream is generated, read by -part changes instead of generating the whole stream again (10M snapshot rows take minutes and GBs)")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func config(o options) (dbzgen.Config, error) {
	if o.txTopic != "" && (o.format == "avro" || o.txSize < 1) {
		return dbzgen.Config{}, fmt.Errorf("-tx-topic needs a JSON -format and -tx-size ≥ 1")
	}
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
	case "json-plain", "avro": // avro: transcoded from the schemaless records
		f = dbzgen.JSONPlain
	default:
		return dbzgen.Config{}, fmt.Errorf("-format %q: json-schema, json-plain or avro", o.format)
	}
	if o.format == "avro" && o.registry == "" && o.out == "" && o.expected == "" && o.stats == "" {
		return dbzgen.Config{}, fmt.Errorf("-format avro needs -registry (or -out for a dry run)")
	}
	keys := o.keys
	if keys <= 0 {
		keys = o.snapshotRows + o.events/4 + 1
	}
	return dbzgen.Config{
		Seed: o.seed, Partitions: o.partitions, Keys: keys, Events: o.events, SnapshotRows: o.snapshotRows,
		Mix: dbzgen.Mix{Insert: mix[0], Update: mix[1], Delete: mix[2]}, Format: f, Tombstones: o.tombstones,
		TxSize: o.txSize, Duplicates: o.duplicates, RowWidth: o.rowWidth,
		// the snapshot is encoded while it is produced: at 10M rows the
		// encoded stream would not fit in memory
		LazySnapshot: true,
	}, nil
}

// changes returns the part after the snapshot with the late copies
// inserted (deterministically from the seed).
// endMarker is the topic of the END records in the changes part (and its
// cache): they are produced to -tx-topic, whatever its name in this run.
const endMarker = "dbzgen.transaction-end"

func changes(s *dbzgen.Stream, o options) []*source.Record {
	rest := s.Records // LazySnapshot: the records after the snapshot
	if o.txTopic != "" {
		ends := s.TxEnds(endMarker)
		with := make([]*source.Record, 0, len(rest)+len(ends))
		for _, r := range rest {
			with = append(with, r)
			if e, ok := ends[r]; ok {
				with = append(with, e)
			}
		}
		rest = with
	}
	if o.late <= 0 {
		return rest
	}
	rng := rand.New(rand.NewPCG(uint64(o.seed), 0x1a7e))
	lateAt := map[int][]*source.Record{} // index in rest → copies to emit before it
	var tail []*source.Record
	for i, r := range rest {
		if r.Value == nil || r.Topic == endMarker || rng.Float64() >= o.late {
			continue
		}
		if at := i + o.lateDistance; at < len(rest) {
			lateAt[at] = append(lateAt[at], r)
		} else {
			tail = append(tail, r)
		}
	}
	out := make([]*source.Record, 0, len(rest)+len(rest)/50)
	for i, r := range rest {
		out = append(out, lateAt[i]...)
		out = append(out, r)
	}
	return append(out, tail...)
}

func run(o options) error {
	cfg, err := config(o)
	if err != nil {
		return err
	}
	if o.format == "avro" && o.expected == "" && o.stats == "" {
		if o.avro, err = avroCodec(o, cfg); err != nil {
			return err
		}
	}
	t0 := time.Now()
	if o.part == "changes" && o.changesFile != "" && o.expected == "" && o.stats == "" {
		chg, err := loadChanges(o.changesFile)
		if err == nil {
			n, recs := changesRange(o, chg)
			return produce(o, n, recs)
		}
		if !os.IsNotExist(err) {
			return err
		}
	}
	s := dbzgen.Generate(cfg)
	chg := changes(s, o)
	if o.changesFile != "" {
		if err := saveChanges(o.changesFile, chg); err != nil {
			return err
		}
	}
	nSnap := s.Counts().Snapshot
	fmt.Fprintf(os.Stderr, "gen: %d snapshot + %d change records (%s, %.1fs)\n", nSnap, len(chg), o.format, time.Since(t0).Seconds())
	if o.stats != "" {
		c := s.Counts()
		var bytes int64
		count := func(r *source.Record) error { bytes += int64(len(r.Key) + len(r.Value)); return nil }
		_ = s.EachSnapshot(count)
		for _, r := range s.Records {
			_ = count(r)
		}
		n := nSnap + len(s.Records)
		st := map[string]any{"counts": c, "snapshot_records": nSnap, "change_records": len(chg),
			"avg_record_bytes": float64(bytes) / float64(max(1, n)), "config": cfg}
		b, _ := json.MarshalIndent(st, "", "  ")
		if err := os.WriteFile(o.stats, b, 0o644); err != nil {
			return err
		}
	}
	if o.expected != "" {
		return writeExpected(o.expected, s)
	}
	switch o.part {
	case "all":
		return produce(o, nSnap+len(chg), func(fn func(*source.Record) error) error {
			if err := s.EachSnapshot(fn); err != nil {
				return err
			}
			return each(chg)(fn)
		})
	case "snapshot":
		return produce(o, nSnap, s.EachSnapshot)
	case "changes":
		n, recs := changesRange(o, chg)
		return produce(o, n, recs)
	default:
		return fmt.Errorf("-part %q: all, snapshot or changes", o.part)
	}
}

// changesRange selects -from/-to of the changes part.
func changesRange(o options, chg []*source.Record) (int, func(func(*source.Record) error) error) {
	to := o.to
	if to < 0 || to > len(chg) {
		to = len(chg)
	}
	from := min(max(o.from, 0), to)
	return to - from, each(chg[from:to])
}

func each(recs []*source.Record) func(func(*source.Record) error) error {
	return func(fn func(*source.Record) error) error {
		for _, r := range recs {
			if err := fn(r); err != nil {
				return err
			}
		}
		return nil
	}
}

// saveChanges writes the changes part as kcat JSON lines (to a temporary
// name, then renamed: a reader never sees half a file).
func saveChanges(path string, recs []*source.Record) error {
	if err := dbzgen.WriteKcatFile(path+".tmp", recs); err != nil {
		return fmt.Errorf("save changes: %w", err)
	}
	return os.Rename(path+".tmp", path)
}

// loadChanges reads what saveChanges wrote.
func loadChanges(path string) ([]*source.Record, error) {
	return source.ReadFile(path, source.FileOptions{})
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

// avroCodec derives the stream's Avro schemas and registers them (subjects
// <topic>-key and <topic>-value), or numbers them 1 and 2 for a dry run.
func avroCodec(o options, cfg dbzgen.Config) (*dbzgen.AvroCodec, error) {
	ac, err := dbzgen.NewAvroCodec(cfg)
	if err != nil {
		return nil, err
	}
	if o.registry == "" {
		ac.SetIDs(1, 2)
		for _, f := range []struct{ name, schema string }{{".key.avsc", ac.KeySchema}, {".value.avsc", ac.ValueSchema}} {
			if err := os.WriteFile(o.out+f.name, []byte(f.schema), 0o644); err != nil {
				return nil, err
			}
		}
		return ac, nil
	}
	var ids [2]int
	for i, f := range []struct{ subject, schema string }{{o.topic + "-key", ac.KeySchema}, {o.topic + "-value", ac.ValueSchema}} {
		if ids[i], err = register(o.registry, f.subject, f.schema); err != nil {
			return nil, err
		}
	}
	ac.SetIDs(ids[0], ids[1])
	return ac, nil
}

// register posts schema under subject (Confluent API; Apicurio: its
// .../apis/ccompat/v7 endpoint) and returns its id.
func register(url, subject, schema string) (int, error) {
	body, _ := json.Marshal(map[string]string{"schema": schema, "schemaType": "AVRO"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(url, "/")+"/subjects/"+subject+"/versions", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/vnd.schemaregistry.v1+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("register %s: %w", subject, err)
	}
	defer resp.Body.Close()
	var r struct {
		ID int `json:"id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode/100 != 2 || r.ID <= 0 {
		return 0, fmt.Errorf("register %s: HTTP %d (%v)", subject, resp.StatusCode, err)
	}
	return r.ID, nil
}

// dryRun writes the n records to -out (kcat JSON lines) and, with -decode,
// decodes them all and reports the decoder's events per CPU-second.
func dryRun(o options, n int, yield func(func(*source.Record) error) error) error {
	var recs []*source.Record
	var nbytes int64
	err := yield(func(r *source.Record) error {
		if o.avro != nil {
			var err error
			if r, err = o.avro.Record(r); err != nil {
				return err
			}
		}
		nbytes += int64(len(r.Key) + len(r.Value))
		recs = append(recs, r)
		return nil
	})
	if err != nil {
		return err
	}
	if len(recs) != n {
		return fmt.Errorf("wrote %d records, expected %d", len(recs), n)
	}
	if err := dbzgen.WriteKcatFile(o.out, recs); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "gen: wrote %d records (%s, %.0f B/record) to %s\n", n, o.format, float64(nbytes)/float64(max(1, n)), o.out)
	if !o.decode {
		return nil
	}
	opts := envelope.Options{}
	if o.avro != nil {
		reg := envelope.NewMemoryRegistry()
		reg.Set(1, o.avro.KeySchema)
		reg.Set(2, o.avro.ValueSchema)
		opts.Registry = reg
	}
	d := envelope.NewDecoder(opts)
	ctx := context.Background()
	var bad int
	decodeAll := func() {
		for _, r := range recs {
			if _, err := d.Decode(ctx, r); err != nil {
				bad++
			}
		}
	}
	decodeAll() // warm: schemas compiled, caches filled
	bad = 0
	cpu0, t0 := cpuTime(), time.Now()
	rounds := 0
	for rounds == 0 || time.Since(t0) < 3*time.Second {
		decodeAll()
		rounds++
	}
	cpu, wall := cpuTime()-cpu0, time.Since(t0)
	ev := float64(rounds * len(recs))
	fmt.Fprintf(os.Stderr, "gen: decode %s: %d records x %d rounds, %.0f ns/record, %.0f events/cpu-s, %.0f events/s (%d malformed per round)\n",
		o.format, len(recs), rounds, float64(wall.Nanoseconds())/ev, ev/cpu.Seconds(), ev/wall.Seconds(), bad/rounds)
	return nil
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// produce sends the n records each yields, in order, at -rate.
func produce(o options, n int, yield func(func(*source.Record) error) error) error {
	if o.out != "" {
		return dryRun(o, n, yield)
	}
	if err := ensureTopic(o); err != nil {
		return err
	}
	if o.txTopic != "" {
		t := o
		t.topic, t.partitions = o.txTopic, 1
		if err := ensureTopic(t); err != nil {
			return err
		}
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
		got := 0
		for e := range p.Events() {
			m, ok := e.(*kafka.Message)
			if !ok {
				continue
			}
			if m.TopicPartition.Error != nil && firstErr == nil {
				firstErr = m.TopicPartition.Error
			}
			if offW != nil && m.TopicPartition.Error == nil && m.Opaque.(int64) >= 0 { // not an END
				fmt.Fprintf(offW, "%d %d %d\n", m.TopicPartition.Partition, int64(m.TopicPartition.Offset), m.Opaque.(int64))
			}
			got++
			if got == n {
				break
			}
		}
		done <- firstErr
	}()
	t0 := time.Now()
	i := 0
	err = yield(func(r *source.Record) error {
		if o.rate > 0 {
			due := t0.Add(time.Duration(float64(i) / o.rate * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				time.Sleep(d)
			}
		}
		i++
		now := time.Now()
		hs := make([]kafka.Header, len(r.Headers))
		for j, h := range r.Headers {
			hs[j] = kafka.Header{Key: h.Key, Value: h.Value}
		}
		if r.Topic == endMarker {
			if o.txTopic == "" {
				return fmt.Errorf("the changes hold END records (-changes-file %s was written with -tx-topic): give -tx-topic", o.changesFile)
			}
			m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &o.txTopic, Partition: 0},
				Key: r.Key, Value: r.Value, Timestamp: now, Opaque: int64(-1)}
			return send(p, m)
		}
		key, val := r.Key, restamp(r.Value, now)
		if o.avro != nil { // restamped as JSON, then transcoded
			ar, err := o.avro.Record(&source.Record{Key: key, Value: val})
			if err != nil {
				return err
			}
			key, val = ar.Key, ar.Value
		}
		m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &o.topic, Partition: r.Partition},
			Key: key, Value: val, Headers: hs, Timestamp: now, Opaque: now.UnixMicro()}
		return send(p, m)
	})
	if err != nil {
		return err
	}
	if i != n {
		return fmt.Errorf("produced %d records, expected %d", i, n)
	}
	if n == 0 {
		return nil
	}
	for p.Flush(1000) > 0 {
	}
	if err := <-done; err != nil {
		return err
	}
	el := time.Since(t0).Seconds()
	fmt.Fprintf(os.Stderr, "gen: produced %d records to %s in %.1fs (%.0f/s)\n", n, o.topic, el, float64(n)/el)
	return nil
}

// send produces m, waiting while the producer's queue is full.
func send(p *kafka.Producer, m *kafka.Message) error {
	for {
		err := p.Produce(m, nil)
		if err == nil {
			return nil
		}
		if ke, ok := err.(kafka.Error); ok && ke.Code() == kafka.ErrQueueFull {
			p.Flush(100)
			continue
		}
		return err
	}
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
	err = s.EachExpected(func(r dbzgen.Row) error {
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
		return enc.Encode(line)
	})
	if err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
