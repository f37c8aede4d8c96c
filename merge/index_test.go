// Tests of the key index against a plain map.

package merge

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	"github.com/cdcsink/cdc-sink/versioning"
)

// The index agrees with a map under inserts, overwrites and lookups of
// present and absent keys, through both the string and []byte paths.
func TestKeyIndexMatchesMap(t *testing.T) {
	x := newKeyIndex()
	want := map[string]loc{}
	for i := 0; i < 20000; i++ {
		k := string(AppendKey(nil, []any{int64(i % 7000), fmt.Sprint("k", i%13)}))
		l := loc{file: int32(i % 17), row: int32(i), ver: versioning.Version{LSN: uint64(i)}, deleted: i%5 == 0}
		if i%2 == 0 {
			x.Set(k, l)
		} else {
			x.SetBytes([]byte(k), l)
		}
		want[k] = l
	}
	if x.Len() != len(want) {
		t.Fatalf("Len = %d, want %d", x.Len(), len(want))
	}
	for k, l := range want {
		if got, ok := x.Get(k); !ok || got != l {
			t.Fatalf("Get(%q) = %v %v, want %v", k, got, ok, l)
		}
		if got, ok := x.GetBytes([]byte(k)); !ok || got != l {
			t.Fatalf("GetBytes(%q) = %v %v, want %v", k, got, ok, l)
		}
	}
	for _, k := range []string{"", "absent", string(AppendKey(nil, []any{int64(99999), "k1"}))} {
		if _, ok := x.Get(k); ok {
			t.Fatalf("Get(%q) found an absent key", k)
		}
	}
	n := 0
	for k, l := range x.All() {
		if want[k] != l {
			t.Fatalf("All: %q -> %v, want %v", k, l, want[k])
		}
		n++
	}
	if n != len(want) {
		t.Fatalf("All yielded %d keys, want %d", n, len(want))
	}
}

// testKeys is a mix of key shapes: bigint and composite keys, short
// strings (inline), 9-byte keys (inline with a tag), long strings and
// composites (arena), the empty key, and raw bytes of every length up to
// 12 (9-byte ones whose first byte has no inline kind among them).
func testKeys(r *rand.Rand, n int) []string {
	seen := map[string]bool{}
	var out []string
	for len(out) < n {
		var k []byte
		switch r.IntN(8) {
		case 0:
			k = AppendKey(nil, []any{r.Int64N(1 << 40)})
		case 1:
			k = AppendKey(nil, []any{int64(r.IntN(100)) - 50, fmt.Sprint("k", r.IntN(1000))})
		case 2:
			k = AppendKey(nil, []any{randString(r, r.IntN(7))})
		case 3:
			k = AppendKey(nil, []any{randString(r, 7)}) // 9 bytes
		case 4:
			k = AppendKey(nil, []any{randString(r, 8+r.IntN(300))})
		case 5:
			k = AppendKey(nil, []any{int32(r.Int32()), int64(r.Int64()), r.Float64()})
		case 6:
			k = []byte{}
		default:
			k = make([]byte, r.IntN(13))
			for i := range k {
				k[i] = byte(r.UintN(256))
			}
		}
		if !seen[string(k)] {
			seen[string(k)] = true
			out = append(out, string(k))
		}
	}
	return out
}

func randString(r *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + r.IntN(26))
	}
	return string(b)
}

// versionCases: versions of the compact forms (at their edges) and ones
// that need the overflow slab.
var versionCases = []struct {
	name string
	v    versioning.Version
	over bool
}{
	{"zero", versioning.Version{}, false},
	{"stream", versioning.Version{Phase: 1, Commit: 24023119, LSN: 24023128}, false},
	{"stream-high-lsn", versioning.Version{Epoch: 3, Phase: 1, Commit: 0x1a3_5f000000, LSN: 0x1a3_5f001000}, false},
	{"lsn-below-commit", versioning.Version{Phase: 1, Commit: 130, LSN: 100}, false},
	{"delta-max", versioning.Version{Phase: 1, Commit: 1 << 40, LSN: 1<<40 + math.MaxInt32}, false},
	{"delta-min", versioning.Version{Phase: 1, Commit: 1 << 40, LSN: 1<<40 + math.MinInt32}, false},
	{"delta-wraps", versioning.Version{Phase: 1, Commit: math.MaxUint64, LSN: 5}, false},
	{"snapshot", versioning.Version{Phase: 0, LSN: 0x1a3_5f000000}, false},
	{"unwrap-seq", versioning.Version{Phase: 1, LSN: math.MaxUint64, Seq: math.MaxUint32}, false},
	{"epoch-max", versioning.Version{Epoch: 1<<20 - 1, Phase: 1, Commit: 7, LSN: 9}, false},
	{"epoch-huge", versioning.Version{Epoch: 1 << 20, Phase: 1, Commit: 7, LSN: 9}, true},
	{"epoch-max32", versioning.Version{Epoch: math.MaxUint32, Commit: 7, LSN: 9}, true},
	{"phase-2", versioning.Version{Phase: 2, Commit: 7, LSN: 9}, true},
	{"phase-255", versioning.Version{Phase: 255}, true},
	{"seq-with-commit", versioning.Version{Phase: 1, Commit: 100, LSN: 108, Seq: 5001}, true},
	{"seq-huge", versioning.Version{Phase: 1, LSN: 100, Seq: math.MaxUint32 + 1}, true},
	{"delta-above", versioning.Version{Phase: 1, Commit: 1 << 40, LSN: 1<<40 + math.MaxInt32 + 1}, true},
	{"delta-below", versioning.Version{Phase: 1, Commit: 1 << 40, LSN: 1<<40 + math.MinInt32 - 1}, true},
	{"all-max", versioning.Version{Epoch: math.MaxUint32, Phase: 255, Commit: math.MaxUint64, LSN: math.MaxUint64, Seq: math.MaxUint64}, true},
}

func randVersion(r *rand.Rand) versioning.Version {
	if r.IntN(4) == 0 {
		return versionCases[r.IntN(len(versionCases))].v
	}
	c := r.Uint64N(1 << 42)
	switch r.IntN(6) {
	case 0: // snapshot row
		return versioning.Version{Epoch: r.Uint32N(3), LSN: c}
	case 1: // far LSN, any Seq, any Epoch: mostly overflow
		return versioning.Version{Epoch: r.Uint32(), Phase: versioning.Phase(r.IntN(3)), Commit: c, LSN: r.Uint64(), Seq: r.Uint64N(3)}
	default: // streamed
		return versioning.Version{Epoch: r.Uint32N(3), Phase: 1, Commit: c, LSN: c + r.Uint64N(1<<20) - 1<<10}
	}
}

func randLoc(r *rand.Rand) loc {
	ints := []int32{0, 1, -1, math.MaxInt32, math.MinInt32, r.Int32(), int32(r.IntN(100))}
	return loc{file: ints[r.IntN(len(ints))], row: ints[r.IntN(len(ints))], ver: randVersion(r), deleted: r.IntN(3) == 0}
}

// checkIndex compares every key of want, some absent keys, All and Locs.
// checkLookup checks Lookup of keys against want, and that each entry it
// returns holds its key.
func checkLookup(t testing.TB, x *keyIndex, keys []string, want map[string]loc) []uint32 {
	t.Helper()
	ent := make([]uint32, len(keys))
	locs := make([]loc, len(keys))
	for i := range ent {
		ent[i], locs[i] = 7, loc{row: 3} // overwritten, also for absent keys
	}
	x.Lookup(keys, ent, locs)
	for i, k := range keys {
		w, in := want[k]
		if (ent[i] != 0) != in || locs[i] != w {
			t.Fatalf("Lookup(%x) = entry %d %+v, want %+v %v", k, ent[i], locs[i], w, in)
		}
		if in && !x.is(x.ents.at(int(ent[i])-1), k) {
			t.Fatalf("Lookup(%x) = entry %d, which holds another key", k, ent[i])
		}
	}
	return ent
}

func checkIndex(t testing.TB, x *keyIndex, want map[string]loc, absent []string) {
	t.Helper()
	if x.Len() != len(want) {
		t.Fatalf("Len = %d, want %d", x.Len(), len(want))
	}
	for k, l := range want {
		if got, ok := x.Get(k); !ok || got != l {
			t.Fatalf("Get(%x) = %+v %v, want %+v", k, got, ok, l)
		}
		if got, ok := x.GetBytes([]byte(k)); !ok || got != l {
			t.Fatalf("GetBytes(%x) = %+v %v, want %+v", k, got, ok, l)
		}
	}
	for _, k := range absent {
		if _, in := want[k]; in {
			continue
		}
		if got, ok := x.Get(k); ok {
			t.Fatalf("Get(%x) found an absent key: %+v", k, got)
		}
		if got, ok := x.GetBytes([]byte(k)); ok {
			t.Fatalf("GetBytes(%x) found an absent key: %+v", k, got)
		}
	}
	// Lookup of every key, present and absent, in one call (several
	// groups of lookupBatch) agrees with Get
	var all []string
	for k := range want {
		all = append(all, k)
	}
	all = append(all, absent...)
	checkLookup(t, x, all, want)
	n := 0
	for k, l := range x.All() {
		if w, ok := want[k]; !ok || w != l {
			t.Fatalf("All: %x -> %+v, want %+v %v", k, l, w, ok)
		}
		n++
	}
	if n != len(want) {
		t.Fatalf("All yielded %d keys, want %d", n, len(want))
	}
	n, dead := 0, 0
	for l := range x.Locs() {
		if l.deleted {
			dead++
		}
		n++
	}
	if wdead := countDeleted(want); dead != wdead || x.Deleted() != wdead {
		t.Fatalf("Locs yielded %d tombstones, Deleted = %d, want %d", dead, x.Deleted(), wdead)
	}
	if n != len(want) {
		t.Fatalf("Locs yielded %d, want %d", n, len(want))
	}
}

// Every version and location round-trips exactly, in the compact form
// or through the overflow slab, and moving between the two reuses the
// slab's slots.
func TestKeyIndexVersions(t *testing.T) {
	for _, c := range versionCases {
		t.Run(c.name, func(t *testing.T) {
			x := newKeyIndex()
			k := string(AppendKey(nil, []any{int64(42)}))
			for _, l := range []loc{
				{file: 3, row: 7, ver: c.v},
				{file: math.MaxInt32, row: math.MinInt32, ver: c.v, deleted: true},
				{file: -1, row: -1, ver: c.v},
			} {
				x.Set(k, l)
				if got, _ := x.Get(k); got != l {
					t.Fatalf("Get = %+v, want %+v", got, l)
				}
				e := x.ents.at(0)
				if over := e.tail>>modeShift&3 == modeOver; over != c.over {
					t.Fatalf("overflow = %v, want %v", over, c.over)
				}
			}
		})
	}
	// one key moved between every pair of forms: the slab does not grow
	x := newKeyIndex()
	k := "key"
	for range 3 {
		for _, a := range versionCases {
			for _, b := range versionCases {
				for _, v := range []versioning.Version{a.v, b.v} {
					x.Set(k, loc{ver: v})
					if got, _ := x.Get(k); got.ver != v {
						t.Fatalf("%s then %s: Get = %+v, want %+v", a.name, b.name, got.ver, v)
					}
				}
			}
		}
	}
	if x.over.n != 1 || len(x.free) > 1 {
		t.Fatalf("overflow slab: %d slots, %d free, want 1", x.over.n, len(x.free))
	}
}

// The index agrees with a map under random inserts, overwrites and
// lookups of present and absent keys of every shape, through the string
// and []byte paths, with compact and overflow versions, with the real
// hash and with hashes masked down so that most keys collide, across
// many rehashes.
func TestKeyIndexModel(t *testing.T) {
	for _, c := range []struct {
		name  string
		hmask uint64
		keys  int
		ops   int
	}{
		{"full-hash", math.MaxUint64, 30000, 100000},
		{"hash-256", 0xff << 56, 3000, 20000},     // same home slots and fingerprints
		{"hash-low", 0xffff, 3000, 20000},         // same home slots, fingerprints differ
		{"hash-one", 0, 300, 3000},                // every key in one cluster
		{"hash-2bits", 1<<63 | 1<<7, 1000, 10000}, // four hashes
	} {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(c.keys), c.hmask))
			keys := testKeys(r, c.keys)
			absent := keys[c.keys*9/10:]
			keys = keys[:c.keys*9/10]
			x := newKeyIndex()
			x.hmask = c.hmask
			want := map[string]loc{}
			rehashes, cap0 := 0, 0
			for i := range c.ops {
				k := keys[r.IntN(len(keys))]
				switch r.IntN(7) {
				case 6:
					// Lookup of a few present and absent keys, then SetAt
					// with what it returned, with a wrong entry, or with
					// none: all three store like Set
					ks := []string{k, absent[r.IntN(len(absent))]}
					for range r.IntN(2 * lookupBatch) {
						ks = append(ks, keys[r.IntN(len(keys))])
					}
					ent := checkLookup(t, x, ks, want)
					j := r.IntN(len(ks))
					if j == 1 {
						j = 0 // absent keys stay absent
					}
					e := ent[j]
					switch r.IntN(3) {
					case 0:
						e = uint32(r.IntN(x.Len() + 2))
					case 1:
						e = 0
					}
					l := randLoc(r)
					x.SetAt(e, ks[j], l)
					want[ks[j]] = l
					continue
				case 4:
					l := randLoc(r)
					w, in := want[k]
					newer := !in || w.ver.Less(l.ver)
					if got := x.SetNewerBytes([]byte(k), l); got != newer {
						t.Fatalf("op %d: SetNewerBytes(%x, %+v) = %v, stored %+v %v", i, k, l, got, w, in)
					}
					if newer {
						want[k] = l
					}
					continue
				case 5:
					if r.IntN(50) == 0 {
						x.Reserve(x.Len() + r.IntN(3000))
					}
					continue
				case 0:
					l := randLoc(r)
					x.Set(k, l)
					want[k] = l
				case 1:
					l := randLoc(r)
					x.SetBytes([]byte(k), l)
					want[k] = l
				case 2:
					got, ok := x.Get(k)
					if w, in := want[k]; ok != in || got != w {
						t.Fatalf("op %d: Get(%x) = %+v %v, want %+v %v", i, k, got, ok, w, in)
					}
				default:
					a := absent[r.IntN(len(absent))]
					if got, ok := x.GetBytes([]byte(a)); ok {
						t.Fatalf("op %d: GetBytes(%x) found an absent key: %+v", i, a, got)
					}
				}
				if len(x.slots) != cap0 {
					rehashes, cap0 = rehashes+1, len(x.slots)
				}
			}
			checkIndex(t, x, want, absent)
			if rehashes < 5 {
				t.Fatalf("only %d rehashes", rehashes)
			}
		})
	}
}

// The index agrees with a map on ops decoded from the fuzz input: a hash
// mask (to force collisions), then ops of a kind byte, a key (length and
// bytes) and a location (a shape byte, then the fields).
func FuzzKeyIndex(f *testing.F) {
	f.Add([]byte("\x00\x01\x09\x02abcdefgh\x00\x00\x01\x09\x02abcdefgh\x05"))
	f.Add([]byte("\x01\x00\x00\x03\x00\x01\x00\x02\x02\x00\x02\x01\x00\x05"))
	f.Add([]byte("\xff\x01\x14\x04\x12long string key...\x02\x10\x20\x30\x40"))
	f.Fuzz(fuzzKeyIndex)
}

func fuzzKeyIndex(t *testing.T, data []byte) {
	{
		if len(data) == 0 {
			return
		}
		x := newKeyIndex()
		x.hmask = []uint64{0, 3, 0xf << 60, math.MaxUint64}[data[0]%4]
		// with colliding hashes an op is O(keys): bound the input
		data = data[1:min(len(data), 4096)]
		next := func(n int) []byte {
			n = min(n, len(data))
			b := data[:n]
			data = data[n:]
			return b
		}
		byte1 := func() byte {
			if b := next(1); len(b) == 1 {
				return b[0]
			}
			return 0
		}
		u64 := func() uint64 {
			var b [8]byte
			copy(b[:], next(8))
			return binary.LittleEndian.Uint64(b[:])
		}
		want := map[string]loc{}
		var seen []string
		for len(data) > 0 {
			op := byte1()
			var k string
			if op&0x80 != 0 && len(seen) > 0 {
				k = seen[int(op>>4&7)%len(seen)] // an earlier key: overwrites
			} else {
				k = string(next(int(byte1()) % 24))
				seen = append(seen, k)
			}
			switch op % 4 {
			case 0, 1:
				var l loc
				switch byte1() % 4 {
				case 0:
					l.ver = versionCases[int(u64()%uint64(len(versionCases)))].v
				case 1:
					c := u64()
					l.ver = versioning.Version{Phase: 1, Commit: c, LSN: c + u64()%1024}
				default:
					l.ver = versioning.Version{Epoch: uint32(u64()), Phase: versioning.Phase(u64()), Commit: u64(), LSN: u64(), Seq: u64()}
				}
				fr := u64()
				l.file, l.row, l.deleted = int32(fr), int32(fr>>32), fr&(1<<20) != 0
				if op%4 == 0 {
					x.Set(k, l)
				} else {
					x.SetBytes([]byte(k), l)
				}
				want[k] = l
			case 2:
				got, ok := x.Get(k)
				if w, in := want[k]; ok != in || got != w {
					t.Fatalf("Get(%x) = %+v %v, want %+v %v", k, got, ok, w, in)
				}
			default:
				got, ok := x.GetBytes([]byte(k))
				if w, in := want[k]; ok != in || got != w {
					t.Fatalf("GetBytes(%x) = %+v %v, want %+v %v", k, got, ok, w, in)
				}
				if op&0x40 != 0 { // the batch path on every key so far
					checkLookup(t, x, seen, want)
				}
			}
		}
		checkIndex(t, x, want, seen)
	}
}

// A key longer than an arena chunk gets a chunk of its own, and the keys
// around it stay readable.
func TestKeyIndexLongKeys(t *testing.T) {
	x := newKeyIndex()
	want := map[string]loc{}
	for i, n := range []int{20, arenaChunk - 5, 30, arenaChunk + 100, 3 * arenaChunk, 40, arenaChunk / 2, arenaChunk / 2, 10} {
		k := string(AppendKey(nil, []any{strings.Repeat(string(rune('a'+i)), n)}))
		l := loc{file: int32(i), row: int32(n)}
		x.Set(k, l)
		want[k] = l
	}
	checkIndex(t, x, want, []string{"", "absent", strings.Repeat("a", 20)})
}

// BenchmarkKeyIndexHeap builds an index of n keys once and reports its
// heap per key (HeapAlloc after GC, before vs after), the build time per
// key, the bytes allocated per key during the build (growth copies
// included) and the sampled peak of heap objects per key; ns/op is a Get
// of a random present key.
func BenchmarkKeyIndexHeap(b *testing.B) {
	// AppendKey of one int64 (tag 2, 8 bytes big-endian), without boxing
	bigint := func(dst []byte, i int) []byte { return binary.BigEndian.AppendUint64(append(dst[:0], 2), uint64(i)) }
	// AppendKey of a 20-byte string ("k-" and 18 digits): 22 bytes
	str20 := func(dst []byte, i int) []byte {
		dst = append(dst[:0], 4, 20, 'k', '-')
		return fmt.Appendf(dst, "%018d", i)
	}
	for _, c := range []struct {
		name string
		n    int
		key  func([]byte, int) []byte
	}{
		{"bigint-1M", 1 << 20, bigint},
		{"bigint-10M", 10_000_000, bigint},
		{"string20-1M", 1 << 20, str20},
	} {
		b.Run(c.name, func(b *testing.B) { benchKeyIndexHeap(b, c.n, c.key) })
	}
}

func benchKeyIndexHeap(b *testing.B, n int, key func([]byte, int) []byte) {
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	stop, peak := samplePeakHeap()
	x := newKeyIndex()
	buf := make([]byte, 0, 64)
	start := time.Now()
	for i := range n {
		buf = key(buf, i)
		x.SetBytes(buf, loc{file: int32(i >> 12), row: int32(i & 4095),
			ver: versioning.Version{Phase: 1, Commit: 1<<40 + uint64(i)*64, LSN: 1<<40 + uint64(i)*64 + 24}})
	}
	build := time.Since(start)
	stop()
	runtime.GC()
	runtime.ReadMemStats(&m1)
	if x.Len() != n {
		b.Fatalf("Len = %d, want %d", x.Len(), n)
	}
	rng := uint64(1)
	for b.Loop() {
		rng = rng*6364136223846793005 + 1442695040888963407
		buf = key(buf, int((rng>>33)%uint64(n)))
		if _, ok := x.GetBytes(buf); !ok {
			b.Fatal("a present key not found")
		}
	}
	b.ReportMetric(float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc))/float64(n), "B/key")
	b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/float64(n), "alloc-B/key")
	b.ReportMetric(float64(int64(*peak)-int64(m0.HeapAlloc))/float64(n), "peak-B/key")
	b.ReportMetric(float64(build.Nanoseconds())/float64(n), "set-ns/key")
	b.ReportMetric(float64(build.Milliseconds()), "build-ms")
	runtime.KeepAlive(x)
}

// samplePeakHeap samples the bytes in heap objects (live and not yet
// swept) every millisecond until stop is called.
func samplePeakHeap() (stop func(), peak *uint64) {
	peak = new(uint64)
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(s)
			*peak = max(*peak, s[0].Value.Uint64())
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done); <-finished }, peak
}

func countDeleted(m map[string]loc) int {
	n := 0
	for _, l := range m {
		if l.deleted {
			n++
		}
	}
	return n
}
