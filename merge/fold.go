// Folding a batch: changes grouped per key, ordered by source version, to each key's final row.

package merge

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/shopspring/decimal"

	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/versioning"
)

// storedKey is what the table already holds for one key (from the key index).
type storedKey struct {
	Exists  bool
	Deleted bool
	Version versioning.Version
	// Loc and Ent: where the stored row is and its index entry (keyIndex
	// Lookup), so that writing the batch and indexing its new rows do not
	// probe the index for the key again.
	Loc loc
	Ent uint32
}

// foldOutcome says what folding decided for one incoming change.
type foldOutcome uint8

const (
	outApplied   foldOutcome = iota + 1 // part of the key's final state (or superseded later in the batch)
	outStale                            // version below the stored/current one
	outDuplicate                        // equal version, same content (or equal to the stored version)
	outConflict                         // equal version, different content: quarantine version_conflict
)

// finalState is the state a key ends the batch in: the row to write.
type finalState struct {
	Key     string // canonical key encoding
	Change  *normalize.Change
	Deleted bool
	// Row is the image to store, aligned with Change.Schema. Unavailable
	// markers remain only where neither the batch nor (yet) the stored row
	// supplied a value; NeedStored is then true.
	Row        []any
	NeedStored bool
	// FillKey, when set, is the old key of a primary-key change this row
	// came from: unavailable TOAST values are filled from that key's stored
	// row (if live and older than FillBefore), never from this key's own.
	FillKey    string
	FillBefore versioning.Version
	// Op is the op letter to record in _cdc_op.
	Op byte
	// Truncated is true when the row is a tombstone produced by a truncate.
	Truncated bool
	// Part is the layout.TagPartition of the file the row goes to when
	// the change's own partition is not it: a truncate's tombstone stays
	// in the partition of the row it replaces.
	Part string
	// Stored is what the index held for Key when the batch was folded;
	// Looked says it was looked up (a truncate's tombstones are not).
	Stored storedKey
	Looked bool
}

// foldResult is the result of folding one batch for one table.
type foldResult struct {
	Finals   []*finalState
	Outcomes []foldOutcome // aligned with the input changes
	Truncate *normalize.Change
	// Keys are the encoded keys of the changes that carry one (first seen
	// first): what batchKeys needs, without encoding them again.
	Keys      []string
	Stale     int
	Duplicate int
	Conflicts []int // indexes into the input of changes in version_conflict
}

// foldBatch groups changes per key, orders each key's changes by source version,
// and computes the key's final state, given what the table stores. It never
// reorders by arrival: only the version decides (ties keep the first seen).
//
// Truncates apply to every stored and earlier-in-batch row with a lower
// version; changes newer than the truncate survive it. stored is asked
// once, for every key of the batch (first seen first).
func foldBatch(changes []*normalize.Change, stored func(keys []string) []storedKey) *foldResult {
	f := &foldResult{Outcomes: make([]foldOutcome, len(changes))}
	// One allocation each for the groups, their change indexes and the
	// finals of a batch, not one per key: per-key objects were 6% of
	// a changes replay's allocations (bench/README.md, *Allocations on the
	// write path*).
	type group struct {
		key    string
		idx    []int
		n      int  // changes of the key
		hasKey bool // some change carries a key (batchKeys)
	}
	groups := make(map[string]int32, len(changes)) // into order
	order := make([]group, 0, len(changes))        // first seen first
	groupOf := make([]int32, len(changes))         // into order; -1: a truncate
	var keyBuf []byte
	for i, c := range changes {
		if c.Op == normalize.OpTruncate {
			if f.Truncate == nil || f.Truncate.Version.Less(c.Version) {
				f.Truncate = c
			}
			f.Outcomes[i] = outApplied
			groupOf[i] = -1
			continue
		}
		keyBuf = AppendKey(keyBuf[:0], c.Key)
		gi, ok := groups[string(keyBuf)]
		if !ok {
			gi = int32(len(order))
			order = append(order, group{key: string(keyBuf)})
			groups[order[gi].key] = gi
		}
		g := &order[gi]
		g.n++
		g.hasKey = g.hasKey || c.Key != nil
		groupOf[i] = gi
	}
	{
		idx := make([]int, len(changes))
		at := 0
		for gi := range order {
			g := &order[gi]
			g.idx = idx[at : at : at+g.n]
			at += g.n
		}
		for i, gi := range groupOf {
			if gi >= 0 {
				g := &order[gi]
				g.idx = append(g.idx, i) // within its share: stream order kept
			}
		}
	}
	// Primary-key changes: the image each key had right before each of its
	// deletes (by the delete's version), and for each new key the old key its
	// current image came from (see fillFromOldKeys).
	type imageAt struct {
		schema *normalize.Schema
		row    []any
	}
	beforeDelete := map[string]map[versioning.Version]imageAt{}
	movedFrom := map[string]*normalize.Change{}
	keys := make([]string, len(order))
	for i, g := range order {
		keys[i] = g.key
		if g.hasKey {
			f.Keys = append(f.Keys, g.key)
		}
	}
	finSlab := make([]finalState, 0, len(order)) // never grows: pointers into it stay valid
	sts := stored(keys)
	for gi, g := range order {
		slices.SortStableFunc(g.idx, func(a, b int) int {
			return changes[a].Version.Compare(changes[b].Version)
		})
		st := sts[gi]
		var (
			cur       *normalize.Change // current in-batch winner
			curRow    []any
			curVer    = st.Version
			have      = st.Exists
			curFromDB = st.Exists
		)
		if f.Truncate != nil && have && curVer.Less(f.Truncate.Version) {
			// The stored row is wiped by the truncate; ordering continues from
			// the truncate's version.
			curVer = f.Truncate.Version
			curFromDB = false
		}
		for _, i := range g.idx {
			c := changes[i]
			if f.Truncate != nil && c.Version.Less(f.Truncate.Version) {
				f.Outcomes[i] = outStale
				f.Stale++
				continue
			}
			if have || cur != nil {
				switch cmp := c.Version.Compare(curVer); {
				case cmp < 0:
					f.Outcomes[i] = outStale
					f.Stale++
					continue
				case cmp == 0:
					if cur == nil || curFromDB || sameContent(cur, c) {
						f.Outcomes[i] = outDuplicate
						f.Duplicate++
					} else {
						f.Outcomes[i] = outConflict
						f.Conflicts = append(f.Conflicts, i)
					}
					continue
				}
			}
			f.Outcomes[i] = outApplied
			if c.Op == normalize.OpDelete {
				if cur != nil && cur.Op != normalize.OpDelete && curRow != nil {
					m := beforeDelete[g.key]
					if m == nil {
						m = map[versioning.Version]imageAt{}
						beforeDelete[g.key] = m
					}
					m[c.Version] = imageAt{cur.Schema, curRow}
				}
				delete(movedFrom, g.key)
				// A tombstone keeps the last image seen in this batch; otherwise
				// only the key (before images of REPLICA IDENTITY DEFAULT carry
				// defaults, not values, in non-key columns).
				curRow = deleteImage(c, cur, curRow)
			} else if len(c.OldKey) > 0 {
				// The create half of a primary-key change: its unavailable
				// values belong to the old key's row, not to an earlier
				// incarnation of this key.
				curRow = image(c, nil, nil)
				movedFrom[g.key] = c
			} else {
				curRow = image(c, cur, curRow)
			}
			cur, curVer, curFromDB = c, c.Version, false
		}
		if cur != nil && cur.Op == normalize.OpDelete && cur.KeyMoved && curRow == nil && cur.Schema != nil &&
			st.Exists && !st.Deleted && (f.Truncate == nil || !st.Version.Less(f.Truncate.Version)) {
			// The delete half of a primary-key change with no image in this
			// batch: the tombstone keeps the stored row's values (filled by
			// fillFromStored), so a create half applied in a later batch can
			// still take its unavailable TOAST values from here.
			curRow = make([]any, len(cur.Schema.Columns))
			for j := range curRow {
				curRow[j] = normalize.Unavailable
			}
		}
		if cur != nil {
			finSlab = append(finSlab, finalState{Key: g.key, Change: cur, Row: curRow, Deleted: cur.Op == normalize.OpDelete, Op: opLetter(cur),
				Stored: st, Looked: true})
			fin := &finSlab[len(finSlab)-1]
			for _, v := range curRow {
				if normalize.IsUnavailable(v) {
					fin.NeedStored = true
					break
				}
			}
			f.Finals = append(f.Finals, fin)
		}
	}
	// Fill what the moved rows still lack from the old key: its image right
	// before the delete half of the same change (same version) when this
	// batch had one, else (fillFromStored) the old key's stored row.
	for _, fin := range f.Finals {
		mv := movedFrom[fin.Key]
		if mv == nil || !fin.NeedStored || fin.Deleted {
			continue
		}
		oldKey := string(AppendKey(nil, mv.OldKey))
		if img, ok := beforeDelete[oldKey][mv.Version]; ok {
			fin.Row = fillByName(fin.Row, fin.Change.Schema, img.row, img.schema)
			fin.NeedStored = hasUnavailable(fin.Row)
		}
		if fin.NeedStored {
			fin.FillKey, fin.FillBefore = oldKey, mv.Version
		}
	}
	return f
}

func hasUnavailable(row []any) bool {
	for _, v := range row {
		if normalize.IsUnavailable(v) {
			return true
		}
	}
	return false
}

// fillByName returns row with its unavailable values replaced by src's
// values of the same column name (a copy when anything changed).
func fillByName(row []any, schema *normalize.Schema, src []any, srcSchema *normalize.Schema) []any {
	out := row
	copied := false
	for j, v := range row {
		if !normalize.IsUnavailable(v) {
			continue
		}
		k := j
		if srcSchema != schema {
			k = srcSchema.Index(schema.Columns[j].Name)
		}
		if k < 0 || k >= len(src) {
			continue
		}
		if !copied {
			out = slices.Clone(row)
			copied = true
		}
		out[j] = src[k]
	}
	return out
}

// image is the row stored for c: its own values, with unavailable TOAST
// columns filled from the previous image of the key (same schema column name).
func image(c, prev *normalize.Change, prevRow []any) []any {
	if c.Row == nil {
		return nil
	}
	row := c.Row
	copied := false
	for j, v := range c.Row {
		if !normalize.IsUnavailable(v) || prev == nil || prevRow == nil {
			continue
		}
		name := c.Schema.Columns[j].Name
		k := j
		if prev.Schema != c.Schema {
			k = prev.Schema.Index(name)
		}
		if k < 0 || k >= len(prevRow) {
			continue
		}
		if !copied {
			row = slices.Clone(c.Row)
			copied = true
		}
		row[j] = prevRow[k]
	}
	return row
}

func deleteImage(c, prev *normalize.Change, prevRow []any) []any {
	if prev != nil && prev.Op != normalize.OpDelete && prevRow != nil && prev.Schema == c.Schema {
		return prevRow
	}
	return nil
}

func fmtAny(v any) string { return fmt.Sprintf("%T:%v", v, v) }

func opLetter(c *normalize.Change) byte {
	if c.SourceOp != 0 {
		return c.SourceOp
	}
	if c.Op == normalize.OpDelete {
		return 'd'
	}
	return 'u'
}

// sameContent reports whether two changes with equal versions carry the same
// row change (op and every column value).
func sameContent(a, b *normalize.Change) bool {
	if a.Op == normalize.OpDelete && b.Op == normalize.OpDelete && (a.Tombstone || b.Tombstone) {
		// A Kafka tombstone repeats the delete it follows without content.
		return true
	}
	if a.Op != b.Op || len(a.Row) != len(b.Row) {
		return false
	}
	for i := range a.Row {
		if a.Schema != b.Schema && a.Schema.Columns[i].Name != b.Schema.Columns[i].Name {
			return false
		}
		if !ValuesEqual(a.Row[i], b.Row[i]) {
			return false
		}
	}
	return true
}

// ValuesEqual compares two normalized values (decimals by value and scale,
// floats bitwise so NaN equals NaN, nested values recursively).
func ValuesEqual(a, b any) bool {
	switch x := a.(type) {
	case nil:
		return b == nil
	case decimal.Decimal:
		y, ok := b.(decimal.Decimal)
		return ok && x.Equal(y) && x.Exponent() == y.Exponent()
	case []byte:
		y, ok := b.([]byte)
		return ok && bytes.Equal(x, y)
	case float64:
		y, ok := b.(float64)
		return ok && math.Float64bits(x) == math.Float64bits(y)
	case float32:
		y, ok := b.(float32)
		return ok && math.Float32bits(x) == math.Float32bits(y)
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !ValuesEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case []normalize.MapEntry:
		y, ok := b.([]normalize.MapEntry)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !ValuesEqual(x[i].Key, y[i].Key) || !ValuesEqual(x[i].Value, y[i].Value) {
				return false
			}
		}
		return true
	default:
		return a == b
	}
}

// AppendKey appends a canonical, injective encoding of a key tuple: each value
// is a type tag followed by a fixed-width or length-prefixed body, so equal
// tuples (and only those) encode equally.
func AppendKey(dst []byte, key []any) []byte {
	for _, v := range key {
		dst = appendKeyValue(dst, v)
	}
	return dst
}

func appendKeyValue(dst []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(dst, 0)
	case bool:
		if x {
			return append(dst, 1, 1)
		}
		return append(dst, 1, 0)
	case int8:
		return binary.BigEndian.AppendUint64(append(dst, 2), uint64(int64(x)))
	case int16:
		return binary.BigEndian.AppendUint64(append(dst, 2), uint64(int64(x)))
	case int32:
		return binary.BigEndian.AppendUint64(append(dst, 2), uint64(int64(x)))
	case int64:
		return binary.BigEndian.AppendUint64(append(dst, 2), uint64(x))
	case float32:
		return binary.BigEndian.AppendUint64(append(dst, 3), math.Float64bits(float64(x)))
	case float64:
		return binary.BigEndian.AppendUint64(append(dst, 3), math.Float64bits(x))
	case string:
		dst = binary.AppendUvarint(append(dst, 4), uint64(len(x)))
		return append(dst, x...)
	case []byte:
		dst = binary.AppendUvarint(append(dst, 5), uint64(len(x)))
		return append(dst, x...)
	case decimal.Decimal:
		// Normalised so 1.0 and 1.00 are one key.
		s := x.String()
		dst = binary.AppendUvarint(append(dst, 6), uint64(len(s)))
		return append(dst, s...)
	case []any:
		dst = binary.AppendUvarint(append(dst, 7), uint64(len(x)))
		for _, e := range x {
			dst = appendKeyValue(dst, e)
		}
		return dst
	default:
		s := []byte(fmtAny(x))
		dst = binary.AppendUvarint(append(dst, 8), uint64(len(s)))
		return append(dst, s...)
	}
}
