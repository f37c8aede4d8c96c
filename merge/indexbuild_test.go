// Tests of the parallel key index build on open against the plain loop.

package merge

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cdcsink/cdc-sink/normalize"
)

// indexSnapshot is what an open state holds about its files: every key's
// location, the located (foreign) entries, each file's row counts.
type indexSnapshot struct {
	keys    map[string]loc
	foreign []uint64
	files   []string
}

func snapshotIndex(st *state) indexSnapshot {
	s := indexSnapshot{keys: map[string]loc{}}
	for k, l := range st.index.All() {
		s.keys[k] = l
	}
	if st.foreign != nil {
		st.foreign.each(func(v uint64) { s.foreign = append(s.foreign, v) })
		slices.Sort(s.foreign)
	}
	for _, fs := range st.files {
		s.files = append(s.files, fmt.Sprintf("%s rows=%d live=%d indexed=%v", fs.add.Path, fs.rows, fs.live, fs.indexed))
	}
	return s
}

func withIndexWorkers(t *testing.T, n int) {
	old := indexWorkers
	indexWorkers = n
	t.Cleanup(func() { indexWorkers = old })
}

// Opening with 2, 3 or 16 workers gives the state the loop over the files
// gives (1 worker): same keys and locations, same located keys of the
// partitions not adopted, same file counts; also on the partition-aligned
// layout, with deletion vectors, and with chunks smaller than a file.
func TestIndexFilesParallelMatchesLoop(t *testing.T) {
	for _, aligned := range []bool{false, true} {
		t.Run(fmt.Sprint("aligned=", aligned), func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			opts := Options{Sink: "test", PartitionAligned: aligned}
			// the first batches untagged (indexed on open), the others
			// tagged by partition when aligned (located on open)
			tb, err := Open(ctx, dir, Options{Sink: "test"})
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(1, 2))
			next := map[TP]int64{}
			lsn := uint64(0)
			for i := range 12 {
				if i == 4 {
					if tb, err = Open(ctx, dir, opts); err != nil {
						t.Fatal(err)
					}
				}
				b := &Batch{Offsets: map[TP]int64{}}
				for range 150 {
					lsn++
					id := r.Int64N(600)
					p := int32(id % 3)
					op := byte('u')
					if r.IntN(8) == 0 {
						op = 'd'
					}
					c := ch(id, op, "S", "1.00", v(lsn))
					tp := TP{"t", p}
					c.Table = normalize.TableID{Server: "dbz", Schema: "public", Table: "pedidos"}
					c.Coord = normalize.Coord{Topic: "t", Partition: p, Offset: next[tp]}
					next[tp]++
					b.Offsets[tp] = next[tp]
					b.Changes = append(b.Changes, c)
				}
				if _, err := tb.Apply(ctx, b, noReject(t)); err != nil {
					t.Fatal(err)
				}
			}
			open := func(workers int) indexSnapshot {
				withIndexWorkers(t, workers)
				tb, err := Open(ctx, dir, opts)
				if err != nil {
					t.Fatal(err)
				}
				return snapshotIndex(tb.st)
			}
			want := open(1)
			if len(want.files) < 12 || len(want.keys) < 20 || aligned != (len(want.foreign) > 0) {
				t.Fatalf("%d files, %d keys, %d located: not the table meant", len(want.files), len(want.keys), len(want.foreign))
			}
			for _, c := range []struct{ workers, rows, bytes int }{{2, 1 << 14, 4 << 20}, {3, 7, 4 << 20}, {16, 1 << 14, 30}, {2, 1, 1}} {
				oldRows, oldBytes := scanChunkRows, scanChunkBytes
				scanChunkRows, scanChunkBytes = c.rows, c.bytes
				got := open(c.workers)
				scanChunkRows, scanChunkBytes = oldRows, oldBytes
				if !locMapsEqual(got.keys, want.keys) || !slices.Equal(got.foreign, want.foreign) || !slices.Equal(got.files, want.files) {
					t.Fatalf("%+v: %d keys, %d located, files equal %v; the loop: %d keys, %d located",
						c, len(got.keys), len(got.foreign), slices.Equal(got.files, want.files), len(want.keys), len(want.foreign))
				}
			}
		})
	}
}

func locMapsEqual(a, b map[string]loc) bool {
	if len(a) != len(b) {
		return false
	}
	for k, l := range a {
		if m, ok := b[k]; !ok || m != l {
			return false
		}
	}
	return true
}

// A corrupt file among many fails the parallel open with the error the
// loop gives (the first bad file in order), and a canceled open fails
// without hanging.
func TestIndexFilesParallelErrors(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tb := openT(t, dir)
	for i := range 10 {
		id := int64(i)
		if _, err := tb.Apply(ctx, batchOf("t", id+1, ch(id, 'c', "A", "1.00", v(uint64(id+1)))), noReject(t)); err != nil {
			t.Fatal(err)
		}
	}
	withIndexWorkers(t, 3)
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	st, err := tb.ops.latest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tb.loadState(canceled, st); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled load: err = %v", err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.parquet"))
	if err != nil || len(files) != 10 {
		t.Fatalf("data files = %v (%v)", files, err)
	}
	slices.Sort(files)
	for _, f := range files[3:5] {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i := 4; i < len(b)-8; i++ {
			b[i] ^= 0x5a
		}
		if err := os.WriteFile(f, b, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	var errs []string
	for _, w := range []int{1, 3} {
		withIndexWorkers(t, w)
		_, err := Open(ctx, dir, Options{Sink: "test"})
		if err == nil {
			t.Fatalf("%d workers: Open of corrupt files succeeded", w)
		}
		errs = append(errs, err.Error())
	}
	if errs[0] != errs[1] || !strings.Contains(errs[0], "rebuild key index") {
		t.Fatalf("the loop: %s\nin parallel: %s", errs[0], errs[1])
	}
}

func TestNumRecords(t *testing.T) {
	for _, c := range []struct {
		stats string
		n     int64
		ok    bool
	}{
		{`{"numRecords":1200,"minValues":{"id":1}}`, 1200, true},
		{`{"minValues":{"id":1},"numRecords": 7}`, 7, true},
		{`{"numRecords":0}`, 0, true},
		{``, 0, false},
		{`{"minValues":{"id":1}}`, 0, false},
		{`{"numRecords":-3}`, 0, false},
		{`{"numRecords":"12"}`, 0, false},
		{`{"numRecords":99999999999999999999}`, 0, false},
	} {
		if n, ok := numRecords(c.stats); n != c.n || ok != c.ok {
			t.Errorf("numRecords(%q) = %d %v, want %d %v", c.stats, n, ok, c.n, c.ok)
		}
	}
}

// Open sizes the key index once from the files' numRecords (less their
// deletion vectors): the index never grows while it is built, and holds
// what the unsized build holds. Files without numRecords give no hint.
func TestOpenReservesIndex(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tb, err := Open(ctx, dir, Options{Sink: "test"})
	if err != nil {
		t.Fatal(err)
	}
	lsn, off := uint64(0), int64(0)
	for b := range 8 {
		var cs []*normalize.Change
		for i := range 700 {
			lsn++
			op := byte('c')
			if b > 0 && i%3 == 0 {
				op = 'u' // an earlier batch's key: a DV on its file
			}
			id := int64(b*700 + i)
			if op == 'u' {
				id = int64(i)
			}
			cs = append(cs, ch(id, op, "S", "1.00", v(lsn)))
		}
		off += int64(len(cs))
		if _, err := tb.Apply(ctx, &Batch{Changes: cs, Offsets: map[TP]int64{{"t", 0}: off}}, noReject(t)); err != nil {
			t.Fatal(err)
		}
	}
	if tb, err = Open(ctx, dir, Options{Sink: "test"}); err != nil {
		t.Fatal(err)
	}
	st := tb.st
	hint := st.indexHint()
	if hint != st.index.Len() {
		t.Fatalf("hint %d, %d keys indexed: numRecords less the DVs should count the live rows", hint, st.index.Len())
	}
	sized := newKeyIndex()
	sized.Reserve(hint)
	if len(st.index.slots) != len(sized.slots) {
		t.Fatalf("%d slots after open, Reserve(%d) gives %d: the index grew while it was built", len(st.index.slots), hint, len(sized.slots))
	}
	for _, fs := range st.files {
		fs.add.Stats = ""
	}
	if h := st.indexHint(); h != 0 {
		t.Fatalf("hint %d without stats", h)
	}
	want := snapshotIndex(st).keys
	st.index = newKeyIndex()
	for id := range st.files {
		if err := tb.indexFile(ctx, st, int32(id)); err != nil {
			t.Fatal(err)
		}
	}
	if len(st.index.slots) == len(sized.slots) {
		t.Fatal("the unsized build has the sized build's slots: not the comparison meant")
	}
	if !locMapsEqual(snapshotIndex(st).keys, want) {
		t.Fatal("the sized index differs from the unsized build")
	}
}
