package merge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/google/uuid"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/delta/dv"
	"github.com/cdcsink/cdc-sink/delta/parquetio"
	"github.com/cdcsink/cdc-sink/delta/schema"
)

// deltaOps is everything merge asks of the delta packages, in one place.
type deltaOps struct {
	dir   string
	store *delta.LocalStorage
	tbl   *delta.Table
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

func newDeltaOps(dir string) (*deltaOps, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o750); err != nil {
		return nil, fmt.Errorf("create table directory %s: %w", abs, err)
	}
	st := delta.NewLocalStorage(abs)
	return &deltaOps{dir: abs, store: st, tbl: delta.OpenTable(st, "")}, nil
}

// latest returns the newest snapshot, or nil when there is no table yet.
func (o *deltaOps) latest(ctx context.Context) (*snapshotView, error) {
	snap, err := o.tbl.Snapshot(ctx)
	if errors.Is(err, delta.ErrNotATable) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load snapshot of %s: %w", o.dir, err)
	}
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

func toDV(d *delta.DeletionVector) *dv.Descriptor {
	if d == nil {
		return nil
	}
	return &dv.Descriptor{StorageType: d.StorageType, PathOrInlineDv: d.PathOrInlineDv, Offset: d.Offset,
		SizeInBytes: d.SizeInBytes, Cardinality: d.Cardinality, MaxRowIndex: d.MaxRowIndex}
}

func fromDV(d dv.Descriptor) *delta.DeletionVector {
	return &delta.DeletionVector{StorageType: d.StorageType, PathOrInlineDv: d.PathOrInlineDv, Offset: d.Offset,
		SizeInBytes: d.SizeInBytes, Cardinality: d.Cardinality, MaxRowIndex: d.MaxRowIndex}
}

func (o *deltaOps) readDV(ctx context.Context, d *delta.DeletionVector) (*roaring64.Bitmap, error) {
	fsys := dv.FSFunc(func(ctx context.Context, p string) ([]byte, error) { return os.ReadFile(p) })
	return dv.Read(ctx, fsys, o.dir, toDV(d))
}

func (o *deltaOps) create(ctx context.Context, meta *delta.Metadata, proto *delta.Protocol) error {
	_, err := delta.Create(ctx, o.store, "", *meta, *proto)
	if errors.Is(err, delta.ErrTableExists) {
		// Another process created it first: use theirs (reload checks ownership).
		return nil
	}
	return err
}

// commit writes plan as the next version after readVersion. The MERGE reads
// the whole table (the key index), so any concurrent data change conflicts
// and the caller re-plans.
func (o *deltaOps) commit(ctx context.Context, readVersion int64, p *plan, op string, params map[string]any) (int64, int64, error) {
	snap, err := o.tbl.SnapshotAt(ctx, readVersion)
	if err != nil {
		return -1, 0, fmt.Errorf("read snapshot v%d: %w", readVersion, err)
	}
	tx := snap.Begin().ReadWholeTable()
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
	for _, t := range p.txns {
		tx.SetAppTransaction(t.AppID, t.Version)
	}
	for _, d := range p.domains {
		tx.SetDomainMetadata(d.Domain, d.Configuration)
	}
	v, err := tx.Commit(ctx, op, params)
	if err != nil {
		return -1, 0, err
	}
	var n int64
	if fi, err := o.store.Stat(ctx, fmt.Sprintf("_delta_log/%020d.json", v)); err == nil {
		n = fi.Size
	}
	return v, n, nil
}

// writeData writes rec as a new Parquet data file and returns its add action.
func (o *deltaOps) writeData(ctx context.Context, sc *schema.StructType, rec arrow.RecordBatch, now time.Time) (*delta.Add, int64, error) {
	var buf bytes.Buffer
	stats, err := parquetio.WriteFile(ctx, &buf, sc, []arrow.RecordBatch{rec}, parquetio.WriteOptions{})
	if err != nil {
		return nil, 0, err
	}
	name := fmt.Sprintf("part-00000-%s-c000.snappy.parquet", uuid.NewString())
	if err := o.store.PutIfAbsent(ctx, name, buf.Bytes()); err != nil {
		return nil, 0, fmt.Errorf("store %s: %w", name, err)
	}
	return &delta.Add{Path: name, PartitionValues: map[string]*string{}, Size: int64(buf.Len()),
		ModificationTime: now.UnixMilli(), DataChange: true, Stats: stats.StatsJSON}, int64(buf.Len()), nil
}

// withDV writes bm as a new deletion vector for the file of add and returns
// the add/remove pair that swaps the file's old DV for the new one.
func (o *deltaOps) withDV(ctx context.Context, add *delta.Add, bm *roaring64.Bitmap, now time.Time) (*delta.Add, *delta.Remove, int64, error) {
	data, desc, err := dv.Write(bm)
	if err != nil {
		return nil, nil, 0, err
	}
	rel, err := desc.RelativePath()
	if err != nil {
		return nil, nil, 0, err
	}
	if err := o.store.PutIfAbsent(ctx, rel, data); err != nil {
		return nil, nil, 0, fmt.Errorf("store %s: %w", rel, err)
	}
	rm := delta.RemoveFile(*add, now)
	na := *add
	na.DeletionVector = fromDV(desc)
	na.DataChange = true
	na.ModificationTime = add.ModificationTime
	// With rows hidden, the file's min/max still bound the live rows but are
	// no longer tight (as Spark marks them).
	na.Stats = strings.Replace(add.Stats, `"tightBounds":true`, `"tightBounds":false`, 1)
	return &na, &rm, int64(len(data)), nil
}
