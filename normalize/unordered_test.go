package normalize_test

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"strconv"
	"sync"
	"testing"

	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/internal/dbzgen"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/source"
)

type outcome struct {
	c   *normalize.Change
	err string
}

// unorderedStreams: records whose normalizing depends on the records before
// them in every way it can: schemaless tables whose inferred schemas gain
// columns and widen mid-stream, conflicting kinds, schemaless keys typed by
// those columns, tombstones and flattened rows that take a topic's last
// table, a topic whose table changes, TOAST, primary-key changes, malformed
// records; and the real Debezium captures.
func unorderedStreams(t *testing.T) map[string][]*source.Record {
	out := map[string][]*source.Record{}
	for _, f := range []dbzgen.Format{dbzgen.JSONSchema, dbzgen.JSONPlain, dbzgen.Unwrap, dbzgen.UnwrapPlain} {
		s := dbzgen.Generate(dbzgen.Config{Seed: 11, Partitions: 1, SnapshotRows: 300, Events: 1500, Keys: 500,
			Mix: dbzgen.Mix{Insert: 0.2, Update: 0.6, Delete: 0.2}, Format: f, Tombstones: true, TxSize: 3,
			Duplicates: 0.02, ToastEvery: 7, PKChangeEvery: 41, Malformed: 8, Resnapshot: true, RowWidth: 20})
		out["dbzgen-"+f.String()] = s.Records
	}
	var real []*source.Record
	for _, f := range []string{"loja.public.orders.jsonl", "loja_avro.public.orders.jsonl", "loja.public.customers.jsonl",
		"loja_avro.public.order_items.jsonl", "loja.transaction.jsonl", "__debezium-heartbeat.loja.jsonl"} {
		recs, err := source.ReadFile(filepath.Join("../envelope/testdata/real", f), source.FileOptions{})
		if err != nil {
			t.Fatal(err)
		}
		real = append(real, recs...)
	}
	out["real"] = real

	// Handwritten schemaless records: one topic, two tables (the topic's
	// table changes), widening and new columns in the middle of a poll.
	env := func(table, after string) string {
		return `{"before":null,"after":` + after + `,"source":{"name":"srv","db":"d","schema":"s","table":"` + table +
			`","snapshot":"false","lsn":100},"op":"c","ts_ms":1}`
	}
	vals := []struct{ key, val string }{
		{`{"id":1}`, env("a", `{"id":1,"x":null}`)},
		{`{"id":1}`, ``},                                   // tombstone: table a
		{`{"id":2}`, env("a", `{"id":2,"x":5}`)},           // x null → long
		{`{"id":3}`, env("a", `{"id":3,"x":5.5}`)},         // long → double
		{`{"id":4}`, env("a", `{"id":4,"x":7,"y":"new"}`)}, // new column
		{`{"id":5}`, env("a", `{"id":5,"x":"text"}`)},      // conflicting kinds: an error
		{`{"id":6}`, env("a", `{"id":6,"x":1,"y":"b"}`)},
		{`{"id":7}`, env("b", `{"id":7,"z":true}`)},             // the topic's table is now b
		{`{"id":7}`, ``},                                        // tombstone: table b
		{`{"id":8}`, `{"id":8,"x":2,"__op":"u","__table":"a"}`}, // flattened
		{`{"id":9.5}`, env("a", `{"id":9,"x":3}`)},              // key typed by the inferred id column
		{`{"id":10}`, env("a", `{"id":10,"x":4,"y":"c","w":[1,2]}`)},
		{`{"id":1}`, ``},
	}
	var hand []*source.Record
	for round := range 3 {
		for i, kv := range vals {
			r := &source.Record{Topic: "srv.s.a", Offset: int64(round*len(vals) + i), Key: []byte(kv.key)}
			if kv.val != "" {
				r.Value = []byte(kv.val)
			}
			hand = append(hand, r)
		}
	}
	// A known column widened in the middle of a poll: the records before the
	// widening one keep the narrower type.
	for i := range 60 {
		x := strconv.Itoa(i)
		if i == 37 {
			x = "2.5"
		}
		hand = append(hand, &source.Record{Topic: "srv.s.c", Offset: int64(i), Key: []byte(`{"id":` + strconv.Itoa(i) + `}`),
			Value: []byte(env("c", `{"id":`+strconv.Itoa(i)+`,"x":`+x+`}`))})
	}
	out["handwritten"] = hand
	return out
}

func decodeAll(t *testing.T, recs []*source.Record) []*envelope.Event {
	d := envelope.NewDecoder(envelope.Options{Registry: normalize.RealRegistry(t)})
	evs := make([]*envelope.Event, len(recs))
	for i, r := range recs {
		ev, err := d.Decode(context.Background(), r)
		if err == nil {
			evs[i] = ev
		}
	}
	return evs
}

// Unordered, run ahead of stream order and concurrently (each poll's
// records on two goroutines, one of them backwards), then Ordered in stream
// order, gives exactly what Normalize gives in stream order, for polls of
// every size; and for a steady stream Ordered takes Unordered's result.
func TestUnorderedMatchesNormalize(t *testing.T) {
	for name, recs := range unorderedStreams(t) {
		evs := decodeAll(t, recs)
		seq, err := normalize.New(normalize.Options{})
		if err != nil {
			t.Fatal(err)
		}
		want := make([]outcome, len(recs))
		for i, ev := range evs {
			if ev != nil {
				c, err := seq.Normalize(ev, recs[i])
				want[i] = outcome{c, errText(err)}
			}
		}
		for _, poll := range []int{1, 3, 16, 500, len(recs)} {
			t.Run(fmt.Sprintf("%s/poll=%d", name, poll), func(t *testing.T) {
				n, err := normalize.New(normalize.Options{})
				if err != nil {
					t.Fatal(err)
				}
				taken, data := 0, 0
				for lo := 0; lo < len(recs); lo += poll {
					hi := min(lo+poll, len(recs))
					pend := make([]normalize.Pending, hi-lo)
					var wg sync.WaitGroup
					mid := lo + (hi-lo)/2
					wg.Go(func() {
						for i := lo; i < mid; i++ {
							if evs[i] != nil {
								pend[i-lo] = n.Unordered(evs[i], recs[i])
							}
						}
					})
					wg.Go(func() {
						for i := hi - 1; i >= mid; i-- {
							if evs[i] != nil {
								pend[i-lo] = n.Unordered(evs[i], recs[i])
							}
						}
					})
					wg.Wait()
					for i := lo; i < hi; i++ {
						if evs[i] == nil {
							continue
						}
						data++
						if n.Taken(pend[i-lo]) {
							taken++
						}
						c, err := n.Ordered(pend[i-lo], evs[i], recs[i])
						got := outcome{c, errText(err)}
						if !reflect.DeepEqual(got, want[i]) {
							t.Fatalf("record %d (%s@%d): Unordered+Ordered gave %+v / %q, Normalize %+v / %q",
								i, recs[i].Topic, recs[i].Offset, got.c, got.err, want[i].c, want[i].err)
						}
					}
				}
				// a steady stream (not the first poll's, which infers the
				// schema; flattened rows always wait for their turn)
				steady := (poll == 16 || poll == 500) && (name == "dbzgen-json-plain" || name == "dbzgen-json-schema" || name == "real")
				if steady && taken < data/2 { // tombstones (a tenth) always wait
					t.Fatalf("Ordered took Unordered's result for %d of %d records", taken, data)
				}
			})
		}
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
