// Package normalize turns a decoded Debezium event into a Change: table id,
// key tuple, op, and column values typed for Delta.
package normalize

import (
	"github.com/cdcsink/cdc-sink/versioning"
)

// Kind is the Delta type of a column (docs/types.md maps Debezium types to these).
type Kind uint8

// Delta type kinds. Go value representation of each, as stored in Change.Row:
//
//	Boolean      bool
//	Byte         int8
//	Short        int16
//	Integer      int32
//	Long         int64
//	Float        float32
//	Double       float64
//	Decimal      decimal.Decimal (shopspring), exact, scale == Type.Scale
//	String       string
//	Binary       []byte
//	Date         int32, days since 1970-01-01
//	Timestamp    int64, microseconds since epoch, UTC
//	TimestampNTZ int64, microseconds since epoch, wall clock
//	Array        []any (elements of Type.Elem)
//	Map          []MapEntry
//	Struct       []any aligned with Type.Fields
//
// nil is SQL NULL. Unavailable marks an unavailable TOAST value (keep the
// stored value).
const (
	Boolean Kind = iota + 1
	Byte
	Short
	Integer
	Long
	Float
	Double
	Decimal
	String
	Binary
	Date
	Timestamp
	TimestampNTZ
	Array
	Map
	Struct
)

// Type is a Delta data type.
type Type struct {
	Kind      Kind
	Precision int         // Decimal
	Scale     int         // Decimal
	Elem      *Type       // Array
	Key, Val  *Type       // Map
	Fields    []ColumnDef // Struct
}

// ColumnDef is one column of a row schema.
type ColumnDef struct {
	Name     string
	Type     Type
	Nullable bool
	// NullOnly is set for a column of a schemaless (inferred) table that has
	// held only nulls so far: its Type (String) is a placeholder, and a later
	// Schema of the same table may give the column its real type.
	NullOnly bool
}

// Schema is the column list of Change.Row. Changes decoded with the same
// source schema share one *Schema (compare pointers for a fast path, or
// Fingerprint for equality).
type Schema struct {
	Columns     []ColumnDef
	Fingerprint uint64
	// Inferred: the columns were inferred from schemaless values, so a
	// column's absence says nothing about the source table (it is not a
	// dropped column).
	Inferred bool
}

// Index returns the position of column name, or -1.
func (s *Schema) Index(name string) int {
	for i := range s.Columns {
		if s.Columns[i].Name == name {
			return i
		}
	}
	return -1
}

// MapEntry is one entry of a Map value.
type MapEntry struct{ Key, Value any }

type unavailable struct{}

// Unavailable is the value of a column whose TOAST value Debezium did not send
// (__debezium_unavailable_value in any form). Merge keeps the previous value.
var Unavailable any = unavailable{}

// IsUnavailable reports whether v is the Unavailable marker.
func IsUnavailable(v any) bool { _, ok := v.(unavailable); return ok }

// Op is what a change does to its key.
type Op uint8

const (
	OpUpsert   Op = iota + 1 // c, u, r
	OpDelete                 // d, tombstone (unwrap tombstone mode), __deleted=true
	OpTruncate               // t: every row of the table older than Version
)

// TableID names a source table.
type TableID struct {
	Server string // topic.prefix / source.name
	DB     string
	Schema string
	Table  string
}

// Coord is the Kafka coordinate the change came from.
type Coord struct {
	Topic     string
	Partition int32
	Offset    int64
}

// Change is one normalized row change, ready for ordering and merge.
type Change struct {
	Table TableID
	Op    Op
	// SourceOp is Debezium's op letter ('c','u','d','r','t'); 0 for a bare tombstone.
	SourceOp byte
	// KeyNames / Key: the key tuple (column names and typed values), from the
	// record key, or from configured key columns when the record key is null.
	// Empty for truncate.
	KeyNames []string
	Key      []any
	// Schema / Row: the full row image: `after` for upserts, `before` (possibly
	// partial, may be nil) for deletes. Row is aligned with Schema.Columns.
	Schema *Schema
	Row    []any
	// Before / BeforeSchema: the typed before image of an update, only with
	// Options.KeepBefore and a schema'd envelope (nil otherwise). Merge does
	// not read it; quality rules do.
	Before       []any
	BeforeSchema *Schema
	// TxID is source.txId when HasTxID.
	TxID    int64
	HasTxID bool
	// Position in the source stream; versioning.Tracker turns it into Version.
	Position versioning.Position
	// Version is set by the Tracker (not by Normalize).
	Version versioning.Version
	// SourceTsMicros is the source commit time (source.ts_us, or ts_ms*1000).
	SourceTsMicros int64
	// OldKey is set on the create half of a primary-key change
	// (header __debezium.oldkey): the previous key tuple, aligned with KeyNames.
	OldKey []any
	// KeyMoved is set on the delete half of a primary-key change (header
	// __debezium.newkey): the row lives on under another key, whose create
	// half may need this row's unavailable TOAST values.
	KeyMoved bool
	Coord    Coord
	// Tombstone is true for a bare Kafka tombstone (null value): a delete of
	// Key with no row. Right after a delete of the same key (Debezium's
	// tombstones.on.delete) the Tracker gives it that delete's Version, so the
	// version guard sees a duplicate; with the unwrap SMT's default
	// delete.tombstone.handling.mode=tombstone it is the only record of the
	// delete and gets a newer Version: merge must apply it, not skip it.
	Tombstone bool
}
