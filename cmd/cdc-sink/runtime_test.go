package main

// Runtime tests of the sidecar (runSink) against an in-process Kafka
// (kfake): kill and restart, rebalance between instances, quarantine
// contents, shutdown during a batch, quarantine outage, secrets, config.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cdcsink/cdc-sink/internal/dbzgen"
	"github.com/cdcsink/cdc-sink/internal/deltacheck"
	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/cdcsink/cdc-sink/source"
)

// gatedProducer produces chunks[0] at once and each later chunk once the
// table has committed a new version since the previous chunk, so records
// keep arriving while the sink consumes, restarts and rebalances.
func gatedProducer(t *testing.T, brokers []string, dir string, cs [][]*source.Record) <-chan error {
	t.Helper()
	p := newProducer(t, brokers)
	if err := p.produce(cs[0]); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		last := diskVersion(dir)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		deadline := time.Now().Add(2 * time.Minute)
		for _, c := range cs[1:] {
			for diskVersion(dir) <= last {
				if time.Now().After(deadline) {
					done <- fmt.Errorf("producer: table stuck at version %d", last)
					return
				}
				<-tick.C
			}
			last = diskVersion(dir)
			if err := p.produce(c); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	return done
}

func waitProduced(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("producer did not finish")
	}
}

// malformedReasons is the reason each dbzgen malformed kind (index mod 4)
// gets: truncated JSON, unknown op, a decimal whose bytes are not base64
// (type_mismatch, docs/quarantine.md), missing after.
var malformedReasons = [4]quarantine.Reason{quarantine.MalformedJSON, quarantine.UnknownOp,
	quarantine.TypeMismatch, quarantine.MissingAfter}

func header(r *kgo.Record, key string) (string, bool) {
	for i := len(r.Headers) - 1; i >= 0; i-- {
		if r.Headers[i].Key == key {
			return string(r.Headers[i].Value), true
		}
	}
	return "", false
}

// checkQuarantineCoords asserts that the quarantine topic holds every
// malformed record of s (at least once: the contract is at-least-once) and
// nothing else.
func checkQuarantineCoords(t *testing.T, brokers []string, qtopic string, s *dbzgen.Stream) []*kgo.Record {
	t.Helper()
	recs := quarantined(t, brokers, qtopic)
	want := map[dbzgen.Coord]bool{}
	for _, c := range s.Malformed() {
		want[c] = false
	}
	for _, r := range recs {
		topic, _ := header(r, quarantine.HeaderSourceTopic)
		ps, _ := header(r, quarantine.HeaderSourcePartition)
		ofs, _ := header(r, quarantine.HeaderSourceOffset)
		p, err1 := strconv.ParseInt(ps, 10, 32)
		o, err2 := strconv.ParseInt(ofs, 10, 64)
		if err1 != nil || err2 != nil {
			t.Errorf("quarantine record %d@%d: bad coordinates %q %q", r.Partition, r.Offset, ps, ofs)
			continue
		}
		c := dbzgen.Coord{Topic: topic, Partition: int32(p), Offset: o}
		if _, ok := want[c]; !ok {
			t.Errorf("quarantine holds %v, which is not a malformed record", c)
			continue
		}
		want[c] = true
	}
	for c, seen := range want {
		if !seen {
			t.Errorf("malformed record %v is not in the quarantine topic", c)
		}
	}
	if len(recs) != len(want) {
		t.Logf("quarantine: %d records for %d malformed (duplicates from retries are allowed)", len(recs), len(want))
	}
	return recs
}

// Kill (ctx cancel) and restart while records are being produced: three
// runs are stopped after the table gained 1, 3 and 2 versions, a fourth
// catches up; the table equals the model and quarantine holds exactly the
// malformed records.
func TestRuntimeKillRestartMidStream(t *testing.T) {
	s := testStream(11, 1500, 300, 3, 8)
	const sink = "rt-kill"
	_, brokers := newKfake(t, 3, sink+".quarantine")
	lake := t.TempDir()
	dir := tableDir(lake)
	cfg := testConfig(brokers, lake, sink)
	produced := gatedProducer(t, brokers, dir, chunks(s.Records, 10))

	for i, step := range []int64{1, 3, 2} {
		r := startSink(t, fmt.Sprintf("run%d", i), cfg, runHooks{})
		from := diskVersion(dir)
		waitUntil(t, time.Minute, fmt.Sprintf("run %d: %d new table versions after %d", i, step, from),
			func() bool { return diskVersion(dir) >= from+step })
		if took, err := r.stop(t, time.Minute); err != nil {
			t.Fatalf("run %d: runSink after cancel: %v", i, err)
		} else {
			offs, v := tableProgress(t, dir, sink)
			t.Logf("run %d stopped in %v at version %d, offsets %v", i, took.Round(time.Millisecond), v, offs)
		}
	}
	r := startSink(t, "final", cfg, runHooks{})
	waitProduced(t, produced)
	end := endOffsets(s)
	waitUntil(t, 2*time.Minute, "the table to reach the end offsets", func() bool { return caughtUp(t, dir, sink, end) })
	if _, err := r.stop(t, time.Minute); err != nil {
		t.Fatalf("final run: %v", err)
	}
	checkTable(t, dir, sink, s)
	checkQuarantineCoords(t, brokers, sink+".quarantine", s)
}

// Two instances in one group share the topic's partitions and the table;
// the second joins while the first consumes, then the first leaves. Records
// are produced throughout, in phases tied to those steps so that each
// instance is sure to have work.
func TestRuntimeRebalanceTwoInstances(t *testing.T) {
	s := testStream(22, 1800, 300, 3, 8)
	const sink = "rt-rebal"
	_, brokers := newKfake(t, 3, sink+".quarantine")
	lake := t.TempDir()
	dir := tableDir(lake)
	cs := chunks(s.Records, 12)
	owned := func(r *running) int { return r.log.count("partition assigned") - r.log.count("partition revoked") }

	phase1 := gatedProducer(t, brokers, dir, cs[:4])
	a := startSink(t, "A", testConfig(brokers, lake, sink), runHooks{})
	waitUntil(t, time.Minute, "A to own all 3 partitions", func() bool { return owned(a) == 3 })
	waitProduced(t, phase1)
	b := startSink(t, "B", testConfig(brokers, lake, sink), runHooks{})
	waitUntil(t, time.Minute, "B to be assigned partitions taken from A", func() bool {
		return owned(b) >= 1 && owned(a)+owned(b) == 3
	})
	phase2 := gatedProducer(t, brokers, dir, cs[4:8])
	waitUntil(t, time.Minute, "B to apply records while A still runs", func() bool {
		return progressOf(t, b.addr).Totals["records"] > 0
	})
	from := diskVersion(dir)
	waitUntil(t, time.Minute, "two more versions with both instances", func() bool { return diskVersion(dir) >= from+2 })
	aRecs := progressOf(t, a.addr).Totals["records"]
	if _, err := a.stop(t, time.Minute); err != nil {
		t.Fatalf("A: %v", err)
	}
	waitUntil(t, time.Minute, "B to own all 3 partitions", func() bool { return owned(b) == 3 })
	waitProduced(t, phase2)
	waitProduced(t, gatedProducer(t, brokers, dir, cs[8:]))
	end := endOffsets(s)
	waitUntil(t, 2*time.Minute, "the table to reach the end offsets", func() bool { return caughtUp(t, dir, sink, end) })
	bRecs := progressOf(t, b.addr).Totals["records"]
	if _, err := b.stop(t, time.Minute); err != nil {
		t.Fatalf("B: %v", err)
	}
	const conflict = "concurrent commit won, re-planning batch"
	t.Logf("A applied %d records, B %d; %d produced; commit conflicts re-planned: A %d, B %d",
		aRecs, bRecs, len(s.Records), a.log.count(conflict), b.log.count(conflict))
	if aRecs == 0 || bRecs == 0 {
		t.Errorf("both instances should have applied records: A %d, B %d", aRecs, bRecs)
	}
	checkTable(t, dir, sink, s)
	checkQuarantineCoords(t, brokers, sink+".quarantine", s)
}

// Two instances process a re-snapshot (dbzgen Resnapshot: op=r rows that
// start a new versioning epoch in their partition), then one leaves and the
// other takes over its partitions and applies the changes that follow.
//
// Regression: every commit used to write the whole versioning-tracker domain
// (cdcsink.tracker.<sink>) from the committing instance's in-memory view,
// including partitions another instance owns, so each instance overwrote the
// other's newer per-partition state (here: the epoch bumped by the
// re-snapshot). The instance taking the partitions over then assigned the old
// epoch to later changes and the version guard dropped them (52 keys wrong
// with this seed). merge now persists only the batch's own partitions
// (merge.TestTrackerStateOfOtherPartitionsKept).
func TestRuntimeRebalanceResnapshot(t *testing.T) {
	s := dbzgen.Generate(dbzgen.Config{Seed: 23, Prefix: "loja", Schema: "public", Table: "orders",
		Partitions: 3, Keys: 300 + 1800/4, Events: 1800, SnapshotRows: 300, Tombstones: true,
		TxSize: 4, InFlightAtSnapshot: true, ToastEvery: 7, Resnapshot: true})
	const sink = "rt-resnap"
	_, brokers := newKfake(t, 3, sink+".quarantine")
	lake := t.TempDir()
	dir := tableDir(lake)
	cs := chunks(s.Records, 12) // the re-snapshot is in chunks 9-10
	owned := func(r *running) int { return r.log.count("partition assigned") - r.log.count("partition revoked") }

	phase1 := gatedProducer(t, brokers, dir, cs[:2])
	a := startSink(t, "A", testConfig(brokers, lake, sink), runHooks{})
	waitUntil(t, time.Minute, "A to own all 3 partitions", func() bool { return owned(a) == 3 })
	waitProduced(t, phase1)
	b := startSink(t, "B", testConfig(brokers, lake, sink), runHooks{})
	waitUntil(t, time.Minute, "B to be assigned partitions taken from A", func() bool {
		return owned(b) >= 1 && owned(a)+owned(b) == 3
	})
	waitProduced(t, gatedProducer(t, brokers, dir, cs[2:11]))
	var through []*source.Record
	for _, c := range cs[:11] {
		through = append(through, c...)
	}
	mid := endOffsets(&dbzgen.Stream{Records: through})
	waitUntil(t, time.Minute, "both to apply the re-snapshot", func() bool { return caughtUp(t, dir, sink, mid) })
	if _, err := a.stop(t, time.Minute); err != nil {
		t.Fatalf("A: %v", err)
	}
	waitUntil(t, time.Minute, "B to own all 3 partitions", func() bool { return owned(b) == 3 })
	waitProduced(t, gatedProducer(t, brokers, dir, cs[11:]))
	end := endOffsets(s)
	waitUntil(t, time.Minute, "the table to reach the end offsets", func() bool { return caughtUp(t, dir, sink, end) })
	if _, err := b.stop(t, time.Minute); err != nil {
		t.Fatalf("B: %v", err)
	}
	checkTable(t, dir, sink, s)
}

// The quarantine record is the original record byte for byte (key, value,
// headers) followed by exactly the cdc-sink.* headers with the right values.
func TestRuntimeQuarantineByteExact(t *testing.T) {
	s := testStream(33, 600, 100, 3, 12)
	const sink = "rt-qexact"
	qtopic := sink + ".quarantine"
	_, brokers := newKfake(t, 3, qtopic)
	lake := t.TempDir()
	dir := tableDir(lake)
	if err := newProducer(t, brokers).produce(s.Records); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	r := startSink(t, "sink", testConfig(brokers, lake, sink), runHooks{})
	end := endOffsets(s)
	waitUntil(t, time.Minute, "the table to reach the end offsets", func() bool { return caughtUp(t, dir, sink, end) })
	if _, err := r.stop(t, time.Minute); err != nil {
		t.Fatal(err)
	}
	finished := time.Now()
	checkTable(t, dir, sink, s)
	recs := checkQuarantineCoords(t, brokers, qtopic, s)

	orig := map[dbzgen.Coord]*source.Record{}
	kind := map[dbzgen.Coord]int{}
	for _, r := range s.Records {
		orig[dbzgen.Coord{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}] = r
	}
	for i, c := range s.Malformed() {
		kind[c] = i % 4
	}
	_, lastBatch := tableProgress(t, dir, sink)
	for _, q := range recs {
		at := fmt.Sprintf("quarantine %d@%d", q.Partition, q.Offset)
		n := len(q.Headers) - len(quarantine.HeaderNames)
		if n < 0 {
			t.Errorf("%s: %d headers", at, len(q.Headers))
			continue
		}
		h := map[string]string{}
		for i, name := range quarantine.HeaderNames {
			if q.Headers[n+i].Key != name {
				t.Errorf("%s: header %d is %q, want %q", at, n+i, q.Headers[n+i].Key, name)
			}
			h[name] = string(q.Headers[n+i].Value)
		}
		p, _ := strconv.ParseInt(h[quarantine.HeaderSourcePartition], 10, 32)
		o, _ := strconv.ParseInt(h[quarantine.HeaderSourceOffset], 10, 64)
		c := dbzgen.Coord{Topic: h[quarantine.HeaderSourceTopic], Partition: int32(p), Offset: o}
		src := orig[c]
		if src == nil {
			t.Errorf("%s: source %v unknown", at, c)
			continue
		}
		if !bytes.Equal(q.Key, src.Key) {
			t.Errorf("%s: key %q, original %q", at, q.Key, src.Key)
		}
		if !bytes.Equal(q.Value, src.Value) || (q.Value == nil) != (src.Value == nil) {
			t.Errorf("%s: value differs from the original (%d vs %d bytes)", at, len(q.Value), len(src.Value))
		}
		if n != len(src.Headers) {
			t.Errorf("%s: %d original headers, source had %d", at, n, len(src.Headers))
		} else {
			for i, sh := range src.Headers {
				if q.Headers[i].Key != sh.Key || !bytes.Equal(q.Headers[i].Value, sh.Value) {
					t.Errorf("%s: header %d is %q=%q, original %q=%q", at, i, q.Headers[i].Key, q.Headers[i].Value, sh.Key, sh.Value)
				}
			}
		}
		if want := string(malformedReasons[kind[c]]); h[quarantine.HeaderReason] != want {
			t.Errorf("%s (%v): reason %q, want %q (message %q)", at, c, h[quarantine.HeaderReason], want, h[quarantine.HeaderMessage])
		}
		if h[quarantine.HeaderMessage] == "" {
			t.Errorf("%s: empty message", at)
		}
		if want := src.Timestamp.UTC().Format(time.RFC3339Nano); h[quarantine.HeaderSourceTimestamp] != want {
			t.Errorf("%s: source timestamp %q, want %q", at, h[quarantine.HeaderSourceTimestamp], want)
		}
		if h[quarantine.HeaderSink] != sink {
			t.Errorf("%s: sink %q", at, h[quarantine.HeaderSink])
		}
		if b, err := strconv.ParseInt(h[quarantine.HeaderBatch], 10, 64); err != nil || b < 1 || b > lastBatch {
			t.Errorf("%s: batch %q not in 1..%d", at, h[quarantine.HeaderBatch], lastBatch)
		}
		qt, err := time.Parse(time.RFC3339Nano, h[quarantine.HeaderTime])
		if err != nil || qt.Before(started.Add(-time.Second)) || qt.After(finished) {
			t.Errorf("%s: time %q outside the run (%v)", at, h[quarantine.HeaderTime], err)
		}
		if !q.Timestamp.Truncate(time.Millisecond).Equal(qt.Truncate(time.Millisecond)) {
			t.Errorf("%s: Kafka timestamp %v, %s %v", at, q.Timestamp, quarantine.HeaderTime, qt)
		}
	}
}

// gateWriter holds quarantine Write number skip+1 until release is closed
// (or its ctx ends).
type gateWriter struct {
	quarantine.Writer
	skip    int // writes let through before the gated one
	mu      sync.Mutex
	writes  int
	entered chan []quarantine.Entry
	release chan struct{}
}

func (g *gateWriter) Write(ctx context.Context, es []quarantine.Entry) error {
	g.mu.Lock()
	g.writes++
	gated := g.writes == g.skip+1
	g.mu.Unlock()
	if gated {
		g.entered <- es
		select {
		case <-g.release:
		case <-ctx.Done():
			return quarantine.Transient(fmt.Errorf("gate: %w", ctx.Err()))
		}
	}
	return g.Writer.Write(ctx, es)
}

// SIGTERM (ctx cancel) while a batch is in flight: the batch finishes within
// the shutdown grace, runSink returns nil, the table's offsets match its data,
// and a restart completes to the model.
func TestRuntimeShutdownDuringBatch(t *testing.T) {
	s := testStream(44, 900, 200, 3, 6)
	const sink = "rt-term"
	qtopic := sink + ".quarantine"
	_, brokers := newKfake(t, 3, qtopic)
	lake := t.TempDir()
	dir := tableDir(lake)
	if err := newProducer(t, brokers).produce(s.Records); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(brokers, lake, sink)
	cfg.Merge.ShutdownGrace = 15 * time.Second
	qw, err := openQuarantine(cfg, newLogger(cfg.Log, &logSink{tag: "q"}))
	if err != nil {
		t.Fatal(err)
	}
	gate := &gateWriter{Writer: qw, entered: make(chan []quarantine.Entry, 1), release: make(chan struct{})}
	r := startSink(t, "sink", cfg, runHooks{Quarantine: gate})
	var inflight []quarantine.Entry
	select {
	case inflight = <-gate.entered:
	case <-time.After(time.Minute):
		t.Fatal("no batch reached the quarantine write")
	}
	before, vBefore := tableProgress(t, dir, sink)
	// SIGTERM arrives while the batch waits on its quarantine write.
	start := time.Now()
	r.cancel()
	close(gate.release)
	select {
	case err := <-r.done:
		r.done <- err
		if err != nil {
			t.Fatalf("runSink after SIGTERM during a batch: %v", err)
		}
	case <-time.After(cfg.Merge.ShutdownGrace + 10*time.Second):
		t.Fatal("runSink did not return after SIGTERM")
	}
	took := time.Since(start)
	if took > cfg.Merge.ShutdownGrace {
		t.Errorf("shutdown took %v, grace %v", took, cfg.Merge.ShutdownGrace)
	}
	after, vAfter := tableProgress(t, dir, sink)
	t.Logf("in-flight batch: version %d → %d, offsets %v → %v, shutdown %v", vBefore, vAfter, before, after, took.Round(time.Millisecond))
	// The in-flight batch was finished, not abandoned: its quarantined
	// records are behind the recorded offsets.
	for _, e := range inflight {
		if after[e.Record.Partition] <= e.Record.Offset {
			t.Errorf("in-flight record %d@%d not covered by the table's offsets %v", e.Record.Partition, e.Record.Offset, after)
		}
	}
	checkPrefixConsistent(t, dir, sink, s)

	r2 := startSink(t, "restart", cfg, runHooks{})
	end := endOffsets(s)
	waitUntil(t, time.Minute, "the restart to reach the end offsets", func() bool { return caughtUp(t, dir, sink, end) })
	if _, err := r2.stop(t, time.Minute); err != nil {
		t.Fatal(err)
	}
	checkTable(t, dir, sink, s)
	checkQuarantineCoords(t, brokers, qtopic, s)
}

// A batch that cannot finish within the shutdown grace is abandoned: runSink
// returns (an error) soon after the grace, nothing of the batch is
// committed, and a restart completes to the model.
func TestRuntimeShutdownGraceExceeded(t *testing.T) {
	s := testStream(45, 600, 150, 3, 6)
	const sink = "rt-grace"
	qtopic := sink + ".quarantine"
	_, brokers := newKfake(t, 3, qtopic)
	lake := t.TempDir()
	dir := tableDir(lake)
	if err := newProducer(t, brokers).produce(s.Records); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(brokers, lake, sink)
	cfg.Merge.ShutdownGrace = time.Second
	qw, err := openQuarantine(cfg, newLogger(cfg.Log, &logSink{tag: "q"}))
	if err != nil {
		t.Fatal(err)
	}
	gate := &gateWriter{Writer: qw, skip: 1, entered: make(chan []quarantine.Entry, 1), release: make(chan struct{})}
	r := startSink(t, "sink", cfg, runHooks{Quarantine: gate})
	select {
	case <-gate.entered:
	case <-time.After(time.Minute):
		t.Fatal("no batch reached the quarantine write")
	}
	before, vBefore := tableProgress(t, dir, sink)
	took, err := r.stop(t, cfg.Merge.ShutdownGrace+15*time.Second)
	t.Logf("stuck batch: runSink returned %v after %v", err, took.Round(time.Millisecond))
	if err == nil {
		t.Errorf("runSink returned nil although its last batch was abandoned")
	}
	if took < cfg.Merge.ShutdownGrace {
		t.Errorf("returned after %v, before the %v grace", took, cfg.Merge.ShutdownGrace)
	}
	after, vAfter := tableProgress(t, dir, sink)
	if vAfter != vBefore || fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("the abandoned batch changed the table: version %d → %d, offsets %v → %v", vBefore, vAfter, before, after)
	}
	checkPrefixConsistent(t, dir, sink, s)
	close(gate.release)

	r2 := startSink(t, "restart", cfg, runHooks{})
	end := endOffsets(s)
	waitUntil(t, time.Minute, "the restart to reach the end offsets", func() bool { return caughtUp(t, dir, sink, end) })
	if _, err := r2.stop(t, time.Minute); err != nil {
		t.Fatal(err)
	}
	checkTable(t, dir, sink, s)
	checkQuarantineCoords(t, brokers, qtopic, s)
}

// checkPrefixConsistent asserts that the table's data is exactly what the
// records below its recorded offsets produce: it replays that prefix of the
// stream into a fresh table and compares them with `cdc-sink diff`.
func checkPrefixConsistent(t *testing.T, dir, sink string, s *dbzgen.Stream) {
	t.Helper()
	offs, _ := tableProgress(t, dir, sink)
	var prefix []*source.Record
	for _, r := range s.Records {
		if r.Offset < offs[r.Partition] {
			prefix = append(prefix, r)
		}
	}
	tmp := t.TempDir()
	in := filepath.Join(tmp, "prefix.jsonl")
	if err := dbzgen.WriteKcatFile(in, prefix); err != nil {
		t.Fatal(err)
	}
	ref := filepath.Join(tmp, "ref")
	if code, out, errOut := runCLI(t, "replay", "--from-file", in, "--table", ref, "--sink-name", "ref",
		"--quarantine-file", filepath.Join(tmp, "q.jsonl"), "--quiet", "--batch-records", "100000"); code != 0 {
		t.Fatalf("replay of the prefix: exit %d\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut := runCLI(t, "diff", dir, ref); code != 0 {
		t.Errorf("table at offsets %v differs from a replay of those records (exit %d):\n%s\n%s", offs, code, out, errOut)
	}
}

// createTopic creates a topic on the cluster.
func createTopic(t *testing.T, brokers []string, topic string, partitions int32) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, partitions, 1
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 10000
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range resp.Topics {
		if err := kerr.ErrorForCode(rt.ErrorCode); err != nil {
			t.Fatalf("create topic %s: %v", topic, err)
		}
	}
}

type readyBody struct {
	Ready               bool   `json:"ready"`
	ConsecutiveFailures int    `json:"consecutiveFailures"`
	LastError           string `json:"lastError"`
}

func readyz(t *testing.T, addr string) (int, readyBody) {
	t.Helper()
	code, b := httpGet(t, "http://"+addr+"/readyz")
	var rb readyBody
	if err := json.Unmarshal(b, &rb); err != nil {
		t.Fatalf("/readyz: %v: %s", err, b)
	}
	return code, rb
}

// The quarantine topic does not exist: quarantine writes fail, the sink
// retries, the table never moves past a malformed record, /readyz says so;
// once the topic exists everything completes.
func TestRuntimeQuarantineUnavailable(t *testing.T) {
	s := testStream(55, 600, 150, 3, 6)
	const sink = "rt-qdown"
	qtopic := sink + ".quarantine"
	_, brokers := newKfake(t, 3) // no quarantine topic
	lake := t.TempDir()
	dir := tableDir(lake)
	if err := newProducer(t, brokers).produce(s.Records); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(brokers, lake, sink)
	// Fail each quarantine write after 1 s instead of the 60 s default.
	cfg.Kafka.Properties["message.timeout.ms"] = "1000"
	r := startSink(t, "sink", cfg, runHooks{})
	notPast := func() {
		t.Helper()
		offs, _ := tableProgress(t, dir, sink)
		for _, c := range s.Malformed() {
			if offs[c.Partition] > c.Offset {
				t.Fatalf("table offsets %v moved past malformed record %v while quarantine is down", offs, c)
			}
		}
	}
	waitUntil(t, time.Minute, "/readyz to report the failing quarantine", func() bool {
		notPast()
		code, rb := readyz(t, r.addr)
		return code == 503 && rb.ConsecutiveFailures >= 3 && strings.Contains(rb.LastError, "quarantine")
	})
	if code, _ := httpGet(t, "http://"+r.addr+"/healthz"); code != 200 {
		t.Errorf("/healthz %d while retrying: the sink is alive", code)
	}
	_, rb := readyz(t, r.addr)
	t.Logf("/readyz while the quarantine topic is missing: %+v", rb)
	notPast()
	createTopic(t, brokers, qtopic, 1)
	end := endOffsets(s)
	waitUntil(t, 2*time.Minute, "the table to reach the end offsets", func() bool { return caughtUp(t, dir, sink, end) })
	waitUntil(t, 10*time.Second, "/readyz 200", func() bool { code, _ := readyz(t, r.addr); return code == 200 })
	if _, err := r.stop(t, time.Minute); err != nil {
		t.Fatal(err)
	}
	checkTable(t, dir, sink, s)
	checkQuarantineCoords(t, brokers, qtopic, s)
}

// Secrets from the config file and the environment appear in no log line,
// HTTP endpoint or output; the table is not world-writable.
func TestRuntimeSecretsAndModes(t *testing.T) {
	const secret, regSecret, urlSecret = "s3cr3t-kafka-pw", "r3g-s3cr3t-pw", "url-s3cr3t-pw"
	s := testStream(66, 300, 80, 1, 4)
	const sink = "rt-sec"
	_, brokers := newKfake(t, 1, sink+".quarantine")
	if err := newProducer(t, brokers).produce(s.Records); err != nil {
		t.Fatal(err)
	}
	lake := t.TempDir()
	dir := tableDir(lake)
	addr := freePort(t)
	cfgFile := filepath.Join(t.TempDir(), "sink.yaml")
	writeFile(t, cfgFile, fmt.Sprintf(`sink: %s
kafka:
  brokers: [%s]
  topics: [%s]
  properties:
    session.timeout.ms: "6000"
    heartbeat.interval.ms: "100"
    sasl.username: sink
    debug: conf,security,generic
    sasl.password: %s
tables:
  path_template: %s/{schema}.{table}
registry:
  url: http://reg:%s@127.0.0.1:9/apis/ccompat/v7
  username: reg
batch: {max_records: 100, max_interval: 50ms}
http: {listen: "%s"}
log: {level: debug, format: json}
`, sink, brokers[0], testTopic, secret, lake, urlSecret, addr))
	t.Setenv("CDC_SINK_REGISTRY_PASSWORD", regSecret)
	old := syscall.Umask(0) // the modes are the sink's choice, not the umask's
	defer syscall.Umask(old)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr logSink
	stderr.tag = "run"
	exit := make(chan int, 1)
	go func() { exit <- realMain(ctx, []string{"run", "--config", cfgFile}, &stdout, &stderr) }()
	waitUntil(t, time.Minute, "the sink to apply every record", func() bool {
		select {
		case code := <-exit:
			exit <- code
			t.Fatalf("cdc-sink run exited %d:\n%s", code, stderr.String())
		default:
		}
		code, b := httpGetMaybe("http://" + addr + "/progress")
		if code != 200 {
			return false
		}
		var p progressJSON
		return json.Unmarshal(b, &p) == nil && p.Totals["records"] == int64(len(s.Records))
	})
	var bodies []string
	for _, path := range []string{"/progress", "/metrics", "/readyz", "/healthz"} {
		_, b := httpGet(t, "http://"+addr+path)
		bodies = append(bodies, path+":\n"+string(b))
	}
	cancel()
	select {
	case code := <-exit:
		if code != 0 {
			t.Errorf("exit %d after cancel:\n%s", code, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("cdc-sink run did not stop")
	}
	logs := stderr.String()
	for _, want := range []string{`"cdc-sink starting"`, `"sasl.password":"***"`, `"registry.password":"***"`,
		`"librdkafka":"CONF"`} { // librdkafka's own config dump (debug: conf) ran too
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %s:\n%.3000s", want, logs)
		}
	}
	for name, text := range map[string]string{"stderr": logs, "stdout": stdout.String(), "http": strings.Join(bodies, "\n")} {
		for _, sec := range []string{secret, regSecret, urlSecret} {
			if i := strings.Index(text, sec); i >= 0 {
				t.Errorf("secret %q in %s: …%s…", sec, name, text[max(0, i-200):min(len(text), i+50)])
			}
		}
	}
	// The table directory and every file in it: not world-writable.
	n := 0
	err := filepath.Walk(lake, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if p == lake {
			return nil
		}
		n++
		if fi.Mode().Perm()&0o002 != 0 {
			t.Errorf("%s is world-writable (%v)", p, fi.Mode())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 3 {
		t.Errorf("only %d entries under %s", n, lake)
	}
	checkTable(t, dir, sink, s)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// loadConfig: flag > env > file > default, the README's example loads, and
// every error names the key.
func TestLoadConfig(t *testing.T) {
	const base = "kafka:\n  brokers: [127.0.0.1:9092]\n  topics: [loja.public.orders]\n"
	const tuned = base + "  properties: {security.protocol: SASL_SSL, sasl.username: u}\n" +
		"batch:\n  max_records: 500\n  max_bytes: 8MiB\n  max_interval: 250ms\nmerge: {shutdown_grace: 5s}\n"
	readme, err := os.ReadFile(filepath.Join(deltacheck.RepoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var readmeYAML string
	if _, rest, ok := strings.Cut(string(readme), "## Configuration"); ok {
		if _, y, ok := strings.Cut(rest, "```yaml\n"); ok {
			readmeYAML, _, _ = strings.Cut(y, "```")
		}
	}
	if readmeYAML == "" {
		t.Fatal("no yaml block under README's Configuration section")
	}
	// The Kubernetes ConfigMap's file, with the credentials from the Secret
	// as the ConfigMap's comments say.
	cm, err := os.ReadFile(filepath.Join(deltacheck.RepoRoot(), "deploy", "kubernetes", "configmap.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k8sYAML strings.Builder
	if _, block, ok := strings.Cut(string(cm), "cdc-sink.yaml: |\n"); ok {
		for _, line := range strings.Split(block, "\n") {
			k8sYAML.WriteString(strings.TrimPrefix(line, "    ") + "\n")
		}
	}
	compose, err := os.ReadFile(filepath.Join(deltacheck.RepoRoot(), "compose", "cdc-sink.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	type env = map[string]string
	tests := []struct {
		name  string
		yaml  string // "" = no --config
		env   env
		args  []string
		check func(t *testing.T, c *Config)
		err   []string // wanted substrings of the error
		noErr []string // substrings the error must not contain (secrets)
	}{
		{name: "defaults", yaml: base, check: func(t *testing.T, c *Config) {
			eq(t, "sink", c.Sink, "cdc-sink")
			eq(t, "max_records", c.Batch.MaxRecords, 10000)
			eq(t, "max_bytes", c.Batch.MaxBytes, int64(64<<20))
			eq(t, "max_interval", c.Batch.MaxInterval, time.Second)
			eq(t, "listen", c.HTTP.Listen, "127.0.0.1:8081")
			eq(t, "log", c.Log, LogConf{Level: "info", Format: "json"})
			eq(t, "grace", c.Merge.ShutdownGrace, 30*time.Second)
			eq(t, "template", c.Table.PathTemplate, "lake/{prefix}/{schema}.{table}")
		}},
		{name: "file over default", yaml: tuned, check: func(t *testing.T, c *Config) {
			eq(t, "max_records", c.Batch.MaxRecords, 500)
			eq(t, "max_bytes", c.Batch.MaxBytes, int64(8<<20))
			eq(t, "max_interval", c.Batch.MaxInterval, 250*time.Millisecond)
			eq(t, "grace", c.Merge.ShutdownGrace, 5*time.Second)
		}},
		{name: "env over file", yaml: tuned,
			env: env{"CDC_SINK_BATCH_MAX_RECORDS": "600", "CDC_SINK_BATCH_MAX_INTERVAL": "2s", "CDC_SINK_KAFKA_BROKERS": "a:1, b:2"},
			check: func(t *testing.T, c *Config) {
				eq(t, "max_records", c.Batch.MaxRecords, 600)
				eq(t, "max_interval", c.Batch.MaxInterval, 2*time.Second)
				eq(t, "max_bytes (file)", c.Batch.MaxBytes, int64(8<<20))
				eq(t, "brokers", fmt.Sprint(c.Kafka.Brokers), "[a:1 b:2]")
			}},
		{name: "flag over env over file", yaml: tuned,
			env:  env{"CDC_SINK_BATCH_MAX_RECORDS": "600", "CDC_SINK_BATCH_MAX_INTERVAL": "2s"},
			args: []string{"--batch.max_records=700", "--kafka.topics", "x,y", "--sink", "s1"},
			check: func(t *testing.T, c *Config) {
				eq(t, "max_records", c.Batch.MaxRecords, 700)
				eq(t, "max_interval (env)", c.Batch.MaxInterval, 2*time.Second)
				eq(t, "topics", fmt.Sprint(c.Kafka.Topics), "[x y]")
				eq(t, "sink", c.Sink, "s1")
			}},
		{name: "maps merge entry by entry", yaml: tuned,
			env:  env{"CDC_SINK_KAFKA_PROPERTIES": "sasl.password=pw,sasl.username=e"},
			args: []string{"--kafka.properties=sasl.username=f"},
			check: func(t *testing.T, c *Config) {
				eq(t, "properties", fmt.Sprint(c.Kafka.Properties), "map[sasl.password:pw sasl.username:f security.protocol:SASL_SSL]")
			}},
		{name: "env only, no file", env: env{"CDC_SINK_KAFKA_BROKERS": "k:9092", "CDC_SINK_KAFKA_TOPICS": "t", "CDC_SINK_HTTP_LISTEN": ""},
			check: func(t *testing.T, c *Config) { eq(t, "brokers", fmt.Sprint(c.Kafka.Brokers), "[k:9092]") }},
		{name: "http off by empty file value", yaml: base + "http: {listen: ''}\n",
			check: func(t *testing.T, c *Config) { eq(t, "listen", c.HTTP.Listen, "") }},
		{name: "kubernetes configmap + secret", yaml: k8sYAML.String(),
			env: env{"CDC_SINK_KAFKA_PROPERTIES": "sasl.username=sink,sasl.password=pw"},
			check: func(t *testing.T, c *Config) {
				eq(t, "properties", fmt.Sprint(c.Kafka.Properties),
					"map[sasl.mechanism:SCRAM-SHA-512 sasl.password:pw sasl.username:sink security.protocol:SASL_SSL]")
				eq(t, "grace", c.Merge.ShutdownGrace, 30*time.Second)
			}},
		{name: "compose file", yaml: string(compose), check: func(t *testing.T, c *Config) {
			eq(t, "sink", c.Sink, "loja-lake")
		}},
		{name: "README example", yaml: readmeYAML, check: func(t *testing.T, c *Config) {
			eq(t, "max_bytes", c.Batch.MaxBytes, int64(64<<20))
			eq(t, "sink", c.Sink, "orders-sink")
		}},

		{name: "bad broker in file", yaml: "kafka: {brokers: [nohost], topics: [t]}\n", err: []string{"config key kafka.brokers", `"nohost"`}},
		{name: "rules in the file", yaml: base + "rules:\n  - name: positive_amount\n    table: public.orders\n    expr: row.amount > 0\n  - {name: no_deletes, ops: [c, u, r], action: fail}\n",
			check: func(t *testing.T, c *Config) {
				eq(t, "rules", fmt.Sprint(c.Rules), "[{positive_amount public.orders row.amount > 0 [] [] } {no_deletes   [] [c u r] fail}]")
			}},
		{name: "bad rule in the file", yaml: base + "rules:\n  - name: half\n    expr: row.amount >\n",
			err: []string{"config key rules", `rule "half"`, "expr"}},
		{name: "unknown rule key", yaml: base + "rules:\n  - name: r\n    requird: [amount]\n",
			err: []string{"config key rules", `unknown rule key "requird"`, "line 6"}},
		{name: "instance id from env", yaml: base, env: env{"CDC_SINK_INSTANCE_ID": "orders-sink-1"}, check: func(t *testing.T, c *Config) {
			eq(t, "instance_id", c.InstanceID, "orders-sink-1")
		}},
		{name: "bad instance id", yaml: base + "instance_id: pod/1\n", err: []string{"config key instance_id", `"pod/1"`}},
		{name: "layout follows instance_id", yaml: base, env: env{"CDC_SINK_INSTANCE_ID": "pod-1"}, check: func(t *testing.T, c *Config) {
			eq(t, "partitionAligned", c.partitionAligned(), true)
		}},
		{name: "layout batch by default", yaml: base, check: func(t *testing.T, c *Config) {
			eq(t, "partitionAligned", c.partitionAligned(), false)
		}},
		{name: "layout batch with an instance id", yaml: base + "instance_id: pod-1\n", env: env{"CDC_SINK_TABLES_LAYOUT": "batch"}, check: func(t *testing.T, c *Config) {
			eq(t, "partitionAligned", c.partitionAligned(), false)
		}},
		{name: "bad layout", yaml: base, args: []string{"--tables.layout=per-key"}, err: []string{"config key tables.layout", `"per-key"`}},
		{name: "optimize_every is not built", yaml: base + "maintenance: {optimize_every: 1h}\n", err: []string{"config key maintenance.optimize_every", "cdc-sink table optimize"}},
		{name: "optimize_every 0", yaml: base + "maintenance: {optimize_every: 0s}\n", check: func(t *testing.T, c *Config) {
			eq(t, "optimize_every", c.Maint.OptimizeEvery, time.Duration(0))
		}},
		{name: "bad broker by flag", yaml: base, args: []string{"--kafka.brokers=a:1,b"}, err: []string{"config key kafka.brokers", `"b"`}},
		{name: "bad duration in file", yaml: base + "batch:\n  max_interval: 5x\n", err: []string{"config key batch.max_interval", "line 5"}},
		{name: "bad duration in env", yaml: base, env: env{"CDC_SINK_BATCH_MAX_INTERVAL": "soon"}, err: []string{"config key batch.max_interval", "CDC_SINK_BATCH_MAX_INTERVAL"}},
		{name: "bad duration by flag", yaml: base, args: []string{"--merge.shutdown_grace=forever"}, err: []string{"config key merge.shutdown_grace", "flag"}},
		{name: "zero interval", yaml: base, env: env{"CDC_SINK_BATCH_MAX_INTERVAL": "0s"}, err: []string{"config key batch.max_interval"}},
		{name: "bad size in file", yaml: base + "batch: {max_bytes: lots}\n", err: []string{"config key batch.max_bytes"}},
		{name: "negative max_records", yaml: base, args: []string{"--batch.max_records=-1"}, err: []string{"batch.max_records"}},
		{name: "unknown yaml key", yaml: base + "batch:\n  bogus: 1\n", err: []string{"config key batch.bogus", "unknown key", "line 5"}},
		{name: "unknown top-level key", yaml: base + "kafak: {}\n", err: []string{"config key kafak", "unknown key"}},
		{name: "section not a mapping", yaml: base + "batch: 5\n", err: []string{"config key batch", "mapping"}},
		{name: "list where a value is expected", yaml: base + "sink: [a, b]\n", err: []string{"config key sink"}},
		{name: "no topics", yaml: "kafka: {brokers: [a:1]}\n", err: []string{"config key kafka.topics"}},
		{name: "bad topic regex", yaml: base + "  topic_regex: '('\n", err: []string{"config key kafka.topic_regex"}},
		{name: "bad log level", yaml: base, env: env{"CDC_SINK_LOG_LEVEL": "loud"}, err: []string{"config key log.level"}},
		{name: "bad listen", yaml: base + "http: {listen: 8081}\n", err: []string{"config key http.listen"}},
		{name: "bad sink name", yaml: base + "sink: 'a b'\n", err: []string{"config key sink"}},
		{name: "bad truncate", yaml: base + "merge: {truncate: maybe}\n", err: []string{"config key merge.truncate"}},
		{name: "bad map in env", yaml: base, env: env{"CDC_SINK_KAFKA_PROPERTIES": "novalue"}, err: []string{"config key kafka.properties", "CDC_SINK_KAFKA_PROPERTIES"}},
		{name: "registry url with credentials", yaml: base + "registry: {url: 'ftp://u:hunter2@reg'}\n",
			err: []string{"config key registry.url"}, noErr: []string{"hunter2"}},
		{name: "unknown flag", yaml: base, args: []string{"--nope=1"}, err: []string{"nope"}},
		{name: "stray argument", yaml: base, args: []string{"extra"}, err: []string{"unexpected arguments"}},
		{name: "missing file", args: []string{"--config", "/nonexistent/cdc-sink.yaml"}, err: []string{"/nonexistent/cdc-sink.yaml"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.yaml != "" {
				f := filepath.Join(t.TempDir(), "sink.yaml")
				writeFile(t, f, tc.yaml)
				args = append([]string{"--config", f}, args...)
			}
			getenv := func(k string) string { return tc.env[k] }
			var stderr bytes.Buffer
			c, err := loadConfig(args, getenv, &stderr)
			if tc.err == nil {
				if err != nil {
					t.Fatalf("loadConfig: %v", err)
				}
				tc.check(t, c)
				return
			}
			if err == nil {
				t.Fatalf("loadConfig succeeded, want an error with %q", tc.err)
			}
			for _, w := range tc.err {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			for _, w := range tc.noErr {
				if strings.Contains(err.Error(), w) {
					t.Errorf("error %q contains %q", err, w)
				}
			}
		})
	}
}

func eq[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

// batch.overlap is on by default; batch.max_held_bytes below
// batch.max_bytes is refused (the batch read ahead could never be full).
func TestBatchOverlapConfig(t *testing.T) {
	for _, c := range []struct {
		yaml    string
		overlap bool
		held    int64
		err     string
	}{
		{"", true, 0, ""},
		{"batch: {overlap: false}\n", false, 0, ""},
		{"batch: {max_bytes: 8MiB, max_held_bytes: 24MiB}\n", true, 24 << 20, ""},
		{"batch: {max_bytes: 8MiB, max_held_bytes: 4MiB}\n", true, 0, "batch.max_held_bytes: must be 0 (2 × max_bytes) or at least batch.max_bytes (8388608)"},
	} {
		file := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(file, []byte("sink: s\nkafka: {brokers: [a:1], topics: [t]}\n"+c.yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := loadConfig([]string{"--config", file}, func(string) string { return "" }, io.Discard)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("%q: err %v, want %q", c.yaml, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", c.yaml, err)
		}
		if cfg.Batch.Overlap != c.overlap || cfg.Batch.MaxHeldBytes != c.held {
			t.Fatalf("%q: overlap %v held %d", c.yaml, cfg.Batch.Overlap, cfg.Batch.MaxHeldBytes)
		}
	}
}

// replay --batch-bytes cuts batches by bytes (the file reader's records
// come from one file, so only the trigger decides); a bad size is refused
// before anything is written.
func TestReplayBatchBytes(t *testing.T) {
	s := dbzgen.Generate(dbzgen.Config{Seed: 3, Prefix: "loja", Schema: "public", Table: "orders", Partitions: 1,
		Keys: 40, Events: 200, SnapshotRows: 20, TxSize: 4})
	file := filepath.Join(t.TempDir(), "in.jsonl")
	var b bytes.Buffer
	var total int
	for _, r := range s.Records {
		b.Write(source.Encode(r))
		b.WriteByte('\n')
		total += len(r.Key) + len(r.Value)
	}
	if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var out, errb bytes.Buffer
	bad := filepath.Join(t.TempDir(), "bad")
	if code := realMain(ctx, []string{"replay", "--from-file", file, "--table", bad, "--batch-bytes", "lots"}, &out, &errb); code == 0 ||
		!strings.Contains(errb.String(), `--batch-bytes "lots": want a size such as 64MiB`) {
		t.Fatalf("exit %d %q", code, errb.String())
	}
	if _, err := os.Stat(bad); !os.IsNotExist(err) {
		t.Fatalf("a refused replay wrote %s (%v)", bad, err)
	}
	versions := func(extra ...string) int64 {
		dir := filepath.Join(t.TempDir(), "t")
		if code := realMain(ctx, append([]string{"replay", "--from-file", file, "--table", dir, "--quiet"}, extra...), &out, &errb); code != 0 {
			t.Fatalf("replay %v: exit %d %s", extra, code, errb.String())
		}
		return diskVersion(dir)
	}
	one, many := versions(), versions("--batch-bytes", strconv.Itoa(total/8))
	// the first batch creates the table and commits its data (v0, v1)
	if one != 1 || many < one+7 {
		t.Fatalf("versions: %d with the default, %d with --batch-bytes %d (of %d bytes), want 1 and ≥ 8", one, many, total/8, total)
	}
}
