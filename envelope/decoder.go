package envelope

import (
	"context"
	"encoding/base64"
	"strconv"
	"strings"

	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/cdcsink/cdc-sink/source"
)

// FlattenMode says how to recognise ExtractNewRecordState ("unwrap") output.
type FlattenMode uint8

const (
	// FlattenAuto: a value with op and source/before/after is an envelope; a
	// struct with UnwrapPrefix meta fields (__op, __deleted, …) or named like
	// a Debezium row (*.Value) is a flattened row; anything else is
	// malformed_event.
	FlattenAuto FlattenMode = iota
	// FlattenAlways: every data value is a flattened row (heartbeats and
	// transaction metadata are still recognised).
	FlattenAlways
	// FlattenNever: every data value must be a full envelope.
	FlattenNever
)

// Options configures a Decoder. The zero value is usable for JSON.
type Options struct {
	// Registry resolves Confluent schema ids for Avro records. nil makes every
	// Avro record fail with unknown_schema_id.
	Registry Registry
	// Flattened selects envelope vs ExtractNewRecordState detection.
	Flattened FlattenMode
	// UnwrapPrefix is the add.fields.prefix of the unwrap SMT (default "__").
	UnwrapPrefix string
	// MaxSchemaCache bounds the number of distinct JSON schemas and of Avro
	// schema ids kept compiled (default 1024 each).
	MaxSchemaCache int
	// MaxDepth bounds JSON nesting (default 64). Deeper input is malformed_json.
	MaxDepth int
}

// Decoder turns records into Events. It is safe for concurrent use; compiled
// schemas are cached and shared between the events decoded with them.
type Decoder struct {
	opts   Options
	prefix string
	jcache *jsonSchemaCache
	hints  *hints
	acache *avroCache
	names  *interner
	plain  [2]plainHint // schemaless record sizes: key, value
	// noEnvFast turns the envelope fast path off: the oracle of its tests.
	noEnvFast bool
}

// NewDecoder returns a Decoder for opts.
func NewDecoder(opts Options) *Decoder {
	if opts.UnwrapPrefix == "" {
		opts.UnwrapPrefix = "__"
	}
	if opts.MaxSchemaCache <= 0 {
		opts.MaxSchemaCache = 1024
	}
	if opts.MaxDepth <= 0 {
		opts.MaxDepth = 64
	}
	return &Decoder{
		opts:   opts,
		prefix: opts.UnwrapPrefix,
		jcache: newJSONSchemaCache(opts.MaxSchemaCache),
		hints:  newHints(4 * opts.MaxSchemaCache),
		acache: newAvroCache(opts.MaxSchemaCache, opts.Registry),
		names:  &interner{},
	}
}

// Header names of a primary-key change.
const (
	HeaderNewKey = "__debezium.newkey"
	HeaderOldKey = "__debezium.oldkey"
)

// Decode decodes one record. Errors are *quarantine.Error (permanent, with a
// reason: malformed_json, malformed_avro, unknown_schema_id, malformed_event,
// unknown_op, type_mismatch) or quarantine.Transient (schema registry
// unreachable; retry). The Event shares no memory with rec.
func (d *Decoder) Decode(ctx context.Context, rec *source.Record) (*Event, error) {
	ev := &Event{}
	if v, ok := rec.Header(HeaderNewKey); ok && v != nil {
		ev.NewKey = append([]byte(nil), v...)
	}
	if v, ok := rec.Header(HeaderOldKey); ok && v != nil {
		ev.OldKey = append([]byte(nil), v...)
	}
	if rec.Key != nil {
		k, err := d.decodeSide(ctx, rec.Topic, "key", rec.Key, nil)
		if err != nil {
			return nil, err
		}
		if k.row == nil {
			return nil, quarantine.Errorf(quarantine.MalformedEvent, "key: expected a struct key")
		}
		ev.Key = k.row
		ev.Format = k.format
	}
	if rec.Value == nil {
		ev.Kind = KindTombstone
		ev.Flattened = d.opts.Flattened == FlattenAlways
		return ev, nil
	}
	v, err := d.decodeSide(ctx, rec.Topic, "value", rec.Value, ev)
	if err != nil {
		return nil, err
	}
	ev.Format = v.format
	if v.row == nil {
		return nil, quarantine.Errorf(quarantine.MalformedEvent, "value: expected a struct, got %s", typeName(v.val))
	}
	if err := d.interpret(ev, v, rec.Topic); err != nil {
		return nil, err
	}
	return ev, nil
}

// side is one decoded key or value.
type side struct {
	row    *Row // top-level struct (nil if the value is not a struct)
	val    any  // the value when it is not a struct
	format Format
	flat   *flatPlan // for a schema'd struct: its flattened-row plan
}

// decodeSide decodes one side; ev, for the value, receives the envelope's
// source and transaction blocks when the JSON fast path takes them.
func (d *Decoder) decodeSide(ctx context.Context, topic, which string, b []byte, ev *Event) (side, error) {
	i := 0
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	if ev != nil && (d.noEnvFast || d.opts.Flattened == FlattenAlways || strings.HasPrefix(topic, "__debezium-heartbeat")) {
		ev = nil // the record may not be read as an envelope (interpret)
	}
	switch {
	case len(b) > 0 && b[0] == 0:
		if len(b) < 5 {
			return side{}, quarantine.Errorf(quarantine.MalformedAvro, "%s: %d bytes, too short for Confluent framing (magic byte + 4-byte schema id)", which, len(b))
		}
		return d.decodeAvro(ctx, which, b, ev)
	case i < len(b) && b[i] == '{':
		return d.decodeJSON(topic, which, b, ev)
	case len(b) == 0:
		return side{}, quarantine.Errorf(quarantine.MalformedJSON, "%s: empty", which)
	case i < len(b) && (b[i] == '[' || b[i] == '"' || b[i] == 'n' || b[i] == 't' || b[i] == 'f' || b[i] == '-' || (b[i] >= '0' && b[i] <= '9')):
		return side{}, quarantine.Errorf(quarantine.MalformedEvent, "%s: JSON that is not an object", which)
	}
	return side{}, quarantine.Errorf(quarantine.MalformedJSON, "%s: neither JSON (first byte %#02x) nor Confluent Avro framing (magic byte 0)", which, b[0])
}

func jsonErr(which string, e *decodeErr) error {
	p := e.pathString()
	if p != "" {
		return quarantine.Errorf(e.reason, "%s: offset %d: %s at %s", which, e.off, e.msg, p)
	}
	return quarantine.Errorf(e.reason, "%s: offset %d: %s", which, e.off, e.msg)
}

// decodeJSON decodes a JSON object, schema'd ({"schema":…,"payload":…}) or not.
func (d *Decoder) decodeJSON(topic, which string, b []byte, ev *Event) (side, error) {
	s := scanner{buf: b, maxDepth: d.opts.MaxDepth, intern: d.names, inKey: which == "key"}
	// ev: the record may be read as an envelope (interpret), so its source
	// and transaction blocks can go straight into it (envfast.go)
	s.env = ev
	s.getStacks()
	defer s.putStacks()
	empty, e := s.objStart()
	if e != nil {
		return side{}, jsonErr(which, e)
	}
	if !empty && !d.firstKeySchema(&s) {
		// Not JsonConverter's {"schema":…,"payload":…} order: decode the
		// object schemaless in one pass; only if it turns out to have both
		// keys after all, decode it again as schema'd.
		s.pos, s.arena = 0, nil
		hint := &d.plain[1]
		if s.inKey {
			hint = &d.plain[0]
		}
		hint.presize(&s.bx)
		s.envPlain = s.env != nil
		r, e := s.anyObject()
		if e != nil {
			return side{}, jsonErr(which, e)
		}
		hint.record(&s.bx)
		if s.peek() != 0 {
			return side{}, jsonErr(which, s.syntax("end of input"))
		}
		isPlain := !hasField(r, "schema") || !hasField(r, "payload")
		if s.envUsed && !(isPlain && d.plainEnvelope(r)) {
			// the blocks are needed as Row values after all (a flattened
			// row with such columns, or a schema'd record): decode again
			s.discardEnvelope()
			s.envPlain = false
			if isPlain {
				s.pos, s.depth, s.arena = 0, 0, nil
				if r, e = s.anyObject(); e != nil {
					return side{}, jsonErr(which, e)
				}
			}
		}
		s.envPlain = false
		if isPlain {
			return side{row: r, format: FormatJSONPlain}, nil
		}
		s.pos, s.depth, s.arena = 0, 0, nil
		s.objStart()
	}
	var (
		entry      *jsonEntry
		haveSchema bool
		schemaNull bool
		havePay    bool
		payPos     = -1 // payload seen before the schema: decode afterwards
		payVal     any
		payDone    bool
		scratch    [64]byte
	)
	for !empty {
		k, e := s.objKey(&scratch)
		if e != nil {
			return side{}, jsonErr(which, e)
		}
		switch string(k) {
		case "schema":
			c := s.peek()
			if c == '{' {
				isKey := which == "key"
				hint := d.hints.get(topic, isKey)
				if entry = d.jcache.lookupAt(b, s.pos, hint); entry != nil {
					s.pos += len(entry.raw)
				} else {
					st := s.pos
					if e := s.skip(); e != nil {
						return side{}, jsonErr(which, e.at("schema"))
					}
					raw := b[st:s.pos]
					if entry = d.jcache.lookupExact(raw); entry == nil {
						entry = d.jcache.add(raw, d.prefix)
					}
				}
				if entry != hint {
					d.hints.set(topic, isKey, entry)
				}
				haveSchema = true
			} else if c == 'n' && s.literal("null") {
				haveSchema, schemaNull = true, true
			} else if e := s.skip(); e != nil {
				return side{}, jsonErr(which, e.at("schema"))
			}
		case "payload":
			havePay = true
			switch {
			case haveSchema && entry != nil && entry.perr == nil:
				s.arena = nil
				s.bx.presize(entry.nvals, entry.nrows)
				v, e := s.typedVal(entry.node)
				if e != nil {
					return side{}, jsonErr(which, e.at("payload"))
				}
				payVal, payDone = v, true
			default:
				payPos = s.pos
				if e := s.skip(); e != nil {
					return side{}, jsonErr(which, e.at("payload"))
				}
			}
		default:
			if e := s.skip(); e != nil {
				return side{}, jsonErr(which, e.at(string(k)))
			}
		}
		more, e := s.objNext()
		if e != nil {
			return side{}, jsonErr(which, e)
		}
		if !more {
			break
		}
	}
	if s.peek() != 0 {
		return side{}, jsonErr(which, s.syntax("end of input"))
	}
	if !(haveSchema && havePay) {
		// schemaless: the whole object is the payload
		s.pos, s.arena = 0, nil
		r, e := s.anyObject()
		if e != nil {
			return side{}, jsonErr(which, e)
		}
		return side{row: r, format: FormatJSONPlain}, nil
	}
	if entry != nil && entry.perr != nil {
		return side{}, quarantine.Wrap(quarantine.MalformedEvent, entry.perr, "%s: invalid Connect schema", which)
	}
	if !payDone {
		s.pos, s.depth = payPos, 0
		s.arena = nil
		var v any
		var e *decodeErr
		if schemaNull {
			v, e = s.anyVal()
		} else {
			s.bx.presize(entry.nvals, entry.nrows)
			v, e = s.typedVal(entry.node)
		}
		if e != nil {
			return side{}, jsonErr(which, e.at("payload"))
		}
		payVal = v
	}
	out := side{format: FormatJSONSchema, val: payVal}
	if r, ok := payVal.(*Row); ok {
		out.row = r
		if entry != nil {
			out.flat = entry.flat
		}
	}
	return out, nil
}

// plainEnvelope reports whether interpret reads the schemaless top-level
// Row r as an envelope, so its source and transaction blocks may stay out of
// it (the fast path). It is interpret's rule: op, and FlattenNever or one of
// source/after/before (FlattenAlways disables the fast path up front).
func (d *Decoder) plainEnvelope(r *Row) bool {
	if !hasField(r, "op") {
		return false // a heartbeat, transaction metadata or a flattened row
	}
	return d.opts.Flattened == FlattenNever || hasField(r, "source") || hasField(r, "after") || hasField(r, "before")
}

// discardEnvelope undoes what the fast path put into the event.
func (s *scanner) discardEnvelope() {
	s.env.Source, s.env.Tx = Source{}, nil
	s.envUsed, s.envSeen = false, 0
}

// firstKeySchema reports whether the first member name is "schema" (the
// scanner is left unchanged).
func (d *Decoder) firstKeySchema(s *scanner) bool {
	p := s.pos
	s.ws()
	ok := s.literal(`"schema"`)
	s.pos = p
	return ok
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case int64, float64, Number:
		return "number"
	case string:
		return "string"
	case []byte:
		return "bytes"
	case []any:
		return "array"
	case map[string]any:
		return "map"
	case *Row:
		return "struct"
	}
	return "unknown"
}

// ---- interpretation of the decoded value ----

func schemaName(r *Row) string {
	if r.Schema != nil {
		return r.Schema.Name
	}
	return ""
}

func (d *Decoder) interpret(ev *Event, v side, topic string) error {
	r := v.row
	name := schemaName(r)
	switch {
	case name == NameHeartbeat || strings.HasPrefix(topic, "__debezium-heartbeat") ||
		(r.Schema == nil && len(r.Names) == 1 && r.Names[0] == "ts_ms" && ev.Key != nil && hasField(ev.Key, "serverName")):
		ev.Kind = KindHeartbeat
		if x, ok := r.Get("ts_ms"); ok {
			ev.TsMs, _ = asInt(x)
		}
		return nil
	case name == NameTxValue || strings.HasSuffix(name, ".TransactionMetadataValue") || (name == "" && isTxMeta(r)):
		return interpretTx(ev, r)
	}
	mode := d.opts.Flattened
	if mode == FlattenAuto {
		_, hasOp := r.Get("op")
		switch {
		case hasOp && (hasField(r, "source") || hasField(r, "after") || hasField(r, "before")):
			mode = FlattenNever
		case d.hasMeta(r):
			mode = FlattenAlways
		case strings.HasSuffix(name, ".Value") || name == "Value":
			mode = FlattenAlways
		case hasOp:
			mode = FlattenNever
		default:
			return quarantine.Errorf(quarantine.MalformedEvent,
				"value: not a Debezium envelope (no op/source) nor a flattened row (no %s fields); set Flattened=always for unwrapped rows without added fields", d.prefix)
		}
	}
	if mode == FlattenAlways {
		return d.interpretFlat(ev, r, v.flat)
	}
	return interpretEnvelope(ev, r)
}

func hasField(r *Row, name string) bool {
	_, ok := r.Get(name)
	return ok
}

func isTxMeta(r *Row) bool {
	if hasField(r, "op") || !hasField(r, "id") {
		return false
	}
	st, _ := r.Get("status")
	s, _ := st.(string)
	return s == "BEGIN" || s == "END"
}

func (d *Decoder) hasMeta(r *Row) bool {
	for _, n := range r.Names {
		if _, ok := isMetaName(n, d.prefix); ok {
			return true
		}
	}
	return false
}

func validOp(s string) (byte, bool) {
	if len(s) == 1 && strings.IndexByte("cudrtm", s[0]) >= 0 {
		return s[0], true
	}
	return 0, false
}

func interpretEnvelope(ev *Event, r *Row) error {
	ev.Kind = KindChange
	for i, n := range r.Names {
		v := r.Values[i]
		switch n {
		case "op":
			s, ok := v.(string)
			if !ok {
				if v == nil {
					return quarantine.Errorf(quarantine.MalformedEvent, "value: op is null at payload.op")
				}
				return quarantine.Errorf(quarantine.MalformedEvent, "value: expected string at payload.op, got %s", typeName(v))
			}
			op, ok := validOp(s)
			if !ok {
				return quarantine.Errorf(quarantine.UnknownOp, "value: unknown op %q at payload.op", s)
			}
			ev.Op = op
		case "before", "after":
			if v == nil {
				continue
			}
			row, ok := v.(*Row)
			if !ok {
				return quarantine.Errorf(quarantine.MalformedEvent, "value: expected object at payload.%s, got %s", n, typeName(v))
			}
			if n == "before" {
				ev.Before = row
			} else {
				ev.After = row
			}
		case "source":
			if v == nil {
				continue
			}
			row, ok := v.(*Row)
			if !ok {
				return quarantine.Errorf(quarantine.MalformedEvent, "value: expected object at payload.source, got %s", typeName(v))
			}
			if err := fillSource(&ev.Source, row); err != nil {
				return err
			}
		case "ts_ms":
			if v != nil {
				t, ok := asInt(v)
				if !ok {
					return quarantine.Errorf(quarantine.MalformedEvent, "value: expected integer at payload.ts_ms, got %s", typeName(v))
				}
				ev.TsMs = t
			}
		case "transaction":
			if v == nil {
				continue
			}
			row, ok := v.(*Row)
			if !ok {
				return quarantine.Errorf(quarantine.MalformedEvent, "value: expected object at payload.transaction, got %s", typeName(v))
			}
			tx := &TxInfo{}
			for j, tn := range row.Names {
				switch tn {
				case "id":
					tx.ID, _ = asString(row.Values[j])
				case "total_order":
					tx.TotalOrder, _ = asInt(row.Values[j])
				case "data_collection_order":
					tx.DataCollectionOrder, _ = asInt(row.Values[j])
				}
			}
			ev.Tx = tx
		case "message":
			if v == nil {
				continue
			}
			row, ok := v.(*Row)
			if !ok {
				return quarantine.Errorf(quarantine.MalformedEvent, "value: expected object at payload.message, got %s", typeName(v))
			}
			m := &Message{}
			for j, mn := range row.Names {
				switch mn {
				case "prefix":
					m.Prefix, _ = asString(row.Values[j])
				case "content":
					switch c := row.Values[j].(type) {
					case []byte:
						m.Content = c
					case string: // schemaless: base64 text
						if b, err := base64.StdEncoding.DecodeString(c); err == nil {
							m.Content = b
						} else {
							m.Content = []byte(c)
						}
					}
				}
			}
			ev.Message = m
		}
	}
	if ev.Op == 0 {
		return quarantine.Errorf(quarantine.MalformedEvent, "value: missing op at payload.op")
	}
	if ev.Op == 'm' {
		ev.Kind = KindMessage
	}
	return nil
}

func fillSource(src *Source, r *Row) error {
	for i, n := range r.Names {
		v := r.Values[i]
		if v == nil {
			continue
		}
		var ok = true
		switch n {
		case "version":
			src.Version, ok = asString(v)
		case "connector":
			src.Connector, ok = asString(v)
		case "name":
			src.Name, ok = asString(v)
		case "db":
			src.DB, ok = asString(v)
		case "schema":
			src.Schema, ok = asString(v)
		case "table":
			src.Table, ok = asString(v)
		case "snapshot":
			src.Snapshot, ok = asString(v)
		case "sequence":
			src.Sequence, ok = asString(v)
		case "ts_ms":
			src.TsMs, ok = asInt(v)
		case "ts_us":
			src.TsUs, ok = asInt(v)
		case "ts_ns":
			src.TsNs, ok = asInt(v)
		case "lsn":
			src.LSN, ok = asInt(v)
			src.HasLSN = ok
		case "txId":
			src.TxID, ok = asInt(v)
			src.HasTxID = ok
		}
		if !ok {
			return quarantine.Errorf(quarantine.MalformedEvent, "value: unexpected %s at payload.source.%s", typeName(v), n)
		}
	}
	return nil
}

func interpretTx(ev *Event, r *Row) error {
	ev.Kind = KindTxMetadata
	m := &TxMetadata{}
	for i, n := range r.Names {
		v := r.Values[i]
		switch n {
		case "status":
			m.Status, _ = asString(v)
		case "id":
			m.ID, _ = asString(v)
		case "event_count":
			m.EventCount, _ = asInt(v)
		case "ts_ms":
			m.TsMs, _ = asInt(v)
		case "data_collections":
			list, _ := v.([]any)
			for _, x := range list {
				dc, ok := x.(*Row)
				if !ok {
					continue
				}
				var e TxDataCollection
				if y, ok := dc.Get("data_collection"); ok {
					e.DataCollection, _ = asString(y)
				}
				if y, ok := dc.Get("event_count"); ok {
					e.EventCount, _ = asInt(y)
				}
				m.DataCollections = append(m.DataCollections, e)
			}
		}
	}
	ev.TxMeta = m
	ev.TsMs = m.TsMs
	return nil
}

// interpretFlat handles an ExtractNewRecordState row: meta fields go to the
// Event and are removed from After.
func (d *Decoder) interpretFlat(ev *Event, r *Row, plan *flatPlan) error {
	ev.Kind = KindChange
	ev.Flattened = true
	after := &Row{Schema: r.Schema}
	if plan != nil && r.Schema != nil && plan.schema != nil && len(plan.keep)+len(plan.meta) == len(r.Values) {
		if len(plan.meta) == 0 {
			after = r
		} else {
			after.Schema, after.Names = plan.schema, plan.names
			after.Values = make([]any, len(plan.keep))
			for j, i := range plan.keep {
				after.Values[j] = r.Values[i]
			}
			for j, i := range plan.meta {
				if err := d.setMeta(ev, plan.what[j], r.Names[i], r.Values[i]); err != nil {
					return err
				}
			}
		}
	} else {
		var schema *Schema
		if r.Schema != nil {
			c := *r.Schema
			c.Fields = nil
			schema = &c
		}
		// schemaless rows of one table repeat the same names: the kept
		// names are collected on the stack and shared through the interner
		var nbuf [64]string
		names := nbuf[:0]
		after.Values = make([]any, 0, len(r.Names))
		for i, n := range r.Names {
			if m, ok := isMetaName(n, d.prefix); ok {
				if err := d.setMeta(ev, m, n, r.Values[i]); err != nil {
					return err
				}
				continue
			}
			names = append(names, n)
			after.Values = append(after.Values, r.Values[i])
			if schema != nil && i < len(r.Schema.Fields) {
				schema.Fields = append(schema.Fields, r.Schema.Fields[i])
			}
		}
		if len(names) > 0 {
			after.Names = d.names.shape(names)
		}
		if len(after.Values) == 0 {
			after.Values = nil
		}
		if schema != nil {
			after.Schema = schema
		}
	}
	ev.After = after
	if ev.Op == 'd' {
		ev.Deleted = true
	}
	return nil
}

func (d *Decoder) setMeta(ev *Event, m metaField, name string, v any) error {
	if v == nil {
		return nil
	}
	bad := func() error {
		return quarantine.Errorf(quarantine.MalformedEvent, "value: unexpected %s at payload.%s", typeName(v), name)
	}
	var ok = true
	src := &ev.Source
	switch m {
	case mOp:
		s, isStr := v.(string)
		if !isStr {
			return bad()
		}
		op, valid := validOp(s)
		if !valid {
			return quarantine.Errorf(quarantine.UnknownOp, "value: unknown op %q at payload.%s", s, name)
		}
		ev.Op = op
	case mDeleted:
		switch x := v.(type) {
		case bool:
			ev.Deleted = ev.Deleted || x
		case string:
			switch x {
			case "true":
				ev.Deleted = true
			case "false":
			default:
				return bad()
			}
		default:
			return bad()
		}
	case mLSN:
		src.LSN, ok = asInt(v)
		src.HasLSN = ok
	case mSrcTsMs:
		src.TsMs, ok = asInt(v)
	case mSrcTsUs:
		src.TsUs, ok = asInt(v)
	case mSrcTsNs:
		src.TsNs, ok = asInt(v)
	case mTable:
		src.Table, ok = asString(v)
	case mDB:
		src.DB, ok = asString(v)
	case mSchema:
		src.Schema, ok = asString(v)
	case mSnapshot:
		src.Snapshot, ok = asString(v)
	case mSequence:
		src.Sequence, ok = asString(v)
	case mTxID:
		src.TxID, ok = asInt(v)
		src.HasTxID = ok
	case mVersion:
		src.Version, ok = asString(v)
	case mConnector:
		src.Connector, ok = asString(v)
	case mName:
		src.Name, ok = asString(v)
	case mTsMs:
		ev.TsMs, ok = asInt(v)
	case mTsUs, mTsNs:
		_, ok = asInt(v)
	case mTxIDStr, mTotalOrder, mDCOrder:
		if ev.Tx == nil {
			ev.Tx = &TxInfo{}
		}
		switch m {
		case mTxIDStr:
			ev.Tx.ID, ok = asString(v)
		case mTotalOrder:
			ev.Tx.TotalOrder, ok = asInt(v)
		default:
			ev.Tx.DataCollectionOrder, ok = asInt(v)
		}
	}
	if !ok {
		return bad()
	}
	return nil
}

// asInt converts an integer-valued field of any form to int64.
func asInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case Number:
		n, err := strconv.ParseInt(string(x), 10, 64)
		return n, err == nil
	case float64:
		if x == float64(int64(x)) {
			return int64(x), true
		}
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		return n, err == nil
	}
	return 0, false
}

// asString converts a string-valued field (or a legacy boolean snapshot flag).
func asString(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case bool:
		return strconv.FormatBool(x), true
	case Number:
		return string(x), true
	}
	return "", false
}
