// Writing classic checkpoints in the schema Spark writes, and _last_checkpoint.

package delta

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// The classic checkpoint schema, as Spark writes it (delta.md §1.5). Every
// field is nullable; stats is a JSON string (writeStatsAsJson).
var (
	strMap    = arrow.MapOf(arrow.BinaryTypes.String, arrow.BinaryTypes.String)
	strList   = arrow.ListOf(arrow.BinaryTypes.String)
	dvStruct  = arrow.StructOf(nf("storageType", arrow.BinaryTypes.String), nf("pathOrInlineDv", arrow.BinaryTypes.String), nf("offset", arrow.PrimitiveTypes.Int32), nf("sizeInBytes", arrow.PrimitiveTypes.Int32), nf("cardinality", arrow.PrimitiveTypes.Int64), nf("maxRowIndex", arrow.PrimitiveTypes.Int64))
	cpTxn     = arrow.StructOf(nf("appId", arrow.BinaryTypes.String), nf("version", arrow.PrimitiveTypes.Int64), nf("lastUpdated", arrow.PrimitiveTypes.Int64))
	cpAdd     = arrow.StructOf(nf("path", arrow.BinaryTypes.String), nf("partitionValues", strMap), nf("size", arrow.PrimitiveTypes.Int64), nf("modificationTime", arrow.PrimitiveTypes.Int64), nf("dataChange", arrow.FixedWidthTypes.Boolean), nf("tags", strMap), nf("deletionVector", dvStruct), nf("baseRowId", arrow.PrimitiveTypes.Int64), nf("defaultRowCommitVersion", arrow.PrimitiveTypes.Int64), nf("stats", arrow.BinaryTypes.String))
	cpRemove  = arrow.StructOf(nf("path", arrow.BinaryTypes.String), nf("deletionTimestamp", arrow.PrimitiveTypes.Int64), nf("dataChange", arrow.FixedWidthTypes.Boolean), nf("extendedFileMetadata", arrow.FixedWidthTypes.Boolean), nf("partitionValues", strMap), nf("size", arrow.PrimitiveTypes.Int64), nf("deletionVector", dvStruct), nf("baseRowId", arrow.PrimitiveTypes.Int64), nf("defaultRowCommitVersion", arrow.PrimitiveTypes.Int64))
	cpMeta    = arrow.StructOf(nf("id", arrow.BinaryTypes.String), nf("name", arrow.BinaryTypes.String), nf("description", arrow.BinaryTypes.String), nf("format", arrow.StructOf(nf("provider", arrow.BinaryTypes.String), nf("options", strMap))), nf("schemaString", arrow.BinaryTypes.String), nf("partitionColumns", strList), nf("configuration", strMap), nf("createdTime", arrow.PrimitiveTypes.Int64))
	cpProto   = arrow.StructOf(nf("minReaderVersion", arrow.PrimitiveTypes.Int32), nf("minWriterVersion", arrow.PrimitiveTypes.Int32), nf("readerFeatures", strList), nf("writerFeatures", strList))
	cpDomain  = arrow.StructOf(nf("domain", arrow.BinaryTypes.String), nf("configuration", arrow.BinaryTypes.String), nf("removed", arrow.FixedWidthTypes.Boolean))
	cpSchema  = arrow.NewSchema([]arrow.Field{nf("txn", cpTxn), nf("add", cpAdd), nf("remove", cpRemove), nf("metaData", cpMeta), nf("protocol", cpProto), nf("domainMetadata", cpDomain)}, nil)
	cpBatchSz = 64 << 10
)

func nf(name string, t arrow.DataType) arrow.Field {
	return arrow.Field{Name: name, Type: t, Nullable: true}
}

// cpBuilder wraps the record builder with typed appenders.
type cpBuilder struct {
	rb *array.RecordBuilder
	n  int
}

func appStr(b array.Builder, s string, valid bool) {
	if !valid {
		b.AppendNull()
		return
	}
	b.(*array.StringBuilder).Append(s)
}

func appI64(b array.Builder, v *int64) {
	if v == nil {
		b.AppendNull()
		return
	}
	b.(*array.Int64Builder).Append(*v)
}

func appI32(b array.Builder, v *int32) {
	if v == nil {
		b.AppendNull()
		return
	}
	b.(*array.Int32Builder).Append(*v)
}

func appBool(b array.Builder, v *bool) {
	if v == nil {
		b.AppendNull()
		return
	}
	b.(*array.BooleanBuilder).Append(*v)
}

func appPtrMap(b array.Builder, m map[string]*string, nullIfNil bool) {
	mb := b.(*array.MapBuilder)
	if m == nil && nullIfNil {
		mb.AppendNull()
		return
	}
	mb.Append(true)
	kb, ib := mb.KeyBuilder().(*array.StringBuilder), mb.ItemBuilder().(*array.StringBuilder)
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		kb.Append(k)
		if v := m[k]; v != nil {
			ib.Append(*v)
		} else {
			ib.AppendNull()
		}
	}
}

func appMap(b array.Builder, m map[string]string, nullIfNil bool) {
	mb := b.(*array.MapBuilder)
	if m == nil && nullIfNil {
		mb.AppendNull()
		return
	}
	mb.Append(true)
	kb, ib := mb.KeyBuilder().(*array.StringBuilder), mb.ItemBuilder().(*array.StringBuilder)
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		kb.Append(k)
		ib.Append(m[k])
	}
}

func appList(b array.Builder, l []string, valid bool) {
	lb := b.(*array.ListBuilder)
	if !valid {
		lb.AppendNull()
		return
	}
	lb.Append(true)
	vb := lb.ValueBuilder().(*array.StringBuilder)
	for _, s := range l {
		vb.Append(s)
	}
}

func appDV(b array.Builder, d *DeletionVector) {
	s := b.(*array.StructBuilder)
	if d == nil {
		s.AppendNull()
		return
	}
	s.Append(true)
	appStr(s.FieldBuilder(0), d.StorageType, true)
	appStr(s.FieldBuilder(1), d.PathOrInlineDv, true)
	appI32(s.FieldBuilder(2), d.Offset)
	sz := d.SizeInBytes
	appI32(s.FieldBuilder(3), &sz)
	c := d.Cardinality
	appI64(s.FieldBuilder(4), &c)
	appI64(s.FieldBuilder(5), d.MaxRowIndex)
}

// row starts a row: all top-level columns null except col, whose struct
// builder is returned.
func (c *cpBuilder) row(col int) *array.StructBuilder {
	for i := 0; i < c.rb.Schema().NumFields(); i++ {
		if i != col {
			c.rb.Field(i).AppendNull()
		}
	}
	c.n++
	s := c.rb.Field(col).(*array.StructBuilder)
	s.Append(true)
	return s
}

func (c *cpBuilder) txn(t Txn) {
	s := c.row(0)
	appStr(s.FieldBuilder(0), t.AppID, true)
	v := t.Version
	appI64(s.FieldBuilder(1), &v)
	appI64(s.FieldBuilder(2), t.LastUpdated)
}

func (c *cpBuilder) add(a *Add) {
	s := c.row(1)
	appStr(s.FieldBuilder(0), a.Path, true)
	appPtrMap(s.FieldBuilder(1), a.PartitionValues, false)
	sz, mt, dc := a.Size, a.ModificationTime, a.DataChange
	appI64(s.FieldBuilder(2), &sz)
	appI64(s.FieldBuilder(3), &mt)
	appBool(s.FieldBuilder(4), &dc)
	appMap(s.FieldBuilder(5), a.Tags, true)
	appDV(s.FieldBuilder(6), a.DeletionVector)
	appI64(s.FieldBuilder(7), a.BaseRowID)
	appI64(s.FieldBuilder(8), a.DefaultRowCommitVersion)
	appStr(s.FieldBuilder(9), a.Stats, a.Stats != "")
}

func (c *cpBuilder) remove(r *Remove) {
	s := c.row(2)
	appStr(s.FieldBuilder(0), r.Path, true)
	appI64(s.FieldBuilder(1), r.DeletionTimestamp)
	dc := r.DataChange
	appBool(s.FieldBuilder(2), &dc)
	appBool(s.FieldBuilder(3), r.ExtendedFileMetadata)
	appPtrMap(s.FieldBuilder(4), r.PartitionValues, true)
	appI64(s.FieldBuilder(5), r.Size)
	appDV(s.FieldBuilder(6), r.DeletionVector)
	appI64(s.FieldBuilder(7), r.BaseRowID)
	appI64(s.FieldBuilder(8), r.DefaultRowCommitVersion)
}

func (c *cpBuilder) metadata(m *Metadata) {
	s := c.row(3)
	appStr(s.FieldBuilder(0), m.ID, true)
	appStr(s.FieldBuilder(1), m.Name, m.Name != "")
	appStr(s.FieldBuilder(2), m.Description, m.Description != "")
	f := s.FieldBuilder(3).(*array.StructBuilder)
	f.Append(true)
	prov := m.Format.Provider
	if prov == "" {
		prov = "parquet"
	}
	appStr(f.FieldBuilder(0), prov, true)
	appMap(f.FieldBuilder(1), m.Format.Options, false)
	appStr(s.FieldBuilder(4), m.SchemaString, true)
	appList(s.FieldBuilder(5), m.PartitionColumns, true)
	appMap(s.FieldBuilder(6), m.Configuration, false)
	appI64(s.FieldBuilder(7), m.CreatedTime)
}

func (c *cpBuilder) protocol(p *Protocol) {
	s := c.row(4)
	r, w := p.MinReaderVersion, p.MinWriterVersion
	appI32(s.FieldBuilder(0), &r)
	appI32(s.FieldBuilder(1), &w)
	// reader v3 / writer v7 tables must have non-null feature lists.
	appList(s.FieldBuilder(2), p.ReaderFeatures, p.MinReaderVersion >= 3 || p.ReaderFeatures != nil)
	appList(s.FieldBuilder(3), p.WriterFeatures, p.MinWriterVersion >= 7 || p.WriterFeatures != nil)
}

func (c *cpBuilder) domain(d DomainMetadata) {
	s := c.row(5)
	appStr(s.FieldBuilder(0), d.Domain, true)
	appStr(s.FieldBuilder(1), d.Configuration, true)
	rm := d.Removed
	appBool(s.FieldBuilder(2), &rm)
}

// WriteCheckpoint writes a classic single-part checkpoint for snap and then
// _last_checkpoint. The parquet file is written atomically (temp + rename)
// and _last_checkpoint last, so a crash at any point leaves readers able
// to use the previous checkpoint or plain replay.
func WriteCheckpoint(ctx context.Context, snap *Snapshot) error {
	return writeCheckpointAt(ctx, snap, time.Now())
}

// WriteCheckpointAt writes the checkpoint of version v. Best effort for a
// writer: readers never depend on a checkpoint existing.
func (t *Table) WriteCheckpointAt(ctx context.Context, v int64) error {
	snap, err := t.SnapshotAt(ctx, v)
	if err != nil {
		return fmt.Errorf("write checkpoint v%d: %w", v, err)
	}
	return WriteCheckpoint(ctx, snap)
}

func writeCheckpointAt(ctx context.Context, snap *Snapshot, now time.Time) error {
	t := snap.table
	v := snap.version
	data, nActions, nAdds, err := encodeCheckpoint(snap, now)
	if err != nil {
		return fmt.Errorf("write checkpoint v%d: %w", v, err)
	}
	if err := t.store.Put(ctx, t.logKey(checkpointName(v)), data); err != nil {
		return fmt.Errorf("write checkpoint v%d: %w", v, err)
	}
	lc, _ := json.Marshal(lastCheckpointInfo{Version: v, Size: nActions, SizeInBytes: int64(len(data)), NumOfAddFiles: nAdds})
	// never move _last_checkpoint backwards (time-travel checkpoints)
	if b, err := t.store.Get(ctx, t.logKey("_last_checkpoint")); err == nil {
		var old lastCheckpointInfo
		if json.Unmarshal(b, &old) == nil && old.Version > v {
			return nil
		}
	}
	if err := t.store.Put(ctx, t.logKey("_last_checkpoint"), lc); err != nil {
		return fmt.Errorf("write _last_checkpoint v%d: %w", v, err)
	}
	return nil
}

// encodeCheckpoint renders the snapshot as checkpoint parquet bytes.
func encodeCheckpoint(snap *Snapshot, now time.Time) ([]byte, int64, int64, error) {
	var buf bytes.Buffer
	props := parquet.NewWriterProperties(
		parquet.WithCompression(compress.Codecs.Snappy),
		parquet.WithMaxRowGroupLength(int64(cpBatchSz)),
		parquet.WithCreatedBy("cdc-sink/"+EngineVersion),
	)
	fw, err := pqarrow.NewFileWriter(cpSchema, &buf, props, pqarrow.DefaultWriterProps())
	if err != nil {
		return nil, 0, 0, err
	}
	c := &cpBuilder{rb: array.NewRecordBuilder(memory.DefaultAllocator, cpSchema)}
	defer c.rb.Release()
	var total int64
	flush := func(force bool) error {
		if c.n == 0 || (!force && c.n < cpBatchSz) {
			return nil
		}
		rec := c.rb.NewRecordBatch()
		defer rec.Release()
		total += int64(c.n)
		c.n = 0
		return fw.Write(rec)
	}
	c.protocol(&snap.protocol)
	c.metadata(&snap.metadata)
	appIDs := make([]string, 0, len(snap.txns))
	for k := range snap.txns {
		appIDs = append(appIDs, k)
	}
	sort.Strings(appIDs)
	for _, k := range appIDs {
		c.txn(snap.txns[k])
	}
	for _, d := range snap.Domains() {
		c.domain(snap.domains[d])
	}
	for i := range snap.files {
		c.add(&snap.files[i])
		if err := flush(false); err != nil {
			return nil, 0, 0, err
		}
	}
	for _, r := range snap.TombstonesAt(now) {
		// checkpoints omit remove.stats/tags (spec)
		c.remove(&r)
		if err := flush(false); err != nil {
			return nil, 0, 0, err
		}
	}
	if err := flush(true); err != nil {
		return nil, 0, 0, err
	}
	if err := fw.Close(); err != nil {
		return nil, 0, 0, err
	}
	return buf.Bytes(), total, int64(len(snap.files)), nil
}
