package schema

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Column mapping metadata keys and table property (Delta protocol, "Column
// Mapping").
const (
	ColumnMappingIDKey           = "delta.columnMapping.id"
	ColumnMappingPhysicalNameKey = "delta.columnMapping.physicalName"
	MaxColumnIDProperty          = "delta.columnMapping.maxColumnId"
)

// AssignColumnMapping returns a copy of s in which every field (nested
// fields of structs, also inside arrays and maps, included) that has no
// column mapping yet gets the next column id after maxColumnID and a new
// globally unique physical name ("col-<uuid>"), as the protocol requires of
// writers for new columns; fields that already have both keep them. It
// returns the new maximum id, the value to commit as the table property
// delta.columnMapping.maxColumnId together with the schema. Use it when
// enabling column mapping (maxColumnID 0) and after every schema evolution
// of a column-mapped table (maxColumnID = the current property).
func AssignColumnMapping(s *StructType, maxColumnID int64) (*StructType, int64, error) {
	out := s.Clone()
	next := maxColumnID
	// Ids already in the schema count too, so ids never repeat even when the
	// property lags behind.
	scan := func(t DataType) error {
		return eachField(t, func(f *StructField) error {
			if v, ok := f.Metadata[ColumnMappingIDKey]; ok {
				id, err := metaInt(v)
				if err != nil {
					return fmt.Errorf("assign column mapping: field %q: %s: %w", f.Name, ColumnMappingIDKey, err)
				}
				next = max(next, id)
			}
			return nil
		})
	}
	if err := scan(out); err != nil {
		return nil, 0, err
	}
	err := eachField(out, func(f *StructField) error {
		_, hasID := f.Metadata[ColumnMappingIDKey]
		p, _ := f.Metadata[ColumnMappingPhysicalNameKey].(string)
		if hasID && p != "" {
			return nil
		}
		if hasID != (p != "") {
			return fmt.Errorf("assign column mapping: field %q has only one of %s and %s", f.Name, ColumnMappingIDKey, ColumnMappingPhysicalNameKey)
		}
		next++
		if next > 1<<31-1 {
			return fmt.Errorf("assign column mapping: column ids exhausted (Parquet field ids are 32 bit)")
		}
		name, err := newPhysicalName()
		if err != nil {
			return fmt.Errorf("assign column mapping: %w", err)
		}
		f.Metadata[ColumnMappingIDKey] = json.Number(strconv.FormatInt(next, 10))
		f.Metadata[ColumnMappingPhysicalNameKey] = name
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return out, next, nil
}

// eachField calls fn for every struct field in t, parents before children.
func eachField(t DataType, fn func(*StructField) error) error {
	switch t := t.(type) {
	case *StructType:
		for _, f := range t.Fields {
			if f.Metadata == nil {
				f.Metadata = map[string]any{}
			}
			if err := fn(f); err != nil {
				return err
			}
			if err := eachField(f.Type, fn); err != nil {
				return err
			}
		}
	case *ArrayType:
		return eachField(t.ElementType, fn)
	case *MapType:
		if err := eachField(t.KeyType, fn); err != nil {
			return err
		}
		return eachField(t.ValueType, fn)
	}
	return nil
}

func metaInt(v any) (int64, error) {
	switch x := v.(type) {
	case json.Number:
		return x.Int64()
	case float64:
		if x == float64(int64(x)) {
			return int64(x), nil
		}
	case int64:
		return x, nil
	case int:
		return int64(x), nil
	}
	return 0, fmt.Errorf("not an integer: %v", v)
}

func newPhysicalName() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("col-%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}

// DropColumn returns a copy of s without the column at path (dotted for a
// field of a struct column; names match like StructType.Field). On a table
// with column mapping mode "name" this is all a drop takes: data files keep
// the column under its physical name, which no field of the new schema has,
// so readers no longer see it, and a column added later with the same name
// gets a new physical name (AssignColumnMapping) and so never reads the old
// values. Without column mapping, dropping would let a re-added column of
// the same name read the old data: refuse it there.
func DropColumn(s *StructType, path string) (*StructType, error) {
	out := s.Clone()
	parts := strings.Split(path, ".")
	cur := out
	for i, p := range parts {
		f, idx := cur.Field(p)
		if f == nil {
			return nil, fmt.Errorf("drop column %q: no field %q", path, p)
		}
		if pn, _ := f.Metadata[ColumnMappingPhysicalNameKey].(string); pn == "" {
			return nil, fmt.Errorf("drop column %q: field %q has no column mapping (a drop needs column mapping mode name)", path, f.Name)
		}
		if i == len(parts)-1 {
			if i == 0 && len(cur.Fields) == 1 {
				return nil, fmt.Errorf("drop column %q: a table needs at least one column", path)
			}
			// Copy the slice: Clone shares nothing, but keep the intent clear.
			cur.Fields = append(append([]*StructField{}, cur.Fields[:idx]...), cur.Fields[idx+1:]...)
			return out, nil
		}
		st, ok := f.Type.(*StructType)
		if !ok {
			return nil, fmt.Errorf("drop column %q: %q is not a struct", path, f.Name)
		}
		cur = st
	}
	return out, nil
}
