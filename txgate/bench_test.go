package txgate

import (
	"fmt"
	"testing"
)

// BenchmarkRelease: a poll's worth of small transactions (3 records each,
// over 32 partitions of one collection) added with their ENDs, then
// released; per record (Add and Release).
func BenchmarkRelease(b *testing.B) {
	const parts, txs, per = 32, 3000, 3
	ids := make([]string, txs)
	for i := range ids {
		ids[i] = fmt.Sprint(1000 + i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		g := New[int](Config{Collections: []string{"public.t"}})
		for i := 0; i < txs; i++ {
			commit := int64(100 * (i + 1))
			for o := int64(1); o <= per; o++ {
				_ = g.Add(Record[int]{Topic: "t", Partition: int32((i*per + int(o)) % parts), Collection: "public.t",
					HasTx: true, TxID: ids[i], Order: o, Prev: commit - 100, LSN: commit - 50})
			}
			g.End(End{TxID: ids[i], CommitLSN: commit, Counts: map[string]int64{"public.t": per}})
		}
		if out := g.Release(); len(out) != txs*per {
			b.Fatalf("released %d", len(out))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*txs*per), "ns/record")
}
