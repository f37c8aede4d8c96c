// Package delta implements the Delta Lake transaction log (PROTOCOL.md of
// delta-io/delta) for cdc-sink: log replay into snapshots, checkpoints,
// optimistic-concurrency commits with txn (idempotency) actions, and
// maintenance. There is no usable Delta library for Go, so we speak the
// protocol directly; data files and deletion-vector bitmaps are delegated to
// delta/parquetio and delta/dv, schemas to delta/schema.
//
// Reading:
//
//	t := delta.OpenTable(delta.NewLocalStorage(root), "tables/orders")
//	t, err := delta.OpenLocation(ctx, "file:///lake/orders", delta.StorageOptions{}) // a user-given location
//	snap, err := t.Snapshot(ctx)            // or t.SnapshotAt(ctx, v)
//	snap.Files(); snap.TxnVersion("sink"); snap.DomainMetadata("cdc-sink")
//	for rec, err := range snap.Scan(ctx, delta.ScanOptions{}) { ... }
//
// Replay starts at the newest complete checkpoint (classic, multi-part or
// v2 with sidecars) and applies only the JSON commits after it, so load
// cost does not grow with history. Logical files are keyed by
// (path, deletion-vector unique id). Unsupported reader features are
// refused with *UnsupportedFeatureError instead of returning wrong data.
//
// Table features beyond the basics: typeWidening (and Delta 3.2's
// typeWidening-preview) for reading and writing: files written before a
// widening keep their narrow Parquet types and are widened exactly on read,
// and commits may only widen types on tables that enable it; columnMapping
// for reading (modes name and id, nested fields included) and writing (mode
// name: physical names, field ids, stats and partition values by physical
// name; schema.AssignColumnMapping and schema.DropColumn maintain the
// schema).
//
// Writing:
//
//	tx := snap.Begin()
//	tx.Add(add).Remove(delta.RemoveFile(old, now)).SetAppTransaction("sink", batchID)
//	v, err := tx.Commit(ctx, "MERGE", params)
//
// (CommitWithResult also reports whether the checkpoint due after the commit
// failed: checkpoints are best effort and never fail a commit.)
//
// A commit is created with Storage.PutIfAbsent (link(2) on local disks), so
// two processes can never both own a version. On losing a race the winner's
// actions are checked for logical conflicts (removed the same file, changed
// metadata/protocol, set a txn appId we read/write, changed a domain we
// write); concurrent blind appends are rebased over. Conflicts surface as
// *ConflictError (errors.Is(err, ErrConflict)). Every
// delta.checkpointInterval versions a classic checkpoint is written
// (temp file + rename, then _last_checkpoint), so a crash never leaves
// readers with a partial checkpoint.
package delta
