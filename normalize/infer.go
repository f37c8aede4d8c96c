package normalize

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"sync"

	"github.com/cdcsink/cdc-sink/envelope"
)

// itype is an inferred type of a schemaless value. kind 0 means "only nulls
// seen so far".
type itype struct {
	kind Kind
	elem *itype // Array
}

func (t itype) toType() (Type, bool) {
	switch t.kind {
	case 0:
		return Type{Kind: String}, true
	case Array:
		var e Type
		if t.elem != nil {
			e, _ = t.elem.toType()
		} else {
			e = Type{Kind: String}
		}
		return Type{Kind: Array, Elem: &e}, false
	}
	return Type{Kind: t.kind}, false
}

func (t itype) String() string {
	if t.kind == 0 {
		return "null"
	}
	ty, _ := t.toType()
	return ty.String()
}

func itypeEqual(a, b itype) bool {
	if a.kind != b.kind {
		return false
	}
	if a.kind != Array {
		return true
	}
	if a.elem == nil || b.elem == nil {
		return a.elem == b.elem
	}
	return itypeEqual(*a.elem, *b.elem)
}

// inferOf returns the inferred type of one schemaless value.
func inferOf(v any) (itype, bool) {
	switch x := v.(type) {
	case nil:
		return itype{}, true
	case bool:
		return itype{kind: Boolean}, true
	case int64:
		return itype{kind: Long}, true
	case float64:
		return itype{kind: Double}, true
	case envelope.Number:
		if isIntLiteral(string(x)) {
			if _, err := strconv.ParseInt(string(x), 10, 64); err == nil {
				return itype{kind: Long}, true
			}
		}
		return itype{kind: Double}, true
	case string:
		return itype{kind: String}, true
	case []byte:
		return itype{kind: Binary}, true
	case *envelope.Row, map[string]any:
		return itype{kind: String}, true // rendered as JSON text
	case []any:
		el := itype{}
		for _, e := range x {
			t, ok := inferOf(e)
			if !ok {
				return itype{}, false
			}
			if el, ok = widen(el, t); !ok {
				return itype{}, false
			}
		}
		return itype{kind: Array, elem: elemOf(el)}, true
	}
	return itype{}, false
}

// elemOf is a pointer to t, an array's element type. A scalar one is shared
// (itypes are never changed through elem): inferring every array value's
// type allocated an element type for it.
func elemOf(t itype) *itype {
	if t.elem == nil && int(t.kind) < len(scalarElems) {
		return &scalarElems[t.kind]
	}
	p := new(itype) // not &t: t would be moved to the heap on every call
	*p = t
	return p
}

var scalarElems = func() (a [Struct + 1]itype) {
	for k := range a {
		a[k].kind = Kind(k)
	}
	return a
}()

func isIntLiteral(s string) bool {
	if s == "" {
		return false
	}
	i := 0
	if s[0] == '-' || s[0] == '+' {
		i++
	}
	if i == len(s) {
		return false
	}
	for ; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// widen merges two inferred types: null+T → T, array<A>+array<B> →
// array<widen(A,B)>, scalars by Widen (the rule merge applies to the table:
// Long+Double → Double); anything else conflicts.
func widen(a, b itype) (itype, bool) {
	switch {
	case a.kind == 0:
		return b, true
	case b.kind == 0:
		return a, true
	case a.kind == b.kind && a.kind != Array:
		return a, true // the common case, per value of every row: no Widen call
	case a.kind != Array && b.kind != Array:
		w, ok := Widen(Type{Kind: a.kind}, Type{Kind: b.kind})
		if !ok {
			return itype{}, false
		}
		return itype{kind: w.Kind}, true
	case a.kind == Array && b.kind == Array:
		ea, eb := itype{}, itype{}
		if a.elem != nil {
			ea = *a.elem
		}
		if b.elem != nil {
			eb = *b.elem
		}
		e, ok := widen(ea, eb)
		if !ok {
			return itype{}, false
		}
		return itype{kind: Array, elem: elemOf(e)}, true
	}
	return itype{}, false
}

// inferVersion is one immutable state of a table's inferred schema.
type inferVersion struct {
	schema *Schema
	names  []string
	types  []itype
	convs  []*conv // configured (SchemalessTypes) columns; nil when inferred
	index  map[string]int
}

type inferTable struct {
	mu  sync.Mutex
	cur *inferVersion
}

// inferRow types a schemaless row against the table's inferred schema,
// widening it when needed. skip reports fields to leave out (unwrap metadata).
// With u (Unordered) it never widens: a row that needs the schema changed
// sets u.order and returns nothing.
func (n *Normalizer) inferRow(tkey, tid TableID, topic string, r *envelope.Row, skip func(string) bool, u *Pending) (*Schema, []any, *cerr) {
	it := n.inferTableFor(tkey)
	it.mu.Lock()
	cur := it.cur
	var next *inferVersion
	for i, name := range r.Names {
		if skip != nil && skip(name) {
			continue
		}
		v := r.Values[i]
		vt, ok := itype{}, true
		if !n.toast.is(v) { // a TOAST placeholder carries no type information
			vt, ok = inferOf(v)
		}
		if !ok {
			it.mu.Unlock()
			return nil, nil, errf(reasonType, "column %q: schemaless value of Go type %T", name, v)
		}
		ver := cur
		if next != nil {
			ver = next
		}
		idx, known := -1, false
		if ver != nil {
			if i < len(ver.names) && ver.names[i] == name {
				idx, known = i, true
			} else {
				idx, known = ver.index[name]
			}
		}
		if known {
			if ver.convs[idx] != nil {
				continue // configured type: checked on conversion
			}
			old := ver.types[idx]
			w, ok := widen(old, vt)
			if !ok {
				it.mu.Unlock()
				return nil, nil, errf(reasonType, "column %q: schemaless value %s is %s but the column was inferred as %s (conflicting kinds)", name, short(v), vt, old)
			}
			if itypeEqual(w, old) {
				continue
			}
			if u != nil {
				it.mu.Unlock()
				u.order = true
				return nil, nil, nil
			}
			if next == nil {
				next = cur.clone()
			}
			next.types[idx] = w
			continue
		}
		if u != nil {
			it.mu.Unlock()
			u.order = true
			return nil, nil, nil
		}
		if next == nil {
			next = cur.clone()
		}
		var cc *conv
		if s := n.lookupSchemaless(tid, topic, name); s != nil {
			c, e := n.compile(s, "column "+strconv.Quote(name))
			if e != nil {
				it.mu.Unlock()
				return nil, nil, e
			}
			cc = &c
		}
		next.index[name] = len(next.names)
		next.names = append(next.names, name)
		next.types = append(next.types, vt)
		next.convs = append(next.convs, cc)
	}
	if next != nil {
		next.build()
		it.cur = next
		cur = next
		n.inferGen.Add(1)
	}
	it.mu.Unlock()
	if cur == nil { // row with no columns at all
		cur = &inferVersion{schema: &Schema{Inferred: true}, index: map[string]int{}}
		cur.build()
	}
	row := make([]any, len(cur.names))
	for i, name := range r.Names {
		if skip != nil && skip(name) {
			continue
		}
		idx := i
		if !(i < len(cur.names) && cur.names[i] == name) {
			var ok bool
			if idx, ok = cur.index[name]; !ok {
				return nil, nil, errf(reasonType, "column %q missing from the inferred schema", name) // unreachable
			}
		}
		v, e := n.convertInferred(cur, idx, r.Values[i])
		if e != nil {
			return nil, nil, e.in("column " + strconv.Quote(name))
		}
		row[idx] = v
	}
	return cur.schema, row, nil
}

func (n *Normalizer) convertInferred(cur *inferVersion, idx int, v any) (any, *cerr) {
	if v == nil {
		return nil, nil
	}
	if n.toast.is(v) {
		return Unavailable, nil
	}
	if c := cur.convs[idx]; c != nil {
		return n.coerce(c, v)
	}
	return convertItype(cur.types[idx], v)
}

// coerce converts a schemaless value to a configured Connect type.
func (n *Normalizer) coerce(c *conv, v any) (any, *cerr) {
	if c.op == opDecimal {
		if s, ok := v.(string); ok {
			if n.opts.DecimalHandling == DecimalString {
				return decimalFromTextAny(s, c.scale, c.prec)
			}
			return nil, errf(reasonDecimal, "configured as decimal(%d,%d) but the schemaless value %s is a string: base64 bytes (decimal.handling.mode=precise) are not guessed as decimals; enable schemas (value.converter.schemas.enable=true) or use decimal.handling.mode=string and DecimalHandling=string", c.prec, c.scale, short(v))
		}
	}
	if c.op == opBytes {
		if s, ok := v.(string); ok { // schemaless JSON carries bytes as base64
			b, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				return nil, errf(reasonType, "configured as bytes but %s is not base64", short(s))
			}
			return b, nil
		}
	}
	if c.op == opVarDecimal {
		if r, ok := v.(*envelope.Row); ok && r.Schema == nil {
			sv, _ := r.Get("scale")
			bv, _ := r.Get("value")
			if s, ok := bv.(string); ok {
				b, err := base64.StdEncoding.DecodeString(s)
				if err != nil {
					return nil, errf(reasonDecimal, "VariableScaleDecimal value %q is not base64", s)
				}
				bv = b
			}
			v = map[string]any{"scale": sv, "value": bv}
		}
	}
	return n.convert(c, v)
}

func decimalFromTextAny(s string, scale, prec int) (any, *cerr) {
	d, e := decimalFromText(s, scale, prec)
	if e != nil {
		return nil, e
	}
	return d, nil
}

func convertItype(t itype, v any) (any, *cerr) {
	if v == nil {
		return nil, nil
	}
	switch t.kind {
	case Long:
		if _, ok := v.(int64); ok {
			return v, nil
		}
		if x, ok := v.(envelope.Number); ok {
			if i, err := strconv.ParseInt(string(x), 10, 64); err == nil {
				return boxInt64(i), nil
			}
		}
	case Double:
		if _, ok := v.(float64); ok {
			return v, nil
		}
		if f, ok := toFloat64(v); ok {
			return f, nil
		}
	case String:
		switch x := v.(type) {
		case string:
			return v, nil
		case *envelope.Row, map[string]any:
			return jsonText(x), nil
		}
	case Boolean:
		if _, ok := v.(bool); ok {
			return v, nil
		}
	case Binary:
		if _, ok := v.([]byte); ok {
			return v, nil
		}
	case Array:
		arr, ok := v.([]any)
		if !ok {
			break
		}
		el := itype{}
		if t.elem != nil {
			el = *t.elem
		}
		out := make([]any, len(arr))
		for i, e := range arr {
			if el.kind == 0 {
				if e != nil {
					return nil, errf(reasonType, "array element %d: %s in an array of nulls", i, short(e))
				}
				continue
			}
			x, ce := convertItype(el, e)
			if ce != nil {
				return nil, ce.in("element " + strconv.Itoa(i))
			}
			out[i] = x
		}
		return out, nil
	}
	ty, _ := t.toType()
	return nil, errf(reasonType, "schemaless value %s (%T) does not fit inferred %s", short(v), v, ty.String())
}

// jsonText renders a schemaless object as compact JSON (field order kept for
// rows, keys sorted for maps).
func jsonText(v any) string {
	var b bytes.Buffer
	writeJSON(&b, v)
	return b.String()
}

func writeJSON(b *bytes.Buffer, v any) {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case *envelope.Row:
		b.WriteByte('{')
		for i, name := range x.Names {
			if i > 0 {
				b.WriteByte(',')
			}
			k, _ := json.Marshal(name)
			b.Write(k)
			b.WriteByte(':')
			writeJSON(b, x.Values[i])
		}
		b.WriteByte('}')
	case envelope.Number:
		b.WriteString(string(x))
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSON(b, e)
		}
		b.WriteByte(']')
	default: // map[string]any (sorted by encoding/json), string, bool, numbers, []byte (base64)
		j, err := json.Marshal(x)
		if err != nil {
			j, _ = json.Marshal(short(x))
		}
		b.Write(j)
	}
}

func (v *inferVersion) clone() *inferVersion {
	if v == nil {
		return &inferVersion{index: map[string]int{}}
	}
	c := &inferVersion{
		names: append([]string(nil), v.names...),
		types: append([]itype(nil), v.types...),
		convs: append([]*conv(nil), v.convs...),
		index: make(map[string]int, len(v.index)+1),
	}
	for k, i := range v.index {
		c.index[k] = i
	}
	return c
}

func (v *inferVersion) build() {
	cols := make([]ColumnDef, len(v.names))
	for i, name := range v.names {
		if c := v.convs[i]; c != nil {
			cols[i] = ColumnDef{Name: name, Type: c.typ, Nullable: true}
			continue
		}
		t, nullOnly := v.types[i].toType()
		cols[i] = ColumnDef{Name: name, Type: t, Nullable: true, NullOnly: nullOnly}
	}
	v.schema = &Schema{Columns: cols, Fingerprint: fingerprint(cols), Inferred: true}
}

func (n *Normalizer) inferTableFor(key TableID) *inferTable {
	n.mu.Lock()
	defer n.mu.Unlock()
	it := n.inferred[key]
	if it == nil {
		it = &inferTable{}
		n.inferred[key] = it
	}
	return it
}

// inferredColumn returns the current inferred type of a column (for typing
// schemaless keys like their columns).
func (n *Normalizer) inferredColumn(tkey TableID, name string) (*conv, itype, bool) {
	n.mu.Lock()
	it := n.inferred[tkey]
	n.mu.Unlock()
	if it == nil {
		return nil, itype{}, false
	}
	it.mu.Lock()
	cur := it.cur
	it.mu.Unlock()
	if cur == nil {
		return nil, itype{}, false
	}
	idx, ok := cur.index[name]
	if !ok {
		return nil, itype{}, false
	}
	return cur.convs[idx], cur.types[idx], true
}

// boxInt64 is i as an any, from a table for small values: boxing an int64
// allocates (the runtime shares only 0–255), and schemaless JSON's small
// integers (counts, codes, small ids, dates as days) were one allocation
// each (bench/README.md, *Allocations on the write path*).
func boxInt64(i int64) any {
	if uint64(i) < uint64(len(smallInt64s)) {
		return smallInt64s[i]
	}
	return i
}

var smallInt64s = func() *[1 << 15]any { // boxed once at start: 768 KiB
	var a [1 << 15]any
	for i := range a {
		a[i] = int64(i)
	}
	return &a
}()
