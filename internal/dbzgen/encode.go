package dbzgen

import (
	"strconv"
	"strings"
	"time"

	"github.com/cdcsink/cdc-sink/source"
)

// Version is the Debezium version the records claim (source.version).
const Version = "3.6.1.Final"

// Unavailable is Debezium's default unavailable.value.placeholder.
const Unavailable = "__debezium_unavailable_value"

// encoder holds the constant parts of every record of a stream.
type encoder struct {
	f           Format
	keyPrefix   []byte // up to and including `"id":`
	keySuffix   []byte
	valPrefix   []byte // schema'd: `{"schema":…,"payload":`; plain: nothing
	valSuffix   []byte
	srcPrefix   []byte // `{"version":…,"ts_ms":`
	srcDB       []byte // `,"db":"…"`
	srcTable    []byte // `,"schema":"…","table":"…","txId":`
	deleteImage [2][]byte
	headers     []source.Header
	lsnOnly     bool
	arena       []byte
}

const arenaChunk = 1 << 20

// buf returns an empty slice at the end of the arena with room for est
// bytes; done claims what was appended to it. Records share arena chunks but
// each gets capacity = length, so an append by a user never touches a
// neighbour.
func (e *encoder) buf(est int) []byte {
	if cap(e.arena)-len(e.arena) < est {
		e.arena = make([]byte, 0, max(arenaChunk, est))
	}
	return e.arena[len(e.arena):len(e.arena)]
}

func (e *encoder) done(b []byte) []byte {
	n := len(e.arena)
	if len(b) > 0 && len(b) <= cap(e.arena)-n && &b[0] == &e.arena[n : n+1][0] {
		e.arena = e.arena[:n+len(b)]
	}
	return b[:len(b):len(b)]
}

func rowFieldsSchema() string {
	return `{"type":"int64","optional":false,"field":"id"},` +
		`{"type":"int32","optional":true,"field":"customer_id"},` +
		`{"type":"string","optional":false,"name":"io.debezium.data.Enum","version":1,"parameters":{"allowed":"` + strings.Join(Statuses, ",") + `"},"default":"CRIADO","field":"status"},` +
		`{"type":"bytes","optional":false,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"2","connect.decimal.precision":"12"},"field":"amount"},` +
		`{"type":"string","optional":false,"name":"io.debezium.time.ZonedTimestamp","version":1,"default":"1970-01-01T00:00:00.000000Z","field":"created_at"},` +
		`{"type":"int64","optional":true,"name":"io.debezium.time.MicroTimestamp","version":1,"field":"updated_at"},` +
		`{"type":"int32","optional":true,"name":"io.debezium.time.Date","version":1,"field":"ship_date"},` +
		`{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"field":"payload"},` +
		`{"type":"array","items":{"type":"string","optional":true},"optional":true,"field":"tags"},` +
		`{"type":"string","optional":true,"field":"note"},` +
		`{"type":"string","optional":false,"name":"io.debezium.data.Uuid","version":1,"field":"uuid"},` +
		`{"type":"boolean","optional":false,"default":false,"field":"paid"},` +
		`{"type":"string","optional":true,"field":"filler"}`
}

const sourceSchema = `{"type":"struct","fields":[{"type":"string","optional":false,"field":"version"},{"type":"string","optional":false,"field":"connector"},{"type":"string","optional":false,"field":"name"},{"type":"int64","optional":false,"field":"ts_ms"},{"type":"string","optional":true,"name":"io.debezium.data.Enum","version":1,"parameters":{"allowed":"true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"},"default":"false","field":"snapshot"},{"type":"string","optional":false,"field":"db"},{"type":"string","optional":true,"field":"sequence"},{"type":"int64","optional":true,"field":"ts_us"},{"type":"int64","optional":true,"field":"ts_ns"},{"type":"string","optional":false,"field":"schema"},{"type":"string","optional":false,"field":"table"},{"type":"int64","optional":true,"field":"txId"},{"type":"int64","optional":true,"field":"lsn"},{"type":"int64","optional":true,"field":"xmin"},{"type":"string","optional":true,"field":"origin"},{"type":"int64","optional":true,"field":"origin_lsn"}],"optional":false,"name":"io.debezium.connector.postgresql.Source","version":1,"field":"source"}`

const txSchema = `{"type":"struct","fields":[{"type":"string","optional":false,"field":"id"},{"type":"int64","optional":false,"field":"total_order"},{"type":"int64","optional":false,"field":"data_collection_order"}],"optional":true,"name":"event.block","version":1,"field":"transaction"}`

// EnvelopeSchema returns the JSON of the value schema of cfg's records
// (the Envelope, or the flattened Value for the Unwrap formats).
func EnvelopeSchema(cfg Config) string {
	cfg = withDefaults(cfg)
	base := cfg.Prefix + "." + cfg.Schema + "." + cfg.Table
	if cfg.Format.unwrap() {
		meta := `,{"type":"string","optional":true,"field":"__op"},{"type":"int64","optional":true,"field":"__lsn"},{"type":"int64","optional":true,"field":"__source_ts_ms"}`
		if !cfg.UnwrapLSNOnly {
			meta += `,{"type":"string","optional":true,"field":"__source_sequence"},{"type":"string","optional":true,"name":"io.debezium.data.Enum","version":1,"parameters":{"allowed":"true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"},"default":"false","field":"__snapshot"}`
		}
		meta += `,{"type":"string","optional":true,"field":"__deleted"}`
		return `{"type":"struct","fields":[` + rowFieldsSchema() + meta + `],"optional":false,"name":"` + base + `.Value"}`
	}
	row := `{"type":"struct","fields":[` + rowFieldsSchema() + `],"optional":true,"name":"` + base + `.Value","field":`
	return `{"type":"struct","fields":[` +
		row + `"before"},` + row + `"after"},` + sourceSchema + `,` + txSchema + `,` +
		`{"type":"string","optional":false,"field":"op"},{"type":"int64","optional":true,"field":"ts_ms"},{"type":"int64","optional":true,"field":"ts_us"},{"type":"int64","optional":true,"field":"ts_ns"}` +
		`],"optional":false,"name":"` + base + `.Envelope","version":2}`
}

// KeySchema returns the JSON of the key schema of cfg's records.
func KeySchema(cfg Config) string {
	cfg = withDefaults(cfg)
	return `{"type":"struct","fields":[{"type":"int64","optional":false,"field":"id"}],"optional":false,"name":"` +
		cfg.Prefix + "." + cfg.Schema + "." + cfg.Table + `.Key"}`
}

func newEncoder(cfg Config, runID string) *encoder {
	e := &encoder{f: cfg.Format, lsnOnly: cfg.UnwrapLSNOnly}
	if cfg.Format.schemas() {
		e.keyPrefix = []byte(`{"schema":` + KeySchema(cfg) + `,"payload":{"id":`)
		e.keySuffix = []byte(`}}`)
		e.valPrefix = []byte(`{"schema":` + EnvelopeSchema(cfg) + `,"payload":`)
		e.valSuffix = []byte(`}`)
	} else {
		e.keyPrefix = []byte(`{"id":`)
		e.keySuffix = []byte(`}`)
	}
	e.srcPrefix = []byte(`{"version":"` + Version + `","connector":"postgresql","name":` + string(appendString(nil, cfg.Prefix)) + `,"ts_ms":`)
	e.srcDB = []byte(`,"db":` + string(appendString(nil, cfg.DB)))
	e.srcTable = []byte(`,"schema":` + string(appendString(nil, cfg.Schema)) + `,"table":` + string(appendString(nil, cfg.Table)) + `,"txId":`)
	// The before image of a delete under REPLICA IDENTITY DEFAULT: the key,
	// then NULL for nullable columns and the schema default / type fallback
	// for NOT NULL ones.
	e.deleteImage[0] = []byte(`{"id":`)
	e.deleteImage[1] = []byte(`,"customer_id":null,"status":"CRIADO","amount":"AA==","created_at":"1970-01-01T00:00:00.000000Z","updated_at":null,"ship_date":null,"payload":null,"tags":null,"note":null,"uuid":"","paid":false,"filler":null`)
	e.headers = []source.Header{
		{Key: "__debezium.context.connectorLogicalName", Value: []byte(cfg.Prefix)},
		{Key: "__debezium.context.taskId", Value: []byte("0")},
		{Key: "__debezium.context.connectorName", Value: []byte("postgresql")},
		{Key: "__debezium.context.runId", Value: []byte(runID)},
	}
	return e
}

func (e *encoder) key(id int64) []byte {
	b := append(e.buf(len(e.keyPrefix)+len(e.keySuffix)+20), e.keyPrefix...)
	b = strconv.AppendInt(b, id, 10)
	return e.done(append(b, e.keySuffix...))
}

func (e *encoder) recordHeaders(ev *event) []source.Header {
	if ev.newKey == 0 && ev.oldKey == 0 {
		return e.headers
	}
	h := make([]source.Header, 0, len(e.headers)+1)
	if ev.newKey != 0 {
		h = append(h, source.Header{Key: "__debezium.newkey", Value: append(strconv.AppendInt([]byte(`{"id":`), ev.newKey, 10), '}')})
	}
	if ev.oldKey != 0 {
		h = append(h, source.Header{Key: "__debezium.oldkey", Value: append(strconv.AppendInt([]byte(`{"id":`), ev.oldKey, 10), '}')})
	}
	return append(h, e.headers...)
}

// appendRow appends the row struct JSON (without the closing brace when open
// is set, so the Unwrap form can add its fields).
func (e *encoder) appendRow(b []byte, r *rowState, toast, open bool) []byte {
	b = append(b, `{"id":`...)
	b = strconv.AppendInt(b, r.id, 10)
	b = append(b, `,"customer_id":`...)
	if r.customerNil {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, int64(r.customerID), 10)
	}
	b = append(b, `,"status":"`...)
	b = append(b, Statuses[r.status]...)
	b = append(b, `","amount":`...)
	b = appendDecimal(b, r.amount)
	b = append(b, `,"created_at":`...)
	b = appendZoned(b, r.createdAt)
	b = append(b, `,"updated_at":`...)
	if r.updatedNil {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, r.updatedAt, 10)
	}
	b = append(b, `,"ship_date":`...)
	if r.shipNil {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, int64(r.shipDate), 10)
	}
	b = append(b, `,"payload":`...)
	if r.payloadNil {
		b = append(b, "null"...)
	} else {
		b = appendString(b, r.payload)
	}
	b = append(b, `,"tags":`...)
	if r.tagsNil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, t := range r.tags {
			if i > 0 {
				b = append(b, ',')
			}
			if t == tagNull {
				b = append(b, "null"...)
			} else {
				b = appendString(b, t)
			}
		}
		b = append(b, ']')
	}
	b = append(b, `,"note":`...)
	switch {
	case toast:
		b = append(b, `"`+Unavailable+`"`...)
	case r.noteNil:
		b = append(b, "null"...)
	default:
		b = appendString(b, r.note)
	}
	b = append(b, `,"uuid":"`...)
	b = append(b, r.uuid...)
	b = append(b, `","paid":`...)
	b = strconv.AppendBool(b, r.paid)
	b = append(b, `,"filler":`...)
	if r.fillerNil {
		b = append(b, "null"...)
	} else {
		b = appendString(b, r.filler)
	}
	if !open {
		b = append(b, '}')
	}
	return b
}

func (e *encoder) appendDeleteImage(b []byte, id int64, open bool) []byte {
	b = append(b, e.deleteImage[0]...)
	b = strconv.AppendInt(b, id, 10)
	b = append(b, e.deleteImage[1]...)
	if !open {
		b = append(b, '}')
	}
	return b
}

func appendSequence(b []byte, ev *event) []byte {
	b = append(b, `"[`...)
	if ev.hasCommit {
		b = append(b, `\"`...)
		b = strconv.AppendUint(b, ev.commit, 10)
		b = append(b, `\"`...)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,\"`...)
	b = strconv.AppendUint(b, ev.lsn, 10)
	return append(b, `\"]"`...)
}

func (e *encoder) appendSource(b []byte, ev *event) []byte {
	ms := ev.tsUs / 1000
	if ev.tsUs < 0 && ev.tsUs%1000 != 0 {
		ms--
	}
	b = append(b, e.srcPrefix...)
	b = strconv.AppendInt(b, ms, 10)
	b = append(b, `,"snapshot":"`...)
	if ev.snap == "" {
		b = append(b, "false"...)
	} else {
		b = append(b, ev.snap...)
	}
	b = append(b, '"')
	b = append(b, e.srcDB...)
	b = append(b, `,"sequence":`...)
	b = appendSequence(b, ev)
	b = append(b, `,"ts_us":`...)
	b = strconv.AppendInt(b, ev.tsUs, 10)
	b = append(b, `,"ts_ns":`...)
	b = strconv.AppendInt(b, ev.tsUs*1000, 10)
	b = append(b, e.srcTable...)
	b = strconv.AppendInt(b, ev.xid, 10)
	b = append(b, `,"lsn":`...)
	b = strconv.AppendUint(b, ev.lsn, 10)
	return append(b, `,"xmin":null,"origin":null,"origin_lsn":null}`...)
}

// value encodes the value of ev; op overrides the op letter (malformed
// records), noAfter drops the after image.
func (e *encoder) value(ev *event, op string, noAfter bool, garbageDecimal bool) []byte {
	est := len(e.valPrefix) + 1500
	if ev.row != nil {
		est += len(ev.row.note) + len(ev.row.filler) + 2*len(ev.row.payload)
	}
	b := append(e.buf(est), e.valPrefix...)
	if e.f.unwrap() {
		b = e.unwrapPayload(b, ev, op)
	} else {
		b = e.envelopePayload(b, ev, op, noAfter)
	}
	b = append(b, e.valSuffix...)
	if garbageDecimal {
		s := string(b)
		i := strings.Index(s, `"amount":"`)
		if i >= 0 {
			j := strings.IndexByte(s[i+10:], '"')
			return []byte(s[:i+10] + "!!não-é-base64%%" + s[i+10+j:])
		}
	}
	return e.done(b)
}

func (e *encoder) envelopePayload(b []byte, ev *event, op string, noAfter bool) []byte {
	b = append(b, `{"before":`...)
	if ev.op == 'd' {
		if ev.row != nil {
			b = e.appendRow(b, ev.row, false, false)
		} else {
			b = e.appendDeleteImage(b, ev.id, false)
		}
		b = append(b, `,"after":null`...)
	} else {
		b = append(b, `null,"after":`...)
		if noAfter {
			b = append(b, "null"...)
		} else {
			b = e.appendRow(b, ev.row, ev.toast, false)
		}
	}
	b = append(b, `,"source":`...)
	b = e.appendSource(b, ev)
	b = append(b, `,"transaction":`...)
	if ev.totalOrder == 0 {
		b = append(b, "null"...)
	} else {
		b = append(b, `{"id":"`...)
		b = strconv.AppendInt(b, ev.xid, 10)
		b = append(b, ':')
		b = strconv.AppendUint(b, ev.lsn, 10)
		b = append(b, `","total_order":`...)
		b = strconv.AppendInt(b, ev.totalOrder, 10)
		b = append(b, `,"data_collection_order":`...)
		b = strconv.AppendInt(b, ev.totalOrder, 10)
		b = append(b, '}')
	}
	b = append(b, `,"op":"`...)
	if op != "" {
		b = append(b, op...)
	} else {
		b = append(b, ev.op)
	}
	b = append(b, `","ts_ms":`...)
	b = strconv.AppendInt(b, ev.procNs/1_000_000, 10)
	b = append(b, `,"ts_us":`...)
	b = strconv.AppendInt(b, ev.procNs/1000, 10)
	b = append(b, `,"ts_ns":`...)
	b = strconv.AppendInt(b, ev.procNs, 10)
	return append(b, '}')
}

func (e *encoder) unwrapPayload(b []byte, ev *event, op string) []byte {
	if ev.op == 'd' {
		if ev.row != nil {
			b = e.appendRow(b, ev.row, false, true)
		} else {
			b = e.appendDeleteImage(b, ev.id, true)
		}
	} else {
		b = e.appendRow(b, ev.row, ev.toast, true)
	}
	b = append(b, `,"__op":"`...)
	if op != "" {
		b = append(b, op...)
	} else {
		b = append(b, ev.op)
	}
	b = append(b, `","__lsn":`...)
	b = strconv.AppendUint(b, ev.lsn, 10)
	b = append(b, `,"__source_ts_ms":`...)
	ms := ev.tsUs / 1000
	if ev.tsUs < 0 && ev.tsUs%1000 != 0 {
		ms--
	}
	b = strconv.AppendInt(b, ms, 10)
	if !e.lsnOnly {
		b = append(b, `,"__source_sequence":`...)
		b = appendSequence(b, ev)
		b = append(b, `,"__snapshot":"`...)
		if ev.snap == "" {
			b = append(b, "false"...)
		} else {
			b = append(b, ev.snap...)
		}
		b = append(b, '"')
	}
	if ev.op == 'd' {
		b = append(b, `,"__deleted":"true"}`...)
	} else {
		b = append(b, `,"__deleted":"false"}`...)
	}
	return b
}

// record builds the Kafka record of ev (partition and offset assigned later).
func (e *encoder) record(topic string, ev *event) *source.Record {
	r := &source.Record{
		Topic:         topic,
		Key:           e.key(ev.id),
		Headers:       e.recordHeaders(ev),
		Timestamp:     time.UnixMilli(ev.procNs/1_000_000 + 1),
		TimestampType: "create",
	}
	if !ev.tomb {
		r.Value = e.value(ev, "", false, false)
	}
	return r
}
