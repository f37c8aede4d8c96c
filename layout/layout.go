// Package layout names what cdc-sink stores in a Delta table besides the
// source's own columns: the _cdc_* metadata columns, the cdcsink.* table
// properties, the tracker's domain metadata and the txn appIds that record
// batches and per-partition offsets (README "Table layout",
// docs/table-layout.md).
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

// TagPartition is the add-action tag (Delta "tags") that a
// partition-aligned writer puts on each data file: every row of the file
// came from the one Kafka partition PartitionTag names. Instances of one
// sink then only ever hide rows (deletion vectors) in files of the
// partitions they own, so their commits touch disjoint files
// (docs/table-layout.md, "Partition-aligned layout"). A file without the
// tag may hold rows of any partition.
const TagPartition = "cdcsink.partition"

// PartitionTag is the TagPartition value of a topic partition:
// "<topic>/<partition>" (Kafka topic names never contain '/').
func PartitionTag(topic string, partition int32) string {
	return topic + "/" + strconv.Itoa(int(partition))
}

// ParsePartitionTag is the inverse of PartitionTag; ok is false for
// anything PartitionTag does not write.
func ParsePartitionTag(s string) (topic string, partition int32, ok bool) {
	i := strings.LastIndexByte(s, '/')
	if i <= 0 || strings.IndexByte(s[:i], '/') >= 0 {
		return "", 0, false
	}
	digits := s[i+1:]
	if digits == "" || (len(digits) > 1 && digits[0] == '0') || strings.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' }) >= 0 {
		return "", 0, false
	}
	p, err := strconv.ParseInt(digits, 10, 32)
	if err != nil {
		return "", 0, false
	}
	return s[:i], int32(p), true
}

// TrackerDomain is the domain metadata of the single-domain layout: sink's
// versioning tracker state for all partitions in one JSON array. Tables
// written before the per-partition layout have it; it is still read (a
// partition's own domain, TrackerPartitionDomain, wins over it) but no
// longer written, because every commit rewriting one shared domain makes
// all instances of a sink conflict on every commit.
func TrackerDomain(sink string) string { return "cdcsink.tracker." + sink }

// TrackerPartitionDomain is the domain metadata holding sink's versioning
// tracker state of one partition (a JSON array of that one partition's
// state), written by the instance owning the partition with its offsets.
// Sink names and Kafka topic names never contain '/', so it parses back
// unambiguously (ParseTrackerDomain).
func TrackerPartitionDomain(sink, topic string, partition int32) string {
	return TrackerDomain(sink) + "/" + topic + "/" + strconv.Itoa(int(partition))
}

// ParseTrackerDomain says whether domain holds sink's tracker state: the
// single-domain layout (legacy true) or one partition's domain.
func ParseTrackerDomain(sink, domain string) (topic string, partition int32, legacy, ok bool) {
	if domain == TrackerDomain(sink) {
		return "", 0, true, true
	}
	rest, ok := strings.CutPrefix(domain, TrackerDomain(sink)+"/")
	if !ok {
		return "", 0, false, false
	}
	topic, partition, ok = ParseOffsetAppID(sink, sink+"/"+rest)
	return topic, partition, false, ok
}

// BatchAppID is the txn appId of an instance's batch counter: "<sink>" when
// instance is empty (one instance per sink: the original layout), else
// "<sink>@<instance>". Each instance of a sink writes only its own, so
// their commits do not all conflict on one appId. The batch id is not what
// makes a commit idempotent (the per-partition offsets are), so an instance
// may change its id across restarts; a stable one (a pod name) only keeps
// the number of appIds in the log bounded.
func BatchAppID(sink, instance string) string {
	if instance == "" {
		return sink
	}
	return sink + "@" + instance
}

// ParseBatchAppID says whether app is a batch counter of sink, and of which
// instance ("" for the single-instance appId). Sink names never contain
// '@' or '/'.
func ParseBatchAppID(sink, app string) (instance string, ok bool) {
	if app == sink {
		return "", true
	}
	inst, ok := strings.CutPrefix(app, sink+"@")
	if !ok || inst == "" || strings.ContainsAny(inst, "/@") {
		return "", false
	}
	return inst, true
}

// The txn appIds: the batch counters (BatchAppID), and
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
