package maintain

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/google/uuid"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/delta/parquetio"
	"github.com/cdcsink/cdc-sink/delta/schema"
	"github.com/cdcsink/cdc-sink/layout"
	"github.com/cdcsink/cdc-sink/tablerows"
)

// OpAlterColumn is the commitInfo operation of AlterColumn.
const OpAlterColumn = "ALTER COLUMN"

// AlterOptions configures AlterColumn.
type AlterOptions struct {
	// Storage configures object store locations (endpoint, region…).
	Storage delta.StorageOptions
	// DryRun reads and converts every value (so a value that does not
	// convert is reported) but writes and commits nothing.
	DryRun bool
	Now    func() time.Time
	// fault, a test seam set only by this package's tests, is called at
	// "files-written" (every new data file is stored) and "before-commit";
	// an error aborts AlterColumn there without any clean-up, as a crash
	// would (crash-safety and conflict tests).
	fault func(point string) error
}

// AlterResult reports what AlterColumn did (or would do).
type AlterResult struct {
	Column           string // as spelled in the table
	OldType, NewType string
	ReadVersion      int64
	Version          int64 // new table version (ReadVersion when nothing was committed)
	Committed        bool
	FilesRemoved     int
	DVFilesRemoved   int
	FilesAdded       int
	Rows             int64 // rows rewritten: live rows and tombstones (rows hidden by deletion vectors are dropped)
	Values           int64 // non-null values converted
	// Widening: old → new is a Delta type widening, which the sink applies
	// by itself when a change brings the wider type; the rewrite was the
	// operator's choice, not a necessity.
	Widening bool
	// ProtocolUpgraded: the timestampNtz table feature was added.
	ProtocolUpgraded bool
}

// AlterColumn changes the type of one business column of the table at dir
// to newType (a Delta type name, see ParseType), converting every stored
// value with the exact conversions of CanConvert (docs/types.md). It is the
// recovery path for records quarantined as schema_mismatch after the source
// changed a column's type incompatibly: alter, then redrive them.
//
// All live data files are rewritten (their current rows only: rows hidden
// by deletion vectors are dropped, tombstone rows are kept) and the new
// schema, the removes and the adds are committed as one version, so readers
// see the old table or the new one, never a mix. Every other column (the
// _cdc_* metadata included), txn actions, domain metadata and table
// properties are kept.
//
// Refused before anything is written: an unknown column, a key column (its
// type is part of the key's identity in the sink's index and in every
// change the source sends), a _cdc_ metadata column, a partition column,
// the same type, an unknown type name, a pair without conversion, and a
// table whose protocol or features we cannot write. A value that does not
// convert fails the command naming the row's key and the value; the files
// written so far are deleted.
//
// A concurrent commit that touches data or metadata makes the commit fail
// (optimistic concurrency, whole table read): the files of this attempt are
// deleted and the table is unchanged. A crash before the commit leaves the
// table unchanged too (the files written are unreferenced; vacuum removes
// them).
func AlterColumn(ctx context.Context, dir, column, newType string, opts AlterOptions) (*AlterResult, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	to, err := ParseType(newType)
	if err != nil {
		return nil, fmt.Errorf("alter column %s: %w", column, err)
	}
	t, err := tablerows.OpenWith(ctx, dir, opts.Storage)
	if err != nil {
		return nil, fmt.Errorf("alter column %s: %w", column, err)
	}
	p, err := planAlter(t, column, to)
	if err != nil {
		return nil, fmt.Errorf("alter column %s of %s: %w", column, dir, err)
	}
	res := &AlterResult{Column: p.field.Name, OldType: typeLabel(p.field.Type), NewType: typeLabel(to),
		ReadVersion: t.Version(), Version: t.Version(), Widening: schema.CanWiden(p.field.Type, to),
		ProtocolUpgraded: p.protocol != nil}
	a := &alterRun{t: t, p: p, opts: opts, res: res}
	if err := a.rewrite(ctx); err != nil {
		if !a.crashed {
			if n := a.deleteWritten(ctx); n > 0 {
				err = fmt.Errorf("%w (the %d data files written by this attempt were deleted)", err, n)
			}
		}
		return nil, fmt.Errorf("alter column %s of %s: %w", p.field.Name, dir, err)
	}
	return res, nil
}

// alterPlan is everything decided before reading data.
type alterPlan struct {
	field    *schema.StructField
	idx      int // position in the table schema
	to       schema.DataType
	conv     convertFunc
	schema   *schema.StructType
	protocol *delta.Protocol // non-nil: upgraded protocol to commit
	keys     []string
}

func planAlter(t *tablerows.Table, column string, to schema.DataType) (*alterPlan, error) {
	if err := writable(t); err != nil {
		return nil, err
	}
	if err := t.Snap.CheckWritable(); err != nil {
		return nil, fmt.Errorf("table cannot be rewritten: %w", err)
	}
	if t.Snap.Metadata().Configuration["delta.appendOnly"] == "true" {
		return nil, errors.New("table is append-only (delta.appendOnly=true): rewriting its files is not allowed")
	}
	f, idx := t.Schema.Field(column)
	if f == nil {
		return nil, fmt.Errorf("column %q is not in the table (columns: %s)", column, strings.Join(t.Columns(), ", "))
	}
	if layout.IsMetaColumn(f.Name) {
		return nil, fmt.Errorf("column %s is a cdc-sink metadata column: its type is fixed by the table layout", f.Name)
	}
	keys := t.KeyColumns()
	for _, k := range keys {
		if strings.EqualFold(k, f.Name) {
			return nil, fmt.Errorf("column %s is a key column (%s=%s): its type is part of every key's identity, so changing it "+
				"would split keys the source sees as equal; rebuild the table instead (docs/runbook.md, \"Rebuild and swap\")",
				f.Name, layout.ConfKeyColumns, strings.Join(keys, ","))
		}
	}
	for _, pc := range t.Snap.PartitionColumns() {
		if strings.EqualFold(pc, f.Name) {
			return nil, fmt.Errorf("column %s is a partition column: changing its type is not supported", f.Name)
		}
	}
	if schema.Equal(f.Type, to) {
		return nil, fmt.Errorf("column %s already has type %s", f.Name, typeLabel(to))
	}
	conv, err := converter(f.Type, to)
	if err != nil {
		return nil, fmt.Errorf("column %s: %w", f.Name, err)
	}
	ns := t.Schema.Clone()
	nf := ns.Fields[idx]
	nf.Type = to
	// The widening history describes files that are all rewritten now:
	// readers must not apply it to the new files.
	delete(nf.Metadata, "delta.typeChanges")
	if err := ns.Validate(); err != nil {
		return nil, err
	}
	p := &alterPlan{field: f, idx: idx, to: to, conv: conv, schema: ns, keys: keys}
	if to == schema.TimestampNTZ {
		proto := t.Snap.Protocol()
		if !proto.HasFeature("timestampNtz") {
			if proto.MinReaderVersion != 3 || proto.MinWriterVersion != 7 {
				return nil, fmt.Errorf("column %s: timestamp_ntz needs the timestampNtz table feature (reader 3 / writer 7), the table has reader %d / writer %d",
					f.Name, proto.MinReaderVersion, proto.MinWriterVersion)
			}
			proto = delta.WithReaderWriterFeature(proto, "timestampNtz")
			p.protocol = &proto
		}
	}
	return p, nil
}

type alterRun struct {
	t       *tablerows.Table
	p       *alterPlan
	opts    AlterOptions
	res     *AlterResult
	written []string // storage keys of the data files this attempt stored
	crashed bool     // a fault aborted: leave everything as a crash would
}

func (a *alterRun) fault(point string) error {
	if a.opts.fault == nil {
		return nil
	}
	if err := a.opts.fault(point); err != nil {
		a.crashed = true
		return err
	}
	return nil
}

func (a *alterRun) rewrite(ctx context.Context) error {
	t, p, res := a.t, a.p, a.res
	now := a.opts.Now()
	cols := t.Columns()
	keyIdx := make([]int, 0, len(p.keys))
	for _, k := range p.keys {
		if _, i := t.Schema.Field(k); i >= 0 {
			keyIdx = append(keyIdx, i)
		}
	}
	tx := t.Snap.Begin()
	// The new files are derived from every live file: any concurrent data
	// change must make this commit fail, not be silently dropped.
	tx.ReadWholeTable()
	cdf := t.Snap.ChangeDataFeedEnabled()
	files := t.Snap.Files()
	for i := range files {
		f := &files[i]
		var buf bytes.Buffer
		w, err := parquetio.NewWriter(ctx, &buf, p.schema, parquetio.WriteOptions{PartitionColumns: t.Snap.PartitionColumns()})
		if err != nil {
			return err
		}
		var seen int64 // rows of this file before the current record
		err = t.ScanFile(ctx, f, cols, false, func(rec arrow.RecordBatch) error {
			out, err := a.convertRecord(rec, keyIdx, f.Path, seen)
			if err != nil {
				return err
			}
			defer out.Release()
			seen += out.NumRows()
			res.Rows += out.NumRows()
			return w.Write(out)
		})
		if err != nil {
			_, _ = w.Close()
			return err
		}
		st, err := w.Close()
		if err != nil {
			return fmt.Errorf("write the rewrite of %s: %w", f.Path, err)
		}
		res.FilesRemoved++
		if f.DeletionVector != nil {
			res.DVFilesRemoved++
		}
		// dataChange=true: the column's values change type, streaming
		// readers must see the rewrite. With Change Data Feed on, false:
		// every row keeps its value (pre and post images would be equal in
		// the new schema), so the feed has no change for it, only the
		// version's new schema.
		rm := delta.RemoveFile(*f, now)
		rm.DataChange = !cdf
		tx.Remove(rm)
		if st.NumRecords == 0 {
			continue // every row was hidden by the deletion vector: the file just goes
		}
		res.FilesAdded++
		if a.opts.DryRun {
			continue
		}
		name := fmt.Sprintf("part-00000-%s-c000.snappy.parquet", uuid.NewString())
		if err := t.Store.PutIfAbsent(ctx, name, buf.Bytes()); err != nil {
			return fmt.Errorf("store %s: %w", name, err)
		}
		a.written = append(a.written, name)
		pv := f.PartitionValues
		if pv == nil {
			pv = map[string]*string{}
		}
		tx.Add(delta.Add{Path: name, PartitionValues: pv, Size: int64(buf.Len()), ModificationTime: now.UnixMilli(),
			DataChange: !cdf, Stats: st.StatsJSON, Tags: f.Tags}) // same rows: same partition (layout.TagPartition)
	}
	if a.opts.DryRun {
		return nil
	}
	if err := a.fault("files-written"); err != nil {
		return err
	}
	meta := t.Snap.Metadata()
	meta.SchemaString = p.schema.String()
	tx.SetMetadata(meta)
	if p.protocol != nil {
		tx.SetProtocol(*p.protocol)
	}
	if err := a.fault("before-commit"); err != nil {
		return err
	}
	v, err := tx.Commit(ctx, OpAlterColumn, map[string]any{
		"column": p.field.Name, "oldType": res.OldType, "newType": res.NewType,
		"filesRemoved": res.FilesRemoved, "filesAdded": res.FilesAdded, "rows": res.Rows,
	})
	if err != nil {
		if errors.Is(err, delta.ErrConflict) {
			return fmt.Errorf("another writer committed while the table was rewritten, so nothing was committed "+
				"(stop the table's sink and run the command again): %w", err)
		}
		return err
	}
	res.Version, res.Committed = v, true
	return nil
}

// convertRecord returns rec with the altered column converted.
func (a *alterRun) convertRecord(rec arrow.RecordBatch, keyIdx []int, file string, base int64) (arrow.RecordBatch, error) {
	p := a.p
	src := rec.Column(p.idx)
	conv, row, err := convertArray(src, p.conv, p.to)
	if err != nil {
		var ve *valueError
		if !errors.As(err, &ve) {
			return nil, fmt.Errorf("column %s: %w", p.field.Name, err)
		}
		return nil, fmt.Errorf("column %s: %s: value %s %s, so it cannot become %s (nothing was committed)",
			p.field.Name, describeRow(rec, keyIdx, row, file, base), tablerows.AppendJSON(nil, src, row), ve.reason, typeLabel(p.to))
	}
	a.res.Values += int64(src.Len() - src.NullN())
	fields := append([]arrow.Field(nil), rec.Schema().Fields()...)
	fields[p.idx] = schema.ArrowField(p.schema.Fields[p.idx])
	arrs := append([]arrow.Array(nil), rec.Columns()...)
	arrs[p.idx] = conv
	out := array.NewRecordBatch(arrow.NewSchema(fields, nil), arrs, rec.NumRows())
	conv.Release() // out holds its own reference
	return out, nil
}

// describeRow names a row by its key (cdc-sink tables) or, without key
// columns, by its position among the file's live rows.
func describeRow(rec arrow.RecordBatch, keyIdx []int, row int, file string, base int64) string {
	if len(keyIdx) == 0 {
		return fmt.Sprintf("live row %d of %s", base+int64(row), file)
	}
	parts := make([]string, len(keyIdx))
	for i, k := range keyIdx {
		parts[i] = rec.Schema().Field(k).Name + "=" + string(tablerows.AppendJSON(nil, rec.Column(k), row))
	}
	return "key " + strings.Join(parts, ",")
}

// deleteWritten removes the data files this attempt stored, unless the
// table references them (a commit that reported an error but landed), and
// returns how many it deleted. Best effort: an orphan left behind is
// harmless and vacuum removes it.
func (a *alterRun) deleteWritten(ctx context.Context) int {
	if len(a.written) == 0 {
		return 0
	}
	// The caller's ctx may be the reason we stopped: clean up regardless.
	ctx = context.WithoutCancel(ctx)
	snap, err := a.t.Delta.Snapshot(ctx)
	if err != nil {
		return 0 // cannot prove they are unreferenced
	}
	live := map[string]bool{}
	for _, f := range snap.Files() {
		live[f.Path] = true
	}
	n := 0
	for _, k := range a.written {
		if !live[k] && a.t.Store.Delete(ctx, k) == nil {
			n++
		}
	}
	return n
}
