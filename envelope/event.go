// Package envelope decodes Kafka record bytes into Debezium events: JSON with
// and without schema, Avro in Confluent framing, the flattened
// ExtractNewRecordState form, tombstones, heartbeats and transaction metadata.
// It knows nothing of Delta types or ordering.
package envelope

// Kind says what a record is.
type Kind uint8

const (
	KindChange     Kind = iota + 1 // a row change (full envelope or flattened)
	KindTombstone                  // Kafka null value
	KindHeartbeat                  // io.debezium.connector.common.Heartbeat
	KindTxMetadata                 // BEGIN / END on the transaction topic
	KindMessage                    // op=m logical decoding message
)

// Format is the wire form the record was decoded from.
type Format uint8

const (
	FormatJSONSchema Format = iota + 1 // JsonConverter schemas.enable=true
	FormatJSONPlain                    // JsonConverter schemas.enable=false
	FormatAvro                         // Confluent framing + registry
)

// Schema is a Kafka Connect schema (as JsonConverter writes it, or derived from
// an Avro schema's connect.* properties). Schemas are shared between events
// with the same source schema and must be treated as immutable.
type Schema struct {
	Type       string // int8 int16 int32 int64 float32 float64 boolean string bytes array map struct
	Name       string // semantic name, e.g. io.debezium.time.MicroTimestamp
	Optional   bool
	Parameters map[string]string
	Default    any
	Fields     []Field // struct
	Items      *Schema // array
	Keys       *Schema // map
	Values     *Schema // map
}

// Field is one field of a struct Schema.
type Field struct {
	Name   string
	Schema *Schema
}

// Number is a JSON number kept as its literal text (schemaless JSON), so no
// precision is lost before normalize decides its type.
type Number string

// Row is a struct value: field names and values, aligned. Schema is nil for
// schemaless JSON.
//
// Values: nil, bool, int64 (all Connect integer types), float64 (float32 and
// float64), string, []byte (bytes; base64 already decoded when the schema
// says bytes), Number (schemaless numbers; also a Decimal written with
// decimal.format=NUMERIC), []any, map[string]any (Connect map), *Row (nested
// struct). envelope/README.md has the full table.
//
// Rows decoded with the same schema share Schema and Names: treat both as
// read-only. Strings, numbers and bytes values may be views of the record's
// bytes (a source never changes or reuses a record it handed out): never
// write to a decoded value, and expect it to keep its record alive.
type Row struct {
	Schema *Schema
	Names  []string
	Values []any
}

// Get returns the value of field name and whether the field exists.
func (r *Row) Get(name string) (any, bool) {
	if r == nil {
		return nil, false
	}
	for i, n := range r.Names {
		if n == name {
			return r.Values[i], true
		}
	}
	return nil, false
}

// Source is the Debezium source block (fields absent in the record are zero).
type Source struct {
	Version   string
	Connector string
	Name      string
	DB        string
	Schema    string
	Table     string
	TsMs      int64
	TsUs      int64
	Snapshot  string // as sent; "" when absent
	Sequence  string // raw JSON array string, "" when absent
	LSN       int64
	HasLSN    bool
	TxID      int64
	HasTxID   bool
	TsNs      int64 // ts_ns (optional since Debezium 2.x); 0 when absent
}

// TxInfo is the transaction block of a data event.
type TxInfo struct {
	ID                  string
	TotalOrder          int64
	DataCollectionOrder int64
}

// TxMetadata is a BEGIN/END record of the transaction topic.
type TxMetadata struct {
	Status     string // BEGIN or END
	ID         string
	EventCount int64
	TsMs       int64
	// DataCollections is the per-table event count of an END record.
	DataCollections []TxDataCollection
}

// TxDataCollection is one entry of TxMetadata.DataCollections.
type TxDataCollection struct {
	DataCollection string // "schema.table"
	EventCount     int64
}

// Message is the payload of an op=m logical decoding message event.
type Message struct {
	Prefix  string
	Content []byte // base64-decoded when the schema says bytes (or when schemaless and valid base64)
}

// Event is one decoded record.
type Event struct {
	Kind   Kind
	Format Format
	// Flattened is true for the ExtractNewRecordState form; then After holds the
	// row (without the __ fields), Op/Source come from __op/__lsn/__source_ts_ms…,
	// and Deleted from __deleted.
	Flattened bool
	Deleted   bool
	Op        byte // c u d r t m; 0 when unknown (flattened without __op)
	Key       *Row // nil when the record key is null
	Before    *Row
	After     *Row
	Source    Source
	TsMs      int64
	Tx        *TxInfo
	TxMeta    *TxMetadata
	// NewKey / OldKey are the raw __debezium.newkey / __debezium.oldkey header
	// values of a primary-key change (nil when absent).
	NewKey []byte
	OldKey []byte
	// Message is set for KindMessage (op=m).
	Message *Message
}
