// The partition-scoped key index of a partition-aligned table: the full index holds the keys of
// the partitions this instance writes, a 64-bit hash locates every other key.

package merge

import (
	"context"
	"fmt"
	"hash/maphash"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/layout"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/versioning"
)

// With Options.PartitionAligned, every data file the sink writes holds the
// rows of one Kafka partition (layout.TagPartition). An instance then
// needs the exact location and version of the keys of the partitions it
// writes only: those files are "adopted" into the key index the first time
// a batch of the partition arrives. Every other live row is remembered as
// a 64-bit hash of its key → (file, row, tombstone) in foreignKeys, about
// 20 B per key instead of the index's ~100: enough to find a key whose
// partition changed (a primary-key change moved it, the topic's partition
// count grew) in another partition's file, adopt that one file, and apply
// the version guard as always. Files without the tag (written unaligned,
// before this layout) are always in the index.
//
// The hash map is exact: a key hashing like another live key of another
// file is kept in more, beside it, and both files are adopted when either is
// looked up.
type foreignKeys struct {
	seed  maphash.Seed
	first map[uint64]uint64   // key hash → packed (file, row, deleted)
	more  map[uint64][]uint64 // hashes shared by several live rows (rare)
}

func newForeignKeys(seed maphash.Seed) *foreignKeys {
	return &foreignKeys{seed: seed, first: map[uint64]uint64{}, more: map[uint64][]uint64{}}
}

func packForeign(file int32, row int32, deleted bool) uint64 {
	v := uint64(uint32(file))<<32 | uint64(uint32(row))<<1
	if deleted {
		v |= 1
	}
	return v
}

func unpackForeign(v uint64) (file int32, row int32, deleted bool) {
	return int32(v >> 32), int32(uint32(v) >> 1), v&1 == 1
}

// Len is the number of keys held.
func (f *foreignKeys) Len() int {
	n := len(f.first)
	for _, vs := range f.more {
		n += len(vs) - 1
	}
	return n
}

// add records a live row of a key (hash h). stale reports whether a row
// already held for h is dead now (hidden by a deletion vector): then the
// new row replaces it (the same key's newer row, the usual case);
// otherwise both are kept (two keys with one hash).
func (f *foreignKeys) add(h uint64, v uint64, stale func(uint64) bool) {
	if vs, ok := f.more[h]; ok {
		kept := vs[:0]
		for _, o := range vs {
			if stale(o) {
				continue
			}
			kept = append(kept, o)
		}
		f.set(h, append(kept, v))
		return
	}
	o, ok := f.first[h]
	switch {
	case !ok:
		f.first[h] = v
	case stale(o):
		f.first[h] = v
	default:
		delete(f.first, h)
		f.more[h] = []uint64{o, v}
	}
}

// lookup appends the files that may hold key hash h to dst.
func (f *foreignKeys) lookup(h uint64, dst []int32) []int32 {
	if v, ok := f.first[h]; ok {
		file, _, _ := unpackForeign(v)
		return append(dst, file)
	}
	for _, v := range f.more[h] {
		file, _, _ := unpackForeign(v)
		dst = append(dst, file)
	}
	return dst
}

// dropFiles forgets every entry of the files (adopted into the index). It
// walks the whole map once per adoption: a batch adopts its new partitions'
// files together, and single files only for moved keys.
func (f *foreignKeys) dropFiles(files map[int32]bool) {
	for h, v := range f.first {
		if file, _, _ := unpackForeign(v); files[file] {
			delete(f.first, h)
		}
	}
	for h, vs := range f.more {
		kept := vs[:0]
		for _, v := range vs {
			if file, _, _ := unpackForeign(v); !files[file] {
				kept = append(kept, v)
			}
		}
		f.set(h, kept)
	}
}

// drop forgets one entry (a row adopted into the index).
func (f *foreignKeys) drop(h uint64, v uint64) {
	if o, ok := f.first[h]; ok {
		if o == v {
			delete(f.first, h)
		}
		return
	}
	vs := f.more[h]
	kept := vs[:0]
	for _, o := range vs {
		if o != v {
			kept = append(kept, o)
		}
	}
	f.set(h, kept)
}

// set stores what remains for hash h of its shared (more) entries.
func (f *foreignKeys) set(h uint64, vs []uint64) {
	switch len(vs) {
	case 0:
		delete(f.more, h)
	case 1:
		delete(f.more, h)
		f.first[h] = vs[0]
	default:
		f.more[h] = vs
	}
}

// each calls fn for every entry.
func (f *foreignKeys) each(fn func(v uint64)) {
	for _, v := range f.first {
		fn(v)
	}
	for _, vs := range f.more {
		for _, v := range vs {
			fn(v)
		}
	}
}

// scoped reports whether the state keeps a partition-scoped index.
func (st *state) scoped() bool { return st.foreign != nil }

// located reports whether the rows of file fs go to foreignKeys rather
// than to the key index: a file of a partition not adopted, in a scoped
// state.
func (st *state) located(fs *fileState) bool {
	return st.scoped() && fs.part != "" && !st.adopted[fs.part]
}

// rowDead reports whether a packed foreign entry's row is hidden now.
func (st *state) rowDead(v uint64) bool {
	file, row, _ := unpackForeign(v)
	if int(file) >= len(st.files) {
		return true
	}
	fs := st.files[file]
	return fs.dv != nil && fs.dv.Contains(uint64(row))
}

// indexFile puts the live rows of a file into the key index or, for a
// file of a partition not adopted in a scoped state, into foreignKeys.
func (t *Table) indexFile(ctx context.Context, st *state, id int32) error {
	return t.ops.scanFile(ctx, st, st.files[id], st.fileRows(id))
}

// fileRows marks file id indexed or not (indexFile) and returns what to do
// with each of its live rows.
func (st *state) fileRows(id int32) rowFunc {
	fs := st.files[id]
	if st.located(fs) {
		fs.indexed = false
		return func(key []byte, row int, _ versioning.Version, deleted bool) {
			st.foreign.add(maphash.Bytes(st.foreign.seed, key), packForeign(id, int32(row), deleted), st.rowDead)
		}
	}
	fs.indexed = true
	return st.indexRow(id, nil)
}

// rowFunc takes one live row of a file (scanFile).
type rowFunc = func(key []byte, row int, v versioning.Version, deleted bool)

// indexRows puts the live rows of file id into the key index (only the
// keys in only, when set; newest version wins, as on open).
func (t *Table) indexRows(ctx context.Context, st *state, id int32, only map[string]bool) error {
	return t.ops.scanFile(ctx, st, st.files[id], st.indexRow(id, only))
}

func (st *state) indexRow(id int32, only map[string]bool) rowFunc {
	return func(key []byte, row int, v versioning.Version, deleted bool) {
		if only != nil {
			if !only[string(key)] {
				return
			}
			st.foreign.drop(maphash.Bytes(st.foreign.seed, key), packForeign(id, int32(row), deleted))
		}
		// A live duplicate would be a bug; keep the newest.
		st.index.SetNewerBytes(key, loc{file: id, row: int32(row), ver: v, deleted: deleted})
	}
}

// adopt moves files into the key index: their foreign entries are dropped
// and their rows indexed.
func (t *Table) adopt(ctx context.Context, ids map[int32]bool) error {
	st := t.st
	if len(ids) == 0 {
		return nil
	}
	st.foreign.dropFiles(ids)
	for id := range ids {
		st.files[id].indexed = true
		if err := t.indexRows(ctx, st, id, nil); err != nil {
			return fmt.Errorf("adopt %s into the key index: %w", st.files[id].add.Path, err)
		}
	}
	return nil
}

// adoptAll puts every file into the key index (a truncate, Rows): the
// state then no longer distinguishes partitions until the next reload.
func (t *Table) adoptAll(ctx context.Context) error {
	st := t.st
	if st == nil || !st.scoped() {
		return nil
	}
	ids := map[int32]bool{}
	for id, fs := range st.files {
		if !fs.indexed {
			ids[int32(id)] = true
		}
		if fs.part != "" {
			st.adopted[fs.part] = true
		}
	}
	return t.adopt(ctx, ids)
}

// resolveKeys makes the key index hold every key a batch reads: the files
// of the batch's partitions are adopted (their owner is this instance
// now), then any key still missing is looked up by hash in the other
// partitions' files, whose matching files are adopted too.
func (t *Table) resolveKeys(ctx context.Context, changes []*normalize.Change) error {
	st := t.st
	if st == nil || !st.scoped() {
		return nil
	}
	parts := map[string]bool{}
	tags := partitionTags{}
	for _, c := range changes {
		if c.Op == normalize.OpTruncate {
			return t.adoptAll(ctx)
		}
		if tag := tags.of(c.Coord); tag != "" && !st.adopted[tag] {
			parts[tag] = true
		}
	}
	ids := map[int32]bool{}
	if len(parts) > 0 {
		for tag := range parts {
			st.adopted[tag] = true
		}
		for id, fs := range st.files {
			if !fs.indexed && parts[fs.part] {
				ids[int32(id)] = true
			}
		}
		if err := t.adopt(ctx, ids); err != nil {
			return err
		}
		clear(ids)
	}
	var buf []byte
	var files []int32
	wants := map[int32]map[string]bool{}
	look := func(k []any) {
		buf = AppendKey(buf[:0], k)
		if _, ok := st.index.GetBytes(buf); ok {
			return
		}
		files = st.foreign.lookup(maphash.Bytes(st.foreign.seed, buf), files[:0])
		for _, id := range files {
			if wants[id] == nil {
				wants[id] = map[string]bool{}
			}
			wants[id][string(buf)] = true
		}
	}
	for _, c := range changes {
		if c.Key != nil {
			look(c.Key)
		}
		if len(c.OldKey) > 0 {
			look(c.OldKey)
		}
	}
	if len(wants) > 0 {
		t.opts.Logger.Debug("keys found in other partitions' files: indexing them", "table", t.dir, "files", len(wants))
	}
	for id, keys := range wants {
		if err := t.adoptKeys(ctx, id, keys); err != nil {
			return err
		}
	}
	return nil
}

// adoptKeys moves the given keys' rows of one file of another partition
// into the key index (a key that changed partition, the old key of a
// primary-key change): only those keys, so the index stays this
// instance's partitions' plus the few that moved.
func (t *Table) adoptKeys(ctx context.Context, id int32, keys map[string]bool) error {
	if err := t.indexRows(ctx, t.st, id, keys); err != nil {
		return fmt.Errorf("index keys of %s: %w", t.st.files[id].add.Path, err)
	}
	return nil
}

// partitionTags formats the layout.TagPartition value of the partitions a
// batch's changes came from, once per partition.
type partitionTags map[TP]string

// of is the tag of a change's partition; "" for changes without Kafka
// coordinates (replays of files without them), whose rows go to untagged
// files.
func (m partitionTags) of(c normalize.Coord) string {
	if c.Topic == "" || c.Partition < 0 {
		return ""
	}
	tp := TP{c.Topic, c.Partition}
	tag, ok := m[tp]
	if !ok {
		tag = layout.PartitionTag(c.Topic, c.Partition)
		if _, _, valid := layout.ParsePartitionTag(tag); !valid {
			tag = ""
		}
		m[tp] = tag
	}
	return tag
}

// filePartition is a data file's partition tag ("" for none or one that
// does not parse: such a file may hold rows of any partition).
func filePartition(a *delta.Add) string {
	tag := a.Tags[layout.TagPartition]
	if _, _, ok := layout.ParsePartitionTag(tag); !ok {
		return ""
	}
	return tag
}

// IndexKeys is how many keys the instance holds in its key index, and how
// many it only locates by hash (files of partitions other instances write;
// 0 unless Options.PartitionAligned).
func (t *Table) IndexKeys() (indexed, located int) {
	if t.st == nil {
		return 0, 0
	}
	indexed = t.st.index.Len()
	if t.st.scoped() {
		located = t.st.foreign.Len()
	}
	return indexed, located
}

// Release tells a partition-aligned table that this instance no longer
// writes the partitions (a rebalance revoked them): at the next Refresh the
// table is reloaded, which leaves their files' keys located by hash instead
// of indexed, unless Keep took them back first (an eager rebalance revokes
// every partition and assigns most of them again). Without it the first
// instance of a group would keep every key it indexed while it owned all
// partitions. Safe to call from the consumer's rebalance callback.
func (t *Table) Release(tps []TP) {
	if !t.opts.PartitionAligned {
		return
	}
	t.relMu.Lock()
	defer t.relMu.Unlock()
	if t.released == nil {
		t.released = map[string]bool{}
	}
	for _, tp := range tps {
		t.released[layout.PartitionTag(tp.Topic, tp.Partition)] = true
	}
}

// Keep cancels a Release of partitions assigned again.
func (t *Table) Keep(tps []TP) {
	t.relMu.Lock()
	defer t.relMu.Unlock()
	for _, tp := range tps {
		delete(t.released, layout.PartitionTag(tp.Topic, tp.Partition))
	}
}

// takeReleased clears the released partitions and reports whether any of
// them is in the key index (then the state must be rebuilt).
func (t *Table) takeReleased() bool {
	t.relMu.Lock()
	rel := t.released
	t.released = nil
	t.relMu.Unlock()
	if t.st == nil || !t.st.scoped() {
		return false
	}
	for tag := range rel {
		if t.st.adopted[tag] {
			return true
		}
	}
	return false
}
