// Package dbzgen generates deterministic, realistic Debezium 3.6 PostgreSQL
// change streams for one table (public.orders by default) as Kafka records,
// together with a reference model of the final table state a correct sink
// must hold.
//
// The records match what the PostgreSQL connector 3.6.1.Final emits through
// Kafka Connect's JsonConverter (compare envelope/testdata/real): field order,
// the schema block, the complete source block with sequence
// ["<lastCommitLsn>","<lsn>"], the transaction block, context headers,
// tombstones, primary-key-change headers and the unavailable-TOAST
// placeholder. The LSN arithmetic simulates a WAL with concurrent
// transactions: change LSNs of concurrent transactions interleave, events are
// emitted in commit order, and sequence[0] is the end LSN of the previously
// committed transaction (null for the first one streamed).
//
// The simulated source table (REPLICA IDENTITY DEFAULT, so updates have no
// before image and deletes carry only the key plus type fallbacks):
//
//	CREATE TYPE order_status AS ENUM ('CRIADO','PAGO','ENVIADO','ENTREGUE','CANCELADO');
//	CREATE TABLE public.orders (
//	    id          bigint PRIMARY KEY,
//	    customer_id integer,
//	    status      order_status  NOT NULL DEFAULT 'CRIADO',  -- io.debezium.data.Enum
//	    amount      numeric(12,2) NOT NULL,                   -- Decimal, negatives and extremes
//	    created_at  timestamptz   NOT NULL DEFAULT now(),     -- ZonedTimestamp, 1900..9999
//	    updated_at  timestamp,                                -- MicroTimestamp
//	    ship_date   date,                                     -- io.debezium.time.Date
//	    payload     jsonb,                                    -- io.debezium.data.Json
//	    tags        text[],                                   -- NULL elements, empty arrays
//	    note        text,                                     -- the TOAST column
//	    uuid        uuid NOT NULL,                            -- io.debezium.data.Uuid
//	    paid        boolean NOT NULL DEFAULT false,
//	    filler      text);                                    -- Config.RowWidth bytes
//
// It is used by the embedded demo, by model-based property tests of the merge
// engine (Stream.Expected, Stream.DeliveryOrder), by kfake runtime tests and
// by benchmarks. The same Config (Seed included) always yields byte-identical
// records.
package dbzgen

import (
	"slices"
	"strconv"
	"time"

	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/source"
)

// Format is the wire form of the generated records.
type Format uint8

const (
	// JSONSchema is JsonConverter with schemas.enable=true: key and value are
	// {"schema":…,"payload":…}.
	JSONSchema Format = iota
	// JSONPlain is JsonConverter with schemas.enable=false.
	JSONPlain
	// Unwrap is the ExtractNewRecordState SMT output (schemas.enable=true)
	// with delete.tombstone.handling.mode=rewrite and
	// add.fields=op,lsn,source.ts_ms,source.sequence,snapshot: the value is
	// the row plus __op, __lsn, __source_ts_ms, __source_sequence, __snapshot
	// and __deleted ("true"/"false"); deletes carry the before image; no
	// tombstones (rewrite mode drops them, Config.Tombstones is ignored).
	Unwrap
	// UnwrapPlain is Unwrap with schemas.enable=false.
	UnwrapPlain
)

func (f Format) String() string {
	switch f {
	case JSONSchema:
		return "json-schema"
	case JSONPlain:
		return "json-plain"
	case Unwrap:
		return "unwrap"
	case UnwrapPlain:
		return "unwrap-plain"
	}
	return "format(" + strconv.Itoa(int(f)) + ")"
}

func (f Format) schemas() bool { return f == JSONSchema || f == Unwrap }
func (f Format) unwrap() bool  { return f == Unwrap || f == UnwrapPlain }

// Mix weights the kinds of streamed change. Zero everywhere means
// {Insert: 0.3, Update: 0.6, Delete: 0.1}.
type Mix struct{ Insert, Update, Delete float64 }

// Config describes a stream. The zero value (plus Events) is usable; see
// Generate for the defaults.
type Config struct {
	Seed   int64
	Prefix string // topic.prefix, default "loja": topic "loja.public.orders"
	DB     string // database name (source.db), default Prefix
	Schema string // default "public"
	Table  string // default "orders"
	// Partitions of the topic, default 1. Records go to partition
	// murmur2(key bytes) % Partitions, like Kafka's default partitioner.
	Partitions int
	// Keys is the key space: ids 1..Keys. Default max(100, SnapshotRows).
	// Values below SnapshotRows are raised to SnapshotRows+1.
	Keys int
	// Events is the number of row changes after the snapshot (a primary-key
	// change counts once; tombstones, duplicates and malformed records are
	// extra).
	Events int
	// SnapshotRows is the number of rows (ids 1..SnapshotRows) read by the
	// initial snapshot: op=r, source.snapshot first/true/last, sequence
	// [null,"<slot LSN>"].
	SnapshotRows int
	Mix          Mix
	Format       Format
	// Tombstones emits a null-value record after each delete
	// (tombstones.on.delete=true).
	Tombstones bool
	// TxSize is the number of changes per transaction. 0: autocommit
	// statements and no transaction block (provide.transaction.metadata=
	// false); >= 1: transactions of TxSize changes (the last may be shorter)
	// with the transaction block.
	TxSize int
	// Concurrency is the number of transactions open at once (their change
	// LSNs interleave). Default 3 when TxSize > 1, else 1.
	Concurrency int
	// InFlightAtSnapshot: one transaction writes before the snapshot point
	// and commits after it, so its changes have LSN < the snapshot LSN and
	// sequence[0] null (the handoff case). It is the first transaction
	// streamed and counts against Events.
	InFlightAtSnapshot bool
	// Duplicates is the fraction of streamed records redelivered later (same
	// bytes, new offset): whole transactions replayed after simulated Kafka
	// Connect restarts.
	Duplicates float64
	// ToastEvery: every Nth update leaves the TOASTed note column unchanged,
	// so it carries "__debezium_unavailable_value" (notes are then always
	// > 2 kB, as TOAST requires). 0: never.
	ToastEvery int
	// PKChangeEvery: every Nth update changes the primary key: delete(old,
	// header __debezium.newkey) + tombstone(old, same header) + create(new,
	// header __debezium.oldkey), one source position. 0: never.
	PKChangeEvery int
	// Malformed is the number of corrupt records mixed in (bad JSON, unknown
	// op, decimal with garbage base64, missing after / not an object) at
	// deterministic positions. See Stream.Malformed.
	Malformed int
	// Resnapshot: after 4/5 of the events, a second snapshot (op=r) of all
	// live keys at a higher LSN, then the remaining events.
	Resnapshot bool
	// RowWidth is the approximate number of extra bytes per row, in the
	// filler column (null when 0).
	RowWidth int
	// UnwrapLSNOnly drops __source_sequence and __snapshot from the Unwrap
	// formats (add.fields=op,lsn,source.ts_ms). Then the sink can order only
	// by LSN, which is wrong for interleaved transactions and for the
	// snapshot handoff, so Expected is reachable only without them.
	UnwrapLSNOnly bool
	// LazySnapshot keeps the initial snapshot out of Records: they hold the
	// records after it (with their offsets unchanged), and EachSnapshot
	// encodes the snapshot records one at a time. The reference model is
	// not materialised either (see EachExpected). With it, a 10M-row stream
	// needs a few GB instead of tens: the encoded snapshot is what is big.
	// Malformed must be 0.
	LazySnapshot bool
}

// Coord is the Kafka coordinate of a record.
type Coord = normalize.Coord

// Columns lists the row columns in schema order. Row.Values is aligned with it.
var Columns = []string{"id", "customer_id", "status", "amount", "created_at", "updated_at",
	"ship_date", "payload", "tags", "note", "uuid", "paid", "filler"}

// Column positions in Columns / Row.Values.
const (
	ColID = iota
	ColCustomerID
	ColStatus
	ColAmount
	ColCreatedAt
	ColUpdatedAt
	ColShipDate
	ColPayload
	ColTags
	ColNote
	ColUUID
	ColPaid
	ColFiller
)

// Statuses are the values of the status enum, in declaration order.
var Statuses = []string{"CRIADO", "PAGO", "ENVIADO", "ENTREGUE", "CANCELADO"}

// Row is the expected final state of one key.
//
// Values are in normalize's Go value model: id int64, customer_id int32,
// status string, amount decimal.Decimal (scale exactly 2), created_at and
// updated_at int64 microseconds since the epoch (UTC), ship_date int32 days,
// payload string (the JSON text), tags []any of string/nil, note string,
// uuid string, paid bool, filler string; nil is SQL NULL. Values is nil for a
// deleted key (only the key and the tombstone survive).
type Row struct {
	ID      int64
	Deleted bool
	Values  []any
	// The source position of the change that decided this state: Snapshot is
	// true for a snapshot row (op=r); Commit is sequence[0] (0 for null);
	// LSN is sequence[1].
	Snapshot bool
	Commit   uint64
	LSN      uint64
}

// Get returns the value of column name (nil if unknown or deleted).
func (r Row) Get(name string) any {
	if r.Values == nil {
		return nil
	}
	for i, c := range Columns {
		if c == name {
			return r.Values[i]
		}
	}
	return nil
}

// KeyString is the key of id in Expected's map: the decimal id.
func KeyString(id int64) string { return strconv.FormatInt(id, 10) }

// Counts summarises a generated stream.
type Counts struct {
	Records      int // all records, everything below included
	Snapshot     int // op=r of the initial snapshot
	Resnapshot   int // op=r of the second snapshot
	Inserts      int // op=c (excluding the create half of PK changes)
	Updates      int // op=u, ToastUpdates included (PK changes are counted apart)
	ToastUpdates int // updates carrying the unavailable placeholder
	Deletes      int // op=d (excluding the delete half of PK changes)
	PKChanges    int // each is one d + one c (+ tombstone)
	Tombstones   int
	Duplicates   int // redelivered records
	Malformed    int
	Transactions int // committed transactions streamed (the in-flight one included)
	LiveKeys     int // keys present at the end
	DeletedKeys  int // keys deleted at the end
}

// Stream is a generated change stream.
type Stream struct {
	Config Config // with defaults applied
	Topic  string
	// Records in emission order, which is per-partition offset order;
	// offsets start at 0 in every partition.
	Records []*source.Record

	expected  map[string]Row
	malformed []Coord
	counts    Counts
	// ends: the END record (value) of each streamed transaction, keyed by
	// its last record (TxEnds)
	ends map[*source.Record]txEnd

	// LazySnapshot: the snapshot events, their encoder, and the final key
	// states the reference model is built from on demand.
	snapEvents []event
	enc        *encoder
	final      []keyState
}

type txEnd struct {
	key, value []byte
	ts         time.Time
}

// TxEnds returns, for the transactions the stream commits (TxSize ≥ 1), the
// END record Debezium writes on the transaction topic
// (provide.transaction.metadata=true), schemaless JSON, keyed by the last
// record of its transaction in Records: a producer writes the END to topic
// right after that record. Redelivered copies get no END of their own.
func (s *Stream) TxEnds(topic string) map[*source.Record]*source.Record {
	out := make(map[*source.Record]*source.Record, len(s.ends))
	for last, e := range s.ends {
		out[last] = &source.Record{Topic: topic, Key: e.key, Value: e.value, Timestamp: e.ts, TimestampType: last.TimestampType}
	}
	return out
}

// EachSnapshot calls fn for each record of the initial snapshot in emission
// order, with the partition and offset it has in the full stream. With
// LazySnapshot each record is encoded on the fly (a fresh allocation);
// without it this walks the snapshot prefix of Records.
func (s *Stream) EachSnapshot(fn func(*source.Record) error) error {
	if s.enc == nil {
		for _, r := range s.Records[:s.counts.Snapshot] {
			if err := fn(r); err != nil {
				return err
			}
		}
		return nil
	}
	next := make([]int64, s.Config.Partitions)
	for i := range s.snapEvents {
		r := s.enc.record(s.Topic, &s.snapEvents[i])
		r.Partition = partitionOf(r.Key, s.Config.Partitions)
		r.Offset = next[r.Partition]
		next[r.Partition]++
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

// EachExpected calls fn with the final state of every key the stream
// touched, in id order (what Expected returns, without building the map).
func (s *Stream) EachExpected(fn func(Row) error) error {
	if s.final == nil {
		ids := make([]int64, 0, len(s.expected))
		for _, r := range s.expected {
			ids = append(ids, r.ID)
		}
		slices.Sort(ids)
		for _, id := range ids {
			if err := fn(s.expected[KeyString(id)]); err != nil {
				return err
			}
		}
		return nil
	}
	for id := int64(1); id < int64(len(s.final)); id++ {
		if row, ok := finalRow(id, &s.final[id]); ok {
			if err := fn(row); err != nil {
				return err
			}
		}
	}
	return nil
}

// Expected returns the final state per key (KeyString(id)) a correct sink
// must hold: for every key the change with the highest true commit order
// wins; deleted keys are present with Deleted set; TOAST-unchanged values are
// the previous ones. The map is a fresh copy.
func (s *Stream) Expected() map[string]Row {
	if s.final != nil {
		m := make(map[string]Row, s.counts.LiveKeys+s.counts.DeletedKeys)
		_ = s.EachExpected(func(r Row) error { m[KeyString(r.ID)] = r; return nil })
		return m
	}
	m := make(map[string]Row, len(s.expected))
	for k, v := range s.expected {
		m[k] = v
	}
	return m
}

// Malformed returns the coordinates of the corrupt records, in stream order.
func (s *Stream) Malformed() []Coord { return append([]Coord(nil), s.malformed...) }

// IsMalformed reports whether the record at c is one of the corrupt ones.
func (s *Stream) IsMalformed(c Coord) bool {
	for _, m := range s.malformed {
		if m == c {
			return true
		}
	}
	return false
}

// Counts returns what the stream contains.
func (s *Stream) Counts() Counts { return s.counts }

// Partition returns the records of partition p in offset order.
func (s *Stream) Partition(p int32) []*source.Record {
	var out []*source.Record
	for _, r := range s.Records {
		if r.Partition == p {
			out = append(out, r)
		}
	}
	return out
}
