package main

// Helpers for the kfake runtime tests (runtime_test.go, binary_test.go).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/internal/dbzgen"
	"github.com/cdcsink/cdc-sink/internal/deltacheck"
	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/source"
	"github.com/cdcsink/cdc-sink/versioning"
)

// testTopic is the topic dbzgen streams use in these tests.
const testTopic = "loja.public.orders"

// testStream generates the demo's kind of stream (snapshot, transactions,
// tombstones, duplicates, TOAST, PK changes, malformed records), sized for
// a 2-core machine.
func testStream(seed int64, events, snapshot, partitions, malformed int) *dbzgen.Stream {
	return dbzgen.Generate(dbzgen.Config{Seed: seed, Prefix: "loja", Schema: "public", Table: "orders",
		Partitions: partitions, Keys: snapshot + events/4, Events: events, SnapshotRows: snapshot, Tombstones: true,
		TxSize: 4, InFlightAtSnapshot: true, Duplicates: 0.05, ToastEvery: 7, PKChangeEvery: 50, Malformed: malformed})
}

// newKfake starts an in-process broker with the stream topic (partitions)
// and the given single-partition quarantine topics.
func newKfake(t *testing.T, partitions int, quarantineTopics ...string) (*kfake.Cluster, []string) {
	t.Helper()
	return newKfakeWith(t, nil, partitions, quarantineTopics...)
}

// newKfakeWith is newKfake with extra cluster options.
func newKfakeWith(t *testing.T, extra []kfake.Opt, partitions int, quarantineTopics ...string) (*kfake.Cluster, []string) {
	t.Helper()
	opts := append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(int32(partitions), testTopic)}, extra...)
	if len(quarantineTopics) > 0 {
		opts = append(opts, kfake.SeedTopics(1, quarantineTopics...))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, c.ListenAddrs()
}

// producer writes records with their stream partition, in order.
type producer struct {
	t  *testing.T
	cl *kgo.Client
}

func newProducer(t *testing.T, brokers []string) *producer {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &producer{t: t, cl: cl}
}

func toKgo(r *source.Record) *kgo.Record {
	kr := &kgo.Record{Topic: r.Topic, Partition: r.Partition, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}
	for _, h := range r.Headers {
		kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	return kr
}

// produce writes recs and checks that every record got the offset the
// stream assigned it (the stream's offsets are the Kafka offsets).
func (p *producer) produce(recs []*source.Record) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	krs := make([]*kgo.Record, len(recs))
	want := make(map[*kgo.Record]*source.Record, len(recs))
	for i, r := range recs {
		krs[i] = toKgo(r)
		want[krs[i]] = r
	}
	res := p.cl.ProduceSync(ctx, krs...) // results in completion order
	if err := res.FirstErr(); err != nil {
		return err
	}
	for _, pr := range res {
		if r := want[pr.Record]; pr.Record.Offset != r.Offset || pr.Record.Partition != r.Partition {
			return fmt.Errorf("record produced at %d@%d, stream says %d@%d", pr.Record.Partition, pr.Record.Offset, r.Partition, r.Offset)
		}
	}
	return nil
}

// chunks splits recs into n consecutive slices (stream order is
// per-partition offset order, so producing them in turn keeps offsets).
func chunks(recs []*source.Record, n int) [][]*source.Record {
	var out [][]*source.Record
	for i := 0; i < n; i++ {
		lo, hi := i*len(recs)/n, (i+1)*len(recs)/n
		if hi > lo {
			out = append(out, recs[lo:hi])
		}
	}
	return out
}

// endOffsets is the next offset per partition after all of the stream.
func endOffsets(s *dbzgen.Stream) map[int32]int64 {
	out := map[int32]int64{}
	for _, r := range s.Records {
		if r.Offset+1 > out[r.Partition] {
			out[r.Partition] = r.Offset + 1
		}
	}
	return out
}

// logSink collects log output (safe for concurrent writes); with
// CDC_SINK_TEST_LOG set it is also copied to stderr.
type logSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
	tag string
}

func (l *logSink) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if os.Getenv("CDC_SINK_TEST_LOG") != "" {
		fmt.Fprintf(os.Stderr, "[%s] %s", l.tag, p)
	}
	return l.buf.Write(p)
}

func (l *logSink) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// count returns how many JSON log lines have msg.
func (l *logSink) count(msg string) int {
	n := 0
	for _, line := range strings.Split(l.String(), "\n") {
		var m struct {
			Msg string `json:"msg"`
		}
		if json.Unmarshal([]byte(line), &m) == nil && m.Msg == msg {
			n++
		}
	}
	return n
}

// testConfig is a sidecar configuration for a kfake cluster: small batches,
// kfake's minimum session timeout, HTTP on a free port.
func testConfig(brokers []string, lake, sink string) *Config {
	cfg := defaultConfig()
	cfg.Sink = sink
	cfg.Kafka.Brokers = brokers
	cfg.Kafka.Topics = []string{testTopic}
	cfg.Kafka.Properties = map[string]string{
		"session.timeout.ms":                 "6000",
		"heartbeat.interval.ms":              "100",
		"topic.metadata.refresh.interval.ms": "1000",
	}
	cfg.Table.PathTemplate = filepath.Join(lake, "{schema}.{table}")
	cfg.Quar.Topic = sink + ".quarantine"
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.Batch = BatchConf{MaxRecords: 100, MaxBytes: 64 << 20, MaxInterval: 50 * time.Millisecond}
	cfg.Log = LogConf{Level: "info", Format: "json"}
	cfg.Merge.ShutdownGrace = 20 * time.Second
	return &cfg
}

// running is one in-process runSink.
type running struct {
	cancel context.CancelFunc
	done   chan error
	addr   string
	log    *logSink
}

// startSink runs runSink in a goroutine; it returns once the HTTP listener
// is up. The sink is stopped (ctx cancelled) at test cleanup.
func startSink(t *testing.T, name string, cfg *Config, h runHooks) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1), log: &logSink{tag: name}}
	addr := make(chan string, 1)
	h.OnListen = func(a string) { addr <- a }
	h.Quiet = true
	h.stdout = io.Discard
	logger := newLogger(cfg.Log, r.log)
	go func() { r.done <- runSink(ctx, cfg, logger, h) }()
	select {
	case r.addr = <-addr:
	case err := <-r.done:
		cancel()
		t.Fatalf("%s: runSink returned before listening: %v", name, err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatalf("%s: no HTTP listener after 30s", name)
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(60 * time.Second):
			t.Errorf("%s: runSink did not return at cleanup", name)
		}
	})
	return r
}

// stop cancels the sink (SIGTERM) and returns runSink's result and how long it took.
func (r *running) stop(t *testing.T, within time.Duration) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // cleanup reads it again
		return time.Since(start), err
	case <-time.After(within):
		t.Fatalf("runSink did not return within %v of cancellation", within)
	}
	return 0, nil
}

// waitUntil polls cond every 20ms until it holds; it fails the test at the deadline.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

// tableDir is where testConfig routes the stream topic.
func tableDir(lake string) string { return filepath.Join(lake, "public.orders") }

// checkS3 is how the table checks below reach an s3:// table (set by the
// test that writes one; tests in this package do not run in parallel).
var checkS3 struct {
	opts delta.StorageOptions
	rs   map[string]string // delta-rs storage options
}

// checkStorage opens dir, a local directory or an s3:// location.
func checkStorage(dir string) (delta.Storage, error) {
	if strings.HasPrefix(dir, "s3://") {
		return delta.OpenStorage(context.Background(), dir, checkS3.opts)
	}
	return delta.NewLocalStorage(dir), nil
}

// diskVersion is the newest committed version in dir's _delta_log (-1: none).
func diskVersion(dir string) int64 {
	st, err := checkStorage(dir)
	if err != nil {
		return -1
	}
	v, err := delta.OpenTable(st, "").LatestVersion(context.Background())
	if err != nil {
		return -1
	}
	return v
}

// tableProgress reads the sink's per-partition next offsets and the table
// version from the Delta log (not through the running sink's objects).
func tableProgress(t *testing.T, dir, sink string) (map[int32]int64, int64) {
	t.Helper()
	return topicProgress(t, dir, sink, testTopic)
}

// topicProgress is tableProgress for the partitions of another topic.
func topicProgress(t *testing.T, dir, sink, topic string) (map[int32]int64, int64) {
	t.Helper()
	st, err := checkStorage(dir)
	if err != nil {
		return map[int32]int64{}, -1
	}
	snap, err := delta.OpenTable(st, "").Snapshot(context.Background())
	if err != nil {
		return map[int32]int64{}, -1
	}
	out := map[int32]int64{}
	prefix := sink + "/" + topic + "/"
	for app, txn := range snap.Txns() {
		if p, ok := strings.CutPrefix(app, prefix); ok {
			var n int32
			if _, err := fmt.Sscan(p, &n); err != nil {
				t.Fatalf("txn appId %q", app)
			}
			out[n] = txn.Version
		}
	}
	return out, snap.Version()
}

// caughtUp reports whether the table's offsets reach end for every partition.
func caughtUp(t *testing.T, dir, sink string, end map[int32]int64) bool {
	got, _ := tableProgress(t, dir, sink)
	for p, e := range end {
		if got[p] < e {
			return false
		}
	}
	return true
}

// checkTable asserts the table equals the stream's model, its recorded
// offsets equal the stream's end offsets, and delta-rs reads the same rows
// at the same version.
func checkTable(t *testing.T, dir, sink string, s *dbzgen.Stream) {
	t.Helper()
	ctx := context.Background()
	tb, err := merge.Open(ctx, dir, merge.Options{Sink: sink, StorageOptions: checkS3.opts})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := tb.Rows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := s.Expected()
	if bad := compareExpected(rows, want); bad != "" {
		t.Errorf("table differs from the source model: %s", bad)
	}
	// Every key holds the version of its final change (the model's source
	// position), not just equal values.
	for _, r := range rows {
		k := fmt.Sprint(r["id"])
		w, ok := want[k]
		if !ok {
			continue // compareExpected reported it
		}
		vs, _ := r["_cdc_source_version"].(string)
		v, err := versioning.ParseVersion(vs)
		if err != nil {
			t.Errorf("key %s: _cdc_source_version %q: %v", k, vs, err)
			continue
		}
		if v.Commit != w.Commit || v.LSN != w.LSN || (v.Phase == versioning.PhaseSnapshot) != w.Snapshot {
			t.Errorf("key %s: version %s, the model's final change is commit %x lsn %x snapshot %v", k, vs, w.Commit, w.LSN, w.Snapshot)
		}
	}
	offs, ver := tableProgress(t, dir, sink)
	end := endOffsets(s)
	if fmt.Sprint(offs) != fmt.Sprint(end) {
		t.Errorf("offsets in the table %v, end of the topic %v", offs, end)
	}
	if ver != diskVersion(dir) || ver != tb.Version() {
		t.Errorf("versions: snapshot %d, log %d, merge %d", ver, diskVersion(dir), tb.Version())
	}
	var rs deltacheck.Table
	if strings.HasPrefix(dir, "s3://") {
		rs = deltacheck.ReadDeltaRSWith(t, dir, "", checkS3.rs)
	} else {
		rs = deltacheck.ReadDeltaRS(t, dir, "")
	}
	if rs.Version != ver {
		t.Errorf("delta-rs reads version %d, table is at %d", rs.Version, ver)
	}
	if len(rs.Rows) != len(want) {
		t.Errorf("delta-rs reads %d rows, the model has %d keys", len(rs.Rows), len(want))
	}
}

// quarantined reads every quarantine record of topic with franz-go (raw:
// key, value, headers as stored).
func quarantined(t *testing.T, brokers []string, topic string) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	end := listEnd(t, cl, topic) // then read up to them
	var out []*kgo.Record
	seen := map[int32]int64{}
	for {
		done := true
		for p, e := range end {
			if seen[p] < e {
				done = false
			}
		}
		if done {
			break
		}
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("reading %s: %v (have %v of %v)", topic, err, seen, end)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("reading %s: %v", topic, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset < end[r.Partition] {
				out = append(out, r)
			}
			seen[r.Partition] = r.Offset + 1
		})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Partition != out[j].Partition {
			return out[i].Partition < out[j].Partition
		}
		return out[i].Offset < out[j].Offset
	})
	return out
}

// listEnd returns the high watermark of every non-empty partition of topic.
func listEnd(t *testing.T, cl *kgo.Client, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mreq := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	mreq.Topics = append(mreq.Topics, mt)
	mresp, err := mreq.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("metadata %s: %v", topic, err)
	}
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for _, mt := range mresp.Topics {
		if err := kerr.ErrorForCode(mt.ErrorCode); err != nil {
			t.Fatalf("metadata %s: %v", topic, err)
		}
		for _, p := range mt.Partitions {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition = p.Partition
			rp.Timestamp = -1 // latest
			rt.Partitions = append(rt.Partitions, rp)
		}
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("list offsets %s: %v", topic, err)
	}
	out := map[int32]int64{}
	for _, rt := range resp.Topics {
		for _, p := range rt.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				t.Fatalf("list offsets %s/%d: %v", topic, p.Partition, err)
			}
			if p.Offset > 0 {
				out[p.Partition] = p.Offset
			}
		}
	}
	return out
}

// httpGet returns the status and body of url.
func httpGet(t *testing.T, url string) (int, []byte) {
	t.Helper()
	cl := &http.Client{Timeout: 10 * time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// progressOf decodes /progress.
func progressOf(t *testing.T, addr string) progressJSON {
	t.Helper()
	code, b := httpGet(t, "http://"+addr+"/progress")
	if code != 200 {
		t.Fatalf("/progress: %d %s", code, b)
	}
	var p progressJSON
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatalf("/progress: %v: %s", err, b)
	}
	return p
}

// freePort returns a loopback address that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// httpGetMaybe is httpGet without failing on connection errors.
func httpGetMaybe(url string) (int, []byte) {
	cl := &http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}
