// Package layout names what cdc-sink stores in a Delta table besides the
// source's own columns: the _cdc_* metadata columns, the cdcsink.* table
// properties, the tracker's domain metadata and the txn appIds that record
// batches and per-partition offsets (README "Table layout").
//
// It is the one place these names are spelled, so the writer (merge) and
// every reader (tablerows, maintain, status, audit, cmd) agree on them; it
// has no dependencies, so any package can import it.
package layout

import (
	"strconv"
	"strings"
)

// MetaPrefix starts every cdc-sink metadata column; source columns may not use it.
const MetaPrefix = "_cdc_"

// Metadata columns, in the order merge appends them to a table's schema.
const (
	ColDeleted   = "_cdc_deleted"        // boolean, true for tombstones
	ColVersion   = "_cdc_source_version" // string, versioning.Version.String(): sorts like the version
	ColOp        = "_cdc_op"             // string: c u d r t
	ColSourceTs  = "_cdc_source_ts"      // timestamp: source commit time
	ColBatchID   = "_cdc_batch_id"       // long: the batch that wrote the row
	ColIngestTs  = "_cdc_ingest_ts"      // timestamp: when cdc-sink committed it
	ColTopic     = "_cdc_topic"          // string: Kafka lineage
	ColPartition = "_cdc_partition"      // integer
	ColOffset    = "_cdc_offset"         // long
)

// IsMetaColumn reports whether name is a cdc-sink metadata column.
func IsMetaColumn(name string) bool {
	return len(name) > len(MetaPrefix) && strings.HasPrefix(name, MetaPrefix)
}

// Table properties (Delta metaData.configuration) cdc-sink writes.
const (
	ConfKeyColumns = "cdcsink.keyColumns" // comma-separated key column names
	ConfSink       = "cdcsink.sink"       // the sink name that owns the table
	ConfSourceID   = "cdcsink.source"     // server.db.schema.table of the source
	// ConfDroppedColumns records the columns dropped from the table because
	// the source dropped them (schema.on_drop_column=drop): a JSON object
	// column → source_version of the first change without it.
	ConfDroppedColumns = "cdcsink.droppedColumns"
)

// TrackerDomain is the domain metadata holding sink's versioning tracker
// state (per-partition positions, so a restart orders changes as before).
func TrackerDomain(sink string) string { return "cdcsink.tracker." + sink }

// The txn appIds: the sink's own name carries its batch counter, and
// "<sink>/<topic>/<partition>" the partition's next offset.

// OffsetAppID is the txn appId recording sink's next offset of a partition.
func OffsetAppID(sink, topic string, partition int32) string {
	return sink + "/" + topic + "/" + strconv.Itoa(int(partition))
}

// ParseOffsetAppID is the inverse of OffsetAppID for the given sink. Other
// appIds (the sink's batch txn, other sinks', non-canonical partition
// numbers) are not offsets: ok is false. A topic may itself contain "/":
// the partition is the last part.
func ParseOffsetAppID(sink, app string) (topic string, partition int32, ok bool) {
	rest, ok := strings.CutPrefix(app, sink+"/")
	i := strings.LastIndexByte(rest, '/')
	if !ok || i <= 0 {
		return "", 0, false
	}
	digits := rest[i+1:]
	if digits == "" || (len(digits) > 1 && digits[0] == '0') || strings.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' }) >= 0 {
		return "", 0, false // only the canonical decimal OffsetAppID writes
	}
	p, err := strconv.ParseInt(digits, 10, 32)
	if err != nil {
		return "", 0, false
	}
	return rest[:i], int32(p), true
}

// ProgressFile is the storage key, relative to the table root, of the
// offsets a sink records for a table that has no commit yet (every record
// so far was quarantined). Readers and vacuum skip directories starting
// with "_".
func ProgressFile(sink string) string { return "_cdc_sink/progress." + sink + ".json" }
