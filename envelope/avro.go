package envelope

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/linkedin/goavro/v2"
)

// Avro records arrive in Confluent framing: magic byte 0, a 4-byte big-endian
// schema id, then the Avro binary body. The writer schema comes from the
// Registry and is compiled once per id (goavro validates it); the body is
// decoded straight into Rows by a bounds-checking reader (avrodec.go), so
// hostile lengths and block counts cannot make it allocate. The Connect schema is derived from the Avro schema's connect.*
// properties (as Confluent/Apicurio AvroData write them), so Rows and Schemas
// match those decoded from JsonConverter output.

type akind uint8

const (
	aNull akind = iota + 1
	aBool
	aInt
	aLong
	aFloat
	aDouble
	aBytes
	aString
	aFixed
	aEnum
	aArray
	aMap
	aRecord
	aUnion
)

var avroPrimitive = map[string]akind{
	"null": aNull, "boolean": aBool, "int": aInt, "long": aLong, "float": aFloat,
	"double": aDouble, "bytes": aBytes, "string": aString,
}

// aNode is one Avro type at one place in the schema.
type aNode struct {
	kind    akind
	s       *Schema // Connect schema (nil for null; a union's is the optional variant of its branch)
	gname   string  // the name goavro uses for this type as a union branch
	rec     *avroRec
	items   *aNode // array
	values  *aNode // map
	branch  []*aNode
	nonNull int      // union: index of the only non-null branch, or -1
	nsym    int      // enum symbols
	syms    []string // enum symbols, in index order
	size    int      // fixed size
	minSize int      // fewest bytes an encoded value takes
}

type avroRec struct {
	names  []string
	fields []*aNode
	done   bool
	opt    *Schema // the optional variant of the record's Schema
}

type avroParser struct {
	named map[string]*aNode
}

func avroErrf(format string, args ...any) error { return fmt.Errorf(format, args...) }

// parse builds the aNode for an Avro schema JSON value in namespace ns.
func (p *avroParser) parse(v any, ns string, depth int) (*aNode, error) {
	if depth > maxSchemaDepth {
		return nil, avroErrf("schema nested deeper than %d", maxSchemaDepth)
	}
	switch t := v.(type) {
	case string:
		if k, ok := avroPrimitive[t]; ok {
			return p.primitive(k, t, nil), nil
		}
		full := t
		if !strings.Contains(t, ".") && ns != "" {
			full = ns + "." + t
		}
		n, ok := p.named[full]
		if !ok {
			if n, ok = p.named[t]; !ok {
				return nil, avroErrf("unknown type %q", t)
			}
		}
		if n.rec != nil && !n.rec.done {
			return nil, avroErrf("recursive type %q is not supported", t)
		}
		return n, nil
	case []any:
		u := &aNode{kind: aUnion, nonNull: -1, minSize: 1}
		nonNull := 0
		for _, b := range t {
			bn, err := p.parse(b, ns, depth+1)
			if err != nil {
				return nil, err
			}
			if bn.kind == aUnion {
				return nil, avroErrf("nested union")
			}
			if bn.kind != aNull {
				nonNull++
				u.nonNull = len(u.branch)
			}
			u.branch = append(u.branch, bn)
		}
		if nonNull != 1 || len(u.branch) > 2 {
			return nil, avroErrf("only unions of null and one type are supported (Connect optional fields), got %d branches", len(u.branch))
		}
		u.s = fieldSchema(u) // computed once here: decoding only reads it
		return u, nil
	case map[string]any:
		return p.parseMap(t, ns, depth)
	}
	return nil, avroErrf("invalid schema element %T", v)
}

func (p *avroParser) primitive(k akind, name string, props map[string]any) *aNode {
	n := &aNode{kind: k, gname: name}
	switch k {
	case aNull:
		return n
	case aBool:
		n.s, n.minSize = &Schema{Type: "boolean"}, 1
	case aInt:
		n.s, n.minSize = &Schema{Type: "int32"}, 1
		if ct, _ := props["connect.type"].(string); ct == "int8" || ct == "int16" {
			n.s.Type = ct
		}
	case aLong:
		n.s, n.minSize = &Schema{Type: "int64"}, 1
	case aFloat:
		n.s, n.minSize = &Schema{Type: "float32"}, 4
	case aDouble:
		n.s, n.minSize = &Schema{Type: "float64"}, 8
	case aBytes:
		n.s, n.minSize = &Schema{Type: "bytes"}, 1
	case aString:
		n.s, n.minSize = &Schema{Type: "string"}, 1
	}
	if props != nil {
		applyConnectProps(n.s, props)
		switch lt, _ := props["logicalType"].(string); {
		case lt == "date" && k == aInt:
			n.s.Name = NameDate
		case lt == "time-millis" && k == aInt:
			n.s.Name = NameTime
		case lt == "timestamp-millis" && k == aLong:
			n.s.Name = NameTimestamp
		case lt == "decimal" && k == aBytes:
			n.s.Name = NameDecimal
			if n.s.Parameters == nil {
				n.s.Parameters = map[string]string{}
			}
			if _, ok := n.s.Parameters["scale"]; !ok {
				n.s.Parameters["scale"] = numString(props["scale"], "0")
			}
			if _, ok := props["connect.parameters"]; !ok {
				if pr, ok := props["precision"]; ok {
					n.s.Parameters["connect.decimal.precision"] = numString(pr, "")
				}
			}
		}
	}
	return n
}

func numString(v any, def string) string {
	switch x := v.(type) {
	case json.Number:
		return x.String()
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case string:
		return x
	}
	return def
}

// applyConnectProps copies connect.name / connect.parameters / connect.default.
func applyConnectProps(s *Schema, props map[string]any) {
	if name, ok := props["connect.name"].(string); ok {
		s.Name = name
	}
	if params, ok := props["connect.parameters"].(map[string]any); ok {
		s.Parameters = make(map[string]string, len(params))
		for k, v := range params {
			if str, ok := v.(string); ok {
				s.Parameters[k] = str
			} else {
				s.Parameters[k] = fmt.Sprint(v)
			}
		}
	}
	if def, ok := props["connect.default"]; ok && def != nil {
		s.Default = avroDefault(def, s)
	}
}

// avroDefault converts a JSON default to the Row representation of s (best effort).
func avroDefault(v any, s *Schema) any {
	switch s.Type {
	case "int8", "int16", "int32", "int64":
		if n, ok := v.(json.Number); ok {
			if i, err := n.Int64(); err == nil {
				return i
			}
		}
	case "float32", "float64":
		if n, ok := v.(json.Number); ok {
			if f, err := n.Float64(); err == nil {
				return f
			}
		}
	case "boolean":
		if b, ok := v.(bool); ok {
			return b
		}
	case "string":
		if str, ok := v.(string); ok {
			return str
		}
	}
	return nil
}

func fullName(name, ns string) string {
	if strings.Contains(name, ".") || ns == "" {
		return name
	}
	return ns + "." + name
}

func (p *avroParser) define(full string, n *aNode) error {
	if _, dup := p.named[full]; dup {
		return avroErrf("type %q defined twice", full)
	}
	p.named[full] = n
	return nil
}

func (p *avroParser) parseMap(m map[string]any, ns string, depth int) (*aNode, error) {
	typ := m["type"]
	ts, isStr := typ.(string)
	if !isStr {
		// {"type": {...}} or {"type": [...]}: a wrapped schema
		return p.parse(typ, ns, depth+1)
	}
	if k, ok := avroPrimitive[ts]; ok {
		return p.primitive(k, ts, m), nil
	}
	name, _ := m["name"].(string)
	if nsp, ok := m["namespace"].(string); ok && !strings.Contains(name, ".") {
		ns = nsp
	}
	switch ts {
	case "record", "error":
		if name == "" {
			return nil, avroErrf("record without name")
		}
		full := fullName(name, ns)
		if i := strings.LastIndexByte(full, '.'); i >= 0 {
			ns = full[:i]
		}
		n := &aNode{kind: aRecord, gname: full, rec: &avroRec{}, s: &Schema{Type: "struct", Name: full}}
		applyConnectProps(n.s, m)
		if err := p.define(full, n); err != nil {
			return nil, err
		}
		fields, _ := m["fields"].([]any)
		for _, f := range fields {
			fm, ok := f.(map[string]any)
			if !ok {
				return nil, avroErrf("record %q: invalid field", full)
			}
			fname, _ := fm["name"].(string)
			if fname == "" {
				return nil, avroErrf("record %q: field without name", full)
			}
			fn, err := p.parse(fm["type"], ns, depth+1)
			if err != nil {
				return nil, fmt.Errorf("record %q field %q: %w", full, fname, err)
			}
			if fn.kind == aNull {
				return nil, avroErrf("record %q field %q: null type fields are not supported", full, fname)
			}
			fs := fieldSchema(fn)
			if fs.Default == nil {
				if def, ok := fm["default"]; ok && def != nil {
					if d := avroDefault(def, fs); d != nil {
						c := *fs
						c.Default = d
						fs = &c
					}
				}
			}
			n.rec.names = append(n.rec.names, fname)
			n.rec.fields = append(n.rec.fields, fn)
			n.s.Fields = append(n.s.Fields, Field{Name: fname, Schema: fs})
			n.minSize += fn.minSize
		}
		n.rec.done = true
		return n, nil
	case "enum":
		syms, _ := m["symbols"].([]any)
		if name == "" || len(syms) == 0 {
			return nil, avroErrf("invalid enum")
		}
		full := fullName(name, ns)
		n := &aNode{kind: aEnum, gname: full, nsym: len(syms), minSize: 1, s: &Schema{Type: "string"}}
		for _, sym := range syms {
			str, ok := sym.(string)
			if !ok {
				return nil, avroErrf("enum %q: symbol %v is not a string", full, sym)
			}
			n.syms = append(n.syms, str)
		}
		applyConnectProps(n.s, m)
		return n, p.define(full, n)
	case "fixed":
		size := -1
		if sz, ok := m["size"].(json.Number); ok {
			if i, err := sz.Int64(); err == nil && i >= 0 && i <= 1<<20 {
				size = int(i)
			}
		}
		if name == "" || size < 0 {
			return nil, avroErrf("invalid fixed")
		}
		full := fullName(name, ns)
		n := &aNode{kind: aFixed, gname: full, size: size, minSize: size, s: &Schema{Type: "bytes"}}
		applyConnectProps(n.s, m)
		return n, p.define(full, n)
	case "array":
		it, err := p.parse(m["items"], ns, depth+1)
		if err != nil {
			return nil, err
		}
		if it.kind == aNull {
			return nil, avroErrf("arrays of null are not supported")
		}
		n := &aNode{kind: aArray, gname: "array", items: it, minSize: 1, s: &Schema{Type: "array", Items: fieldSchema(it)}}
		applyConnectProps(n.s, m)
		return n, nil
	case "map":
		vn, err := p.parse(m["values"], ns, depth+1)
		if err != nil {
			return nil, err
		}
		if vn.kind == aNull {
			return nil, avroErrf("maps of null are not supported")
		}
		n := &aNode{kind: aMap, gname: "map", values: vn, minSize: 1,
			s: &Schema{Type: "map", Keys: &Schema{Type: "string"}, Values: fieldSchema(vn)}}
		applyConnectProps(n.s, m)
		return n, nil
	}
	return nil, avroErrf("unknown type %q", ts)
}

// fieldSchema is the Connect schema of a value of n: unions with null are
// the optional variant of their other branch.
func fieldSchema(n *aNode) *Schema {
	if n.kind != aUnion || n.s != nil {
		return n.s
	}
	b := n.branch[n.nonNull]
	if b.rec != nil {
		if b.rec.opt == nil {
			c := *b.s
			c.Optional = true
			b.rec.opt = &c
		}
		return b.rec.opt
	}
	c := *b.s
	c.Optional = true
	return &c
}

// stripLogical removes logicalType annotations so goavro hands back the raw
// int/long/bytes values (the Connect schema keeps the logical meaning).
func stripLogical(v any) {
	switch t := v.(type) {
	case map[string]any:
		delete(t, "logicalType")
		for _, x := range t {
			stripLogical(x)
		}
	case []any:
		for _, x := range t {
			stripLogical(x)
		}
	}
}

// avroCompiled is one registry schema, ready to decode.
type avroCompiled struct {
	id    int
	root  *aNode
	env   *avroEnvPlan  // the envelope fast path (envfast.go), or nil
	codec *goavro.Codec // the schema as goavro accepts it (validation; the tests' reference decoder)
	flat  *flatPlan
	// fields and rows of the records a value can hold outside arrays and
	// maps (a Debezium envelope: before, after, source, transaction and
	// itself): the reader's chunks are sized to them, one allocation each
	nvals, nrows int
}

// recordSlots counts the record fields and records reachable from n
// without passing through an array or a map.
func recordSlots(n *aNode, depth int) (vals, rows int) {
	if depth > maxSchemaDepth {
		return 0, 0
	}
	switch n.kind {
	case aUnion:
		return recordSlots(n.branch[n.nonNull], depth+1)
	case aRecord:
		vals, rows = len(n.rec.fields), 1
		if vals > chunk {
			vals = 0 // boxes.values allocates these on their own
		}
		for _, f := range n.rec.fields {
			v, r := recordSlots(f, depth+1)
			vals, rows = vals+v, rows+r
		}
	}
	return vals, rows
}

func compileAvro(id int, schemaJSON, prefix string) (*avroCompiled, error) {
	dec := json.NewDecoder(strings.NewReader(schemaJSON))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("schema is not JSON: %w", err)
	}
	p := &avroParser{named: map[string]*aNode{}}
	root, err := p.parse(v, "", 0)
	if err != nil {
		return nil, err
	}
	// goavro wants plain float64 numbers: re-read without UseNumber
	var g any
	if err := json.Unmarshal([]byte(schemaJSON), &g); err != nil {
		return nil, err
	}
	stripLogical(g)
	gs, err := json.Marshal(g)
	if err != nil {
		return nil, err
	}
	codec, err := goavro.NewCodec(string(gs))
	if err != nil {
		return nil, err
	}
	c := &avroCompiled{id: id, root: root, codec: codec}
	c.nvals, c.nrows = recordSlots(root, 0)
	c.env = planAvroEnvelope(root)
	if root.kind == aRecord || (root.kind == aUnion && root.branch[root.nonNull].kind == aRecord) {
		if n, err := newNode(root.s, 0); err == nil {
			c.flat = newFlatPlan(n, prefix)
		}
	}
	return c, nil
}

// ---- cache of compiled schemas by id, with coalesced registry lookups ----

type avroEntry struct {
	done chan struct{}
	c    *avroCompiled
	err  error
	used atomic.Int64
}

type avroCache struct {
	reg  Registry
	max  int
	tick atomic.Int64
	mu   sync.Mutex
	m    map[int]*avroEntry
}

func newAvroCache(max int, reg Registry) *avroCache {
	return &avroCache{reg: reg, max: max, m: map[int]*avroEntry{}}
}

func (ac *avroCache) get(ctx context.Context, id int, prefix string) (*avroCompiled, error) {
	ac.mu.Lock()
	e := ac.m[id]
	if e != nil {
		ac.mu.Unlock()
		select {
		case <-e.done:
		case <-ctx.Done():
			return nil, quarantine.Transient(ctx.Err())
		}
		e.used.Store(ac.tick.Add(1))
		return e.c, e.err
	}
	e = &avroEntry{done: make(chan struct{})}
	e.used.Store(ac.tick.Add(1))
	if len(ac.m) >= ac.max {
		ac.evictLocked()
	}
	ac.m[id] = e
	ac.mu.Unlock()

	e.c, e.err = ac.load(ctx, id, prefix)
	close(e.done)
	if e.err != nil {
		if r, ok := quarantine.ReasonOf(e.err); !ok || r == quarantine.UnknownSchemaID {
			// transient failures and 404s (the registry may learn the id) are not cached
			ac.mu.Lock()
			if ac.m[id] == e {
				delete(ac.m, id)
			}
			ac.mu.Unlock()
		}
	}
	return e.c, e.err
}

func (ac *avroCache) load(ctx context.Context, id int, prefix string) (*avroCompiled, error) {
	if ac.reg == nil {
		return nil, quarantine.Errorf(quarantine.UnknownSchemaID, "schema id %d: no schema registry configured", id)
	}
	js, err := ac.reg.Schema(ctx, id)
	if err != nil {
		if _, ok := quarantine.ReasonOf(err); ok || quarantine.IsTransient(err) {
			return nil, err
		}
		return nil, quarantine.Transient(fmt.Errorf("schema id %d: %w", id, err))
	}
	c, err := compileAvro(id, js, prefix)
	if err != nil {
		return nil, quarantine.Wrap(quarantine.MalformedAvro, err, "schema id %d: unusable Avro schema", id)
	}
	return c, nil
}

func (ac *avroCache) evictLocked() {
	var oldID int
	var old *avroEntry
	for id, e := range ac.m {
		select {
		case <-e.done:
		default:
			continue // in flight
		}
		if old == nil || e.used.Load() < old.used.Load() {
			oldID, old = id, e
		}
	}
	if old != nil {
		delete(ac.m, oldID)
	}
}

// decodeAvro decodes a Confluent-framed Avro key or value.
// ev, when set, receives the source and transaction blocks of an envelope.
func (d *Decoder) decodeAvro(ctx context.Context, which string, b []byte, ev *Event) (side, error) {
	id := int(int32(binary.BigEndian.Uint32(b[1:5])))
	c, err := d.acache.get(ctx, id, d.prefix)
	if err != nil {
		if r, ok := quarantine.ReasonOf(err); ok {
			var qe *quarantine.Error
			if errors.As(err, &qe) {
				return side{}, &quarantine.Error{Reason: r, Msg: which + ": " + qe.Msg, Err: qe.Err}
			}
		}
		return side{}, err
	}
	body := b[5:]
	r := avroReader{buf: body}
	r.bx.presize(c.nvals, c.nrows)
	var v any
	var end int
	var rerr error
	if c.env != nil && ev != nil {
		v, end, rerr = r.readEnvelope(c.root, c.env, ev)
	} else {
		v, end, rerr = r.read(c.root, 0, 0)
	}
	if rerr != nil {
		return side{}, quarantine.Wrap(quarantine.MalformedAvro, rerr, "%s: schema id %d: body of %d bytes", which, id, len(body))
	}
	if end != len(body) {
		return side{}, quarantine.Errorf(quarantine.MalformedAvro, "%s: schema id %d: %d trailing bytes after the value", which, id, len(body)-end)
	}
	out := side{format: FormatAvro, val: v}
	if r, ok := v.(*Row); ok {
		out.row = r
		out.flat = c.flat
	}
	return out, nil
}
