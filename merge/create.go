// Creating a table from its first change, and schema evolution (added, widened, dropped columns).

package merge

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/delta/schema"
	"github.com/cdcsink/cdc-sink/layout"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/versioning"
)

// create writes version 0 of a new table shaped by the first change.
func (t *Table) create(ctx context.Context, first *normalize.Change) error {
	if len(first.KeyNames) == 0 {
		return fmt.Errorf("create table %s: first change has no key columns", t.dir)
	}
	keyTypes := make([]normalize.Type, len(first.KeyNames))
	for i, k := range first.KeyNames {
		if first.Schema != nil {
			if j := first.Schema.Index(k); j >= 0 {
				keyTypes[i] = first.Schema.Columns[j].Type
				continue
			}
		}
		if i < len(first.Key) {
			keyTypes[i] = inferType(first.Key[i])
		}
	}
	src := first.Schema
	if src == nil {
		src = &normalize.Schema{}
	}
	sc, err := tableSchema(src, first.KeyNames, keyTypes)
	if err != nil {
		return fmt.Errorf("create table %s: %w", t.dir, err)
	}
	var maxColumnID int64
	if t.opts.ColumnMapping == ColumnMappingName {
		if sc, maxColumnID, err = schema.AssignColumnMapping(sc, 0); err != nil {
			return fmt.Errorf("create table %s: %w", t.dir, err)
		}
	}
	now := t.opts.Now()
	id := first.Table
	meta := &delta.Metadata{
		ID:               uuid.NewString(),
		Name:             id.Table,
		Format:           delta.Format{Provider: "parquet", Options: map[string]string{}},
		SchemaString:     sc.String(),
		PartitionColumns: []string{},
		Configuration: map[string]string{
			"delta.enableDeletionVectors": "true",
			"delta.checkpointInterval":    strconv.Itoa(t.opts.CheckpointInterval),
			layout.ConfKeyColumns:         strings.Join(first.KeyNames, ","),
			layout.ConfSink:               t.opts.Sink,
			layout.ConfSourceID:           strings.Trim(strings.Join([]string{id.Server, id.DB, id.Schema, id.Table}, "."), "."),
		},
		CreatedTime: ptr(now.UnixMilli()),
	}
	proto := &delta.Protocol{MinReaderVersion: 3, MinWriterVersion: 7,
		ReaderFeatures: []string{"deletionVectors"},
		WriterFeatures: []string{"deletionVectors", "domainMetadata", "invariants"}}
	if schema.HasTimestampNTZ(sc) {
		proto.ReaderFeatures = append(proto.ReaderFeatures, "timestampNtz")
		proto.WriterFeatures = append(proto.WriterFeatures, "timestampNtz")
	}
	if t.opts.ChangeDataFeed {
		meta.Configuration[delta.ConfEnableChangeDataFeed] = "true"
		proto.WriterFeatures = append(proto.WriterFeatures, delta.FeatureChangeDataFeed)
	}
	if t.opts.ColumnMapping == ColumnMappingName {
		meta.Configuration["delta.columnMapping.mode"] = "name"
		meta.Configuration[schema.MaxColumnIDProperty] = strconv.FormatInt(maxColumnID, 10)
		proto.ReaderFeatures = append(proto.ReaderFeatures, "columnMapping")
		proto.WriterFeatures = append(proto.WriterFeatures, "columnMapping")
	}
	if err := t.ops.create(ctx, meta, proto); err != nil {
		return fmt.Errorf("create table %s: %w", t.dir, err)
	}
	return t.reload(ctx)
}

func inferType(v any) normalize.Type {
	switch x := v.(type) {
	case bool:
		return normalize.Type{Kind: normalize.Boolean}
	case int8:
		return normalize.Type{Kind: normalize.Byte}
	case int16:
		return normalize.Type{Kind: normalize.Short}
	case int32:
		return normalize.Type{Kind: normalize.Integer}
	case int64:
		return normalize.Type{Kind: normalize.Long}
	case float32:
		return normalize.Type{Kind: normalize.Float}
	case float64:
		return normalize.Type{Kind: normalize.Double}
	case []byte:
		return normalize.Type{Kind: normalize.Binary}
	case decimal.Decimal:
		return normalize.Type{Kind: normalize.Decimal, Precision: 38, Scale: int(-x.Exponent())}
	}
	return normalize.Type{Kind: normalize.String}
}

// schemaChange is a table schema evolve installed in memory; it is committed
// with the batch's data (one commit), or reverted when the batch commits
// nothing or fails.
type schemaChange struct {
	oldMeta   *delta.Metadata
	oldProto  delta.Protocol
	oldSchema *schema.StructType
	meta      *delta.Metadata
	proto     *delta.Protocol // nil: unchanged
	added     []string        // "name type"
	widened   []string        // "name from -> to"
	// rewrite: the widening needs every data file rewritten with the new
	// schema (rewriteFiles); rewritten holds the replaced adds by file id.
	rewrite   bool
	rewritten map[int32]*delta.Add
	dropped   []string // columns dropped (schema.on_drop_column=drop)
}

// evolve brings the table schema up to the batch's source schemas: source
// columns the table does not have are added (nullable, at the end), and
// columns whose source type is wider (normalize.Widen) are widened with
// Delta type widening (table feature typeWidening, delta.typeChanges in the
// field metadata; files already written keep their narrow type and read as
// the wide one). Changes the table cannot follow (incompatible types, a
// widening Delta does not allow) are left to mapping(), which rejects them
// as schema_mismatch. The result is installed in memory only: the caller
// commits it with the data or reverts it.
func (t *Table) evolve(changes []*normalize.Change) (*schemaChange, error) {
	st := t.st
	cur := st.schema
	var added []*schema.StructField
	var addedNames, widened []string
	metaOnly, rewrite := false, false
	seen := map[*normalize.Schema]bool{}
	names := map[string]bool{}
	for _, c := range changes {
		if c.Schema == nil || seen[c.Schema] {
			continue
		}
		seen[c.Schema] = true
		if _, ok := st.colMaps[c.Schema]; ok {
			continue
		}
		for _, col := range c.Schema.Columns {
			if col.NullOnly || layout.IsMetaColumn(col.Name) {
				continue
			}
			j := fieldIndex(cur, col.Name)
			if j < 0 {
				if names[col.Name] || t.droppedBefore(col.Name, c) {
					continue
				}
				dt, err := deltaType(col.Type)
				if err != nil {
					continue // mapping() reports it
				}
				names[col.Name] = true
				added = append(added, schema.NewField(col.Name, dt, true))
				addedNames = append(addedNames, col.Name+" "+dt.TypeName())
				continue
			}
			have := cur.Fields[j].Type
			haveN, err := normalizeType(have)
			if err != nil || normalize.TypeEqual(haveN, col.Type) {
				continue
			}
			w, ok := normalize.Widen(haveN, col.Type)
			if !ok || normalize.TypeEqual(w, haveN) {
				continue // incompatible (mapping() rejects), or the table is already wider (cast)
			}
			if slices.Contains(st.keyCols, col.Name) && !keyWidening(haveN, w) {
				continue
			}
			wt, err := deltaType(w)
			if err != nil || t.opts.Widening == WidenOff {
				continue
			}
			cand := cur.Clone()
			cand.Fields[j].Type = wt
			if t.opts.Widening == WidenTypeWidening {
				if ev, err := schema.EvolveWithOptions(cur, cand, schema.EvolveOptions{AllowTypeWidening: true}); err == nil {
					widened = append(widened, col.Name+" "+have.TypeName()+" -> "+wt.TypeName())
					metaOnly = true
					cur = ev
					continue
				}
				// not a metadata-only widening in Delta (long→double): rewrite
			}
			widened = append(widened, col.Name+" "+have.TypeName()+" -> "+wt.TypeName()+" (rewrite)")
			rewrite = true
			cur = cand
		}
	}
	dropped, droppedNow := t.droppedColumns(changes, cur)
	if len(droppedNow) > 0 {
		keep := make([]*schema.StructField, 0, len(cur.Fields))
		for _, f := range cur.Fields {
			if _, ok := droppedNow[f.Name]; !ok {
				keep = append(keep, f)
			}
		}
		cur = &schema.StructType{Fields: keep}
		// Column-mapped tables drop by metadata (files are read by physical
		// name, so the old values never come back); others rewrite the files.
		if !columnMapped(st.meta) {
			rewrite = true
		}
	}
	readded := false
	for _, f := range added {
		if _, ok := dropped[f.Name]; ok {
			delete(dropped, f.Name) // the source has the column again (a newer change carries it)
			readded = true
		}
	}
	if len(added) == 0 && len(widened) == 0 && len(droppedNow) == 0 {
		return nil, nil
	}
	ns := cur
	if len(added) > 0 {
		ns = &schema.StructType{Fields: append(append([]*schema.StructField(nil), cur.Fields...), added...)}
	}
	sc := &schemaChange{oldMeta: st.meta, oldProto: st.proto, oldSchema: st.schema, added: addedNames, widened: widened, rewrite: rewrite}
	meta := *st.meta
	if columnMapped(st.meta) {
		// new columns (and nested fields) get ids and physical names
		maxID, _ := strconv.ParseInt(st.meta.Configuration[schema.MaxColumnIDProperty], 10, 64)
		mapped, next, err := schema.AssignColumnMapping(ns, maxID)
		if err != nil {
			return nil, fmt.Errorf("table %s: %w", t.dir, err)
		}
		ns = mapped
		meta.Configuration = maps.Clone(meta.Configuration)
		meta.Configuration[schema.MaxColumnIDProperty] = strconv.FormatInt(next, 10)
	}
	meta.SchemaString = ns.String()
	if metaOnly {
		meta.Configuration = maps.Clone(meta.Configuration)
		meta.Configuration["delta.enableTypeWidening"] = "true"
		if !slices.Contains(st.proto.ReaderFeatures, "typeWidening") && !slices.Contains(st.proto.ReaderFeatures, "typeWidening-preview") {
			p := delta.WithReaderWriterFeature(st.proto, "typeWidening")
			sc.proto = &p
			st.proto = p
		}
	}
	if len(droppedNow) > 0 || readded {
		meta.Configuration = maps.Clone(meta.Configuration)
		if len(dropped) == 0 {
			delete(meta.Configuration, layout.ConfDroppedColumns)
		} else {
			b, err := json.Marshal(dropped)
			if err != nil {
				return nil, err
			}
			meta.Configuration[layout.ConfDroppedColumns] = string(b)
		}
		for name := range droppedNow {
			sc.dropped = append(sc.dropped, name)
		}
		slices.Sort(sc.dropped)
	}
	sc.meta = &meta
	st.meta = &meta
	if err := st.setSchema(ns); err != nil {
		t.revertSchema(sc)
		return nil, err
	}
	return sc, nil
}

// keyWidening reports whether a key column may widen from → to: only where
// the key encoding (AppendKey) of every value stays the same, so stored rows
// keep matching their keys.
func keyWidening(from, to normalize.Type) bool {
	integral := func(k normalize.Kind) bool {
		return k == normalize.Byte || k == normalize.Short || k == normalize.Integer || k == normalize.Long
	}
	return (integral(from.Kind) && integral(to.Kind)) || (from.Kind == normalize.Decimal && to.Kind == normalize.Decimal)
}

// revertSchema undoes an uncommitted schemaChange (the files a rewrite
// wrote stay unreferenced, for vacuum).
func (t *Table) revertSchema(sc *schemaChange) {
	st := t.st
	st.meta, st.proto = sc.oldMeta, sc.oldProto
	_ = st.setSchema(sc.oldSchema) // was valid before
	for id, a := range sc.rewritten {
		delete(st.byPath, st.files[id].add.Path)
		st.byPath[a.Path] = id
		st.files[id].add = a
	}
}

// DropMode says what happens to a table column the source dropped.
type DropMode string

const (
	DropKeep DropMode = "keep" // the column stays; new rows hold null (default)
	DropDrop DropMode = "drop" // the column is dropped from the table (files rewritten)
)

// ParseDropMode validates a configured mode ("" = keep).
func ParseDropMode(s string) (DropMode, error) {
	switch m := DropMode(s); m {
	case "":
		return DropKeep, nil
	case DropKeep, DropDrop:
		return m, nil
	}
	return "", fmt.Errorf("unknown on_drop_column mode %q (want keep or drop)", s)
}

// dropped returns the table's dropped-column record.
func (st *state) dropped() map[string]versioning.Version {
	out := map[string]versioning.Version{}
	raw := st.meta.Configuration[layout.ConfDroppedColumns]
	if raw == "" {
		return out
	}
	var m map[string]string
	if json.Unmarshal([]byte(raw), &m) != nil {
		return out
	}
	for k, v := range m {
		if ver, err := versioning.ParseVersion(v); err == nil {
			out[k] = ver
		}
	}
	return out
}

// droppedBefore reports whether column name was dropped from the table at a
// version newer than change c (so c's value for it is ignored).
func (t *Table) droppedBefore(name string, c *normalize.Change) bool {
	v, ok := t.st.dropped()[name]
	return ok && !v.Less(c.Version)
}

// droppedColumns returns the table's dropped-column record (updated) and the
// business columns to drop now: those the newest change with a source schema
// (not inferred: a schemaless record just may not mention a column) lacks.
func (t *Table) droppedColumns(changes []*normalize.Change, cur *schema.StructType) (map[string]string, map[string]bool) {
	rec := map[string]string{}
	for k, v := range t.st.dropped() {
		rec[k] = v.String()
	}
	if t.opts.OnDropColumn != DropDrop {
		return rec, nil
	}
	var newest *normalize.Change
	for _, c := range changes {
		if c.Schema == nil || c.Schema.Inferred || len(c.Schema.Columns) == 0 {
			continue
		}
		if newest == nil || newest.Version.Less(c.Version) {
			newest = c
		}
	}
	if newest == nil {
		return rec, nil
	}
	if _, known := t.st.colMaps[newest.Schema]; known {
		// mapped before: its drops were applied then (this runs every batch)
		return rec, nil
	}
	var now map[string]bool
	for _, f := range cur.Fields {
		if layout.IsMetaColumn(f.Name) || slices.Contains(t.st.keyCols, f.Name) || newest.Schema.Index(f.Name) >= 0 {
			continue
		}
		if now == nil {
			now = map[string]bool{}
		}
		now[f.Name] = true
		rec[f.Name] = newest.Version.String()
	}
	return rec, now
}

// Column mapping of new tables (Options.ColumnMapping).
const (
	ColumnMappingNone = "none" // columns are stored under their names (default)
	// ColumnMappingName: Delta column mapping mode "name" — Parquet columns
	// get stable physical names, so a dropped column is dropped by metadata
	// alone (schema.on_drop_column=drop) and never resurrected.
	ColumnMappingName = "name"
)

// ParseColumnMapping validates a configured mode ("" = none).
func ParseColumnMapping(s string) (string, error) {
	switch s {
	case "", ColumnMappingNone:
		return ColumnMappingNone, nil
	case ColumnMappingName:
		return s, nil
	}
	return "", fmt.Errorf("unknown column mapping mode %q (want none or name)", s)
}

func columnMapped(m *delta.Metadata) bool {
	return m.Configuration["delta.columnMapping.mode"] == ColumnMappingName
}
