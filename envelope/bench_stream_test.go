package envelope_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/internal/dbzgen"
)

// BenchmarkDecodeStream decodes a realistic generated Debezium stream
// (internal/dbzgen: 22-column orders rows, snapshot + inserts/updates/
// deletes with tombstones, transactions, 200-byte filler) in every wire form
// the benchmark can produce, round-robin over 4000 records so the caches see
// a table's real mix rather than one record.
func BenchmarkDecodeStream(b *testing.B) {
	for _, tc := range []struct {
		name   string
		format dbzgen.Format
		avro   bool
	}{
		{"json-plain", dbzgen.JSONPlain, false},
		{"json-schema", dbzgen.JSONSchema, false},
		{"unwrap-plain", dbzgen.UnwrapPlain, false},
		{"unwrap", dbzgen.Unwrap, false},
		{"avro", dbzgen.JSONPlain, true},
		{"avro-unwrap", dbzgen.UnwrapPlain, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			cfg := dbzgen.Config{Seed: 1, Format: tc.format, Keys: 2000, SnapshotRows: 1000, Events: 3000,
				Tombstones: true, TxSize: 4, RowWidth: 200}
			recs := dbzgen.Generate(cfg).Records
			opts := envelope.Options{}
			if tc.avro {
				ac, err := dbzgen.NewAvroCodec(cfg)
				if err != nil {
					b.Fatal(err)
				}
				reg := envelope.NewMemoryRegistry()
				ac.SetIDs(reg.Register(ac.KeySchema), reg.Register(ac.ValueSchema))
				opts.Registry = reg
				for i, r := range recs {
					if recs[i], err = ac.Record(r); err != nil {
						b.Fatal(err)
					}
				}
			}
			d := envelope.NewDecoder(opts)
			ctx := context.Background()
			var size int64
			for _, r := range recs {
				size += int64(len(r.Key) + len(r.Value))
				if _, err := d.Decode(ctx, r); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(size / int64(len(recs)))
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime()
			for i := 0; i < b.N; i++ {
				if _, err := d.Decode(ctx, recs[i%len(recs)]); err != nil {
					b.Fatal(err)
				}
			}
			cpu := cpuTime() - cpu0
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
			if cpu > 0 {
				b.ReportMetric(float64(b.N)/cpu.Seconds(), "events/cpu-s")
			}
		})
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
