package s3store_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/cdcsink/cdc-sink/delta"
)

// BenchmarkCommitLatency measures one commit's storage cost: PutIfAbsent of
// a small log file (~2 KB, the size of a micro-batch commit) on SeaweedFS
// over loopback versus LocalStorage on the local disk (temp file, fsync,
// link). Reports the median and p99 per commit. Run with e.g.
//
//	go test -run '^$' -bench CommitLatency -benchtime 300x ./delta/s3store/
func BenchmarkCommitLatency(b *testing.B) {
	commit := make([]byte, 2048)
	for i := range commit {
		commit[i] = byte('a' + i%26)
	}
	for _, c := range []struct {
		name  string
		store func(b *testing.B) delta.Storage
	}{
		{"seaweedfs", func(b *testing.B) delta.Storage { return newStoreAt(b, freshPrefix(b.Name()), 0) }},
		{"local", func(b *testing.B) delta.Storage { return delta.NewLocalStorage(b.TempDir()) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			s := c.store(b)
			durs := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				start := time.Now()
				if err := s.PutIfAbsent(ctx, fmt.Sprintf("_delta_log/%020d.json", i), commit); err != nil {
					b.Fatal(err)
				}
				durs = append(durs, time.Since(start))
			}
			b.StopTimer()
			sort.Slice(durs, func(i, j int) bool { return durs[i] < durs[j] })
			q := func(p float64) float64 { return float64(durs[int(p*float64(len(durs)-1))].Microseconds()) / 1000 }
			b.ReportMetric(q(0.5), "p50-ms")
			b.ReportMetric(q(0.99), "p99-ms")
		})
	}
}
