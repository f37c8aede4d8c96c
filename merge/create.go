package merge

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/delta/schema"
	"github.com/cdcsink/cdc-sink/normalize"
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
	sc, err := TableSchema(src, first.KeyNames, keyTypes)
	if err != nil {
		return fmt.Errorf("create table %s: %w", t.dir, err)
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
			ConfKeyColumns:                strings.Join(first.KeyNames, ","),
			ConfSink:                      t.opts.Sink,
			ConfSourceID:                  strings.Trim(strings.Join([]string{id.Server, id.DB, id.Schema, id.Table}, "."), "."),
		},
		CreatedTime: ptr(now.UnixMilli()),
	}
	proto := &delta.Protocol{MinReaderVersion: 3, MinWriterVersion: 7,
		ReaderFeatures: []string{"deletionVectors"},
		WriterFeatures: []string{"deletionVectors", "domainMetadata", "invariants"}}
	if usesNTZ(sc) {
		proto.ReaderFeatures = append(proto.ReaderFeatures, "timestampNtz")
		proto.WriterFeatures = append(proto.WriterFeatures, "timestampNtz")
	}
	if err := t.ops.create(ctx, meta, proto); err != nil {
		return fmt.Errorf("create table %s: %w", t.dir, err)
	}
	return t.reload(ctx)
}

func usesNTZ(s *schema.StructType) bool {
	var walk func(dt schema.DataType) bool
	walk = func(dt schema.DataType) bool {
		switch x := dt.(type) {
		case schema.PrimitiveType:
			return x == schema.TimestampNTZ
		case *schema.StructType:
			for _, f := range x.Fields {
				if walk(f.Type) {
					return true
				}
			}
		case *schema.ArrayType:
			return walk(x.ElementType)
		case *schema.MapType:
			return walk(x.KeyType) || walk(x.ValueType)
		}
		return false
	}
	return walk(s)
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

// evolve adds the source columns the table does not have yet (nullable, at
// the end), in one metadata commit before the batch. Type changes are not
// evolved: mapping() sends those changes to quarantine as schema_mismatch.
func (t *Table) evolve(ctx context.Context, changes []*normalize.Change) error {
	st := t.st
	var added []*schema.StructField
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
			if col.NullOnly || fieldIndex(st.schema, col.Name) >= 0 || names[col.Name] || IsMetaColumn(col.Name) {
				continue
			}
			dt, err := DeltaType(col.Type)
			if err != nil {
				continue // mapping() reports it
			}
			names[col.Name] = true
			added = append(added, schema.NewField(col.Name, dt, true))
		}
	}
	if len(added) == 0 {
		return nil
	}
	ns := &schema.StructType{Fields: append(append([]*schema.StructField(nil), st.schema.Fields...), added...)}
	meta := *st.meta
	meta.SchemaString = ns.String()
	cols := make([]string, len(added))
	for i, f := range added {
		cols[i] = f.Name + " " + f.Type.TypeName()
	}
	p := &plan{metadata: &meta}
	v, _, err := t.ops.commit(ctx, st.version, p, "ADD COLUMNS", map[string]any{"columns": cols})
	if err != nil {
		return fmt.Errorf("add columns %v to %s: %w", cols, t.dir, err)
	}
	t.opts.Logger.Info("schema evolved", "table", t.dir, "version", v, "added", cols)
	st.version = v
	st.meta = &meta
	return st.setSchema(ns)
}
