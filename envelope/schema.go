package envelope

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Connect logical and Debezium type names the decoder itself cares about.
const (
	NameDecimal   = "org.apache.kafka.connect.data.Decimal"
	NameDate      = "org.apache.kafka.connect.data.Date"
	NameTime      = "org.apache.kafka.connect.data.Time"
	NameTimestamp = "org.apache.kafka.connect.data.Timestamp"
	NameHeartbeat = "io.debezium.connector.common.Heartbeat"
	NameTxValue   = "io.debezium.connector.common.TransactionMetadataValue"
)

type kind uint8

const (
	kInt8 kind = iota + 1
	kInt16
	kInt32
	kInt64
	kFloat32
	kFloat64
	kBool
	kString
	kBytes
	kArray
	kMap
	kStruct
)

var kindOf = map[string]kind{
	"int8": kInt8, "int16": kInt16, "int32": kInt32, "int64": kInt64,
	"float32": kFloat32, "float64": kFloat64, "boolean": kBool, "string": kString,
	"bytes": kBytes, "array": kArray, "map": kMap, "struct": kStruct,
}

// jsonTypeNames maps JsonConverter's type names to Connect's: JsonConverter
// writes FLOAT32 as "float" and FLOAT64 as "double"; Schema.Type always uses
// the Connect names (float32, float64), whatever the wire form.
var jsonTypeNames = map[string]string{"float": "float32", "double": "float64"}

// node is a compiled Connect schema: the exported *Schema plus what the
// decoders need (field index, shared field-name slice, integer range).
type node struct {
	s       *Schema
	kind    kind
	lo, hi  int64 // integer range
	decimal bool
	fields  []*node
	names   []string // shared by every Row of this struct (read-only)
	index   map[string]int
	env     *envPlan // a top-level envelope struct's fast path (envfast.go)
	items   *node
	keys    *node
	values  *node
}

func intRange(k kind) (int64, int64) {
	switch k {
	case kInt8:
		return math.MinInt8, math.MaxInt8
	case kInt16:
		return math.MinInt16, math.MaxInt16
	case kInt32:
		return math.MinInt32, math.MaxInt32
	}
	return math.MinInt64, math.MaxInt64
}

// newNode builds the decoder node for a finished *Schema (children first).
func newNode(s *Schema, depth int) (*node, error) {
	if depth > maxSchemaDepth {
		return nil, fmt.Errorf("schema nested deeper than %d", maxSchemaDepth)
	}
	k, ok := kindOf[s.Type]
	if !ok {
		return nil, fmt.Errorf("unknown schema type %q", s.Type)
	}
	n := &node{s: s, kind: k, decimal: s.Name == NameDecimal}
	n.lo, n.hi = intRange(k)
	var err error
	switch k {
	case kStruct:
		n.fields = make([]*node, len(s.Fields))
		n.names = make([]string, len(s.Fields))
		n.index = make(map[string]int, len(s.Fields))
		for i, f := range s.Fields {
			if f.Schema == nil {
				return nil, fmt.Errorf("field %q has no schema", f.Name)
			}
			if _, dup := n.index[f.Name]; dup {
				return nil, fmt.Errorf("duplicate field %q", f.Name)
			}
			if n.fields[i], err = newNode(f.Schema, depth+1); err != nil {
				return nil, fmt.Errorf("field %q: %w", f.Name, err)
			}
			n.names[i] = f.Name
			n.index[f.Name] = i
		}
		n.env = planEnvelope(n)
	case kArray:
		if s.Items == nil {
			return nil, fmt.Errorf("array without items")
		}
		if n.items, err = newNode(s.Items, depth+1); err != nil {
			return nil, err
		}
	case kMap:
		if s.Keys == nil || s.Values == nil {
			return nil, fmt.Errorf("map without keys/values")
		}
		if n.keys, err = newNode(s.Keys, depth+1); err != nil {
			return nil, err
		}
		if n.values, err = newNode(s.Values, depth+1); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// fieldIndex is the index of struct field k, or -1. next, the field after
// the last one found, is tried first: members mostly come in schema order.
func (n *node) fieldIndex(k []byte, next int) int {
	if next < len(n.names) && string(k) == n.names[next] {
		return next
	}
	if i, ok := n.index[string(k)]; ok {
		return i
	}
	return -1
}

const maxSchemaDepth = 64

// jsonSchema is the JsonConverter schema JSON.
type jsonSchema struct {
	Type       string            `json:"type"`
	Optional   bool              `json:"optional"`
	Name       string            `json:"name"`
	Parameters map[string]string `json:"parameters"`
	Default    json.RawMessage   `json:"default"`
	Field      string            `json:"field"`
	Fields     []*jsonSchema     `json:"fields"`
	Items      *jsonSchema       `json:"items"`
	Keys       *jsonSchema       `json:"keys"`
	Values     *jsonSchema       `json:"values"`
}

func (j *jsonSchema) toSchema(depth int) (*Schema, error) {
	if depth > maxSchemaDepth {
		return nil, fmt.Errorf("schema nested deeper than %d", maxSchemaDepth)
	}
	typ := j.Type
	if t, ok := jsonTypeNames[typ]; ok {
		typ = t
	}
	if _, ok := kindOf[typ]; !ok {
		return nil, fmt.Errorf("unknown schema type %q", j.Type)
	}
	s := &Schema{Type: typ, Name: j.Name, Optional: j.Optional, Parameters: j.Parameters}
	var err error
	for _, f := range j.Fields {
		if f == nil {
			return nil, fmt.Errorf("null field schema")
		}
		fs, err := f.toSchema(depth + 1)
		if err != nil {
			return nil, fmt.Errorf("field %q: %w", f.Field, err)
		}
		s.Fields = append(s.Fields, Field{Name: f.Field, Schema: fs})
	}
	if j.Items != nil {
		if s.Items, err = j.Items.toSchema(depth + 1); err != nil {
			return nil, err
		}
	}
	if j.Keys != nil {
		if s.Keys, err = j.Keys.toSchema(depth + 1); err != nil {
			return nil, err
		}
	}
	if j.Values != nil {
		if s.Values, err = j.Values.toSchema(depth + 1); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// setDefaults decodes the raw JSON defaults once the nodes exist.
func setDefaults(j *jsonSchema, n *node) {
	if len(j.Default) > 0 && !bytes.Equal(j.Default, []byte("null")) {
		n.s.Default = jsonDefault(j.Default, n)
	}
	for i, f := range j.Fields {
		if i < len(n.fields) {
			setDefaults(f, n.fields[i])
		}
	}
	if j.Items != nil && n.items != nil {
		setDefaults(j.Items, n.items)
	}
	if j.Keys != nil && n.keys != nil {
		setDefaults(j.Keys, n.keys)
	}
	if j.Values != nil && n.values != nil {
		setDefaults(j.Values, n.values)
	}
}

// jsonDefault decodes a default value given as JSON for node n; nil if unusable.
func jsonDefault(raw []byte, n *node) any {
	sc := scanner{buf: raw, maxDepth: maxSchemaDepth, arena: make([]byte, 0, len(raw))}
	v, err := sc.typedVal(n)
	if err != nil || sc.peek() != 0 {
		return nil
	}
	return v
}

// compileJSONSchema parses JsonConverter schema JSON into a node.
func compileJSONSchema(raw []byte) (*node, error) {
	var j jsonSchema
	if err := json.Unmarshal(raw, &j); err != nil {
		return nil, err
	}
	s, err := j.toSchema(0)
	if err != nil {
		return nil, err
	}
	n, err := newNode(s, 0)
	if err != nil {
		return nil, err
	}
	setDefaults(&j, n)
	return n, nil
}

// ---- the JSON schema cache ----

// jsonSchemaCache maps the exact bytes of a JsonConverter "schema" value to
// its compiled node. Lookups on the hot path do not need to find the end of
// the schema first: entries are indexed by a hash of their first prefixLen
// bytes, and a hit is confirmed by comparing all of the entry's bytes with the
// input at that position. A complete JSON value is self-delimiting, so if the
// input starts with an entry's bytes the schema value is exactly those bytes.
// Schemas shorter than prefixLen are indexed by a hash of all their bytes.
// Eviction is approximate LRU (a use tick per entry) and bounded by max.
type jsonSchemaCache struct {
	seed   maphash.Seed
	max    int
	tick   atomic.Int64
	mu     sync.RWMutex
	prefix map[uint64][]*jsonEntry // len(raw) >= prefixLen
	full   map[uint64][]*jsonEntry // len(raw) < prefixLen
	n      int
}

const prefixLen = 128

type jsonEntry struct {
	raw   []byte
	node  *node
	flat  *flatPlan // nil unless the schema looks like a flattened row
	used  atomic.Int64
	perr  error // permanent compile error (cached so bad schemas are not re-parsed)
	isPre bool
	key   uint64
	// struct fields and structs a value can hold outside arrays and maps:
	// the scanner's chunks are sized to them (one allocation each)
	nvals, nrows int
}

// structSlots counts the struct fields and structs reachable from n
// without passing through an array or a map.
func structSlots(n *node, depth int) (vals, rows int) {
	if n == nil || n.kind != kStruct || depth > maxSchemaDepth {
		return 0, 0
	}
	vals, rows = len(n.fields), 1
	if vals > chunk {
		vals = 0 // boxes.values allocates these on their own
	}
	for _, f := range n.fields {
		v, r := structSlots(f, depth+1)
		vals, rows = vals+v, rows+r
	}
	return vals, rows
}

func newJSONSchemaCache(max int) *jsonSchemaCache {
	return &jsonSchemaCache{seed: maphash.MakeSeed(), max: max,
		prefix: map[uint64][]*jsonEntry{}, full: map[uint64][]*jsonEntry{}}
}

// lookupAt returns the entry whose bytes the input starts with at pos, if
// any. hint (the entry last used for the same topic and side) is tried first:
// with it, finding the schema costs one memcmp however many are cached.
func (c *jsonSchemaCache) lookupAt(buf []byte, pos int, hint *jsonEntry) *jsonEntry {
	if hint != nil && bytes.HasPrefix(buf[pos:], hint.raw) {
		hint.used.Store(c.tick.Add(1))
		return hint
	}
	if len(buf)-pos < prefixLen {
		return nil
	}
	h := maphash.Bytes(c.seed, buf[pos:pos+prefixLen])
	c.mu.RLock()
	list := c.prefix[h]
	var hit *jsonEntry
	for _, e := range list {
		if bytes.HasPrefix(buf[pos:], e.raw) {
			hit = e
			break
		}
	}
	c.mu.RUnlock()
	if hit != nil {
		hit.used.Store(c.tick.Add(1))
	}
	return hit
}

// lookupExact returns the entry for exactly raw, if any.
func (c *jsonSchemaCache) lookupExact(raw []byte) *jsonEntry {
	pre, h := c.keyOf(raw)
	c.mu.RLock()
	m := c.full
	if pre {
		m = c.prefix
	}
	var hit *jsonEntry
	for _, e := range m[h] {
		if bytes.Equal(e.raw, raw) {
			hit = e
			break
		}
	}
	c.mu.RUnlock()
	if hit != nil {
		hit.used.Store(c.tick.Add(1))
	}
	return hit
}

func (c *jsonSchemaCache) keyOf(raw []byte) (bool, uint64) {
	if len(raw) >= prefixLen {
		return true, maphash.Bytes(c.seed, raw[:prefixLen])
	}
	return false, maphash.Bytes(c.seed, raw)
}

// add compiles raw (outside the lock) and inserts it; concurrent adds of the
// same schema may both compile, the first insert wins.
func (c *jsonSchemaCache) add(raw []byte, prefix string) *jsonEntry {
	e := &jsonEntry{raw: bytes.Clone(raw)}
	n, err := compileJSONSchema(e.raw)
	if err != nil {
		e.perr = err
	} else {
		e.node = n
		e.flat = newFlatPlan(n, prefix)
		e.nvals, e.nrows = structSlots(n, 0)
	}
	e.isPre, e.key = c.keyOf(e.raw)
	e.used.Store(c.tick.Add(1))
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.full
	if e.isPre {
		m = c.prefix
	}
	for _, old := range m[e.key] {
		if bytes.Equal(old.raw, e.raw) {
			return old
		}
	}
	if c.n >= c.max {
		c.evictLocked()
	}
	m[e.key] = append(m[e.key], e)
	c.n++
	return e
}

// evictLocked drops the least recently used eighth of the entries.
func (c *jsonSchemaCache) evictLocked() {
	var all []*jsonEntry
	for _, l := range c.prefix {
		all = append(all, l...)
	}
	for _, l := range c.full {
		all = append(all, l...)
	}
	drop := len(all)/8 + 1
	// partial selection of the oldest entries
	for i := 0; i < drop && i < len(all); i++ {
		min := i
		for j := i + 1; j < len(all); j++ {
			if all[j].used.Load() < all[min].used.Load() {
				min = j
			}
		}
		all[i], all[min] = all[min], all[i]
		e := all[i]
		m := c.full
		if e.isPre {
			m = c.prefix
		}
		l := m[e.key]
		for k, x := range l {
			if x == e {
				l = append(l[:k:k], l[k+1:]...)
				break
			}
		}
		if len(l) == 0 {
			delete(m, e.key)
		} else {
			m[e.key] = l
		}
		c.n--
	}
}

// hints remembers, per topic, the schema entry last used for keys and for
// values (Debezium topics carry one schema at a time).
type hints struct {
	mu  sync.RWMutex
	key map[string]*jsonEntry
	val map[string]*jsonEntry
	max int
}

func newHints(max int) *hints {
	return &hints{key: map[string]*jsonEntry{}, val: map[string]*jsonEntry{}, max: max}
}

func (h *hints) get(topic string, isKey bool) *jsonEntry {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if isKey {
		return h.key[topic]
	}
	return h.val[topic]
}

func (h *hints) set(topic string, isKey bool, e *jsonEntry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.val
	if isKey {
		m = h.key
	}
	if len(m) >= h.max {
		clear(m)
	}
	m[topic] = e
}

// ---- flattened rows ----

// metaField says where an unwrap (ExtractNewRecordState add.fields) field goes.
type metaField uint8

const (
	mOp metaField = iota + 1
	mDeleted
	mLSN
	mSrcTsMs
	mSrcTsUs
	mSrcTsNs
	mTable
	mDB
	mSchema
	mSnapshot
	mSequence
	mTxID
	mVersion
	mConnector
	mName
	mTsMs
	mTsUs
	mTsNs
	mTxIDStr
	mTotalOrder
	mDCOrder
)

// metaNames maps a field name without the prefix to its meta field.
// add.fields resolves unqualified names to source, except op/ts_* (envelope)
// and id/total_order/data_collection_order (transaction); "source.x" becomes
// "source_x", "transaction.x" becomes "transaction_x".
var metaNames = map[string]metaField{
	"op": mOp, "deleted": mDeleted,
	"lsn": mLSN, "source_lsn": mLSN,
	"source_ts_ms": mSrcTsMs, "source_ts_us": mSrcTsUs, "source_ts_ns": mSrcTsNs,
	"table": mTable, "source_table": mTable,
	"db": mDB, "source_db": mDB,
	"schema": mSchema, "source_schema": mSchema,
	"snapshot": mSnapshot, "source_snapshot": mSnapshot,
	"sequence": mSequence, "source_sequence": mSequence,
	"txId": mTxID, "source_txId": mTxID,
	"version": mVersion, "source_version": mVersion,
	"connector": mConnector, "source_connector": mConnector,
	"name": mName, "source_name": mName,
	"ts_ms": mTsMs, "ts_us": mTsUs, "ts_ns": mTsNs,
	"id": mTxIDStr, "transaction_id": mTxIDStr,
	"total_order": mTotalOrder, "transaction_total_order": mTotalOrder,
	"data_collection_order": mDCOrder, "transaction_data_collection_order": mDCOrder,
}

// flatPlan splits a flattened row struct into business fields and meta fields.
type flatPlan struct {
	schema *Schema  // the row schema without meta fields
	names  []string // its field names (shared)
	keep   []int    // source index of each kept field
	meta   []int    // source index of each meta field
	what   []metaField
}

func isMetaName(name, prefix string) (metaField, bool) {
	if prefix == "" || !strings.HasPrefix(name, prefix) {
		return 0, false
	}
	m, ok := metaNames[name[len(prefix):]]
	return m, ok
}

// newFlatPlan returns the plan for a struct schema that has meta fields or is
// named like a Debezium row (*.Value), nil otherwise.
func newFlatPlan(n *node, prefix string) *flatPlan {
	if n == nil || n.kind != kStruct {
		return nil
	}
	p := &flatPlan{}
	for i, name := range n.names {
		if m, ok := isMetaName(name, prefix); ok {
			p.meta = append(p.meta, i)
			p.what = append(p.what, m)
		} else {
			p.keep = append(p.keep, i)
		}
	}
	s := *n.s
	s.Fields = make([]Field, 0, len(p.keep))
	p.names = make([]string, 0, len(p.keep))
	for _, i := range p.keep {
		s.Fields = append(s.Fields, n.s.Fields[i])
		p.names = append(p.names, n.names[i])
	}
	if len(p.meta) == 0 {
		p.schema = n.s
		p.names = n.names
	} else {
		p.schema = &s
	}
	return p
}

// ---- interning of schemaless field names ----

// interner maps field-name bytes to one shared string. Reads are lock-free
// (an immutable map swapped on insert); it stops growing at maxInterned.
type interner struct {
	mu     sync.Mutex
	m      atomic.Pointer[map[string]string]
	shapes atomic.Pointer[map[uint64][]string]
	// next predicts an object's shape from where it sits (key or value,
	// the field it is the value of) and its first field name: the rows of
	// one table, and the envelopes and source blocks around them, repeat
	// one shape per place, so the remaining names are checked against the
	// prediction with a byte comparison each, instead of a map lookup each
	// plus the shape hash. Bounded by maxShapes places and maxRelearn
	// replacements in all, so shapes alternating in one place cost a miss,
	// never a map copy per record.
	next    atomic.Pointer[map[shapePlace][]string]
	relearn atomic.Int32
}

// shapePlace is where an object sits: in a key or a value, as the value of
// the field parent ("" at the top), starting with the field first.
type shapePlace struct {
	key           bool
	parent, first string
}

const maxRelearn = 4096

// predict returns the last learnt shape of objects at p, or nil.
func (in *interner) predict(p shapePlace) []string {
	if in == nil {
		return nil
	}
	if m := in.next.Load(); m != nil {
		return (*m)[p]
	}
	return nil
}

// learn records shape (a slice returned by shape, shape[0] == p.first) as
// the prediction for objects at p.
func (in *interner) learn(p shapePlace, shape []string) {
	if in == nil || len(shape) == 0 {
		return
	}
	known := func(m *map[shapePlace][]string) bool {
		if m == nil {
			return false
		}
		if old, ok := (*m)[p]; ok {
			return slices.Equal(old, shape) || in.relearn.Load() >= maxRelearn
		}
		return len(*m) >= maxShapes
	}
	if known(in.next.Load()) { // the common case: no lock
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	old := in.next.Load()
	if known(old) {
		return
	}
	if old != nil {
		if _, ok := (*old)[p]; ok {
			in.relearn.Add(1)
		}
	}
	n := make(map[shapePlace][]string, 1+len(*orEmptyNext(old)))
	for k, v := range *orEmptyNext(old) {
		n[k] = v
	}
	n[p] = shape
	in.next.Store(&n)
}

func orEmptyNext(m *map[shapePlace][]string) *map[shapePlace][]string {
	if m == nil {
		return &map[shapePlace][]string{}
	}
	return m
}

const maxShapes = 1024

// shape returns a Names slice equal to names, shared by every schemaless
// object with the same field names in the same order (the rows of one
// table): one allocation per object saved. Interned names are hashed by
// their data pointer, so a lookup does not read the names' bytes; names
// that missed the interner simply miss here too. Like the interner it
// stops growing at maxShapes.
func (in *interner) shape(names []string) []string {
	if in == nil {
		return slices.Clone(names)
	}
	h := uint64(len(names))
	for _, n := range names {
		h = (h ^ uint64(uintptr(unsafe.Pointer(unsafe.StringData(n))))) * 0x100000001b3
		h = (h ^ uint64(len(n))) * 0x100000001b3
	}
	m := in.shapes.Load()
	if m != nil {
		if s, ok := (*m)[h]; ok && slices.Equal(s, names) {
			return s
		}
		if len(*m) >= maxShapes {
			return slices.Clone(names)
		}
	}
	c := slices.Clone(names)
	in.mu.Lock()
	defer in.mu.Unlock()
	old := in.shapes.Load()
	if old != nil {
		if s, ok := (*old)[h]; ok {
			if slices.Equal(s, names) {
				return s
			}
			return c // a hash collision: keep the first shape
		}
		if len(*old) >= maxShapes {
			return c
		}
	}
	n := make(map[uint64][]string, 1+len(*orEmpty(old)))
	for k, v := range *orEmpty(old) {
		n[k] = v
	}
	n[h] = c
	in.shapes.Store(&n)
	return c
}

func orEmpty(m *map[uint64][]string) *map[uint64][]string {
	if m == nil {
		return &map[uint64][]string{}
	}
	return m
}

const maxInterned = 2048

func (in *interner) get(b []byte) string {
	if in == nil {
		return string(b)
	}
	if m := in.m.Load(); m != nil {
		if s, ok := (*m)[string(b)]; ok {
			return s
		}
		if len(*m) >= maxInterned {
			return string(b)
		}
	}
	s := string(b)
	in.mu.Lock()
	defer in.mu.Unlock()
	old := in.m.Load()
	n := map[string]string{s: s}
	if old != nil {
		if x, ok := (*old)[s]; ok {
			return x
		}
		if len(*old) >= maxInterned {
			return s
		}
		for k, v := range *old {
			n[k] = v
		}
	}
	in.m.Store(&n)
	return s
}
