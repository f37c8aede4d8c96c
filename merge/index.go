// The in-memory key index: where each key's current row lives, with its version.

package merge

import (
	"bytes"
	"hash/maphash"
	"iter"
)

// keyIndex maps an encoded key (AppendKey) to where the key's current row
// lives. It holds no Go pointers: key bytes sit back to back in one []byte,
// entries in one slice, and the map goes from a 64-bit hash to an entry. A
// map[string]loc costs a heap object per key that every GC cycle must mark;
// at 10M keys that was most of the sink's CPU per event and ~3x the memory
// (bench/results). Hash collisions are resolved by comparing the key bytes,
// so the index is exact.
type keyIndex struct {
	seed  maphash.Seed
	heads map[uint64]int32 // key hash -> newest entry with that hash
	ents  []indexEntry
	keys  []byte
}

type indexEntry struct {
	off  int64 // of the key in keys
	n    int32 // key length
	next int32 // the next entry with the same hash, -1 for none
	loc  loc
}

func newKeyIndex() *keyIndex {
	return &keyIndex{seed: maphash.MakeSeed(), heads: map[uint64]int32{}}
}

// Len is the number of keys.
func (x *keyIndex) Len() int { return len(x.ents) }

func (x *keyIndex) key(e *indexEntry) []byte { return x.keys[e.off : e.off+int64(e.n)] }

// find and findBytes return the entry of key k (hash h), or -1. Two
// copies so that neither path converts (and allocates) the key.
func (x *keyIndex) find(h uint64, k string) int32 {
	i, ok := x.heads[h]
	for ; ok && i >= 0; i = x.ents[i].next {
		if string(x.key(&x.ents[i])) == k {
			return i
		}
	}
	return -1
}

func (x *keyIndex) findBytes(h uint64, k []byte) int32 {
	i, ok := x.heads[h]
	for ; ok && i >= 0; i = x.ents[i].next {
		if bytes.Equal(x.key(&x.ents[i]), k) {
			return i
		}
	}
	return -1
}

func (x *keyIndex) at(i int32) (loc, bool) {
	if i < 0 {
		return loc{}, false
	}
	return x.ents[i].loc, true
}

// Get returns the location of key k.
func (x *keyIndex) Get(k string) (loc, bool) { return x.at(x.find(maphash.String(x.seed, k), k)) }

// GetBytes is Get for a key in a reused buffer.
func (x *keyIndex) GetBytes(k []byte) (loc, bool) {
	return x.at(x.findBytes(maphash.Bytes(x.seed, k), k))
}

// Set stores the location of key k.
func (x *keyIndex) Set(k string, l loc) {
	h := maphash.String(x.seed, k)
	if i := x.find(h, k); i >= 0 {
		x.ents[i].loc = l
		return
	}
	x.add(h, len(k), l)
	x.keys = append(x.keys, k...)
}

// SetBytes is Set for a key in a reused buffer.
func (x *keyIndex) SetBytes(k []byte, l loc) {
	h := maphash.Bytes(x.seed, k)
	if i := x.findBytes(h, k); i >= 0 {
		x.ents[i].loc = l
		return
	}
	x.add(h, len(k), l)
	x.keys = append(x.keys, k...)
}

func (x *keyIndex) add(h uint64, n int, l loc) {
	next := int32(-1)
	if i, ok := x.heads[h]; ok {
		next = i
	}
	x.heads[h] = int32(len(x.ents))
	x.ents = append(x.ents, indexEntry{off: int64(len(x.keys)), n: int32(n), next: next, loc: l})
}

// All yields every key (a fresh string) and its location, in no order.
func (x *keyIndex) All() iter.Seq2[string, loc] {
	return func(yield func(string, loc) bool) {
		for i := range x.ents {
			if !yield(string(x.key(&x.ents[i])), x.ents[i].loc) {
				return
			}
		}
	}
}

// Locs yields every location without building the keys.
func (x *keyIndex) Locs() iter.Seq[loc] {
	return func(yield func(loc) bool) {
		for i := range x.ents {
			if !yield(x.ents[i].loc) {
				return
			}
		}
	}
}
