package parquetio

import (
	"bytes"
	"encoding/json"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/decimal128"

	"github.com/cdcsink/cdc-sink/delta/schema"
)

// statKind says how min/max are tracked for a leaf.
type statKind int

const (
	kindNone statKind = iota // nullCount only
	kindInt                  // byte/short/integer/long
	kindFloat
	kindDecimal
	kindDate
	kindTimestamp
	kindTimestampNTZ
	kindString
)

type statNode struct {
	name     string
	field    *schema.StructField
	children []*statNode // struct fields (nil for leaves)
	isStruct bool
	leaf     bool // collect stats at all
	kind     statKind
	scale    int32

	nulls int64
	has   bool // some non-null value seen
	noMM  bool // min/max disabled (NaN/Inf seen, out of range...)
	imin  int64
	imax  int64
	fmin  float64
	fmax  float64
	dmin  decimal128.Num
	dmax  decimal128.Num
	smin  string
	smax  string
}

type statsCollector struct {
	root      []*statNode
	prefixLen int
}

func newStatsCollector(data *schema.StructType, opts WriteOptions) *statsCollector {
	limit := opts.NumIndexedCols
	if limit == 0 {
		limit = DefaultNumIndexedCols
	}
	var want map[string]bool
	if len(opts.StatsColumns) > 0 {
		want = map[string]bool{}
		for _, c := range opts.StatsColumns {
			want[strings.ToLower(c)] = true
		}
		limit = -1
	}
	count := 0
	var build func(prefix string, f *schema.StructField, forced bool) *statNode
	build = func(prefix string, f *schema.StructField, forced bool) *statNode {
		path := f.Name
		if prefix != "" {
			path = prefix + "." + f.Name
		}
		// Stats are keyed by physical name in column-mapped tables.
		n := &statNode{name: physicalName(f), field: f}
		sel := forced || want == nil || want[strings.ToLower(path)]
		if st, ok := f.Type.(*schema.StructType); ok {
			n.isStruct = true
			for _, c := range st.Fields {
				n.children = append(n.children, build(path, c, sel && want != nil))
			}
			return n
		}
		if want != nil && !sel {
			return n
		}
		if limit >= 0 && count >= limit {
			return n
		}
		count++
		n.leaf = true
		switch t := f.Type.(type) {
		case schema.PrimitiveType:
			switch t {
			case schema.Byte, schema.Short, schema.Integer, schema.Long:
				n.kind = kindInt
			case schema.Float, schema.Double:
				n.kind = kindFloat
			case schema.Date:
				n.kind = kindDate
			case schema.Timestamp:
				n.kind = kindTimestamp
			case schema.TimestampNTZ:
				n.kind = kindTimestampNTZ
			case schema.String:
				n.kind = kindString
			}
		case *schema.DecimalType:
			n.kind = kindDecimal
			n.scale = int32(t.Scale)
		}
		return n
	}
	c := &statsCollector{prefixLen: opts.StringPrefixLength}
	if c.prefixLen <= 0 {
		c.prefixLen = DefaultStringPrefixLength
	}
	for _, f := range data.Fields {
		c.root = append(c.root, build("", f, false))
	}
	return c
}

// validity is a null bitmap with its bit offset; bits == nil means all valid.
type validity struct {
	bits []byte
	off  int
}

func (v validity) ok(i int) bool { return v.bits == nil || bitutil.BitIsSet(v.bits, v.off+i) }

// combine ANDs a parent validity with arr's own.
func combine(parent validity, arr arrow.Array) validity {
	own := validity{}
	if arr.NullN() > 0 {
		own = validity{bits: arr.NullBitmapBytes(), off: arr.Data().Offset()}
	}
	if parent.bits == nil {
		return own
	}
	if own.bits == nil {
		return parent
	}
	n := arr.Len()
	out := make([]byte, bitutil.BytesForBits(int64(n)))
	for i := 0; i < n; i++ {
		if parent.ok(i) && own.ok(i) {
			bitutil.SetBit(out, i)
		}
	}
	return validity{bits: out}
}

func countNulls(v validity, n int) int64 {
	if v.bits == nil {
		return 0
	}
	return int64(n) - int64(bitutil.CountSetBits(v.bits, v.off, n))
}

func (c *statsCollector) add(rec arrow.RecordBatch) error {
	for i, n := range c.root {
		c.addArray(n, rec.Column(i), validity{})
	}
	return nil
}

func (c *statsCollector) addArray(n *statNode, arr arrow.Array, parent validity) {
	v := combine(parent, arr)
	if n.isStruct {
		st := arr.(*array.Struct)
		for i, ch := range n.children {
			c.addArray(ch, st.Field(i), v)
		}
		return
	}
	if !n.leaf {
		return
	}
	l := arr.Len()
	n.nulls += countNulls(v, l)
	if n.noMM {
		return
	}
	switch n.kind {
	case kindInt:
		switch a := arr.(type) {
		case *array.Int8:
			intMinMax(n, a.Int8Values(), v)
		case *array.Int16:
			intMinMax(n, a.Int16Values(), v)
		case *array.Int32:
			intMinMax(n, a.Int32Values(), v)
		case *array.Int64:
			intMinMax(n, a.Int64Values(), v)
		}
	case kindDate:
		intMinMax(n, arr.(*array.Date32).Date32Values(), v)
	case kindTimestamp, kindTimestampNTZ:
		intMinMax(n, arr.(*array.Timestamp).TimestampValues(), v)
	case kindFloat:
		switch a := arr.(type) {
		case *array.Float32:
			floatMinMax(n, a.Float32Values(), v)
		case *array.Float64:
			floatMinMax(n, a.Float64Values(), v)
		}
	case kindDecimal:
		a := arr.(*array.Decimal128)
		vals := a.Values()
		for i := range vals {
			if !v.ok(i) {
				continue
			}
			x := vals[i]
			if !n.has {
				n.dmin, n.dmax, n.has = x, x, true
				continue
			}
			if x.Less(n.dmin) {
				n.dmin = x
			}
			if n.dmax.Less(x) {
				n.dmax = x
			}
		}
	case kindString:
		a := arr.(*array.String)
		var lo, hi string
		has := false
		for i := 0; i < l; i++ {
			if !v.ok(i) {
				continue
			}
			s := a.Value(i)
			if !has {
				lo, hi, has = s, s, true
				continue
			}
			if s < lo {
				lo = s
			}
			if s > hi {
				hi = s
			}
		}
		if !has {
			return
		}
		if !n.has || lo < n.smin {
			n.smin = strings.Clone(lo)
		}
		if !n.has || hi > n.smax {
			n.smax = strings.Clone(hi)
		}
		n.has = true
	}
}

type integer interface {
	~int8 | ~int16 | ~int32 | ~int64
}

func intMinMax[T integer](n *statNode, vals []T, v validity) {
	if len(vals) == 0 {
		return
	}
	var lo, hi T
	has := false
	if v.bits == nil {
		lo, hi = vals[0], vals[0]
		for _, x := range vals[1:] {
			lo = min(lo, x)
			hi = max(hi, x)
		}
		has = true
	} else {
		for i, x := range vals {
			if !bitutil.BitIsSet(v.bits, v.off+i) {
				continue
			}
			if !has {
				lo, hi, has = x, x, true
				continue
			}
			lo = min(lo, x)
			hi = max(hi, x)
		}
	}
	if !has {
		return
	}
	if !n.has {
		n.imin, n.imax, n.has = int64(lo), int64(hi), true
		return
	}
	n.imin = min(n.imin, int64(lo))
	n.imax = max(n.imax, int64(hi))
}

func floatMinMax[T float32 | float64](n *statNode, vals []T, v validity) {
	var lo, hi float64
	has := false
	for i, x := range vals {
		if v.bits != nil && !bitutil.BitIsSet(v.bits, v.off+i) {
			continue
		}
		f := float64(x)
		if f != f || math.IsInf(f, 0) {
			// NaN/Inf cannot be written as JSON numbers: no min/max for this file.
			n.noMM = true
			return
		}
		if !has {
			lo, hi, has = f, f, true
			continue
		}
		lo = min(lo, f)
		hi = max(hi, f)
	}
	if !has {
		return
	}
	if !n.has {
		n.fmin, n.fmax, n.has = lo, hi, true
		return
	}
	n.fmin = min(n.fmin, lo)
	n.fmax = max(n.fmax, hi)
}

// ---------------------------------------------------------------- JSON

func (c *statsCollector) json(numRecords int64) string {
	var b bytes.Buffer
	b.WriteString(`{"numRecords":`)
	b.WriteString(strconv.FormatInt(numRecords, 10))
	b.WriteString(`,"minValues":`)
	c.writeObj(&b, c.root, func(b *bytes.Buffer, n *statNode) bool { return c.writeMinMax(b, n, true) })
	b.WriteString(`,"maxValues":`)
	c.writeObj(&b, c.root, func(b *bytes.Buffer, n *statNode) bool { return c.writeMinMax(b, n, false) })
	b.WriteString(`,"nullCount":`)
	c.writeObj(&b, c.root, func(b *bytes.Buffer, n *statNode) bool {
		if !n.leaf {
			return false
		}
		b.WriteString(strconv.FormatInt(n.nulls, 10))
		return true
	})
	b.WriteString(`,"tightBounds":true}`)
	return b.String()
}

// writeObj writes {"name":value,...} for nodes where leafFn writes a value;
// structs recurse and are omitted when empty.
func (c *statsCollector) writeObj(b *bytes.Buffer, nodes []*statNode, leafFn func(*bytes.Buffer, *statNode) bool) bool {
	b.WriteByte('{')
	wrote := false
	for _, n := range nodes {
		mark := b.Len()
		if wrote {
			b.WriteByte(',')
		}
		writeJSONString(b, n.name)
		b.WriteByte(':')
		var ok bool
		if n.isStruct {
			inner := b.Len()
			ok = c.writeObj(b, n.children, leafFn)
			if !ok {
				b.Truncate(inner)
			}
		} else {
			ok = leafFn(b, n)
		}
		if !ok {
			b.Truncate(mark)
			continue
		}
		wrote = true
	}
	b.WriteByte('}')
	return wrote
}

func writeJSONString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	b.Truncate(b.Len() - 1)
}

const (
	minMicros = -62135596800000000 // 0001-01-01T00:00:00Z
	maxMicros = 253402300799999999 // 9999-12-31T23:59:59.999999Z
	minDays   = -719162            // 0001-01-01
	maxDays   = 2932896            // 9999-12-31
)

func (c *statsCollector) writeMinMax(b *bytes.Buffer, n *statNode, isMin bool) bool {
	if !n.leaf || !n.has || n.noMM || n.kind == kindNone {
		return false
	}
	switch n.kind {
	case kindInt:
		v := n.imax
		if isMin {
			v = n.imin
		}
		b.WriteString(strconv.FormatInt(v, 10))
	case kindFloat:
		v := n.fmax
		if isMin {
			v = n.fmin
		}
		bits := 64
		if n.field.Type == schema.Float {
			bits = 32
		}
		b.WriteString(formatFloatJSON(v, bits))
	case kindDecimal:
		v := n.dmax
		if isMin {
			v = n.dmin
		}
		b.WriteString(formatDecimal(v, n.scale))
	case kindDate:
		v := n.imax
		if isMin {
			v = n.imin
		}
		if v < minDays || v > maxDays {
			return false
		}
		b.WriteByte('"')
		b.WriteString(time.Unix(v*86400, 0).UTC().Format("2006-01-02"))
		b.WriteByte('"')
	case kindTimestamp, kindTimestampNTZ:
		var ms int64
		if isMin {
			ms = floorDiv(n.imin, 1000)
		} else {
			ms = -floorDiv(-n.imax, 1000) // ceil: keep the bound valid
		}
		if ms*1000 < minMicros || ms*1000 > maxMicros+1 || ms > math.MaxInt64/1000 || ms < math.MinInt64/1000 {
			return false
		}
		t := time.UnixMilli(ms).UTC()
		if t.Year() > 9999 {
			return false
		}
		b.WriteByte('"')
		if n.kind == kindTimestamp {
			b.WriteString(t.Format("2006-01-02T15:04:05.000Z"))
		} else {
			b.WriteString(t.Format("2006-01-02T15:04:05.000"))
		}
		b.WriteByte('"')
	case kindString:
		if isMin {
			writeJSONString(b, truncateRunes(n.smin, c.prefixLen))
		} else {
			if utf8.RuneCountInString(n.smax) > c.prefixLen {
				return false
			}
			writeJSONString(b, n.smax)
		}
	default:
		return false
	}
	return true
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func truncateRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i := 0
	for pos := range s {
		if i == n {
			return s[:pos]
		}
		i++
	}
	return s
}

func formatFloatJSON(v float64, bits int) string {
	s := strconv.FormatFloat(v, 'g', -1, bits)
	if !strings.ContainsAny(s, ".eEn") { // integral: keep Spark's "1.0" look
		s += ".0"
	}
	return s
}

// formatDecimal renders an unscaled decimal with the given scale exactly.
func formatDecimal(n decimal128.Num, scale int32) string {
	var digits string
	neg := n.Sign() < 0
	if n.HighBits() == 0 || (n.HighBits() == -1 && int64(n.LowBits()) < 0) {
		x := int64(n.LowBits())
		if neg {
			digits = strconv.FormatUint(uint64(-x), 10)
			if x == math.MinInt64 {
				digits = "9223372036854775808"
			}
		} else {
			digits = strconv.FormatUint(n.LowBits(), 10)
		}
	} else {
		bi := n.BigInt()
		digits = new(big.Int).Abs(bi).String()
	}
	if scale > 0 {
		if len(digits) <= int(scale) {
			digits = strings.Repeat("0", int(scale)-len(digits)+1) + digits
		}
		digits = digits[:len(digits)-int(scale)] + "." + digits[len(digits)-int(scale):]
	} else if scale < 0 {
		digits += strings.Repeat("0", int(-scale))
	}
	if neg {
		return "-" + digits
	}
	return digits
}
