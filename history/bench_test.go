package history_test

import (
	"context"
	"testing"
	"time"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/history"
	"github.com/cdcsink/cdc-sink/internal/dbzgen"
	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/pipeline"
)

// BenchmarkHistoryOverhead: a 5,000-record stream through the pipeline in
// batches of 1,000 into in-memory storage, with and without a history
// table, and with a history and an SCD2 table: what writing each adds per
// record.
func BenchmarkHistoryOverhead(b *testing.B) {
	s := dbzgen.Generate(dbzgen.Config{Seed: 3, Prefix: "loja", Schema: "public", Table: "orders", Partitions: 2,
		Keys: 2000, Events: 4000, SnapshotRows: 1000, TxSize: 3, ToastEvery: 10})
	for _, mode := range []string{"current", "current+history", "current+history+scd2"} {
		withHistory := mode != "current"
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			for i := 0; i < b.N; i++ {
				norm, _ := normalize.New(normalize.Options{KeepBefore: withHistory})
				tb, err := merge.Open(ctx, "mem://t", merge.Options{Sink: "s", Storage: delta.NewMemStorage()})
				if err != nil {
					b.Fatal(err)
				}
				var pt pipeline.Table = tb
				if withHistory {
					hw, err := history.Open(ctx, "mem://h", history.Options{Sink: "s", Storage: delta.NewMemStorage()})
					if err != nil {
						b.Fatal(err)
					}
					tr := &history.Tracked{Table: tb, History: hw}
					if mode == "current+history+scd2" {
						if tr.SCD2, err = history.OpenSCD2(ctx, "mem://scd2", history.SCD2Options{Sink: "s", Storage: delta.NewMemStorage()}); err != nil {
							b.Fatal(err)
						}
					}
					pt = tr
				}
				p := pipeline.New(pipeline.Config{Sink: "s", Decoder: envelope.NewDecoder(envelope.Options{}), Normalizer: norm,
					Quarantine: &memQ{}, MinBackoff: time.Millisecond,
					Route: func(context.Context, string) (pipeline.Table, string, bool, error) { return pt, "t", true, nil }})
				for j := 0; j < len(s.Records); j += 1000 {
					if _, err := p.Process(ctx, s.Records[j:min(j+1000, len(s.Records))]); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(s.Records)), "ns/record")
		})
	}
}
