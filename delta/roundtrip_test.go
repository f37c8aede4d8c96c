// Round trips: tables our writer produces, as delta-rs reads them at every version.

package delta

import (
	"context"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"fmt"
	"github.com/cdcsink/cdc-sink/delta/schema"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

const evolvedSchema = `{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}},{"name":"v","type":"string","nullable":true,"metadata":{}},{"name":"extra","type":"timestamp","nullable":true,"metadata":{}}]}`

// TestWriterReadByDeltaRS writes a table with our writer (checkpoints,
// removes, txns, domainMetadata, schema evolution, DV adds/removes) and
// checks delta-rs sees the same version, schema, files and txns at every
// version.
func TestWriterReadByDeltaRS(t *testing.T) {
	ctx := context.Background()
	tb, dir := newTable(t, dvProtocol, map[string]string{"delta.checkpointInterval": "5", "delta.enableDeletionVectors": "true"})
	touch := func(p string) Add {
		full := filepath.Join(dir, p)
		os.MkdirAll(filepath.Dir(full), 0o750)
		os.WriteFile(full, []byte("PAR1"), 0o640)
		a := add(p)
		a.Stats = `{"numRecords":3,"minValues":{"id":1},"maxValues":{"id":3},"nullCount":{"id":0}}`
		return a
	}
	n := 0
	for i := 1; i <= 23; i++ {
		s := snap(t, tb)
		tx := s.Begin()
		switch {
		case i == 7: // schema evolution
			m := s.Metadata()
			m.SchemaString = evolvedSchema
			tx.SetMetadata(m)
		case i%6 == 0 && len(s.Files()) > 0: // remove a file
			tx.Remove(RemoveFile(s.Files()[0], time.Now()))
		case i%4 == 0 && len(s.Files()) > 1: // DV rewrite of a file
			old := s.Files()[1]
			nw := old
			nw.DeletionVector = dvDesc(fmt.Sprintf("%020d", i), int64(i))
			nw.Stats = `{"numRecords":3,"tightBounds":false}`
			tx.Remove(RemoveFile(old, time.Now())).Add(nw)
		default:
			n++
			tx.Add(touch(fmt.Sprintf("part-%03d.parquet", n)))
		}
		tx.SetAppTransaction("sink", int64(100+i))
		if i%3 == 0 {
			tx.SetAppTransaction(fmt.Sprintf("topic-%d", i%2), int64(i))
		}
		if i%5 == 0 {
			tx.SetDomainMetadata("cdc-sink.offsets", fmt.Sprintf(`{"i":%d}`, i))
		}
		if v := commit(t, tx); v != int64(i) {
			t.Fatalf("commit %d got v%d", i, v)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "_delta_log", checkpointName(20))); err != nil {
		t.Fatal("checkpoint v20 missing")
	}
	var specs []string
	for v := 0; v <= 23; v++ {
		specs = append(specs, fmt.Sprintf("%s#%d", dir, v))
	}
	specs = append(specs, dir)
	rs := runDeltaRS(t, specs, []string{"sink", "topic-0", "topic-1", "nope"})
	for i, spec := range specs {
		var s *Snapshot
		var err error
		if i == 24 {
			s, err = tb.Snapshot(ctx)
		} else {
			s, err = tb.SnapshotAt(ctx, int64(i))
		}
		if err != nil {
			t.Fatal(err)
		}
		r := rs[spec]
		if !r.OK {
			t.Fatalf("delta-rs refused our table at %s: %s", spec, r.Error)
		}
		if d := compareWithDeltaRS(t, spec, s, r); len(d) > 0 {
			t.Errorf("%s differs:\n  %s", spec, strings.Join(d, "\n  "))
		}
		if r.Txns["nope"] != nil {
			t.Error("delta-rs sees a txn we never wrote")
		}
	}
	last := rs[dir]
	if got := *last.Txns["sink"]; got != 123 {
		t.Errorf("delta-rs txn sink = %d", got)
	}
	// Prove delta-rs reads our checkpoint parquet: drop commits 0..19 (as
	// log cleanup would) so v20's checkpoint is the only source.
	for v := int64(0); v < 20; v++ {
		if err := os.Remove(filepath.Join(dir, "_delta_log", commitName(v))); err != nil {
			t.Fatal(err)
		}
	}
	s := snap(t, tb)
	r := runDeltaRS(t, []string{dir}, []string{"sink", "topic-0", "topic-1"})[dir]
	if !r.OK {
		t.Fatalf("delta-rs cannot read our checkpoint: %s", r.Error)
	}
	if d := compareWithDeltaRS(t, dir, s, r); len(d) > 0 {
		t.Errorf("checkpoint-only differs:\n  %s", strings.Join(d, "\n  "))
	}
	t.Logf("delta-rs agrees with our writer at all %d versions (checkpoints at 5,10,15,20; files now %d)", 24, len(snap(t, tb).Files()))
}

// TestEndToEndRowsWithDVsReadByDeltaRS writes real Parquet data files
// (delta/parquetio) and deletion vectors (delta/dv) through our log writer
// and checks delta-rs returns exactly the rows our Scan returns.
func TestEndToEndRowsWithDVsReadByDeltaRS(t *testing.T) {
	ctx := context.Background()
	const sch = `{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}},{"name":"v","type":"string","nullable":true,"metadata":{}},{"name":"p","type":"string","nullable":true,"metadata":{}}]}`
	dir := t.TempDir()
	tb, err := Create(ctx, NewLocalStorage(dir), "", Metadata{SchemaString: sch, PartitionColumns: []string{"p"},
		Configuration: map[string]string{"delta.enableDeletionVectors": "true", "delta.checkpointInterval": "3"}}, dvProtocol)
	if err != nil {
		t.Fatal(err)
	}
	s := snap(t, tb)
	as, _ := s.Schema()
	mkRec := func(base int64) arrow.RecordBatch {
		b := array.NewRecordBuilder(memory.DefaultAllocator, schema.ToArrow(as))
		defer b.Release()
		for i := int64(0); i < 3; i++ {
			b.Field(0).(*array.Int64Builder).Append(base + i)
			b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("row-%d", base+i))
			b.Field(2).AppendNull()
		}
		return b.NewRecordBatch()
	}
	tx := s.Begin()
	for i, part := range []string{"a b:c", "x", "x"} {
		rec := mkRec(int64(i * 10))
		p := part
		a, err := s.WriteDataFile(ctx, []arrow.RecordBatch{rec}, map[string]*string{"p": &p})
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
		tx.Add(a)
	}
	commit(t, tx.SetAppTransaction("sink", 1))
	// DV #1: delete row 1 of the first file
	s = snap(t, tb)
	var target Add
	for _, f := range s.Files() {
		if strings.HasPrefix(f.Path, "p=a%20b%253Ac/") {
			target = f
		}
	}
	if target.Path == "" {
		t.Fatalf("partition path not escaped as Spark does: %v", paths(s.Files()))
	}
	bm := roaring64.BitmapOf(1)
	d1, err := tb.WriteDeletionVector(ctx, bm)
	if err != nil {
		t.Fatal(err)
	}
	nw := target
	nw.DeletionVector = d1
	commit(t, s.Begin().Remove(RemoveFile(target, time.Now())).Add(nw).SetAppTransaction("sink", 2))
	// DV #2: also delete row 2 (union with the existing DV), then remove another file
	s = snap(t, tb)
	for _, f := range s.Files() {
		if f.Path == target.Path {
			target = f
		}
	}
	old, err := tb.ReadDeletionVector(ctx, target.DeletionVector)
	if err != nil || old.GetCardinality() != 1 {
		t.Fatalf("read DV back: %v %v", old, err)
	}
	old.Add(2)
	d2, err := tb.WriteDeletionVector(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	nw = target
	nw.DeletionVector = d2
	var other Add
	for _, f := range s.Files() {
		if f.Path != target.Path {
			other = f
			break
		}
	}
	commit(t, s.Begin().Remove(RemoveFile(target, time.Now()), RemoveFile(other, time.Now())).Add(nw).SetAppTransaction("sink", 3))
	s = snap(t, tb)
	if s.CheckpointVersion() != 3 {
		t.Fatalf("expected checkpoint at v3, got %d", s.CheckpointVersion())
	}
	_, rows, err := scanRows(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 { // 9 rows - 3 (removed file) - 2 (DV)
		t.Fatalf("our scan: %d rows: %v", len(rows), rows)
	}
	// DV #3: row 0 of both files left, their DVs in one new DV file
	// (ReplaceDeletionVectors), each at its own offset
	var adds []Add
	var bms []*roaring64.Bitmap
	for _, f := range s.Files() {
		bm, err := tb.ReadDeletionVector(ctx, f.DeletionVector)
		if err != nil {
			t.Fatal(err)
		}
		bm.Add(0)
		adds, bms = append(adds, f), append(bms, bm)
	}
	nas, rms, n, err := tb.ReplaceDeletionVectors(ctx, adds, bms, time.Now())
	if err != nil || len(nas) != 2 || n <= 0 {
		t.Fatalf("ReplaceDeletionVectors: %d adds, %d bytes, %v", len(nas), n, err)
	}
	if a, b := nas[0].DeletionVector, nas[1].DeletionVector; a.PathOrInlineDv != b.PathOrInlineDv || *a.Offset == *b.Offset {
		t.Fatalf("not one file at two offsets: %+v %+v", a, b)
	}
	tx = s.Begin()
	for i := range nas {
		tx.Remove(rms[i]).Add(nas[i])
	}
	commit(t, tx.SetAppTransaction("sink", 4))
	s = snap(t, tb)
	cols, rows, err := scanRows(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("our scan after the shared DV file: %d rows: %v", len(rows), rows)
	}
	r := runDeltaRS(t, []string{dir}, []string{"sink"}, "--rows")[dir]
	if !r.OK || r.Rows == nil {
		t.Fatalf("delta-rs: %s %s", r.Error, r.RowsError)
	}
	if d := compareWithDeltaRS(t, dir, s, r); len(d) > 0 {
		t.Errorf("log differs:\n  %s", strings.Join(d, "\n  "))
	}
	a, b := projectRows(cols, rows, cols), projectRows(r.RowColumns, r.Rows, cols)
	if strings.Join(a, "\n") != strings.Join(b, "\n") {
		t.Fatalf("rows differ:\n ours %q\n delta-rs %q", a, b)
	}
	t.Logf("delta-rs reads our data files + DVs + checkpoint: %d rows identical: %q", len(a), a)
}

// ReplaceDeletionVectors starts another DV file past MaxDVFileBytes, and
// every DV reads back from the file it landed in.
func TestReplaceDeletionVectorsSplitsFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tb := OpenTable(NewLocalStorage(dir), "")
	// every other row of 40M: bitmap containers of 8 KB, ≈ 5 MiB each
	big := roaring64.New()
	for i := uint64(0); i < 40<<20; i += 2 {
		big.Add(i)
	}
	bms := []*roaring64.Bitmap{big, roaring64.BitmapOf(1), big.Clone(), big.Clone(), roaring64.BitmapOf(3)}
	adds := make([]Add, len(bms))
	for i := range adds {
		adds[i] = Add{Path: fmt.Sprintf("f%d.parquet", i), Stats: `{"numRecords":1,"tightBounds":true}`}
	}
	nas, rms, n, err := tb.ReplaceDeletionVectors(ctx, adds, bms, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]bool{}
	for i, a := range nas {
		files[a.DeletionVector.PathOrInlineDv] = true
		if rms[i].Path != adds[i].Path || a.Path != adds[i].Path || a.Stats != `{"numRecords":1,"tightBounds":false}` {
			t.Fatalf("pair %d: %+v %+v", i, a, rms[i])
		}
		got, err := tb.ReadDeletionVector(ctx, a.DeletionVector)
		if err != nil || !got.Equals(bms[i]) {
			t.Fatalf("DV %d: %d values, %v", i, got.GetCardinality(), err)
		}
	}
	// [big, 1], [big], [big, 3]: 3 files
	if len(files) != 3 {
		t.Fatalf("%d DV files, want 3", len(files))
	}
	var onDisk int64
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		fi, _ := e.Info()
		onDisk += fi.Size()
	}
	if len(ents) != 3 || onDisk != n {
		t.Fatalf("%d files of %d bytes on disk, %d reported", len(ents), onDisk, n)
	}
}

// countGets counts Get calls per key.
type countGets struct {
	Storage
	mu   sync.Mutex
	gets map[string]int
}

func (c *countGets) Get(ctx context.Context, key string) ([]byte, error) {
	c.mu.Lock()
	c.gets[key]++
	c.mu.Unlock()
	return c.Storage.Get(ctx, key)
}

// The DVs of one shared file are read with one Get (the table's DV cache),
// and a new handle reads the file again.
func TestSharedDVFileReadOnce(t *testing.T) {
	ctx := context.Background()
	store := &countGets{Storage: NewMemStorage(), gets: map[string]int{}}
	tb := OpenTable(store, "t")
	var adds []Add
	var bms []*roaring64.Bitmap
	for i := range 5 {
		adds = append(adds, Add{Path: fmt.Sprintf("f%d.parquet", i)})
		bms = append(bms, roaring64.BitmapOf(uint64(i), uint64(10+i)))
	}
	nas, _, _, err := tb.ReplaceDeletionVectors(ctx, adds, bms, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []*Table{tb, OpenTable(store, "t")} {
		for i, a := range nas {
			got, err := h.ReadDeletionVector(ctx, a.DeletionVector)
			if err != nil || !got.Equals(bms[i]) {
				t.Fatalf("DV %d: %v %v", i, got, err)
			}
		}
	}
	rel, _ := nas[0].DeletionVector.RelativePath()
	if len(store.gets) != 1 || store.gets["t/"+rel] != 2 {
		t.Fatalf("gets %v, want %s twice (once per handle)", store.gets, rel)
	}
}
