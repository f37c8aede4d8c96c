// Package tablerows reads the current rows of any Delta table (written by
// cdc-sink or not) as canonical values: the JSON text of each cell, in one
// fixed form per Delta type, so that `table show`, `diff` and `verify` print
// and compare the same thing.
//
// Canonical forms (Value is JSON text):
//
//	byte/short/integer/long   JSON number                       42
//	float/double              JSON number (shortest round-trip)  1.5; NaN/±Infinity as strings
//	decimal(p,s)              string with exactly s decimals     "12.30"
//	boolean                   true / false
//	string                    JSON string
//	binary                    base64 string                      "AAEC"
//	date                      "YYYY-MM-DD"
//	timestamp                 RFC 3339 UTC with microseconds     "2024-01-02T03:04:05.123456Z"
//	timestamp_ntz             same without zone                  "2024-01-02T03:04:05.123456"
//	array                     JSON array
//	struct                    JSON object, fields in schema order
//	map                       JSON object in stored order (non-string keys as their canonical text)
//	null                      null
package tablerows

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/delta/parquetio"
	"github.com/cdcsink/cdc-sink/delta/schema"
	"github.com/cdcsink/cdc-sink/layout"
)

const deltaPathEscapes = "%"

// Table is a Delta table opened at its latest version for reading.
type Table struct {
	Dir    string        // the location (absolute for local paths)
	Store  delta.Storage // rooted at the table
	Delta  *delta.Table
	Snap   *delta.Snapshot
	Schema *schema.StructType
}

// ErrNotATable is returned by Open for a location without a Delta log.
var ErrNotATable = delta.ErrNotATable

// Open loads the latest snapshot of the table at location (a path or URL,
// see delta.ParseLocation) with the object stores' default options.
func Open(ctx context.Context, location string) (*Table, error) {
	return OpenWith(ctx, location, delta.StorageOptions{})
}

// OpenWith is Open with object store options.
func OpenWith(ctx context.Context, location string, so delta.StorageOptions) (*Table, error) {
	loc, err := delta.ParseLocation(location)
	if err != nil {
		return nil, err
	}
	store, err := loc.Storage(ctx, so)
	if err != nil {
		return nil, err
	}
	name := loc.String()
	if loc.IsLocal() {
		if name, err = filepath.Abs(loc.Path); err != nil {
			return nil, err
		}
	}
	return open(ctx, store, name, location)
}

// OpenStorage loads the latest snapshot of the table rooted at store; name
// is the location shown in messages and Dir.
func OpenStorage(ctx context.Context, store delta.Storage, name string) (*Table, error) {
	return open(ctx, store, name, name)
}

// open: errors name the table as the user wrote it (dir).
func open(ctx context.Context, store delta.Storage, name, dir string) (*Table, error) {
	dt := delta.OpenTable(store, "")
	snap, err := dt.Snapshot(ctx)
	if err != nil {
		if errors.Is(err, delta.ErrNotATable) {
			return nil, fmt.Errorf("%s: %w", dir, err)
		}
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	sc, err := snap.Schema()
	if err != nil {
		return nil, fmt.Errorf("schema of %s: %w", dir, err)
	}
	return &Table{Dir: name, Store: store, Delta: dt, Snap: snap, Schema: sc}, nil
}

// At is the table at an earlier version (time travel).
func (t *Table) At(ctx context.Context, version int64) (*Table, error) {
	snap, err := t.Delta.SnapshotAt(ctx, version)
	if err != nil {
		return nil, fmt.Errorf("load %s at version %d: %w", t.Dir, version, err)
	}
	sc, err := snap.Schema()
	if err != nil {
		return nil, fmt.Errorf("schema of %s at version %d: %w", t.Dir, version, err)
	}
	return &Table{Dir: t.Dir, Store: t.Store, Delta: t.Delta, Snap: snap, Schema: sc}, nil
}

// Version is the snapshot version.
func (t *Table) Version() int64 { return t.Snap.Version() }

// HasDeletedColumn reports whether the table has cdc-sink's boolean
// _cdc_deleted column (then tombstones can be hidden).
func (t *Table) HasDeletedColumn() bool {
	f, _ := t.Schema.Field(layout.ColDeleted)
	return f != nil && f.Type == schema.Boolean
}

// KeyColumns returns the cdcsink.keyColumns property (nil if absent).
func (t *Table) KeyColumns() []string {
	v, ok := t.Snap.Config(layout.ConfKeyColumns)
	if !ok || v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// Columns returns the names of the table's top-level columns.
func (t *Table) Columns() []string {
	out := make([]string, len(t.Schema.Fields))
	for i, f := range t.Schema.Fields {
		out[i] = f.Name
	}
	return out
}

// BusinessColumns are the columns that are not cdc-sink metadata (_cdc_*).
func (t *Table) BusinessColumns() []string {
	var out []string
	for _, f := range t.Schema.Fields {
		if !layout.IsMetaColumn(f.Name) {
			out = append(out, f.Name)
		}
	}
	return out
}

// Type returns the Delta type of a top-level column (nil if absent).
func (t *Table) Type(name string) schema.DataType {
	f, _ := t.Schema.Field(name)
	if f == nil {
		return nil
	}
	return f.Type
}

// ScanOptions selects what Scan returns.
type ScanOptions struct {
	// Columns to return, in this order (nil = every column).
	Columns []string
	// IncludeDeleted also returns tombstone rows (_cdc_deleted = true). On
	// tables without that column every row is returned.
	IncludeDeleted bool
}

// Row is one row: the canonical JSON text of each selected column.
type Row []string

// Scan calls fn with every current row (deletion vectors applied) in file
// order. The Row slice is reused between calls: copy it to keep it.
func (t *Table) Scan(ctx context.Context, opts ScanOptions, fn func(Row) error) error {
	cols := opts.Columns
	if cols == nil {
		cols = t.Columns()
	}
	for _, c := range cols {
		if f, _ := t.Schema.Field(c); f == nil {
			return fmt.Errorf("column %q is not in the table (columns: %s)", c, strings.Join(t.Columns(), ", "))
		}
	}
	read := append([]string(nil), cols...)
	delIdx := -1
	if !opts.IncludeDeleted && t.HasDeletedColumn() {
		delIdx = len(read)
		read = append(read, layout.ColDeleted)
	}
	row := make(Row, len(cols))
	var buf []byte
	return t.ScanRecords(ctx, read, func(rec arrow.RecordBatch) error {
		var del *array.Boolean
		if delIdx >= 0 {
			del, _ = rec.Column(delIdx).(*array.Boolean)
		}
		for r := 0; r < int(rec.NumRows()); r++ {
			if del != nil && del.IsValid(r) && del.Value(r) {
				continue
			}
			for i := range cols {
				buf = AppendJSON(buf[:0], rec.Column(i), r)
				row[i] = string(buf)
			}
			if err := fn(row); err != nil {
				return err
			}
		}
		return nil
	})
}

// ScanRecords calls fn with the Arrow records of the snapshot's live rows
// (delta.Snapshot.Scan: deletion vectors applied, partition values filled),
// columns in the order given. The record is released after fn returns.
func (t *Table) ScanRecords(ctx context.Context, cols []string, fn func(arrow.RecordBatch) error) error {
	for rec, err := range t.Snap.Scan(ctx, delta.ScanOptions{Columns: cols}) {
		if err != nil {
			return err
		}
		err = fn(rec)
		rec.Release()
		if err != nil {
			return err
		}
	}
	return nil
}

// FilePath converts an add/remove path (URI-encoded, relative) into a
// storage key; absolute URIs are refused.
func FilePath(p string) (string, error) {
	if strings.Contains(p, "://") {
		if strings.HasPrefix(p, "file://") {
			u, err := url.Parse(p)
			if err != nil {
				return "", err
			}
			return u.Path, nil
		}
		return "", fmt.Errorf("data file %s is not local", p)
	}
	if strings.Contains(p, deltaPathEscapes) {
		u, err := url.PathUnescape(p)
		if err == nil {
			return u, nil
		}
	}
	return p, nil
}

// ReadDV returns the deletion vector of an add action (nil if none).
func (t *Table) ReadDV(ctx context.Context, a *delta.Add) (*roaring64.Bitmap, error) {
	if a.DeletionVector == nil {
		return nil, nil
	}
	return t.Delta.ReadDeletionVector(ctx, a.DeletionVector)
}

// OpenFile opens the data file of an add action for reading. Like
// Snapshot.Scan it reads only files inside the table: an absolute path
// (shallow clones) is refused.
func (t *Table) OpenFile(ctx context.Context, a *delta.Add) (delta.ReadAtCloser, int64, error) {
	key, err := t.Delta.DataFileKey(a.Path)
	if err != nil {
		return nil, 0, err
	}
	return t.Store.Open(ctx, key)
}

// ScanFile calls fn with the records of one data file (deletion vector
// applied). With rowIndex, an int64 column with the physical row position
// (parquetio.RowIndexColumn) follows cols.
func (t *Table) ScanFile(ctx context.Context, a *delta.Add, cols []string, rowIndex bool, fn func(arrow.RecordBatch) error) error {
	bm, err := t.ReadDV(ctx, a)
	if err != nil {
		return fmt.Errorf("deletion vector of %s: %w", a.Path, err)
	}
	f, size, err := t.OpenFile(ctx, a)
	if err != nil {
		return fmt.Errorf("open %s: %w", a.Path, err)
	}
	defer f.Close()
	rd, err := parquetio.ReadFile(ctx, f, size, t.Schema, parquetio.ReadOptions{
		Columns: cols, PartitionValues: a.PartitionValues, Deleted: bm, Name: a.Path, WithRowIndex: rowIndex,
	})
	if err != nil {
		return err
	}
	defer rd.Close()
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		err = fn(rec)
		rec.Release()
		if err != nil {
			return err
		}
	}
}

// Counts is what Count found.
type Counts struct {
	Live, Deleted int64 // rows; Deleted only for tables with _cdc_deleted
}

// Count counts the current rows, split into live rows and tombstones.
func (t *Table) Count(ctx context.Context) (Counts, error) {
	var c Counts
	if !t.HasDeletedColumn() {
		// Still read (not just stats): stats may be missing and DVs matter.
		cols := []string{}
		if len(t.Schema.Fields) > 0 {
			cols = []string{t.Schema.Fields[0].Name}
		}
		err := t.ScanRecords(ctx, cols, func(rec arrow.RecordBatch) error {
			c.Live += rec.NumRows()
			return nil
		})
		return c, err
	}
	err := t.ScanRecords(ctx, []string{layout.ColDeleted}, func(rec arrow.RecordBatch) error {
		d := rec.Column(0).(*array.Boolean)
		for i := 0; i < d.Len(); i++ {
			if d.IsValid(i) && d.Value(i) {
				c.Deleted++
			} else {
				c.Live++
			}
		}
		return nil
	})
	return c, err
}
