package quarantine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/cdcsink/cdc-sink/source"
)

func testLogger() *slog.Logger {
	if os.Getenv("CDC_SINK_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func sameBytes(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }

// edgeEntries covers the byte-level cases: null key, null value, empty value, non-UTF-8
// bytes, null/empty/binary header values, duplicate header names and original headers that
// look like quarantine headers.
func edgeEntries() []Entry {
	qt := time.Date(2026, 11, 29, 23, 59, 58, 123456789, time.UTC)
	ts := time.UnixMilli(1_700_000_000_123).UTC()
	recs := []*source.Record{
		{Topic: "db.public.orders", Partition: 0, Offset: 1, Key: nil, Value: []byte(`{"op":"c"}`), Timestamp: ts},
		{Topic: "db.public.orders", Partition: 1, Offset: 2, Key: []byte(`{"id":1}`), Value: nil, Timestamp: ts},
		{Topic: "db.public.orders", Partition: 2, Offset: 3, Key: []byte{}, Value: []byte{}},
		{Topic: "db.public.items", Partition: 3, Offset: 1 << 40, Key: []byte{0, 0xff, 0xfe, 0x80},
			Value: []byte{0, 0, 0, 0, 42, 0xc3, 0x28, 0xa0, 0xa1}, Timestamp: ts,
			Headers: []source.Header{{Key: "bin", Value: []byte{0xff, 0}}, {Key: "null", Value: nil},
				{Key: "empty", Value: []byte{}}, {Key: "bin", Value: []byte("dup")},
				{Key: HeaderReason, Value: []byte("from an earlier life")}}},
		// a rule violation whose original headers end like a quarantine block
		{Topic: "db.public.orders", Partition: 0, Offset: 9, Key: []byte(`{"id":9}`), Value: []byte(`{"op":"u"}`),
			Headers: []source.Header{{Key: HeaderTime, Value: []byte("x")}, {Key: HeaderRule, Value: []byte("not ours")}}},
	}
	reasons := []Reason{MalformedJSON, MissingAfter, MalformedEvent, MalformedAvro, RuleViolation}
	out := make([]Entry, len(recs))
	for i, r := range recs {
		out[i] = Entry{Record: r, Reason: reasons[i], Message: fmt.Sprintf("bad \"thing\" %d\n€", i),
			Sink: "orders-sink", BatchID: int64(100 + i), Time: qt.Add(time.Duration(i) * time.Hour)}
	}
	out[4].Rule = "positive_amount"
	out[4].Version = "00000001-1-0000000001a37dd0-0000000001a36928-0000000000000000"
	out[3].Version = "00000002-0-0000000000000000-0000000000000001-0000000000000007" // a version without a rule
	return out
}

func checkEntries(t *testing.T, want, got []Entry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d entries, want %d", len(got), len(want))
	}
	for i := range want {
		w, g := want[i], got[i]
		if g.Reason != w.Reason || g.Message != w.Message || g.Sink != w.Sink || g.BatchID != w.BatchID || !g.Time.Equal(w.Time) || g.Rule != w.Rule || g.Version != w.Version {
			t.Fatalf("entry %d metadata: want %+v, got %+v", i, w, g)
		}
		wr, gr := w.Record, g.Record
		if gr.Topic != wr.Topic || gr.Partition != wr.Partition || gr.Offset != wr.Offset || !gr.Timestamp.Equal(wr.Timestamp) {
			t.Fatalf("entry %d coordinates: want %s/%d@%d %v, got %s/%d@%d %v", i, wr.Topic, wr.Partition, wr.Offset, wr.Timestamp, gr.Topic, gr.Partition, gr.Offset, gr.Timestamp)
		}
		if !sameBytes(gr.Key, wr.Key) || !sameBytes(gr.Value, wr.Value) {
			t.Fatalf("entry %d bytes: want key %q (nil %v) value %q (nil %v), got key %q (nil %v) value %q (nil %v)", i,
				wr.Key, wr.Key == nil, wr.Value, wr.Value == nil, gr.Key, gr.Key == nil, gr.Value, gr.Value == nil)
		}
		if len(gr.Headers) != len(wr.Headers) {
			t.Fatalf("entry %d: %d headers, want %d: %v", i, len(gr.Headers), len(wr.Headers), gr.Headers)
		}
		for j := range wr.Headers {
			if gr.Headers[j].Key != wr.Headers[j].Key || !sameBytes(gr.Headers[j].Value, wr.Headers[j].Value) {
				t.Fatalf("entry %d header %d: want %q=%q, got %q=%q", i, j, wr.Headers[j].Key, wr.Headers[j].Value, gr.Headers[j].Key, gr.Headers[j].Value)
			}
		}
		if g.At == "" {
			t.Fatalf("entry %d: At not set", i)
		}
	}
}

func TestKafkaRoundTrip(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "orders-sink.quarantine"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cfg := KafkaConfig{Brokers: c.ListenAddrs(), Sink: "orders-sink", Logger: testLogger()}
	w, err := NewKafkaWriter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.Topic() != "orders-sink.quarantine" {
		t.Fatalf("default topic %q", w.Topic())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	want := edgeEntries()
	if err := w.Write(ctx, want); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(ctx, want[:1]); err != nil {
		t.Fatal(err)
	}
	want = append(want, want[0])
	got, err := ReadKafka(ctx, cfg, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	// The topic has several partitions: order by batch and source coordinates.
	byKey := func(es []Entry) map[string][]Entry {
		m := map[string][]Entry{}
		for _, e := range es {
			k := fmt.Sprintf("%s/%d@%d", e.Record.Topic, e.Record.Partition, e.Record.Offset)
			m[k] = append(m[k], e)
		}
		return m
	}
	wm, gm := byKey(want), byKey(got)
	if len(got) != len(want) {
		t.Fatalf("read %d entries, want %d", len(got), len(want))
	}
	for k, ws := range wm {
		checkEntries(t, ws, gm[k])
	}
	// Filter through the reader.
	only, err := ReadKafka(ctx, cfg, Filter{Reasons: []Reason{MalformedAvro}})
	if err != nil || len(only) != 1 || !strings.HasPrefix(only[0].At, "orders-sink.quarantine/") {
		t.Fatalf("filtered read: %v %+v", err, only)
	}
}

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

func TestKafkaWriteFailsWhenBrokerUnreachable(t *testing.T) {
	w, err := NewKafkaWriter(KafkaConfig{Brokers: []string{closedAddr(t)}, Topic: "q",
		DeliveryTimeout: 500 * time.Millisecond, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	start := time.Now()
	err = w.Write(context.Background(), edgeEntries())
	if err == nil {
		t.Fatal("Write claimed success with no broker")
	}
	if !IsTransient(err) {
		t.Fatalf("want a transient error, got %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Write took %v", d)
	}
	t.Logf("Write failed after %v: %v", time.Since(start), err)
	// A cancelled context also fails, without claiming success.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w2, _ := NewKafkaWriter(KafkaConfig{Brokers: []string{closedAddr(t)}, Topic: "q",
		DeliveryTimeout: 500 * time.Millisecond, Logger: testLogger()})
	defer w2.Close()
	if err := w2.Write(ctx, edgeEntries()); err == nil || !IsTransient(err) {
		t.Fatalf("cancelled write: %v", err)
	}
}

func TestKafkaWriteFailsForMissingTopic(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w, err := NewKafkaWriter(KafkaConfig{Brokers: c.ListenAddrs(), Topic: "absent",
		DeliveryTimeout: time.Second, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Write(context.Background(), edgeEntries()[:1]); err == nil || !IsTransient(err) {
		t.Fatalf("write to a missing topic: %v", err)
	}
}

func TestFileRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.jsonl")
	w, err := NewFileWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	want := edgeEntries()
	ctx := context.Background()
	if err := w.Write(ctx, want[:2]); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(ctx, want[2:]); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v, want 0640", st.Mode().Perm())
	}
	// Appending reopens without truncating.
	w, _ = NewFileWriter(path)
	if err := w.Write(ctx, want[:1]); err != nil {
		t.Fatal(err)
	}
	w.Close()
	got, err := ReadFile(path, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	checkEntries(t, append(want, want[0]), got)
	if got[4].At != path+":5" {
		t.Fatalf("At = %q", got[4].At)
	}
	// Each line is a kcat -J line plus "error": source can read the file as a record dump.
	fr, _ := source.OpenFile(path, source.FileOptions{})
	defer fr.Close()
	rec, err := fr.Next()
	if err != nil || rec.Offset != 1 || rec.Topic != "db.public.orders" {
		t.Fatalf("source reading a quarantine file: %v %+v", err, rec)
	}
	raw, _ := os.ReadFile(path)
	first := strings.SplitN(string(raw), "\n", 2)[0]
	if !strings.Contains(first, `"error":{"class":"malformed_json","message":"bad \"thing\" 0\n€","sink":"orders-sink","batch":100,"time":"2026-11-29T23:59:58.123456789Z"}}`) {
		t.Fatalf("line format: %s", first)
	}
}

func TestFileReadErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.jsonl")
	line := string(AppendLine(nil, &edgeEntries()[0]))
	os.WriteFile(path, []byte(line+"\n"+`{"topic":"t","payload":"no error object"}`+"\n"), 0o600)
	_, err := ReadFile(path, Filter{})
	var le *source.LineError
	if !errors.As(err, &le) || le.Line != 3 || !strings.Contains(err.Error(), "q.jsonl:3: ") {
		t.Fatalf("want a LineError at line 3, got %v", err)
	}
}

func TestFilter(t *testing.T) {
	base := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	mk := func(topic string, p int32, off int64, r Reason, sink string, h int) Entry {
		return Entry{Record: &source.Record{Topic: topic, Partition: p, Offset: off}, Reason: r, Sink: sink,
			Time: base.Add(time.Duration(h) * time.Hour)}
	}
	es := []Entry{
		mk("a", 0, 5, MalformedJSON, "s1", 0),
		mk("a", 1, 7, MissingKey, "s1", 1),
		mk("b", 0, 100, MalformedJSON, "s2", 2),
		mk("b", 2, 250, TypeMismatch, "s2", 3),
	}
	cases := []struct {
		name string
		f    Filter
		want []int
	}{
		{"all", Filter{}, []int{0, 1, 2, 3}},
		{"reason", Filter{Reasons: []Reason{MalformedJSON}}, []int{0, 2}},
		{"reasons", Filter{Reasons: []Reason{MissingKey, TypeMismatch}}, []int{1, 3}},
		{"topic", Filter{Topics: []string{"b"}}, []int{2, 3}},
		{"sink", Filter{Sinks: []string{"s1"}}, []int{0, 1}},
		{"since", Filter{Since: base.Add(time.Hour)}, []int{1, 2, 3}},
		{"until exclusive", Filter{Until: base.Add(2 * time.Hour)}, []int{0, 1}},
		{"window", Filter{Since: base.Add(time.Hour), Until: base.Add(3 * time.Hour)}, []int{1, 2}},
		{"offsets", Filter{Offsets: []OffsetRange{{Topic: "b", Partition: -1, From: 200}}}, []int{3}},
		{"offset ranges", Filter{Offsets: []OffsetRange{{Topic: "a", Partition: 1, From: 7, To: 8}, {Partition: -1, From: 100, To: 101}}}, []int{1, 2}},
		{"combined", Filter{Reasons: []Reason{MalformedJSON}, Topics: []string{"a"}}, []int{0}},
		{"none", Filter{Reasons: []Reason{UnknownTable}}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := c.f.Apply(es)
			if len(got) != len(c.want) {
				t.Fatalf("got %d entries, want %v", len(got), c.want)
			}
			for i, w := range c.want {
				if got[i].Record != es[w].Record {
					t.Fatalf("entry %d: got %+v, want %+v", i, got[i].Record, es[w].Record)
				}
			}
		})
	}
}

func TestParseOffsetRange(t *testing.T) {
	cases := []struct {
		in   string
		want OffsetRange
		err  bool
	}{
		{"orders", OffsetRange{Topic: "orders", Partition: -1}, false},
		{"orders/3", OffsetRange{Topic: "orders", Partition: 3}, false},
		{"orders/3@100-200", OffsetRange{Topic: "orders", Partition: 3, From: 100, To: 200}, false},
		{"orders@100-", OffsetRange{Topic: "orders", Partition: -1, From: 100}, false},
		{"orders/3@42", OffsetRange{Topic: "orders", Partition: 3, From: 42, To: 43}, false},
		{"/1@5", OffsetRange{Partition: 1, From: 5, To: 6}, false},
		{"db.public.x/0@7-7", OffsetRange{}, true},
		{"orders/x", OffsetRange{}, true},
		{"orders@-5", OffsetRange{}, true},
	}
	for _, c := range cases {
		got, err := ParseOffsetRange(c.in)
		if (err != nil) != c.err || (!c.err && got != c.want) {
			t.Errorf("%q: got %+v, %v; want %+v (error %v)", c.in, got, err, c.want, c.err)
		}
	}
}

func TestStats(t *testing.T) {
	h0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	mk := func(topic string, r Reason, at time.Time) Entry {
		return Entry{Record: &source.Record{Topic: topic}, Reason: r, Time: at}
	}
	cases := []struct {
		name     string
		in       []Entry
		reasons  map[Reason]int
		topics   map[string]int
		hours    []time.Time
		perHour  []int
		wantSize int
	}{
		{"empty", nil, map[Reason]int{}, map[string]int{}, nil, nil, 0},
		{"mixed", []Entry{
			mk("a", MalformedJSON, h0.Add(5*time.Minute)),
			mk("a", MalformedJSON, h0.Add(59*time.Minute)),
			mk("b", MissingKey, h0.Add(61*time.Minute)),
			mk("b", MalformedJSON, h0.Add(3*time.Hour).In(time.FixedZone("x", 3600))),
		}, map[Reason]int{MalformedJSON: 3, MissingKey: 1}, map[string]int{"a": 2, "b": 2},
			[]time.Time{h0, h0.Add(time.Hour), h0.Add(3 * time.Hour)}, []int{2, 1, 1}, 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := Stats(c.in)
			if s.Total != c.wantSize || fmt.Sprint(s.ByReason) != fmt.Sprint(c.reasons) || fmt.Sprint(s.ByTopic) != fmt.Sprint(c.topics) {
				t.Fatalf("stats %+v", s)
			}
			hours := s.Hours()
			if len(hours) != len(c.hours) {
				t.Fatalf("hours %v, want %v", hours, c.hours)
			}
			for i, h := range c.hours {
				if !hours[i].Equal(h) || s.ByHour[hours[i]] != c.perHour[i] {
					t.Fatalf("hour %d: %v=%d, want %v=%d", i, hours[i], s.ByHour[hours[i]], h, c.perHour[i])
				}
			}
		})
	}
}

func TestIsTransientAcceptsSourceErrors(t *testing.T) {
	if !IsTransient(fmt.Errorf("wrapped: %w", Transient(errors.New("x")))) {
		t.Fatal("Transient not recognised")
	}
	if IsTransient(Errorf(MalformedJSON, "bad")) || IsTransient(errors.New("plain")) {
		t.Fatal("permanent error seen as transient")
	}
	// source marks its retryable errors with a Transient() method.
	c, err := source.NewConsumer(source.ConsumerConfig{Brokers: []string{closedAddr(t)}, GroupID: "g",
		Topics: []string{"t"}, Logger: testLogger()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := c.EndOffsets(ctx, nil); err == nil || !IsTransient(err) {
		t.Fatalf("source error not transient: %v", err)
	}
}

func FuzzParseQuarantineLine(f *testing.F) {
	for _, e := range edgeEntries() {
		f.Add(bytes.TrimSuffix(AppendLine(nil, &e), []byte("\n")))
	}
	f.Add([]byte(`{"topic":"t","error":{"class":"x","time":"bad"}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		e, err := ParseLine(line)
		if err != nil {
			return
		}
		out := AppendLine(nil, &e)
		e2, err := ParseLine(bytes.TrimSuffix(out, []byte("\n")))
		if err != nil {
			t.Fatalf("re-parse of %s: %v", out, err)
		}
		if e2.Reason != e.Reason || e2.BatchID != e.BatchID || !e2.Time.Equal(e.Time) || !sameBytes(e2.Record.Value, e.Record.Value) {
			t.Fatalf("round trip changed the entry: %+v vs %+v", e, e2)
		}
	})
}
