package envelope

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
}

func (b *boxes) int64(v int64) any { return v }

func (b *boxes) float64(v float64) any { return v }

func (b *boxes) str(v string, t strKind) any {
	if t == tNumber {
		return Number(v)
	}
	return v
}

func (b *boxes) bytes(v []byte) any { return v }

// values returns a zeroed []any of length n (capacity n) from the chunk.
func (b *boxes) values(n int) []any {
	if n > chunk {
		return make([]any, n)
	}
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
	if len(b.rows) == cap(b.rows) {
		b.rows = make([]Row, 0, 4)
	}
	b.rows = append(b.rows, Row{})
	return &b.rows[len(b.rows)-1]
}
