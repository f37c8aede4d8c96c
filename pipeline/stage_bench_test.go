package pipeline

import (
	"context"
	"fmt"
	"testing"

	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/internal/dbzgen"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/source"
)

// orderedOnly hides a Normalizer's Unordered: staging normalizes in stream
// order on one goroutine.
type orderedOnly struct{ n *normalize.Normalizer }

func (o orderedOnly) Normalize(ev *envelope.Event, rec *source.Record) (*normalize.Change, error) {
	return o.n.Normalize(ev, rec)
}

// BenchmarkStageAll: staging one poll of 4,096 records (decode and
// normalize, the reading goroutine's stage) on one or two goroutines, with
// the normalizing in stream order on one goroutine or on both (Unordered).
func BenchmarkStageAll(b *testing.B) {
	for _, f := range []dbzgen.Format{dbzgen.JSONPlain, dbzgen.JSONSchema} {
		s := dbzgen.Generate(dbzgen.Config{Seed: 3, Partitions: 1, SnapshotRows: 2000, Events: 20000, Keys: 6000,
			Format: f, Tombstones: true, TxSize: 4, RowWidth: 200})
		recs := s.Records[len(s.Records)-4096:]
		for _, c := range []struct {
			mode    string
			workers int
		}{{"ordered", 1}, {"ordered", 2}, {"unordered", 2}} {
			mode := c.mode
			b.Run(fmt.Sprintf("%s/%s/workers=%d", f, mode, c.workers), func(b *testing.B) {
				norm, err := normalize.New(normalize.Options{})
				if err != nil {
					b.Fatal(err)
				}
				var nz Normalizer = norm
				if mode == "ordered" {
					nz = orderedOnly{norm}
				}
				p := New(Config{Sink: "s", Decoder: envelope.NewDecoder(envelope.Options{}), Normalizer: nz})
				p.stageAll(context.Background(), recs, 2) // the inferred schema, as in a running sink
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					if st := p.stageAll(context.Background(), recs, c.workers); len(st) != len(recs) {
						b.Fatal("unstaged records")
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/record")
			})
		}
	}
}
