package source

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

func testLogger() *slog.Logger {
	if os.Getenv("CDC_SINK_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func newCluster(t *testing.T, partitions int32, topics ...string) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topics...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// produce writes recs (Topic, Partition, Key, Value, Headers, Timestamp) with franz-go and
// returns them with their assigned offsets.
func produce(t *testing.T, addrs []string, recs []*Record) []*Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	krs := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		kr := &kgo.Record{Topic: r.Topic, Partition: r.Partition, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}
		for _, h := range r.Headers {
			kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
		}
		krs[i] = kr
	}
	res := cl.ProduceSync(ctx, krs...)
	if err := res.FirstErr(); err != nil {
		t.Fatal(err)
	}
	// Results come in completion order; map them back to the input order.
	idx := make(map[*kgo.Record]int, len(krs))
	for i, kr := range krs {
		idx[kr] = i
	}
	out := make([]*Record, len(recs))
	for _, pr := range res {
		i := idx[pr.Record]
		r := *recs[i]
		r.Offset = pr.Record.Offset
		r.Timestamp = pr.Record.Timestamp.UTC()
		r.TimestampType = "create"
		out[i] = &r
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Offset < out[j].Offset })
	return out
}

func genRecords(topic string, partitions int32, n int, from int) []*Record {
	out := make([]*Record, n)
	for i := range n {
		out[i] = &Record{Topic: topic, Partition: int32(i) % partitions,
			Key: []byte(fmt.Sprintf(`{"id":%d}`, from+i)), Value: []byte(fmt.Sprintf(`{"n":%d}`, from+i))}
	}
	return out
}

func consumerConfig(addrs []string, group string, topics ...string) ConsumerConfig {
	return ConsumerConfig{Brokers: addrs, GroupID: group, Topics: topics, SessionTimeout: 6 * time.Second,
		HeartbeatInterval: 100 * time.Millisecond, Logger: testLogger()}
}

// pollUntil polls c until cond holds (checked after every Poll) or the deadline passes.
func pollUntil(t *testing.T, c *Consumer, timeout time.Duration, onBatch func([]*Record), cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", timeout)
		}
		recs, err := c.Poll(context.Background(), 500, 50*time.Millisecond)
		if err != nil {
			t.Fatalf("poll: %v", err)
		}
		if onBatch != nil {
			onBatch(recs)
		}
	}
}

type tpKey = TopicPartition

// seekHandler starts partitions at offsets given by start (the "Delta table") and tracks
// which partitions it owns.
type seekHandler struct {
	mu     sync.Mutex
	start  func(TopicPartition) (int64, bool)
	owned  map[TopicPartition]bool
	failOn error
}

func newSeekHandler(start map[TopicPartition]int64) *seekHandler {
	return &seekHandler{owned: map[TopicPartition]bool{}, start: func(tp TopicPartition) (int64, bool) {
		o, ok := start[tp]
		return o, ok
	}}
}

func (h *seekHandler) OnAssign(_ context.Context, parts []TopicPartition) (map[TopicPartition]int64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failOn != nil {
		return nil, h.failOn
	}
	out := map[TopicPartition]int64{}
	for _, p := range parts {
		if h.owned[p] {
			panic(fmt.Sprintf("%v assigned twice", p))
		}
		h.owned[p] = true
		if o, ok := h.start(p); ok {
			out[p] = o
		}
	}
	return out, nil
}

func (h *seekHandler) OnRevoke(_ context.Context, parts []TopicPartition) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range parts {
		delete(h.owned, p)
	}
	return nil
}

func (h *seekHandler) owns(tp TopicPartition) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.owned[tp]
}

func (h *seekHandler) ownedCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.owned)
}

func TestConsumerReadsCommitsAndResumes(t *testing.T) {
	addrs := newCluster(t, 3, "orders")
	in := genRecords("orders", 3, 60, 0)
	// Byte-level edge cases.
	in = append(in,
		&Record{Topic: "orders", Partition: 0, Key: nil, Value: nil},           // tombstone, null key
		&Record{Topic: "orders", Partition: 1, Key: []byte{}, Value: []byte{}}, // empty, not null
		&Record{Topic: "orders", Partition: 2, Key: []byte{0, 0xff, 0xfe}, Value: []byte{0, 0, 0, 0, 7, 0xc3},
			Headers: []Header{{"h1", []byte{0xff}}, {"h2", nil}, {"h3", []byte{}}, {"h1", []byte("again")}}},
	)
	in[0].Timestamp = time.UnixMilli(1700000000123)
	want := produce(t, addrs, in)

	c, err := NewConsumer(consumerConfig(addrs, "g1", "orders"), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[tpKey][]*Record{}
	n := 0
	pollUntil(t, c, 30*time.Second, func(recs []*Record) {
		for _, r := range recs {
			tp := tpKey{r.Topic, r.Partition}
			got[tp] = append(got[tp], r)
			n++
		}
	}, func() bool { return n >= len(want) })
	if n != len(want) {
		t.Fatalf("got %d records, want %d", n, len(want))
	}
	byTP := map[tpKey][]*Record{}
	for _, r := range want {
		tp := tpKey{r.Topic, r.Partition}
		byTP[tp] = append(byTP[tp], r)
	}
	for tp, ws := range byTP {
		gs := got[tp]
		if len(gs) != len(ws) {
			t.Fatalf("%v: got %d records, want %d", tp, len(gs), len(ws))
		}
		for i := range ws {
			equalRecords(t, ws[i], gs[i])
		}
	}
	if len(c.Assignment()) != 3 {
		t.Fatalf("assignment %v", c.Assignment())
	}
	for tp, lag := range c.Lag() {
		if lag != 0 {
			t.Errorf("lag %v = %d after reading everything", tp, lag)
		}
	}
	pos := c.Positions()
	if pos[tpKey{"orders", 2}] != int64(len(byTP[tpKey{"orders", 2}])) {
		t.Fatalf("positions %v", pos)
	}
	// Commit positions (as the runtime does after a Delta commit), then a new member of the
	// group without a handler starts at the committed offsets.
	if err := c.Commit(context.Background(), pos); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Commit(context.Background(), pos); !errors.Is(err, ErrClosed) {
		t.Fatalf("commit after close: %v", err)
	}
	more := produce(t, addrs, genRecords("orders", 3, 9, 1000))
	c2, err := NewConsumer(consumerConfig(addrs, "g1", "orders"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	var got2 []*Record
	pollUntil(t, c2, 30*time.Second, func(recs []*Record) { got2 = append(got2, recs...) },
		func() bool { return len(got2) >= len(more) })
	for _, r := range got2 {
		if r.Offset < pos[tpKey{r.Topic, r.Partition}] {
			t.Fatalf("resumed before the committed offset: %v@%d", tpKey{r.Topic, r.Partition}, r.Offset)
		}
	}
	if len(got2) != len(more) {
		t.Fatalf("got %d new records, want %d", len(got2), len(more))
	}
}

func TestConsumerSeeksOnAssign(t *testing.T) {
	addrs := newCluster(t, 3, "t")
	produce(t, addrs, genRecords("t", 3, 30, 0)) // 10 per partition, offsets 0..9
	h := newSeekHandler(map[TopicPartition]int64{{"t", 0}: 5, {"t", 1}: 10, {"t", 2}: UseCommitted})
	c, err := NewConsumer(consumerConfig(addrs, "g", "t"), h)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	first := map[tpKey]int64{}
	count := map[tpKey]int{}
	pollUntil(t, c, 30*time.Second, func(recs []*Record) {
		for _, r := range recs {
			tp := tpKey{r.Topic, r.Partition}
			if _, ok := first[tp]; !ok {
				first[tp] = r.Offset
			}
			count[tp]++
		}
	}, func() bool { return count[tpKey{"t", 0}] >= 5 && count[tpKey{"t", 2}] >= 10 })
	if first[tpKey{"t", 0}] != 5 || first[tpKey{"t", 2}] != 0 || count[tpKey{"t", 1}] != 0 {
		t.Fatalf("first offsets %v, counts %v", first, count)
	}
	if pos := c.Positions(); pos[tpKey{"t", 1}] != 10 {
		t.Fatalf("position of a partition seeked to its end: %v", pos)
	}
}

func TestConsumerOnAssignErrorIsFatal(t *testing.T) {
	addrs := newCluster(t, 1, "t")
	produce(t, addrs, genRecords("t", 1, 3, 0))
	h := newSeekHandler(nil)
	h.failOn = errors.New("table unreadable")
	c, err := NewConsumer(consumerConfig(addrs, "g", "t"), h)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		recs, err := c.Poll(context.Background(), 10, 50*time.Millisecond)
		if len(recs) > 0 {
			t.Fatalf("records returned although OnAssign failed: %d", len(recs))
		}
		if err != nil {
			if !errors.Is(err, h.failOn) {
				t.Fatalf("want the handler's error, got %v", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no error from Poll")
		}
	}
}

// table is the test's stand-in for the Delta table: the next offset per partition.
type table struct {
	mu   sync.Mutex
	next map[TopicPartition]int64
}

func (tb *table) get(tp TopicPartition) (int64, bool) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	o, ok := tb.next[tp]
	return o, ok
}

func (tb *table) commit(recs []*Record) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	for _, r := range recs {
		tb.next[TopicPartition{r.Topic, r.Partition}] = r.Offset + 1
	}
}

type member struct {
	name string
	c    *Consumer
	h    *seekHandler
	mu   sync.Mutex
	seen []*Record
	done chan struct{}
}

func (m *member) seenCopy() []*Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*Record(nil), m.seen...)
}

// TestConsumerRebalance runs two members of one group, each in its own goroutine, as the
// runtime would: OnAssign seeks to the "table", every processed batch is committed to it.
// Checks: every produced offset is seen at least once; a record is only ever returned while
// its consumer owns the partition; once the group has settled, records produced later are
// read exactly once, by the partition's final owner.
func TestConsumerRebalance(t *testing.T) {
	const parts = 4
	addrs := newCluster(t, parts, "r")
	first := produce(t, addrs, genRecords("r", parts, 400, 0))
	tb := &table{next: map[TopicPartition]int64{}}
	stop := make(chan struct{})
	start := func(name string) *member {
		h := newSeekHandler(nil)
		h.start = tb.get
		c, err := NewConsumer(consumerConfig(addrs, "rg", "r"), h)
		if err != nil {
			t.Fatal(err)
		}
		m := &member{name: name, c: c, h: h, done: make(chan struct{})}
		go func() {
			defer close(m.done)
			defer c.Close()
			for {
				select {
				case <-stop:
					return
				default:
				}
				recs, err := c.Poll(context.Background(), 50, 20*time.Millisecond)
				if err != nil {
					t.Errorf("%s: poll: %v", name, err)
					return
				}
				for _, r := range recs {
					if !h.owns(TopicPartition{r.Topic, r.Partition}) {
						t.Errorf("%s returned %s/%d@%d without owning the partition", name, r.Topic, r.Partition, r.Offset)
					}
				}
				m.mu.Lock()
				m.seen = append(m.seen, recs...)
				m.mu.Unlock()
				tb.commit(recs)
			}
		}()
		return m
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for !cond() {
			if time.Now().After(deadline) {
				close(stop)
				t.Fatalf("timed out waiting for %s", what)
			}
			<-tick.C
		}
	}
	a := start("A")
	waitFor("A to own every partition and read some records", func() bool {
		return a.h.ownedCount() == parts && len(a.seenCopy()) >= 40
	})
	b := start("B")
	waitFor("the group to settle with both members", func() bool {
		na, nb := a.h.ownedCount(), b.h.ownedCount()
		return na > 0 && nb > 0 && na+nb == parts
	})
	allSeen := func(want []*Record) bool {
		seen := map[string]bool{}
		for _, m := range []*member{a, b} {
			for _, r := range m.seenCopy() {
				seen[fmt.Sprintf("%d@%d", r.Partition, r.Offset)] = true
			}
		}
		for _, r := range want {
			if !seen[fmt.Sprintf("%d@%d", r.Partition, r.Offset)] {
				return false
			}
		}
		return true
	}
	waitFor("every initial record", func() bool { return allSeen(first) })
	owner := map[int32]string{}
	for p := int32(0); p < parts; p++ {
		for _, m := range []*member{a, b} {
			if m.h.owns(TopicPartition{"r", p}) {
				owner[p] = m.name
			}
		}
	}
	later := produce(t, addrs, genRecords("r", parts, 200, 1000))
	waitFor("every later record", func() bool { return allSeen(later) })
	close(stop)
	<-a.done
	<-b.done
	if a.h.ownedCount() != 0 || b.h.ownedCount() != 0 {
		t.Errorf("Close did not revoke: A owns %d, B owns %d", a.h.ownedCount(), b.h.ownedCount())
	}
	readBy := map[string][]string{}
	for _, m := range []*member{a, b} {
		for _, r := range m.seenCopy() {
			k := fmt.Sprintf("%d@%d", r.Partition, r.Offset)
			readBy[k] = append(readBy[k], m.name)
		}
	}
	for _, r := range later {
		k := fmt.Sprintf("%d@%d", r.Partition, r.Offset)
		if got := readBy[k]; len(got) != 1 || got[0] != owner[r.Partition] {
			t.Errorf("later record %s read by %v, want exactly once by %s", k, got, owner[r.Partition])
		}
	}
	t.Logf("A read %d records, B read %d", len(a.seenCopy()), len(b.seenCopy()))
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestConsumerUnreachableBrokerIsTransient(t *testing.T) {
	c, err := NewConsumer(consumerConfig([]string{closedAddr(t)}, "g", "t"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Poll does not fail on a broker that is down: librdkafka keeps retrying.
	if recs, err := c.Poll(context.Background(), 10, 200*time.Millisecond); err != nil || len(recs) != 0 {
		t.Fatalf("poll: %d records, %v", len(recs), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = c.EndOffsets(ctx, nil)
	var m interface{ Transient() bool }
	if err == nil || !errors.As(err, &m) || !m.Transient() {
		t.Fatalf("EndOffsets against a dead broker: want a transient error, got %v", err)
	}
	if _, err := NewConsumer(ConsumerConfig{Brokers: []string{"x:1"}, GroupID: "g", Topics: []string{"t"},
		Extra: map[string]string{"enable.auto.commit": "true"}}, nil); err == nil {
		t.Fatal("Extra overrode a fixed property")
	}
}

func TestConsumerBoundedReplayAndTimes(t *testing.T) {
	addrs := newCluster(t, 3, "b")
	base := time.UnixMilli(1_700_000_000_000)
	in := genRecords("b", 2, 30, 0) // partitions 0 and 1 only; partition 2 stays empty
	for i, r := range in {
		r.Timestamp = base.Add(time.Duration(i) * time.Second)
	}
	produce(t, addrs, in)
	c, err := NewConsumer(consumerConfig(addrs, "replay", "b"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	end, err := c.EndOffsets(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(end) != 2 || end[tpKey{"b", 0}] != 15 || end[tpKey{"b", 1}] != 15 {
		t.Fatalf("end offsets %v", end)
	}
	// Records 20..29 have timestamps base+20s.. and sit at offsets 10..14 of each partition.
	at, err := c.OffsetsForTimes(ctx, []string{"b"}, base.Add(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if at[tpKey{"b", 0}] != 10 || at[tpKey{"b", 1}] != 10 || at[tpKey{"b", 2}] != 0 {
		t.Fatalf("offsets for times %v", at)
	}
	if at, _ = c.OffsetsForTimes(ctx, nil, base.Add(time.Hour)); at[tpKey{"b", 0}] != 15 {
		t.Fatalf("offsets after the last timestamp should be the end offsets: %v", at)
	}
	produce(t, addrs, genRecords("b", 3, 12, 100)) // after the bound: must not be returned
	c.StopAt(end)
	var got []*Record
	deadline := time.Now().Add(30 * time.Second)
	for {
		recs, err := c.Poll(ctx, 7, 50*time.Millisecond)
		got = append(got, recs...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("bounded replay did not end; read %d, positions %v", len(got), c.Positions())
		}
	}
	if len(got) != 30 {
		t.Fatalf("bounded replay returned %d records, want 30", len(got))
	}
	for _, r := range got {
		if r.Offset >= end[tpKey{r.Topic, r.Partition}] {
			t.Fatalf("record beyond the bound: %s/%d@%d", r.Topic, r.Partition, r.Offset)
		}
	}
}

func TestConsumerTopicRegex(t *testing.T) {
	addrs := newCluster(t, 1, "rx.a", "rx.b", "other")
	produce(t, addrs, append(genRecords("rx.a", 1, 3, 0), append(genRecords("rx.b", 1, 2, 0), genRecords("other", 1, 4, 0)...)...))
	cfg := consumerConfig(addrs, "g")
	cfg.TopicRegex = `rx\..*`
	c, err := NewConsumer(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	topics, err := c.Topics(context.Background())
	if err != nil || fmt.Sprint(topics) != "[rx.a rx.b]" {
		t.Fatalf("topics %v, %v", topics, err)
	}
	n := map[string]int{}
	pollUntil(t, c, 30*time.Second, func(recs []*Record) {
		for _, r := range recs {
			n[r.Topic]++
		}
	}, func() bool { return n["rx.a"] == 3 && n["rx.b"] == 2 })
	if n["other"] != 0 {
		t.Fatalf("read a topic outside the regex: %v", n)
	}
}

// revokeCounter wraps seekHandler to count revocations.
type revokeCounter struct {
	*seekHandler
	mu      sync.Mutex
	revoked []TopicPartition
}

func (r *revokeCounter) OnRevoke(ctx context.Context, parts []TopicPartition) error {
	r.mu.Lock()
	r.revoked = append(r.revoked, parts...)
	r.mu.Unlock()
	return r.seekHandler.OnRevoke(ctx, parts)
}

// TestConsumerDropsRevokedRecordsFromBatch: a revocation that happens while Poll is filling a
// batch removes the revoked partitions' records from that batch, so the caller never gets
// records of a partition it no longer owns (the new owner reads them from the table offsets).
func TestConsumerDropsRevokedRecordsFromBatch(t *testing.T) {
	const parts = 4
	addrs := newCluster(t, parts, "d")
	produce(t, addrs, genRecords("d", parts, 200, 0))
	ha := &revokeCounter{seekHandler: newSeekHandler(nil)}
	a, err := NewConsumer(consumerConfig(addrs, "dg", "d"), ha)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	// Wait until A owns everything (one record read, not processed: the "table" stays empty).
	pollUntil(t, a, 30*time.Second, nil, func() bool { return ha.ownedCount() == parts })
	b, err := NewConsumer(consumerConfig(addrs, "dg", "d"), newSeekHandler(nil))
	if err != nil {
		t.Fatal(err)
	}
	bDone := make(chan int)
	stopB := make(chan struct{})
	go func() {
		n := 0
		defer func() { bDone <- n }()
		defer b.Close()
		for {
			select {
			case <-stopB:
				return
			default:
			}
			recs, err := b.Poll(context.Background(), 100, 20*time.Millisecond)
			if err != nil {
				t.Errorf("B: %v", err)
				return
			}
			n += len(recs)
		}
	}()
	// One long Poll on A: it collects everything it has, then lingers while B joins and the
	// cooperative rebalance revokes part of A's assignment inside this very Poll.
	deadline := time.Now().Add(30 * time.Second)
	var batch []*Record
	for {
		recs, err := a.Poll(context.Background(), 100000, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, recs...)
		ha.mu.Lock()
		nrev := len(ha.revoked)
		ha.mu.Unlock()
		if nrev > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no revocation happened")
		}
	}
	ha.mu.Lock()
	revoked := append([]TopicPartition(nil), ha.revoked...)
	ha.mu.Unlock()
	for _, r := range batch {
		for _, tp := range revoked {
			if (TopicPartition{r.Topic, r.Partition}) == tp && !ha.owns(tp) {
				t.Fatalf("A's batch holds %s@%d of revoked partition %v", tp, r.Offset, tp)
			}
		}
	}
	close(stopB)
	nb := <-bDone
	t.Logf("A: %d records in the last batches, revoked %v; B read %d", len(batch), revoked, nb)
}

// Seek moves an assigned partition back (its records are delivered again
// from there) and reports partitions not assigned instead of seeking them.
func TestConsumerSeekBackAndNotAssigned(t *testing.T) {
	addrs := newCluster(t, 2, "t")
	produce(t, addrs, genRecords("t", 2, 20, 0)) // 10 per partition
	c, err := NewConsumer(consumerConfig(addrs, "g", "t"), newSeekHandler(map[TopicPartition]int64{{"t", 0}: 0, {"t", 1}: 0}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	count := map[tpKey]int{}
	pollUntil(t, c, 30*time.Second, func(recs []*Record) {
		for _, r := range recs {
			count[tpKey{r.Topic, r.Partition}]++
		}
	}, func() bool { return count[tpKey{"t", 0}] == 10 && count[tpKey{"t", 1}] == 10 })
	gone, err := c.Seek(map[TopicPartition]int64{{"t", 0}: 4, {"other", 0}: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(gone) != 1 || gone[0] != (tpKey{"other", 0}) {
		t.Fatalf("not assigned: %v, want other/0", gone)
	}
	var again []int64
	pollUntil(t, c, 30*time.Second, func(recs []*Record) {
		for _, r := range recs {
			if r.Partition == 0 {
				again = append(again, r.Offset)
			} else {
				t.Errorf("partition 1 redelivered offset %d without a seek", r.Offset)
			}
		}
	}, func() bool { return len(again) >= 6 })
	if fmt.Sprint(again) != "[4 5 6 7 8 9]" {
		t.Fatalf("after seeking partition 0 to 4: offsets %v", again)
	}
}

// TestConsumerFollowsBrokerConnectivity: Brokers reports down once the
// cluster is gone (librdkafka keeps retrying silently, so without it a sink
// cut off from Kafka looks healthy) and up again once a broker answers on
// the same address, with Since moving at each change.
func TestConsumerFollowsBrokerConnectivity(t *testing.T) {
	cl, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	addrs := cl.ListenAddrs()
	produce(t, addrs, genRecords("t", 1, 5, 0))
	c, err := NewConsumer(consumerConfig(addrs, "g", "t"), nil)
	if err != nil {
		cl.Close()
		t.Fatal(err)
	}
	defer c.Close()
	n := 0
	pollUntil(t, c, 30*time.Second, func(recs []*Record) { n += len(recs) }, func() bool { return n == 5 })
	up := c.Brokers()
	if !up.Up {
		t.Fatalf("after reading records: %+v", up)
	}
	cl.Close()
	pollUntil(t, c, 30*time.Second, func([]*Record) {}, func() bool { return !c.Brokers().Up })
	down := c.Brokers()
	if !down.Since.After(up.Since) {
		t.Errorf("down since %v, not after up since %v", down.Since, up.Since)
	}
	_, port, _ := net.SplitHostPort(addrs[0])
	p, _ := strconv.Atoi(port)
	cl2, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(p), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl2.Close()
	pollUntil(t, c, 30*time.Second, func([]*Record) {}, func() bool { return c.Brokers().Up })
	if again := c.Brokers(); !again.Since.After(down.Since) {
		t.Errorf("up again since %v, not after down since %v", again.Since, down.Since)
	}
	if _, err := NewConsumer(ConsumerConfig{Brokers: []string{"x:1"}, GroupID: "g", Topics: []string{"t"},
		Extra: map[string]string{"statistics.interval.ms": "0"}}, nil); err == nil {
		t.Fatal("statistics.interval.ms 0 accepted: broker loss would go unseen")
	}
}
