// Package merge applies micro-batches of normalized changes to one Delta
// table so that it always equals the source table's current state: per key,
// the change with the highest source version wins, whatever order Kafka
// delivered them in.
//
// A Table is opened on a location (Open) and given one Batch at a time
// (Table.Apply). Apply folds the batch per key in source-version order,
// drops stale and duplicate changes, rejects conflicting ones (same version,
// different content) to the caller's quarantine before anything is written,
// and commits the survivors as one Delta commit: a new data file, deletion
// vectors hiding the rows it replaces (deletes become tombstone rows with
// _cdc_deleted = true), and txn actions recording the batch id and the next
// offset of every Kafka partition it covers. The commit is idempotent by
// batch id, fenced against zombie writers by those offsets, and retried on
// concurrent commits that do not conflict. Schema changes of the source
// (added, widened, dropped columns) evolve the table in the same commit.
//
// The names merge writes (metadata columns, table properties, txn appIds)
// are in package layout; the version order is package versioning's; file
// formats and the log protocol are package delta's.
package merge
