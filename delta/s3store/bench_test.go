package s3store_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
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

// BenchmarkLogCommitRate measures how many commits per second one Delta
// log takes (docs/scaling.md "Limits of one Delta table"): 1 and 3
// writers, each loading the latest snapshot and committing a one-file
// blind append with its own txn (as an instance of a sink does per batch:
// a snapshot load, a put-if-absent, retried at the next version when
// another writer won), on SeaweedFS over loopback and on the local disk.
// Reports commits/s of the whole log and the lost races per commit.
//
//	go test -run '^$' -bench LogCommitRate -benchtime 300x ./delta/s3store/
func BenchmarkLogCommitRate(b *testing.B) {
	meta := delta.Metadata{SchemaString: `{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}}]}`}
	proto := delta.Protocol{MinReaderVersion: 1, MinWriterVersion: 2}
	for _, c := range []struct {
		name  string
		store func(b *testing.B) delta.Storage
	}{
		{"seaweedfs", func(b *testing.B) delta.Storage { return newStoreAt(b, freshPrefix(b.Name()), 0) }},
		{"local", func(b *testing.B) delta.Storage { return delta.NewLocalStorage(b.TempDir()) }},
	} {
		for _, writers := range []int{1, 3} {
			b.Run(fmt.Sprintf("%s/writers=%d", c.name, writers), func(b *testing.B) {
				ctx := context.Background()
				tb, err := delta.Create(ctx, c.store(b), "", meta, proto)
				if err != nil {
					b.Fatal(err)
				}
				var next, lost atomic.Int64
				var wg sync.WaitGroup
				errs := make(chan error, writers)
				b.ResetTimer()
				start := time.Now()
				for w := range writers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for n := int64(1); next.Add(1) <= int64(b.N); n++ {
							snap, err := tb.Snapshot(ctx)
							if err != nil {
								errs <- err
								return
							}
							tx := tb.Begin(snap).Add(delta.Add{Path: fmt.Sprintf("part-w%d-%d.parquet", w, n), Size: 1,
								ModificationTime: time.Now().UnixMilli(), DataChange: true}).
								SetAppTransaction(fmt.Sprintf("w%d", w), n)
							tx.MaxAttempts = 200 // as the sink's key-level plans (merge: maxRebases)
							res, err := tx.CommitWithResult(ctx, "WRITE", nil)
							if err != nil {
								errs <- err
								return
							}
							lost.Add(int64(res.Rebased))
						}
					}()
				}
				wg.Wait()
				el := time.Since(start)
				b.StopTimer()
				close(errs)
				for err := range errs {
					b.Fatal(err)
				}
				b.ReportMetric(float64(b.N)/el.Seconds(), "commits/s")
				b.ReportMetric(float64(lost.Load())/float64(b.N), "lost-races/commit")
			})
		}
	}
}
