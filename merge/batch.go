// The input and output of Apply: a Batch, its partitions and offsets, and the rejected changes.

package merge

import (
	"cmp"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/cdcsink/cdc-sink/versioning"
	"strings"
)

// TP is a Kafka topic-partition.
type TP struct {
	Topic     string
	Partition int32
}

// Compare orders partitions by topic, then number (slices.SortFunc).
func (a TP) Compare(b TP) int {
	if c := strings.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	return cmp.Compare(a.Partition, b.Partition)
}

// Batch is one micro-batch for one table.
type Batch struct {
	// Changes in read order, each with Version assigned.
	Changes []*normalize.Change
	// Offsets is the next offset per partition once this batch is applied:
	// it covers every record read for the table, including skipped and
	// quarantined ones.
	Offsets map[TP]int64
	// Tracker is the versioning state after the batch, persisted with it.
	Tracker []versioning.PartitionState
	// From fences the commit: per partition of Offsets, the table's next
	// offset the batch was read from as the caller last saw it (NextOffset;
	// -1: the table had no progress for it). If another writer moved a
	// partition's offset since (the partition was taken over in a rebalance
	// while this process was paused), Apply commits nothing and fails with a
	// *FencedError: re-planning the same records on top of the new owner's
	// commits would let a zombie move progress and versioning state. Nil: no
	// fence (single-writer tools: replay from a file, redrive).
	From map[TP]int64
	// BeforeCommit, when set, is told each change's outcome before the
	// table's commit is written (history tables: written first, so a crash
	// between the two commits is caught up by recomputing the same outcomes).
	BeforeCommit BeforeCommitFunc
	// Domains are domain metadata (domain → configuration) written in the
	// same commit, so that they hold exactly when the batch's offsets do
	// (the transaction-consistency watermark). They must not be the sink's
	// versioning domains (layout.TrackerPartitionDomain); Apply refuses
	// them. Table.Domain reads them back.
	Domains map[string]string
}

// Reject is a change the merge refuses (version_conflict, schema_mismatch…).
// It must reach quarantine before the batch commits.
type Reject struct {
	Index   int // into Batch.Changes
	Reason  quarantine.Reason
	Message string
}

// Result reports what one Apply did.
type Result struct {
	Committed bool  // false when the batch changed nothing and advanced no offset
	Version   int64 // table version written (or current when not committed)
	BatchID   int64
	Inserted  int // new keys
	Updated   int // keys whose row was replaced
	Deleted   int // tombstones written
	Stale     int // changes older than the stored/current version
	Duplicate int // redelivered changes
	Rejected  int
	// Bytes written (data + deletion vectors + log).
	BytesWritten int64
	// Phase timings, milliseconds.
	FoldMs, WriteMs, CommitMs int64
	// Attempts is the number of commit attempts (plans) the batch took;
	// Conflicts those lost to a concurrent writer (Attempts-1).
	Attempts, Conflicts int
	// Outcomes is what the table did with each change (aligned with
	// Batch.Changes); nil when the table did not exist and nothing was
	// creatable.
	Outcomes []Outcome
	// Rebases counts the concurrent commits of other keys the batch's
	// commit was retried on top of without re-planning.
	Rebases int
}
