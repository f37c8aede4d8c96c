package normalize

import (
	"context"
	"encoding/json"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/source"
	"github.com/cdcsink/cdc-sink/versioning"
)

func benchNormalize(b *testing.B, ev *envelope.Event, r *source.Record) {
	n := newN(b, Options{})
	if _, err := n.Normalize(ev, r); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		if _, err := n.Normalize(ev, r); err != nil {
			b.Fatal(err)
		}
	}
	// On a shared machine wall-clock ns/op is inflated by other processes;
	// CPU time of this process per op (GC included) is the stable figure.
	if cpu := cpuTime() - cpu0; cpu > 0 {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkNormalize: a typical update of a 5-column table (int, text,
// numeric(10,2), timestamp, jsonb) with a sequence, as the JSON decoder
// produces it.
func BenchmarkNormalize(b *testing.B) {
	ev := changeEvent('u', nil, item(42, "widget", twos("123456"), micros20180620), itemsSource("false", `["24023119","24023128"]`, 24023128))
	benchNormalize(b, ev, rec(1))
}

// BenchmarkNormalizeWide: the decoder's own benchmark record (items_u.json,
// a wide row), decoded once by the real envelope decoder.
func BenchmarkNormalizeWide(b *testing.B) {
	raw, err := os.ReadFile("../envelope/testdata/bench/items_u.json")
	if err != nil {
		b.Skip(err)
	}
	var f struct {
		Topic   string `json:"topic"`
		Key     string `json:"key"`
		Payload string `json:"payload"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		b.Fatal(err)
	}
	r := &source.Record{Topic: f.Topic, Key: []byte(f.Key), Value: []byte(f.Payload)}
	ev, err := envelope.NewDecoder(envelope.Options{}).Decode(context.Background(), r)
	if err != nil {
		b.Skip("decoder:", err)
	}
	b.Logf("%d columns", len(ev.After.Values))
	benchNormalize(b, ev, r)
}

func BenchmarkNormalizeSchemaless(b *testing.B) {
	ev := plainEvent('u', plain("id", envelope.Number("42")), plain("id", envelope.Number("42"), "name", "widget",
		"price", envelope.Number("1234.56"), "ts", envelope.Number("1529500396945104"), "ok", true))
	benchNormalize(b, ev, rec(1))
}

func BenchmarkNormalizeAndVersion(b *testing.B) {
	n := newN(b, Options{})
	tr := versioning.NewTracker()
	ev := changeEvent('u', nil, item(42, "widget", twos("123456"), micros20180620), itemsSource("false", `["24023119","24023128"]`, 24023128))
	r := rec(1)
	b.ReportAllocs()
	for b.Loop() {
		c, err := n.Normalize(ev, r)
		if err != nil {
			b.Fatal(err)
		}
		AssignVersion(tr, c)
	}
}
