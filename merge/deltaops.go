// The narrow interface between merge and the delta packages: snapshots, data files, commits.

package merge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
	"github.com/apache/arrow-go/v18/arrow"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/delta/parquetio"
	"github.com/cdcsink/cdc-sink/delta/schema"
)

// deltaOps is everything merge asks of the delta packages, in one place.
// All I/O goes through store, so a table works on any delta.Storage;
// storage errors keep their delta classification (delta.IsTransient, which
// quarantine.IsTransient recognises), so the pipeline retries transient
// ones and stops on the rest.
type deltaOps struct {
	dir    string // the table location, for messages
	store  delta.Storage
	tbl    *delta.Table
	logger *slog.Logger
	fault  func(FaultPoint) error // Options.Fault (tests)

	mu sync.Mutex
	// last is the newest snapshot loaded or advanced to: a commit's read
	// snapshot and a checkpoint's are advanced from it over the versions
	// since (delta.Snapshot.Advance), reading those commits and not the
	// checkpoint again (bench/README.md, commit snapshots).
	last *delta.Snapshot
	// fileBytesPerRow is the last data file's size per row: the next file's
	// buffer starts at that size for its rows instead of doubling up to it.
	fileBytesPerRow atomic.Int64
}

// snapshotView is the part of a Delta snapshot merge needs.
type snapshotView struct {
	snap    *delta.Snapshot
	version int64
	meta    *delta.Metadata
	schema  *schema.StructType
	files   []*delta.Add
	txns    map[string]int64
	domains map[string]string
}

// newDeltaOps uses store when given (tests, embedding), else opens the
// table location; a refused location fails here, before anything is written.
func newDeltaOps(ctx context.Context, location string, store delta.Storage, so delta.StorageOptions) (*deltaOps, error) {
	if store == nil {
		st, err := delta.OpenStorage(ctx, location, so)
		if err != nil {
			return nil, err
		}
		store = st
	}
	return &deltaOps{dir: location, store: store, tbl: delta.OpenTable(store, ""), logger: slog.New(slog.DiscardHandler)}, nil
}

// latest returns the newest snapshot, or nil when there is no table yet.
func (o *deltaOps) latest(ctx context.Context) (*snapshotView, error) {
	snap, err := o.tbl.Snapshot(ctx)
	if errors.Is(err, delta.ErrNotATable) {
		o.keep(nil, true)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load snapshot of %s: %w", o.dir, err)
	}
	o.keep(snap, true) // a reload starts the cache afresh (a table replaced under the same location)
	sc, err := snap.Schema()
	if err != nil {
		return nil, fmt.Errorf("schema of %s: %w", o.dir, err)
	}
	meta := snap.Metadata()
	v := &snapshotView{snap: snap, version: snap.Version(), meta: &meta, schema: sc,
		txns: map[string]int64{}, domains: map[string]string{}}
	files := snap.Files()
	v.files = make([]*delta.Add, len(files))
	for i := range files {
		v.files[i] = &files[i]
	}
	for app, t := range snap.Txns() {
		v.txns[app] = t.Version
	}
	for _, d := range snap.Domains() {
		if c, ok := snap.DomainMetadata(d); ok {
			v.domains[d] = c
		}
	}
	return v, nil
}

func (o *deltaOps) readDV(ctx context.Context, d *delta.DeletionVector) (*roaring64.Bitmap, error) {
	return o.tbl.ReadDeletionVector(ctx, d)
}

func (o *deltaOps) create(ctx context.Context, meta *delta.Metadata, proto *delta.Protocol) error {
	_, err := delta.Create(ctx, o.store, "", *meta, *proto)
	if errors.Is(err, delta.ErrTableExists) {
		// Another process created it first: use theirs (reload checks ownership).
		return nil
	}
	return err
}

// maxRebases bounds the commits a plan with key-level conflict rules is
// rebased over before it re-plans (delta.Transaction.MaxAttempts).
const maxRebases = 200

// commit writes plan as the next version after readVersion. A concurrent
// data change conflicts (the caller re-plans) as p.winners decides, or
// always when the plan has no such rule (it read the whole table: a
// truncate, a schema change).
func (o *deltaOps) commit(ctx context.Context, readVersion int64, p *plan, op string, params map[string]any) (int64, int64, error) {
	snap, err := o.snapshotAt(ctx, readVersion)
	if err != nil {
		return -1, 0, fmt.Errorf("read snapshot v%d: %w", readVersion, err)
	}
	tx := snap.Begin().ReadWholeTable()
	if p.winners != nil {
		tx.CheckWinners(p.winners)
		// Rebasing over a winner of other keys costs one read of its new
		// files' keys, far less than a re-plan: instances of a sink on one
		// table commit in turn, and a batch that takes longer to write than
		// ten of the others' commits must not re-plan for that alone.
		tx.MaxAttempts = maxRebases
	}
	if p.metadata != nil {
		tx.SetMetadata(*p.metadata)
	}
	if p.protocol != nil {
		tx.SetProtocol(*p.protocol)
	}
	for _, r := range p.removes {
		tx.Remove(*r)
	}
	for _, a := range p.adds {
		tx.Add(*a)
	}
	tx.AddCDC(p.cdcs...)
	for _, t := range p.txns {
		if t.AppID == p.blindTxn {
			tx.SetAppTransactionBlind(t.AppID, t.Version)
		} else {
			tx.SetAppTransaction(t.AppID, t.Version)
		}
	}
	for _, e := range p.expect {
		tx.ExpectTxn(e.appID, e.table)
	}
	for _, d := range p.domains {
		tx.SetDomainMetadata(d.Domain, d.Configuration)
	}
	// the checkpoint is written here, after its fault point, not by the commit
	tx.SkipCheckpoint = true
	res, err := tx.CommitWithResult(ctx, op, params)
	if err != nil {
		if errors.Is(err, delta.ErrConflict) || errors.Is(err, delta.ErrFenced) {
			o.discard(ctx, p)
		}
		return -1, 0, err
	}
	v := res.Version
	if res.CheckpointDue {
		if o.fault != nil {
			res.CheckpointErr = o.fault(FaultBeforeCheckpoint)
		}
		if res.CheckpointErr == nil {
			var cs *delta.Snapshot
			if cs, res.CheckpointErr = o.snapshotAt(ctx, v); res.CheckpointErr == nil {
				res.CheckpointErr = delta.WriteCheckpoint(ctx, cs)
			}
		}
	}
	if res.CheckpointErr != nil {
		// best effort, not retried: the next one is due checkpointInterval commits later
		o.logger.Warn("checkpoint failed; the commit stands, readers replay the log", "table", o.dir, "version", v, "err", res.CheckpointErr)
	}
	var n int64
	if fi, err := o.store.Stat(ctx, o.tbl.CommitKey(v)); err == nil {
		n = fi.Size
	}
	return v, n, nil
}

// snapshotAt returns the snapshot at version v: the last one advanced over
// the commits since, or a load when there is none older or advancing failed
// for good (a commit cleaned up); a transient failure is returned.
func (o *deltaOps) snapshotAt(ctx context.Context, v int64) (*delta.Snapshot, error) {
	o.mu.Lock()
	last := o.last
	o.mu.Unlock()
	if last != nil && last.Version() <= v {
		s, err := last.Advance(ctx, v)
		if err == nil {
			o.keep(s, false)
			return s, nil
		}
		if ctx.Err() != nil || delta.IsTransient(err) {
			return nil, err // the pipeline retries the batch: one layer retries
		}
		o.logger.Debug("advancing the cached snapshot failed; loading the table", "table", o.dir, "from", last.Version(), "to", v, "err", err)
	}
	s, err := o.tbl.SnapshotAt(ctx, v)
	if err != nil {
		return nil, err
	}
	o.keep(s, false)
	return s, nil
}

// keep caches s when it is newer than the cached snapshot, or always (reset).
func (o *deltaOps) keep(s *delta.Snapshot, reset bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if reset || o.last == nil || (s != nil && s.Version() >= o.last.Version()) {
		o.last = s
	}
}

// discard deletes the files a plan wrote once its commit lost for sure (a
// conflict: none of our commit attempts landed), so re-planning does not
// leave orphans. After other failures the outcome may be ambiguous (the
// commit may have landed), so nothing is deleted then; vacuum removes any
// orphans later. Best effort: a failed delete only leaves an orphan.
func (o *deltaOps) discard(ctx context.Context, p *plan) {
	for _, nf := range p.newFiles {
		if key, err := o.tbl.DataFileKey(nf.add.Path); err == nil {
			_ = o.store.Delete(ctx, key)
		}
	}
	for _, c := range p.cdcs {
		if key, err := o.tbl.DataFileKey(c.Path); err == nil {
			_ = o.store.Delete(ctx, key)
		}
	}
	for _, u := range p.dvUpdates {
		if d := u.add.DeletionVector; d != nil {
			if rel, err := d.RelativePath(); err == nil {
				_ = o.store.Delete(ctx, o.tbl.Key(rel))
			}
		}
	}
}

// writeData writes rec as a new Parquet data file and returns its add action.
// It encodes with the batch's schema (which a schema change may have moved
// past the read snapshot's) and lets delta name and store the file.
func (o *deltaOps) writeData(ctx context.Context, sc *schema.StructType, rec arrow.RecordBatch, now time.Time) (*delta.Add, int64, error) {
	var buf bytes.Buffer
	if n, bpr := rec.NumRows(), o.fileBytesPerRow.Load(); n > 0 && bpr > 0 {
		buf.Grow(int(min(n*bpr+n*bpr/8, 1<<30)))
	}
	stats, err := parquetio.WriteFile(ctx, &buf, sc, []arrow.RecordBatch{rec}, parquetio.WriteOptions{})
	if err != nil {
		return nil, 0, fmt.Errorf("write data file: %w", err)
	}
	if n := rec.NumRows(); n > 0 {
		o.fileBytesPerRow.Store(max(int64(buf.Len())/n, 1))
	}
	add, err := o.tbl.PutDataFile(ctx, buf.Bytes(), stats.StatsJSON, nil, nil)
	if err != nil {
		return nil, 0, err
	}
	add.ModificationTime = now.UnixMilli()
	return &add, add.Size, nil
}

// withDVs writes bms[i] as the new deletion vector of the file of adds[i],
// all in one DV file, and returns the add/remove pairs that swap the files'
// old DVs for the new ones.
func (o *deltaOps) withDVs(ctx context.Context, adds []*delta.Add, bms []*roaring64.Bitmap, now time.Time) ([]*delta.Add, []*delta.Remove, int64, error) {
	in := make([]delta.Add, len(adds))
	for i, a := range adds {
		in[i] = *a
	}
	nas, rms, n, err := o.tbl.ReplaceDeletionVectors(ctx, in, bms, now)
	if err != nil {
		return nil, nil, 0, err
	}
	outA := make([]*delta.Add, len(nas))
	outR := make([]*delta.Remove, len(rms))
	for i := range nas {
		outA[i], outR[i] = &nas[i], &rms[i]
	}
	return outA, outR, n, nil
}

// writeChangeData writes rec (table columns + _change_type) as a change data
// file and returns its cdc action. No stats: change readers do not skip.
func (o *deltaOps) writeChangeData(ctx context.Context, sc *schema.StructType, rec arrow.RecordBatch) (delta.CDC, int64, error) {
	var buf bytes.Buffer
	if _, err := parquetio.WriteFile(ctx, &buf, sc, []arrow.RecordBatch{rec}, parquetio.WriteOptions{DisableStats: true}); err != nil {
		return delta.CDC{}, 0, fmt.Errorf("write change data file: %w", err)
	}
	c, err := o.tbl.PutChangeDataFile(ctx, buf.Bytes())
	if err != nil {
		return delta.CDC{}, 0, err
	}
	return c, c.Size, nil
}
