package envelope

import "sync/atomic"

// Rows and []any slices of one record are carved from shared chunks to
// save allocations. Scalars are boxed the ordinary way: an earlier version
// built interface values by hand with unsafe to avoid boxing allocations,
// which depends on the runtime's interface layout; not worth the risk.

// Boxing kinds for str.
type strKind uint8

const (
	tString strKind = iota
	tNumber
)

const chunk = 32

// boxes holds the chunks of one record.
type boxes struct {
	vals []any
	rows []Row
	// nvals and nrows count what the chunks handed out (values of at most
	// chunk), so a schemaless record can size the next one's (plainHint).
	nvals, nrows int
}

func (b *boxes) int64(v int64) any { return v }

func (b *boxes) float64(v float64) any { return v }

func (b *boxes) str(v string, t strKind) any {
	if len(v) == 1 && v[0] < 0x80 {
		// one-character values (op letters, flags, digits) come boxed from
		// a table: boxing a string allocates
		if t == tNumber {
			return oneNumber[v[0]]
		}
		return oneString[v[0]]
	}
	if t == tNumber {
		return Number(v)
	}
	return v
}

var oneString, oneNumber = func() (s, n [0x80]any) {
	for i := range s {
		s[i], n[i] = string(rune(i)), Number(rune(i))
	}
	return
}()

func (b *boxes) bytes(v []byte) any { return v }

// values returns a zeroed []any of length n (capacity n) from the chunk.
func (b *boxes) values(n int) []any {
	if n > chunk {
		return make([]any, n)
	}
	b.nvals += n
	if cap(b.vals)-len(b.vals) < n {
		b.vals = make([]any, 0, 2*chunk)
	}
	l := len(b.vals)
	b.vals = b.vals[:l+n]
	return b.vals[l : l+n : l+n]
}

// presize starts the chunks with room for vals values and rows Rows (the
// compiled schema's count), when the current chunks have less.
func (b *boxes) presize(vals, rows int) {
	vals, rows = min(vals, 1024), min(rows, 64)
	if cap(b.vals)-len(b.vals) < vals {
		b.vals = make([]any, 0, vals)
	}
	if cap(b.rows)-len(b.rows) < rows {
		b.rows = make([]Row, 0, rows)
	}
}

func (b *boxes) row() *Row {
	b.nrows++
	if len(b.rows) == cap(b.rows) {
		b.rows = make([]Row, 0, 4)
	}
	b.rows = append(b.rows, Row{})
	return &b.rows[len(b.rows)-1]
}

// plainHint is the size of the last schemaless record decoded on one side
// (key or value), to start the next one's chunks at that size: a fixed
// first chunk wasted most of itself on a one-field key and split a wide
// value in two (2 KB of values per 1 KB record; bench/README.md, *Decoded
// value chunks*). Records of one topic mostly have one shape; a wrong hint
// costs at most a chunk, as before.
type plainHint struct{ v atomic.Uint64 }

// presize starts b's chunks at the hinted size.
func (h *plainHint) presize(b *boxes) {
	if x := h.v.Load(); x != 0 {
		// a little room: arrays and optional blocks vary in length, and
		// overflowing costs a whole chunk
		v, r := int(x>>32), int(uint32(x))
		b.presize(v+v/8+2, r+1)
	}
}

// record keeps b's counts as the hint. It loads before it stores: the
// decode workers share the hint, and rewriting an unchanged one would bounce
// its cache line between the cores on every record.
func (h *plainHint) record(b *boxes) {
	x := uint64(min(b.nvals, 1024))<<32 | uint64(min(b.nrows, 64))
	if h.v.Load() != x {
		h.v.Store(x)
	}
}
