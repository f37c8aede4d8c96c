// The in-memory key index: where each key's current row lives, with its version.

package merge

import (
	"encoding/binary"
	"hash/maphash"
	"iter"
	"math"
	"math/bits"
	"unsafe"

	"github.com/cdcsink/cdc-sink/versioning"
)

// keyIndex maps an encoded key (AppendKey) to where the key's current row
// lives, in 36-39.4 bytes of heap per single-bigint key (38.2 at 10M keys;
// bench/README.md "Key index memory"). It holds no Go pointers per key, so
// the GC has nothing to mark in it: a map[string]loc costs a heap object
// per key, and at 10M keys that was most of the sink's CPU per event
// (bench/results).
//
//   - slots is an open-addressing table (linear probing, at most 13/16
//     full, grown by half: while it grows, old and new slots are both
//     live, never the entries) of 4-byte slots: the low ib bits hold entry
//     index + 1 (0: empty), the others a fingerprint of the key's hash, so
//     a probe reads an entry only when the fingerprint matches.
//   - ents holds one 32-byte entry per key, in insertion order, in chunks
//     of a fixed size: growing never copies them and leaves no append
//     slack. A key of at most 8 bytes, or of 9 bytes (a tag below 240 and
//     8 bytes, e.g. a bigint) is held in the entry; a longer key sits in
//     arena and the entry holds its position.
//   - the entry packs the file, row and deleted flag, and the version as
//     Commit and LSN − Commit (int32) or, when Commit is 0, LSN and Seq
//     (uint32), with Phase and Epoch in the spare bits. A version that does
//     not fit (Epoch ≥ 2^20, Phase > 1, Seq ≠ 0 with a Commit or ≥ 2^32,
//     LSN too far from Commit) is kept whole in over, a side slab (32 more
//     bytes, reused when the key's next version fits again), and the entry
//     holds its index.
//
// A key is found by comparing its encoding (the inline bytes, or the arena
// bytes), never by its hash alone, so the index is exact. Keys are never
// removed; Set overwrites a location.
type keyIndex struct {
	seed  maphash.Seed
	slots []uint32
	ib    uint // low bits of a slot holding entry index + 1
	limit int  // entries that slots takes before it grows
	ents  slab[indexEntry]
	arena [][]byte // long keys, each uvarint length + bytes, within one chunk
	over  slab[versioning.Version]
	free  []uint32 // unused indexes of over
	hmask uint64   // ANDed with every hash: all ones, but tests force collisions
	dead  int      // entries whose location is a tombstone (Deleted)
}

type indexEntry struct {
	key  uint64 // inline key bytes, or arena chunk<<32 | offset
	fr   uint64 // uint32(file)<<32 | uint32(row)
	w    uint64 // Commit (modeDelta), LSN (modeNoCommit), index of over (modeOver)
	d    uint32 // int32(LSN − Commit) (modeDelta), Seq (modeNoCommit)
	tail uint32 // key kind 0-7 | deleted 8 | mode 9-10 | phase 11 | epoch 12-31
}

var _ [32]byte = [unsafe.Sizeof(indexEntry{})]byte{} // the 32 bytes the memory figures assume

// Key kinds (tail bits 0-7): 0..8 an inline key of that length (byte i in
// bits 8i of key); kindArena a key in arena; kind9+b a 9-byte key whose
// first byte is b and whose other 8 are key, big-endian.
const (
	kindArena = 9
	kind9     = 16

	tailDeleted  = 1 << 8
	modeShift    = 9
	modeDelta    = 0
	modeNoCommit = 1
	modeOver     = 2
	phaseShift   = 11
	epochShift   = 12
	maxEpoch     = 1<<(32-epochShift) - 1

	arenaChunk = 1 << 18
)

func newKeyIndex() *keyIndex { return &keyIndex{seed: maphash.MakeSeed(), hmask: math.MaxUint64} }

func (x *keyIndex) hash(k string) uint64 { return maphash.String(x.seed, k) & x.hmask }

// Len is the number of keys.
func (x *keyIndex) Len() int { return x.ents.n }

// Deleted is the number of keys whose location is a tombstone, kept as
// entries change: counting them walked every entry, once a second on a
// running sink (7% of its CPU at 1M keys; bench/README.md).
func (x *keyIndex) Deleted() int { return x.dead }

// inlineKey returns the inline form of k, if it has one.
func inlineKey(k string) (kind uint32, word uint64, ok bool) {
	switch {
	case len(k) == 9 && k[0] < 256-kind9:
		return kind9 + uint32(k[0]), uint64(k[1])<<56 | uint64(k[2])<<48 | uint64(k[3])<<40 | uint64(k[4])<<32 |
			uint64(k[5])<<24 | uint64(k[6])<<16 | uint64(k[7])<<8 | uint64(k[8]), true
	case len(k) <= 8:
		for i := range len(k) {
			word |= uint64(k[i]) << (8 * i)
		}
		return uint32(len(k)), word, true
	}
	return 0, 0, false
}

// appendKey appends the key of entry e to dst.
func (x *keyIndex) appendKey(dst []byte, e *indexEntry) []byte {
	switch kind := e.tail & 0xff; {
	case kind >= kind9:
		return binary.BigEndian.AppendUint64(append(dst, byte(kind-kind9)), e.key)
	case kind == kindArena:
		return append(dst, x.arenaKey(e.key)...)
	default:
		for i := range kind {
			dst = append(dst, byte(e.key>>(8*i)))
		}
		return dst
	}
}

func (x *keyIndex) arenaKey(pos uint64) []byte {
	c := x.arena[pos>>32][uint32(pos):]
	n, w := binary.Uvarint(c)
	return c[w : w+int(n)]
}

// storeArena copies k into arena and returns its position.
func (x *keyIndex) storeArena(k string) uint64 {
	need := binary.MaxVarintLen64 + len(k)
	last := len(x.arena) - 1
	if last < 0 || len(x.arena[last])+need > max(arenaChunk, cap(x.arena[last])) {
		// the first chunk grows by append, later ones are allocated whole
		// (a key longer than a chunk gets a chunk of its own)
		size := 0
		if last >= 0 {
			size = max(arenaChunk, need)
		}
		x.arena = append(x.arena, make([]byte, 0, size))
		last++
	}
	c := x.arena[last]
	pos := uint64(last)<<32 | uint64(len(c))
	c = binary.AppendUvarint(c, uint64(len(k)))
	x.arena[last] = append(c, k...)
	return pos
}

// find returns the entry of key k (hash h) or -1, and the slot where it
// is or would go.
func (x *keyIndex) find(k string, h uint64) (slot, i int) {
	if len(x.slots) == 0 {
		return -1, -1
	}
	return x.findFrom(k, h, home(h, len(x.slots)))
}

// findFrom is find, probing from slot on.
func (x *keyIndex) findFrom(k string, h uint64, slot int) (int, int) {
	kind, word, inline := inlineKey(k)
	mask := uint32(1)<<x.ib - 1
	fp := uint32(h) &^ mask
	for {
		s := x.slots[slot]
		if s == 0 {
			return slot, -1
		}
		if s&^mask == fp {
			i := int(s&mask) - 1
			if x.holds(x.ents.at(i), k, kind, word, inline) {
				return slot, i
			}
		}
		if slot++; slot == len(x.slots) {
			slot = 0
		}
	}
}

// is reports whether entry e holds key k.
func (x *keyIndex) is(e *indexEntry, k string) bool {
	kind, word, inline := inlineKey(k)
	return x.holds(e, k, kind, word, inline)
}

// holds is is for a key whose inline form (inlineKey) is already known.
func (x *keyIndex) holds(e *indexEntry, k string, kind uint32, word uint64, inline bool) bool {
	if inline {
		return e.tail&0xff == kind && e.key == word
	}
	return e.tail&0xff == kindArena && string(x.arenaKey(e.key)) == k
}

// lookupBatch is how many keys lookup probes together: enough misses in
// flight to cover the memory latency, few enough to stay in registers and
// L1.
const lookupBatch = 32

// Lookup finds many keys at once: ent[j] is the entry of keys[j] plus one
// (0: absent) and locs[j] its location. One key at a time, each probe is
// two dependent cache misses (the slot, then the entry) that the CPU
// waits for in turn: find was 36% of a batch's CPU at 10M keys
// (bench/README.md). Here the slots of many keys are loaded in one tight
// loop, then their entries in another, so the misses overlap. Keys not
// settled by their first fingerprint match fall back to find.
func (x *keyIndex) Lookup(keys []string, ent []uint32, locs []loc) {
	if len(x.slots) == 0 {
		clear(ent[:len(keys)])
		clear(locs[:len(keys)])
		return
	}
	mask := uint32(1)<<x.ib - 1
	n := len(x.slots)
	var (
		hs   [lookupBatch]uint64
		pos  [lookupBatch]int
		ss   [lookupBatch]uint32
		idx  [lookupBatch]int
		cand [lookupBatch]*indexEntry
	)
	for lo := 0; lo < len(keys); lo += lookupBatch {
		m := min(lookupBatch, len(keys)-lo)
		for j := range m {
			h := x.hash(keys[lo+j])
			hs[j], pos[j] = h, home(h, n)
		}
		for j := range m { // independent loads: the slots' misses overlap
			ss[j] = x.slots[pos[j]]
		}
		for j := range m {
			// along the probe sequence (mostly within the cache line just
			// loaded) to the first fingerprint match or empty slot
			fp, slot, s := uint32(hs[j])&^mask, pos[j], ss[j]
			for s != 0 && s&^mask != fp {
				if slot++; slot == n {
					slot = 0
				}
				s = x.slots[slot]
			}
			pos[j], idx[j], cand[j] = slot, -1, nil
			if s != 0 {
				idx[j] = int(s&mask) - 1
				cand[j] = x.ents.at(idx[j])
			}
		}
		for j := range m { // the entries' misses overlap
			if e := cand[j]; e != nil {
				ss[j] = e.tail
			}
		}
		for j := range m {
			k := keys[lo+j]
			i := -1
			switch e := cand[j]; {
			case e == nil:
			case x.is(e, k):
				i = idx[j]
			default: // a fingerprint collision: probe on
				slot := pos[j] + 1
				if slot == n {
					slot = 0
				}
				_, i = x.findFrom(k, hs[j], slot)
			}
			if i < 0 {
				ent[lo+j], locs[lo+j] = 0, loc{}
				continue
			}
			ent[lo+j], locs[lo+j] = uint32(i+1), x.loc(x.ents.at(i))
		}
	}
}

// SetAt is Set for key k whose entry Lookup returned (ent, 0 when it was
// absent): no probe for a key the index holds. An ent that does not hold k
// falls back to Set.
func (x *keyIndex) SetAt(ent uint32, k string, l loc) {
	if ent > 0 && int(ent) <= x.ents.n {
		if e := x.ents.at(int(ent) - 1); x.is(e, k) {
			x.put(e, l)
			return
		}
	}
	x.Set(k, l)
}

// home is the first slot to probe for hash h in a table of n slots.
func home(h uint64, n int) int {
	hi, _ := bits.Mul64(h, uint64(n))
	return int(hi)
}

// grow rebuilds slots half as large again. Entries do not move; the old
// table is dropped as soon as the new one is filled.
func (x *keyIndex) grow() { x.rebuild(max(16, len(x.slots)+len(x.slots)/2)) }

// Reserve sizes slots for n keys and a quarter more, so that adding keys
// up to n does not grow it: on open, growing by half from empty rebuilt the
// table again and again (≈ 30% of opening a 100M-key table) and held the
// old and the new slots at once. The quarter is room for new keys: sized
// to n exactly, the first batch's inserts would grow it at once, a stall of
// seconds at 100M keys. n is a hint (numRecords); a wrong one costs memory
// or a later grow, never a wrong answer. Hints beyond what slots can
// address are ignored.
func (x *keyIndex) Reserve(n int) {
	if n <= 0 || n >= math.MaxUint32/20*13 {
		return
	}
	if n += n / 4; n > x.limit {
		x.rebuild(n/13*16 + 16)
	}
}

// rebuild refills slots with n of them.
func (x *keyIndex) rebuild(n int) {
	n = (n + 15) / 16 * 16
	limit := n / 16 * 13
	if limit >= math.MaxUint32 {
		panic("merge: key index full")
	}
	ib := uint(bits.Len32(uint32(limit)))
	slots := make([]uint32, n)
	mask := uint32(1)<<ib - 1
	// In batches: the hashes first (the entries are read in order), then
	// the inserts, whose random loads the CPU can then overlap.
	const batch = 64
	var (
		buf   [9]byte
		hs    [batch]uint64
		homes [batch]int
	)
	for lo := 0; lo < x.ents.n; lo += batch {
		m := min(batch, x.ents.n-lo)
		for j := range m {
			e := x.ents.at(lo + j)
			var h uint64
			if e.tail&0xff == kindArena {
				h = x.hash(bytesString(x.arenaKey(e.key)))
			} else {
				h = x.hash(bytesString(x.appendKey(buf[:0], e)))
			}
			hs[j], homes[j] = h, home(h, n)
		}
		for j := range m {
			slot := homes[j]
			for slots[slot] != 0 {
				if slot++; slot == n {
					slot = 0
				}
			}
			slots[slot] = uint32(hs[j])&^mask | uint32(lo+j+1)
		}
	}
	x.slots, x.ib, x.limit = slots, ib, limit
}

// Get returns the location of key k.
func (x *keyIndex) Get(k string) (loc, bool) {
	_, i := x.find(k, x.hash(k))
	if i < 0 {
		return loc{}, false
	}
	return x.loc(x.ents.at(i)), true
}

// GetBytes is Get for a key in a reused buffer.
func (x *keyIndex) GetBytes(k []byte) (loc, bool) { return x.Get(bytesString(k)) }

// Set stores the location of key k.
func (x *keyIndex) Set(k string, l loc) {
	h := x.hash(k)
	slot, i := x.find(k, h)
	if i >= 0 {
		x.put(x.ents.at(i), l)
		return
	}
	x.insert(k, h, slot, l)
}

// insert adds key k, absent from the index, with hash h at slot (the
// empty slot find stopped at).
func (x *keyIndex) insert(k string, h uint64, slot int, l loc) {
	if x.ents.n >= x.limit {
		x.grow()
		slot, _ = x.find(k, h)
	}
	i := x.ents.add()
	e := x.ents.at(i)
	if kind, word, ok := inlineKey(k); ok {
		e.key, e.tail = word, kind
	} else {
		e.key, e.tail = x.storeArena(k), kindArena
	}
	x.put(e, l)
	x.slots[slot] = uint32(h)&^(uint32(1)<<x.ib-1) | uint32(i+1)
}

// SetBytes is Set for a key in a reused buffer.
func (x *keyIndex) SetBytes(k []byte, l loc) { x.Set(bytesString(k), l) }

// SetNewerBytes stores l for key k unless k is stored with a version not
// older than l's: GetBytes then SetBytes with one probe of the table
// (building the index on open: a probe is a cache miss). It reports
// whether l was stored.
func (x *keyIndex) SetNewerBytes(k []byte, l loc) bool {
	key := bytesString(k)
	h := x.hash(key)
	slot, i := x.find(key, h)
	if i >= 0 {
		e := x.ents.at(i)
		if !x.loc(e).ver.Less(l.ver) {
			return false
		}
		x.put(e, l)
		return true
	}
	x.insert(key, h, slot, l)
	return true
}

// bytesString views b as a string without copying. Only for the duration
// of a call that does not keep it: Set copies a new key's bytes.
func bytesString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// put stores l in entry e, keeping its key.
func (x *keyIndex) put(e *indexEntry, l loc) {
	if was := e.tail&tailDeleted != 0; was != l.deleted { // a new entry starts live
		if l.deleted {
			x.dead++
		} else {
			x.dead--
		}
	}
	e.fr = uint64(uint32(l.file))<<32 | uint64(uint32(l.row))
	tail := e.tail & 0xff
	if l.deleted {
		tail |= tailDeleted
	}
	v := l.ver
	over := e.tail>>modeShift&3 == modeOver
	if v.Phase <= 1 && v.Epoch <= maxEpoch {
		tail |= uint32(v.Phase)<<phaseShift | v.Epoch<<epochShift
		d := int64(v.LSN - v.Commit)
		switch {
		case v.Commit == 0 && v.Seq <= math.MaxUint32:
			x.release(e, over)
			e.w, e.d, e.tail = v.LSN, uint32(v.Seq), tail|modeNoCommit<<modeShift
			return
		case v.Seq == 0 && d == int64(int32(d)):
			x.release(e, over)
			e.w, e.d, e.tail = v.Commit, uint32(int32(d)), tail|modeDelta<<modeShift
			return
		}
	}
	if !over {
		if n := len(x.free); n > 0 {
			e.w, x.free = uint64(x.free[n-1]), x.free[:n-1]
		} else {
			e.w = uint64(x.over.add())
		}
	}
	*x.over.at(int(e.w)) = v
	e.d, e.tail = 0, tail&0xff|tail&tailDeleted|modeOver<<modeShift
}

// release frees the over slot of e, if it had one.
func (x *keyIndex) release(e *indexEntry, over bool) {
	if over {
		x.free = append(x.free, uint32(e.w))
	}
}

// loc unpacks the location in entry e.
func (x *keyIndex) loc(e *indexEntry) loc {
	l := loc{file: int32(e.fr >> 32), row: int32(uint32(e.fr)), deleted: e.tail&tailDeleted != 0}
	epoch, phase := e.tail>>epochShift, versioning.Phase(e.tail>>phaseShift&1)
	switch e.tail >> modeShift & 3 {
	case modeDelta:
		l.ver = versioning.Version{Epoch: epoch, Phase: phase, Commit: e.w, LSN: e.w + uint64(int64(int32(e.d)))}
	case modeNoCommit:
		l.ver = versioning.Version{Epoch: epoch, Phase: phase, LSN: e.w, Seq: uint64(e.d)}
	default:
		l.ver = *x.over.at(int(e.w))
	}
	return l
}

// All yields every key (a fresh string) and its location, in no order.
func (x *keyIndex) All() iter.Seq2[string, loc] {
	return func(yield func(string, loc) bool) {
		var buf []byte
		for i := range x.ents.n {
			e := x.ents.at(i)
			buf = x.appendKey(buf[:0], e)
			if !yield(string(buf), x.loc(e)) {
				return
			}
		}
	}
}

// Locs yields every location without building the keys.
func (x *keyIndex) Locs() iter.Seq[loc] {
	return func(yield func(loc) bool) {
		for i := range x.ents.n {
			if !yield(x.loc(x.ents.at(i))) {
				return
			}
		}
	}
}

// slab is a growable array in chunks of a fixed size, so that growing
// neither copies the elements nor leaves more than one chunk unused. The
// first chunk grows by append, so that a small slab stays small.
type slab[T any] struct {
	c [][]T
	n int
}

const slabShift = 12 // 4096 elements a chunk

func (s *slab[T]) at(i int) *T { return &s.c[i>>slabShift][i&(1<<slabShift-1)] }

// add appends a zero element and returns its index.
func (s *slab[T]) add() int {
	if s.n&(1<<slabShift-1) == 0 && s.n > 0 {
		s.c = append(s.c, make([]T, 0, 1<<slabShift))
	} else if s.n == 0 {
		s.c = append(s.c, nil)
	}
	last := &s.c[len(s.c)-1]
	var zero T
	*last = append(*last, zero)
	s.n++
	return s.n - 1
}
