package normalize

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/cdcsink/cdc-sink/source"
	"github.com/cdcsink/cdc-sink/versioning"
)

// DecimalHandling mirrors the connector's decimal.handling.mode. With a
// schema it changes nothing (values pass through as their declared types);
// for schemaless columns configured as decimal (Options.SchemalessTypes) it
// says whether a string value is a decimal literal (DecimalString) or the
// base64 of unscaled bytes (DecimalPrecise: rejected, not guessed).
type DecimalHandling uint8

const (
	DecimalPrecise DecimalHandling = iota // default: Connect Decimal bytes
	DecimalString                         // "12.34", "NAN"
	DecimalDouble                         // float64
)

// Options configure a Normalizer. Table-keyed maps are looked up by, in
// order: the Kafka topic, "<schema>.<table>", "<table>".
type Options struct {
	// KeyColumns names the key columns of tables whose record key is null
	// (no primary key); values are taken from after (upserts) or before
	// (deletes).
	KeyColumns map[string][]string
	// SchemalessTypes fixes the Connect type of columns of schemaless JSON
	// tables (instead of inference), e.g. {"amount": {Type: "bytes", Name:
	// "org.apache.kafka.connect.data.Decimal", Parameters: {"scale": "2"}}}.
	SchemalessTypes map[string]map[string]*envelope.Schema
	// DecimalHandling: see the type.
	DecimalHandling DecimalHandling
	// UnavailablePlaceholder is the connector's unavailable.value.placeholder
	// (default __debezium_unavailable_value; "hex:..." gives raw bytes).
	UnavailablePlaceholder string
	// UnwrapPrefix is ExtractNewRecordState's add.fields.prefix (default
	// "__"). In flattened records, fields with this prefix are metadata
	// (__op, __lsn, __table, __deleted, __source_sequence, …), not columns.
	UnwrapPrefix string
	// TimestampNTZ maps timestamps without time zone (Timestamp,
	// MicroTimestamp, NanoTimestamp, connect Timestamp, IsoTimestamp) to Delta
	// TIMESTAMP_NTZ instead of TIMESTAMP (UTC). ZonedTimestamp is always
	// TIMESTAMP.
	TimestampNTZ bool
	// RejectInfinity sends ±infinity timestamps to quarantine (invalid_time)
	// instead of clamping them to 9999-12-31T23:59:59.999999Z /
	// 0001-01-01T00:00:00Z.
	RejectInfinity bool
	// VariableScalePrecision/Scale: the Delta decimal type of
	// io.debezium.data.VariableScaleDecimal (NUMERIC without precision);
	// default 38/18. Values that cannot be represented exactly are rejected
	// (invalid_decimal).
	VariableScalePrecision, VariableScaleScale int
	// VariableScaleAsString maps VariableScaleDecimal to String (exact
	// decimal literal) instead.
	VariableScaleAsString bool
	// KeepBefore fills Change.Before of updates from the envelope's before
	// image (schema'd envelopes only: JSON with schema and Avro), for rules
	// that read it. Off by default: it costs a conversion per update.
	KeepBefore bool
}

// Normalizer turns decoded events into Changes. It caches one compiled
// schema per envelope.Schema pointer and one inferred schema per schemaless
// table. It is safe for concurrent use.
type Normalizer struct {
	opts   Options
	toast  *toast
	prefix string

	cacheMu sync.RWMutex
	cache   map[cacheKey]*compiled

	mu       sync.Mutex
	inferred map[TableID]*inferTable
	// inferGen counts the changes of any inferred schema: the state that
	// makes normalizing depend on the events before (Unordered).
	inferGen atomic.Uint64
	// topicTables: topic → TableID last seen in a full envelope (string → TableID).
	topicTables sync.Map
}

type cacheKey struct {
	s    *envelope.Schema
	flat bool
}

// maxCached bounds the schema cache (a decoder that does not share schemas
// would otherwise grow it without bound).
const maxCached = 4096

// New returns a Normalizer.
func New(opts Options) (*Normalizer, error) {
	if opts.UnwrapPrefix == "" {
		opts.UnwrapPrefix = "__"
	}
	if opts.VariableScalePrecision == 0 {
		opts.VariableScalePrecision = MaxDecimalPrecision
	}
	if opts.VariableScaleScale == 0 {
		opts.VariableScaleScale = 18
	}
	if opts.VariableScalePrecision > MaxDecimalPrecision || opts.VariableScaleScale < 0 || opts.VariableScaleScale > opts.VariableScalePrecision {
		return nil, fmt.Errorf("normalize: VariableScaleDecimal type decimal(%d,%d) invalid", opts.VariableScalePrecision, opts.VariableScaleScale)
	}
	t, err := newToast(opts.UnavailablePlaceholder)
	if err != nil {
		return nil, err
	}
	return &Normalizer{
		opts:     opts,
		toast:    t,
		prefix:   opts.UnwrapPrefix,
		cache:    make(map[cacheKey]*compiled),
		inferred: make(map[TableID]*inferTable),
	}, nil
}

// compiled is the conversion of one row (struct) schema.
type compiled struct {
	schema *Schema
	convs  []conv
	names  []string // column names
	fidx   []int    // column i is Row.Values[fidx[i]] when the row is aligned
	meta   map[string]int
	err    *cerr
}

func (n *Normalizer) compiledFor(s *envelope.Schema, flat bool) *compiled {
	k := cacheKey{s, flat}
	n.cacheMu.RLock()
	cp := n.cache[k]
	n.cacheMu.RUnlock()
	if cp != nil {
		return cp
	}
	cp = n.compileRow(s, flat)
	n.cacheMu.Lock()
	if len(n.cache) >= maxCached {
		clear(n.cache)
	}
	if old := n.cache[k]; old != nil {
		cp = old
	} else {
		n.cache[k] = cp
	}
	n.cacheMu.Unlock()
	return cp
}

func (n *Normalizer) compileRow(s *envelope.Schema, flat bool) *compiled {
	cp := &compiled{}
	if s.Type != "struct" {
		cp.err = errf(quarantine.MalformedEvent, "row schema is %q, not struct", s.Type)
		return cp
	}
	cols := make([]ColumnDef, 0, len(s.Fields))
	for i, f := range s.Fields {
		if flat {
			if m, ok := strings.CutPrefix(f.Name, n.prefix); ok {
				if cp.meta == nil {
					cp.meta = make(map[string]int)
				}
				cp.meta[m] = i
				continue
			}
		}
		c, e := n.compile(f.Schema, "column "+strconv.Quote(f.Name))
		if e != nil {
			cp.err = e
			return cp
		}
		cp.convs = append(cp.convs, c)
		cp.names = append(cp.names, f.Name)
		cp.fidx = append(cp.fidx, i)
		cols = append(cols, ColumnDef{Name: f.Name, Type: c.typ, Nullable: c.optional})
	}
	cp.schema = &Schema{Columns: cols, Fingerprint: fingerprint(cols)}
	return cp
}

// fingerprint hashes column names, types and nullability.
func fingerprint(cols []ColumnDef) uint64 {
	h := fnv.New64a()
	for _, c := range cols {
		h.Write([]byte(c.Name))
		h.Write([]byte{0})
		h.Write([]byte(c.Type.String()))
		if c.Nullable {
			h.Write([]byte{1})
		} else {
			h.Write([]byte{2})
		}
	}
	return h.Sum64()
}

// fill converts row r (of the compiled schema) into dst. toast enables
// placeholder detection (row images; never keys).
func (n *Normalizer) fill(cp *compiled, r *envelope.Row, dst []any, toast bool) *cerr {
	aligned := len(r.Values) == len(r.Names)
	for i := range cp.convs {
		fi := cp.fidx[i]
		var v any
		if aligned && fi < len(r.Names) && r.Names[fi] == cp.names[i] {
			v = r.Values[fi]
		} else {
			v, _ = r.Get(cp.names[i])
		}
		if v == nil {
			continue
		}
		if toast && n.toast.is(v) {
			dst[i] = Unavailable
			continue
		}
		x, e := n.convert(&cp.convs[i], v)
		if e != nil {
			return e.in("column " + strconv.Quote(cp.names[i]))
		}
		dst[i] = x
	}
	return nil
}

// meta reads unwrap metadata of a flattened row.
type flatMeta struct {
	op, table, db, schema, name, sequence, snapshot string
	deleted                                         bool
	lsn                                             int64
	hasLSN                                          bool
	tsMs, tsUs                                      int64
}

func (n *Normalizer) readMeta(cp *compiled, r *envelope.Row) flatMeta {
	var m flatMeta
	set := func(key string, v any) {
		switch key {
		case "op":
			m.op, _ = v.(string)
		case "table", "source_table":
			m.table, _ = v.(string)
		case "db", "source_db":
			m.db, _ = v.(string)
		case "schema", "source_schema":
			m.schema, _ = v.(string)
		case "name", "source_name":
			m.name, _ = v.(string)
		case "sequence", "source_sequence":
			m.sequence, _ = v.(string)
		case "snapshot", "source_snapshot":
			switch x := v.(type) {
			case string:
				m.snapshot = x
			case bool:
				if x {
					m.snapshot = "true"
				}
			}
		case "deleted":
			switch x := v.(type) {
			case string:
				m.deleted = x == "true"
			case bool:
				m.deleted = x
			}
		case "lsn", "source_lsn":
			if i, ok := toInt64(v); ok {
				m.lsn, m.hasLSN = i, true
			}
		case "source_ts_ms", "ts_ms":
			m.tsMs, _ = toInt64(v)
		case "source_ts_us", "ts_us":
			m.tsUs, _ = toInt64(v)
		}
	}
	if cp != nil {
		for k, i := range cp.meta {
			if i < len(r.Values) && r.Names[i] == n.prefix+k {
				set(k, r.Values[i])
			} else if v, ok := r.Get(n.prefix + k); ok {
				set(k, v)
			}
		}
		return m
	}
	for i, name := range r.Names {
		if k, ok := strings.CutPrefix(name, n.prefix); ok {
			set(k, r.Values[i])
		}
	}
	return m
}

// Normalize turns one decoded event into a Change. It returns nil, nil for
// heartbeats, transaction metadata and logical-decoding messages (the caller
// counts them as skipped). rec may be nil (then Coord is zero and the topic
// is unknown). Permanent failures are *quarantine.Error.
func (n *Normalizer) Normalize(ev *envelope.Event, rec *source.Record) (*Change, error) {
	return n.normalize(ev, rec, nil)
}

// Pending is an event normalized ahead of stream order (Unordered), for Ordered.
type Pending struct {
	c   *Change
	err error
	// ready: c and err are the event's (else, the zero Pending too, it is
	// normalized in stream order); order: it must be (it reads or writes
	// what earlier events write); gen: inferGen before it was read
	ready, order bool
	gen          uint64
	// remember: the change whose topic and table Normalize would have
	// recorded as the topic's (kept when err is not nil too)
	remember *Change
}

// Unordered normalizes ev the way Normalize would in its place in the
// stream, but may run ahead of that place, concurrently with the normalizing
// of the events before it: the decoding goroutines normalize a poll's
// records with it (normalizing was the runtime's one sequential step).
// Normalizing depends on the events before only through two pieces of
// state: the schemaless tables' inferred schemas, which Unordered reads but
// never changes (a row that would widen them is left for Ordered), and a
// topic's last table, which tombstones and flattened rows read (left for
// Ordered) and full envelopes write (deferred to Ordered).
func (n *Normalizer) Unordered(ev *envelope.Event, rec *source.Record) Pending {
	u := Pending{gen: n.inferGen.Load()}
	if ev == nil || ev.Kind == envelope.KindTombstone || ev.Flattened || (ev.Kind == envelope.KindChange && ev.Source.Table == "") {
		u.order = true
		return u
	}
	u.c, u.err = n.normalize(ev, rec, &u)
	u.ready = !u.order
	return u
}

// Ordered completes u, from Unordered(ev, rec), in stream order: called for
// each event in order (and Normalize for the others), it returns what
// Normalize would have. That is u's result when no inferred schema changed
// since u read them, else ev normalized again.
func (n *Normalizer) Ordered(u Pending, ev *envelope.Event, rec *source.Record) (*Change, error) {
	if !u.ready || n.inferGen.Load() != u.gen {
		return n.Normalize(ev, rec)
	}
	if c := u.remember; c != nil {
		n.rememberTopic(c.Coord.Topic, c.Table)
	}
	return u.c, u.err
}

// normalize is Normalize; with u (Unordered) it leaves the topic's table to
// u and stops with u.order set where Normalize would change an inferred
// schema.
func (n *Normalizer) normalize(ev *envelope.Event, rec *source.Record, u *Pending) (*Change, error) {
	if ev == nil {
		return nil, quarantine.Errorf(quarantine.MalformedEvent, "nil event")
	}
	switch ev.Kind {
	case envelope.KindHeartbeat, envelope.KindTxMetadata, envelope.KindMessage:
		return nil, nil
	case envelope.KindTombstone:
		return n.tombstone(ev, rec)
	case envelope.KindChange:
	default:
		return nil, quarantine.Errorf(quarantine.MalformedEvent, "unknown event kind %d", ev.Kind)
	}
	if ev.Op == 'm' {
		return nil, nil
	}
	c := &Change{}
	if rec != nil {
		c.Coord = Coord{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset}
	}
	src := &ev.Source
	tid := TableID{Server: src.Name, DB: src.DB, Schema: src.Schema, Table: src.Table}
	op := ev.Op
	deleted := ev.Deleted
	seq := src.Sequence
	snapshot := src.Snapshot
	lsn, hasLSN := src.LSN, src.HasLSN
	tsUs, tsMs := src.TsUs, src.TsMs

	var data *envelope.Row // the row image carrying the columns
	var cp *compiled
	if ev.Flattened {
		data = ev.After
		if data == nil {
			data = ev.Before
		}
		if data != nil {
			if data.Schema != nil {
				cp = n.compiledFor(data.Schema, true)
				if cp.err != nil {
					return nil, n.colErr(tid, c.Coord.Topic, cp.err)
				}
			}
			m := n.readMeta(cp, data)
			if op == 0 && m.op != "" {
				op = m.op[0]
				if len(m.op) != 1 {
					return nil, quarantine.Errorf(quarantine.UnknownOp, "%s: unknown op %q", n.tableName(tid, c.Coord.Topic), m.op)
				}
			}
			deleted = deleted || m.deleted
			if seq == "" {
				seq = m.sequence
			}
			if snapshot == "" {
				snapshot = m.snapshot
			}
			if !hasLSN && m.hasLSN {
				lsn, hasLSN = m.lsn, true
			}
			if tsUs == 0 && tsMs == 0 {
				tsUs, tsMs = m.tsUs, m.tsMs
			}
			tid = TableID{Server: firstNonEmpty(tid.Server, m.name), DB: firstNonEmpty(tid.DB, m.db),
				Schema: firstNonEmpty(tid.Schema, m.schema), Table: firstNonEmpty(tid.Table, m.table)}
		}
		// Parts the unwrap fields did not carry come from the topic name, so
		// that rows and bare tombstones of one topic name the same table.
		tt := n.tableFromTopic(c.Coord.Topic)
		tid = TableID{Server: firstNonEmpty(tid.Server, tt.Server), DB: firstNonEmpty(tid.DB, tt.DB),
			Schema: firstNonEmpty(tid.Schema, tt.Schema), Table: firstNonEmpty(tid.Table, tt.Table)}
	}
	if tid.Table == "" {
		tid = n.tableFromTopic(c.Coord.Topic)
	} else if c.Coord.Topic != "" && !ev.Flattened {
		if u != nil {
			u.remember = c // its Table is tid, below
		} else {
			n.rememberTopic(c.Coord.Topic, tid)
		}
	}
	c.Table = tid
	c.SourceOp = op
	c.TxID, c.HasTxID = src.TxID, src.HasTxID

	switch {
	case ev.Flattened && (deleted || op == 'd'):
		c.Op = OpDelete
		if op == 0 {
			c.SourceOp = 'd'
		}
	case ev.Flattened && op == 0:
		c.Op = OpUpsert
		if data == nil {
			return nil, quarantine.Errorf(quarantine.MissingAfter, "%s: flattened record without a row", n.tableName(tid, c.Coord.Topic))
		}
	case op == 'c' || op == 'u' || op == 'r':
		c.Op = OpUpsert
		if !ev.Flattened {
			data = ev.After
		}
		if data == nil {
			return nil, quarantine.Errorf(quarantine.MissingAfter, "%s: op %q without after", n.tableName(tid, c.Coord.Topic), string(op))
		}
	case op == 'd':
		c.Op = OpDelete
		data = ev.Before
	case op == 't':
		c.Op = OpTruncate
		data = nil
	case op == 0:
		return nil, quarantine.Errorf(quarantine.UnknownOp, "%s: event without op", n.tableName(tid, c.Coord.Topic))
	default:
		return nil, quarantine.Errorf(quarantine.UnknownOp, "%s: unknown op %q", n.tableName(tid, c.Coord.Topic), string(op))
	}

	// Position.
	pos := versioning.Position{Snapshot: snapshot}
	if seq != "" {
		p, err := versioning.ParseSequence(seq)
		if err != nil {
			return nil, quarantine.Errorf(quarantine.MalformedEvent, "%s: source.sequence %q is not [\"<lsn>\"|null, \"<lsn>\"|null]", n.tableName(tid, c.Coord.Topic), seq)
		}
		pos.HasCommit, pos.Commit, pos.HasLSN, pos.LSN = p.HasCommit, p.Commit, p.HasLSN, p.LSN
	}
	if !pos.HasLSN && hasLSN && lsn >= 0 {
		pos.HasLSN, pos.LSN = true, uint64(lsn)
	}
	c.Position = pos
	if tsUs != 0 {
		c.SourceTsMicros = tsUs
	} else if src.TsNs != 0 && tsMs == 0 {
		c.SourceTsMicros = src.TsNs / 1000
	} else {
		c.SourceTsMicros = tsMs * 1000
	}
	if c.Op == OpTruncate {
		return c, nil
	}

	// Row and key.
	var keyRow = ev.Key
	if keyRow != nil && len(keyRow.Names) == 0 {
		keyRow = nil
	}
	var kcp *compiled
	nkey := 0
	if keyRow != nil {
		nkey = len(keyRow.Names)
		if keyRow.Schema != nil {
			kcp = n.compiledFor(keyRow.Schema, false)
			if kcp.err != nil {
				return nil, n.colErr(tid, c.Coord.Topic, kcp.err.in("key"))
			}
			nkey = len(kcp.convs)
		}
	}
	tkey := inferKey(tid)
	if data != nil {
		if data.Schema != nil {
			if cp == nil {
				cp = n.compiledFor(data.Schema, ev.Flattened)
				if cp.err != nil {
					return nil, n.colErr(tid, c.Coord.Topic, cp.err)
				}
			}
			buf := make([]any, len(cp.convs)+nkey)
			c.Schema, c.Row, c.Key = cp.schema, buf[:len(cp.convs):len(cp.convs)], buf[len(cp.convs):]
			if e := n.fill(cp, data, c.Row, true); e != nil {
				return nil, n.colErr(tid, c.Coord.Topic, e)
			}
		} else {
			var skip func(string) bool
			if ev.Flattened {
				skip = func(s string) bool { return strings.HasPrefix(s, n.prefix) }
			}
			s, row, e := n.inferRow(tkey, tid, c.Coord.Topic, data, skip, u)
			if u != nil && u.order {
				return nil, nil
			}
			if e != nil {
				return nil, n.colErr(tid, c.Coord.Topic, e)
			}
			c.Schema, c.Row = s, row
		}
	}
	if err := n.key(c, keyRow, kcp, cp, tkey, nkey); err != nil {
		return nil, err
	}
	if n.opts.KeepBefore && c.Op == OpUpsert && !ev.Flattened && ev.Before != nil && ev.Before.Schema != nil {
		bcp := n.compiledFor(ev.Before.Schema, false)
		if bcp.err == nil {
			b := make([]any, len(bcp.convs))
			if e := n.fill(bcp, ev.Before, b, true); e == nil {
				c.Before, c.BeforeSchema = b, bcp.schema
			}
		}
	}
	if len(ev.OldKey) > 0 && c.Op == OpUpsert {
		ok, err := n.oldKey(c, ev.OldKey, kcp, cp, tkey)
		if err != nil {
			return nil, err
		}
		c.OldKey = ok
	}
	if len(ev.NewKey) > 0 && c.Op == OpDelete && !c.Tombstone {
		c.KeyMoved = true
	}
	return c, nil
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// key fills c.KeyNames / c.Key.
func (n *Normalizer) key(c *Change, keyRow *envelope.Row, kcp, cp *compiled, tkey TableID, nkey int) error {
	if keyRow == nil {
		cols := n.lookupKeyColumns(c.Table, c.Coord.Topic)
		if len(cols) == 0 {
			return quarantine.Errorf(quarantine.MissingKey, "%s: record key is null and no key columns are configured (Options.KeyColumns) — table without primary key?", n.tableName(c.Table, c.Coord.Topic))
		}
		if c.Row == nil {
			if c.Op == OpDelete {
				return quarantine.Errorf(quarantine.MissingBefore, "%s: delete with null key and no before image; cannot find key columns %v (set REPLICA IDENTITY FULL)", n.tableName(c.Table, c.Coord.Topic), cols)
			}
			return quarantine.Errorf(quarantine.MissingKey, "%s: null key and no row image", n.tableName(c.Table, c.Coord.Topic))
		}
		c.KeyNames = cols
		c.Key = make([]any, len(cols))
		for i, name := range cols {
			idx := c.Schema.Index(name)
			if idx < 0 {
				return quarantine.Errorf(quarantine.MissingKey, "%s: configured key column %q is not in the row", n.tableName(c.Table, c.Coord.Topic), name)
			}
			v := c.Row[idx]
			if IsUnavailable(v) {
				return quarantine.Errorf(quarantine.MissingKey, "%s: configured key column %q is an unavailable TOAST value", n.tableName(c.Table, c.Coord.Topic), name)
			}
			c.Key[i] = v
		}
		return nil
	}
	if cap(c.Key) < nkey {
		c.Key = make([]any, nkey)
	}
	c.Key = c.Key[:nkey]
	if kcp != nil {
		c.KeyNames = kcp.names
		if e := n.fill(kcp, keyRow, c.Key, false); e != nil {
			return n.colErr(c.Table, c.Coord.Topic, e.in("key"))
		}
		return nil
	}
	c.KeyNames = keyRow.Names
	for i, name := range keyRow.Names {
		v, e := n.schemalessKeyValue(name, keyRow.Values[i], cp, tkey)
		if e != nil {
			return n.colErr(c.Table, c.Coord.Topic, e.in("key column "+strconv.Quote(name)))
		}
		c.Key[i] = v
	}
	return nil
}

// schemalessKeyValue types a schemaless key value the way its column is
// typed: by the row's schema if the value has one, else by the table's
// inferred schema, else by inference of the value alone.
func (n *Normalizer) schemalessKeyValue(name string, v any, cp *compiled, tkey TableID) (any, *cerr) {
	if v == nil {
		return nil, nil
	}
	if cp != nil {
		for i, cn := range cp.names {
			if cn == name {
				return n.coerce(&cp.convs[i], v)
			}
		}
	}
	if cc, t, ok := n.inferredColumn(tkey, name); ok {
		if cc != nil {
			return n.coerce(cc, v)
		}
		if t.kind != 0 {
			return convertItype(t, v)
		}
	}
	t, ok := inferOf(v)
	if !ok {
		return nil, errf(reasonType, "schemaless key value of Go type %T", v)
	}
	return convertItype(t, v)
}

func (n *Normalizer) tombstone(ev *envelope.Event, rec *source.Record) (*Change, error) {
	c := &Change{Op: OpDelete, Tombstone: true}
	if rec != nil {
		c.Coord = Coord{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset}
	}
	c.Table = n.tableFromTopic(c.Coord.Topic)
	keyRow := ev.Key
	if keyRow == nil || len(keyRow.Names) == 0 {
		return nil, quarantine.Errorf(quarantine.MissingKey, "%s: tombstone (null value) with a null key: a delete that cannot be applied", n.tableName(c.Table, c.Coord.Topic))
	}
	var kcp *compiled
	nkey := len(keyRow.Names)
	if keyRow.Schema != nil {
		kcp = n.compiledFor(keyRow.Schema, false)
		if kcp.err != nil {
			return nil, n.colErr(c.Table, c.Coord.Topic, kcp.err.in("key"))
		}
		nkey = len(kcp.convs)
	}
	if err := n.key(c, keyRow, kcp, nil, inferKey(c.Table), nkey); err != nil {
		return nil, err
	}
	return c, nil
}

// tableFromTopic derives a TableID from a topic: the TableID last seen in a
// full envelope on that topic, else <prefix>.<schema>.<table> (a topic with
// fewer dots gives fewer parts; DB stays empty).
func (n *Normalizer) tableFromTopic(topic string) TableID {
	if t, ok := n.topicTables.Load(topic); ok {
		return t.(TableID)
	}
	parts := strings.Split(topic, ".")
	switch len(parts) {
	case 1:
		return TableID{Table: parts[0]}
	case 2:
		return TableID{Schema: parts[0], Table: parts[1]}
	}
	k := len(parts)
	return TableID{Server: strings.Join(parts[:k-2], "."), Schema: parts[k-2], Table: parts[k-1]}
}

func (n *Normalizer) rememberTopic(topic string, tid TableID) {
	if old, ok := n.topicTables.Load(topic); !ok || old.(TableID) != tid {
		n.topicTables.Store(topic, tid)
	}
}

// inferKey identifies a schemaless table for inference (DB is left out: tombstones
// only know the topic).
func inferKey(t TableID) TableID { return TableID{Server: t.Server, Schema: t.Schema, Table: t.Table} }

func (n *Normalizer) tableName(t TableID, topic string) string {
	if t.Table == "" {
		return "topic " + topic
	}
	if t.Schema == "" {
		return "table " + t.Table
	}
	return "table " + t.Schema + "." + t.Table
}

func (n *Normalizer) colErr(t TableID, topic string, e *cerr) error {
	return quarantine.Errorf(e.r, "%s: %s", n.tableName(t, topic), e.msg)
}

func lookupTable[V any](m map[string]V, t TableID, topic string) (V, bool) {
	var zero V
	if len(m) == 0 {
		return zero, false
	}
	if topic != "" {
		if v, ok := m[topic]; ok {
			return v, true
		}
	}
	if t.Schema != "" {
		if v, ok := m[t.Schema+"."+t.Table]; ok {
			return v, true
		}
	}
	if v, ok := m[t.Table]; ok {
		return v, true
	}
	return zero, false
}

func (n *Normalizer) lookupKeyColumns(t TableID, topic string) []string {
	v, _ := lookupTable(n.opts.KeyColumns, t, topic)
	return v
}

func (n *Normalizer) lookupSchemaless(t TableID, topic, column string) *envelope.Schema {
	m, ok := lookupTable(n.opts.SchemalessTypes, t, topic)
	if !ok {
		return nil
	}
	return m[column]
}
