// Benchmarks of loading snapshots from long logs and large checkpoints.

package delta

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// buildLogFixture writes a table of `commits` commits (one add + one txn
// each, plus initialFiles adds in v0's checkpoint) with a real checkpoint
// every `every` versions, directly (no fsync) to keep fixture time low.
func buildLogFixture(b *testing.B, dir string, commits int, every int, initialFiles int) {
	b.Helper()
	logd := filepath.Join(dir, "_delta_log")
	if err := os.MkdirAll(logd, 0o750); err != nil {
		b.Fatal(err)
	}
	t := OpenTable(NewLocalStorage(dir), "")
	meta := Metadata{ID: "bench", SchemaString: testSchema, Format: Format{Provider: "parquet"}, PartitionColumns: []string{}, Configuration: map[string]string{}}
	proto := Protocol{MinReaderVersion: 1, MinWriterVersion: 2}
	s := &Snapshot{table: t, protocol: proto, metadata: meta, txns: map[string]Txn{}, domains: map[string]DomainMetadata{}}
	stats := `{"numRecords":100,"minValues":{"id":1,"v":"aaaa"},"maxValues":{"id":100,"v":"zzzz"},"nullCount":{"id":0,"v":0}}`
	for i := 0; i < initialFiles; i++ {
		s.files = append(s.files, Add{Path: fmt.Sprintf("part-%07d-c000.snappy.parquet", i), Size: 1234, ModificationTime: 1, DataChange: true, Stats: stats})
	}
	v0, _ := MarshalCommit([]Action{{Protocol: &proto}, {Metadata: &meta}})
	if err := os.WriteFile(filepath.Join(logd, commitName(0)), v0, 0o640); err != nil {
		b.Fatal(err)
	}
	writeCP := func(v int64) {
		s.version = v
		data, n, nAdds, err := encodeCheckpoint(s, time.Now())
		if err != nil {
			b.Fatal(err)
		}
		os.WriteFile(filepath.Join(logd, checkpointName(v)), data, 0o640)
		lc, _ := json.Marshal(lastCheckpointInfo{Version: v, Size: n, SizeInBytes: int64(len(data)), NumOfAddFiles: nAdds})
		os.WriteFile(filepath.Join(logd, "_last_checkpoint"), lc, 0o640)
	}
	if initialFiles > 0 {
		writeCP(0)
	}
	for v := int64(1); v <= int64(commits); v++ {
		a := Add{Path: fmt.Sprintf("c-%07d.parquet", v), Size: 1, ModificationTime: 1, DataChange: true, Stats: stats}
		tx := Txn{AppID: fmt.Sprintf("app-%d", v%4), Version: v}
		data, _ := MarshalCommit([]Action{{CommitInfo: map[string]any{"operation": "WRITE", "timestamp": v}}, {Add: &a}, {Txn: &tx}})
		if err := os.WriteFile(filepath.Join(logd, commitName(v)), data, 0o640); err != nil {
			b.Fatal(err)
		}
		s.files = append(s.files, a)
		s.txns[tx.AppID] = tx
		if every > 0 && v%int64(every) == 0 {
			writeCP(v)
		}
	}
}

func benchLoad(b *testing.B, dir string, wantFiles int) {
	ctx := context.Background()
	t := OpenTable(NewLocalStorage(dir), "")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s, err := t.Snapshot(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if len(s.Files()) != wantFiles {
			b.Fatalf("files %d want %d", len(s.Files()), wantFiles)
		}
	}
}

var fixtureDirs = map[string]string{}

func fixture(b *testing.B, name string, build func(dir string)) string {
	if d, ok := fixtureDirs[name]; ok {
		return d
	}
	d, err := os.MkdirTemp("", "delta-bench-"+name+"-")
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	build(d)
	b.Logf("fixture %s built in %v", name, time.Since(start))
	fixtureDirs[name] = d
	return d
}

// 10,000 commits, checkpoint every 10: load = newest checkpoint (~10k adds) + ≤9 commits.
func BenchmarkSnapshotLoad10kCommits(b *testing.B) {
	dir := fixture(b, "10k", func(d string) { buildLogFixture(b, d, 9995, 10, 0) })
	benchLoad(b, dir, 9995)
}

// One checkpoint with 1,000,000 add actions (+5 commits after it).
func BenchmarkSnapshotLoad1MFiles(b *testing.B) {
	dir := fixture(b, "1m", func(d string) { buildLogFixture(b, d, 5, 0, 1_000_000) })
	benchLoad(b, dir, 1_000_005)
}

func cleanupFixtures() {
	for _, d := range fixtureDirs {
		os.RemoveAll(d)
	}
}
