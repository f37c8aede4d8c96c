package envelope

import (
	"context"
	"encoding/json"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/cdcsink/cdc-sink/source"
)

func benchDecode(b *testing.B, d *Decoder, rec *source.Record) {
	ctx := context.Background()
	if _, err := d.Decode(ctx, rec); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(rec.Key) + len(rec.Value)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		if _, err := d.Decode(ctx, rec); err != nil {
			b.Fatal(err)
		}
	}
	reportRates(b, cpuTime()-cpu0)
}

// reportRates reports events per wall-clock second and per CPU second of the
// process (user+sys, GC included). On a shared, oversubscribed machine the
// wall-clock figure understates what one core does; events/cpu-s is the
// per-core throughput.
func reportRates(b *testing.B, cpu time.Duration) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	if cpu > 0 {
		b.ReportMetric(float64(b.N)/cpu.Seconds(), "events/cpu-s")
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDecodeSchemaJSON4KB: a JsonConverter (schemas.enable=true) update
// of a 20-column table: 5.5 KB value (schema ≈ 4.5 KB) + 150 B key.
func BenchmarkDecodeSchemaJSON4KB(b *testing.B) {
	benchDecode(b, NewDecoder(Options{}), loadRecord(b, "bench/items_u.json"))
}

// BenchmarkDecodeSchemaJSONOrders: the 22-column orders create (7.6 KB value).
func BenchmarkDecodeSchemaJSONOrders(b *testing.B) {
	benchDecode(b, NewDecoder(Options{}), loadRecord(b, "json_schema/orders_c.json"))
}

// BenchmarkDecodeSchemalessJSON1KB: the same update without schemas (≈1 KB).
func BenchmarkDecodeSchemalessJSON1KB(b *testing.B) {
	benchDecode(b, NewDecoder(Options{}), loadRecord(b, "bench/items_u_plain.json"))
}

// BenchmarkDecodeAvro: the same update in Confluent Avro.
func BenchmarkDecodeAvro(b *testing.B) {
	af := loadAvro(b)
	raw, err := os.ReadFile("testdata/bench/items_u.avro.json")
	if err != nil {
		b.Fatal(err)
	}
	rec := &source.Record{Topic: "dbz.public.items", Value: af.encode(b, "items_envelope", raw)}
	benchDecode(b, NewDecoder(Options{Registry: af.reg}), rec)
}

// BenchmarkEncodingJSONBaseline: encoding/json on the whole 4 KB envelope, for reference.
func BenchmarkEncodingJSONBaseline(b *testing.B) {
	rec := loadRecord(b, "bench/items_u.json")
	b.SetBytes(int64(len(rec.Value)))
	b.ReportAllocs()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		var v map[string]any
		if err := json.Unmarshal(rec.Value, &v); err != nil {
			b.Fatal(err)
		}
	}
	reportRates(b, cpuTime()-cpu0)
}

// BenchmarkDecodeReal: records captured from a real Debezium 3.6.1 stack
// (customers ≈ 4 KB with schema, orders ≈ 5.6 KB; first c/r record of each).
func BenchmarkDecodeReal(b *testing.B) {
	reg := realRegistry(b)
	for _, name := range []string{"loja.public.customers", "loja.public.orders", "loja_avro.public.customers", "loja_avro.public.orders"} {
		var rec *source.Record
		for _, r := range loadKcat(b, name+".jsonl") {
			if r.Value != nil {
				rec = r
				break
			}
		}
		b.Run(name, func(b *testing.B) {
			benchDecode(b, NewDecoder(Options{Registry: reg}), rec)
		})
	}
}
