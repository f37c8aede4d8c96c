package schema

import (
	"encoding/json"
	"fmt"
	"strings"
)

// IncompatibleError reports a schema change Evolve refuses.
type IncompatibleError struct {
	Column string   // dotted path of the column ("a.b", "arr.element", "m.value")
	Old    DataType // type in the table (nil if not applicable)
	New    DataType // incoming type
	Reason string
}

func (e *IncompatibleError) Error() string {
	var o, n string
	if e.Old != nil {
		o = typeString(e.Old)
	}
	if e.New != nil {
		n = typeString(e.New)
	}
	return fmt.Sprintf("incompatible schema change for column %q: table type %s, incoming type %s: %s", e.Column, o, n, e.Reason)
}

func typeString(t DataType) string {
	b, err := TypeJSON(t)
	if err != nil {
		return t.TypeName()
	}
	return string(b)
}

// EvolveOptions controls Evolve.
type EvolveOptions struct {
	// AllowTypeWidening enables Delta type widening (table feature
	// "typeWidening"): byte->short->integer->long, float->double,
	// byte/short/integer->double, date->timestamp_ntz, decimal precision/scale
	// increase (scale increase <= precision increase), and
	// byte/short/integer/long->decimal with enough integer digits.
	// Each widened field gets a "delta.typeChanges" metadata entry
	// ({"fromType":..,"toType":..}). The caller must make sure the table has
	// the typeWidening reader+writer feature before committing such a schema.
	AllowTypeWidening bool
}

// Evolve computes the table schema after writing data with schema incoming
// into a table with schema old, with type widening disabled.
//
// Rules: columns in old keep their position; columns only in incoming are
// appended at the end (of their struct) and always made nullable; columns
// missing from incoming are kept (they read as null); nested structs evolve
// recursively (also inside arrays and maps); a column whose table type is
// wider than the incoming type (e.g. long vs. integer) keeps the table type
// (the writer must cast); nullability is relaxed when incoming is nullable.
// Anything else is an *IncompatibleError. Names match case-insensitively;
// the table's spelling is kept. The result is a new schema; old is not
// modified.
func Evolve(old, incoming *StructType) (*StructType, error) {
	return EvolveWithOptions(old, incoming, EvolveOptions{})
}

// EvolveWithOptions is Evolve with options.
func EvolveWithOptions(old, incoming *StructType, opts EvolveOptions) (*StructType, error) {
	if old == nil {
		out := incoming.Clone()
		return out, nil
	}
	t, err := evolveType("", old, incoming, opts)
	if err != nil {
		return nil, err
	}
	return t.(*StructType), nil
}

// Changed reports whether evolving old with incoming changes the table schema
// (ignoring metadata).
func Changed(old, evolved *StructType) bool { return !Equal(old, evolved) }

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func evolveType(path string, old, in DataType, opts EvolveOptions) (DataType, error) {
	switch o := old.(type) {
	case *StructType:
		n, ok := in.(*StructType)
		if !ok {
			return nil, &IncompatibleError{Column: path, Old: old, New: in, Reason: "cannot change a struct into a non-struct"}
		}
		out := &StructType{Fields: make([]*StructField, 0, len(o.Fields)+len(n.Fields))}
		used := make([]bool, len(n.Fields))
		for _, of := range o.Fields {
			idx := matchField(n, of.Name)
			if idx < 0 {
				out.Fields = append(out.Fields, of.clone())
				continue
			}
			if used[idx] {
				return nil, &IncompatibleError{Column: join(path, of.Name), Old: of.Type, New: n.Fields[idx].Type, Reason: "incoming column matches more than one table column"}
			}
			used[idx] = true
			nf := n.Fields[idx]
			nt, err := evolveType(join(path, of.Name), of.Type, nf.Type, opts)
			if err != nil {
				return nil, err
			}
			f := of.clone()
			f.Nullable = of.Nullable || nf.Nullable
			for _, c := range leafChanges("", of.Type, nt) {
				addTypeChange(f, c)
			}
			f.Type = nt
			out.Fields = append(out.Fields, f)
		}
		for i, nf := range n.Fields {
			if used[i] {
				continue
			}
			// Two incoming fields that differ only in case both map to nothing
			// in old: refuse, Delta names are case-insensitive.
			for _, f := range out.Fields {
				if strings.EqualFold(f.Name, nf.Name) {
					return nil, &IncompatibleError{Column: join(path, nf.Name), New: nf.Type, Reason: "duplicate column name (case-insensitive)"}
				}
			}
			f := nf.clone()
			f.Nullable = true
			out.Fields = append(out.Fields, f)
		}
		return out, nil
	case *ArrayType:
		n, ok := in.(*ArrayType)
		if !ok {
			return nil, &IncompatibleError{Column: path, Old: old, New: in, Reason: "cannot change an array into a non-array"}
		}
		et, err := evolveType(path+".element", o.ElementType, n.ElementType, opts)
		if err != nil {
			return nil, err
		}
		return &ArrayType{ElementType: et, ContainsNull: o.ContainsNull || n.ContainsNull}, nil
	case *MapType:
		n, ok := in.(*MapType)
		if !ok {
			return nil, &IncompatibleError{Column: path, Old: old, New: in, Reason: "cannot change a map into a non-map"}
		}
		kt, err := evolveType(path+".key", o.KeyType, n.KeyType, opts)
		if err != nil {
			return nil, err
		}
		vt, err := evolveType(path+".value", o.ValueType, n.ValueType, opts)
		if err != nil {
			return nil, err
		}
		return &MapType{KeyType: kt, ValueType: vt, ValueContainsNull: o.ValueContainsNull || n.ValueContainsNull}, nil
	case *UnknownType:
		if Equal(old, in) {
			return cloneType(old), nil
		}
		return nil, &IncompatibleError{Column: path, Old: old, New: in, Reason: "unsupported table type"}
	}
	// primitive or decimal
	if Equal(old, in) {
		return cloneType(old), nil
	}
	if _, ok := in.(*UnknownType); ok {
		return nil, &IncompatibleError{Column: path, Old: old, New: in, Reason: "unsupported incoming type"}
	}
	if CanWiden(in, old) {
		// incoming is narrower than the table: keep the table type, the writer casts.
		return cloneType(old), nil
	}
	if CanWiden(old, in) {
		if !opts.AllowTypeWidening {
			return nil, &IncompatibleError{Column: path, Old: old, New: in, Reason: "type widening requires the typeWidening table feature, which is not enabled"}
		}
		return cloneType(in), nil
	}
	return nil, &IncompatibleError{Column: path, Old: old, New: in, Reason: "type change not allowed"}
}

type typeChange struct {
	fieldPath string
	from, to  DataType
}

// leafChanges lists primitive type changes between old and evolved that
// belong to the enclosing struct field (descending through arrays and maps
// but not into structs, whose fields carry their own metadata).
func leafChanges(path string, old, evolved DataType) []typeChange {
	switch o := old.(type) {
	case *ArrayType:
		n := evolved.(*ArrayType)
		return leafChanges(join(path, "element"), o.ElementType, n.ElementType)
	case *MapType:
		n := evolved.(*MapType)
		return append(leafChanges(join(path, "key"), o.KeyType, n.KeyType),
			leafChanges(join(path, "value"), o.ValueType, n.ValueType)...)
	case PrimitiveType, *DecimalType:
		if !Equal(old, evolved) {
			return []typeChange{{fieldPath: path, from: old, to: evolved}}
		}
	}
	return nil
}

func matchField(s *StructType, name string) int {
	for i, f := range s.Fields {
		if f.Name == name {
			return i
		}
	}
	idx := -1
	for i, f := range s.Fields {
		if strings.EqualFold(f.Name, name) {
			if idx >= 0 {
				return -1
			}
			idx = i
		}
	}
	return idx
}

func addTypeChange(f *StructField, c typeChange) {
	change := map[string]any{"fromType": c.from.TypeName(), "toType": c.to.TypeName()}
	if c.fieldPath != "" {
		change["fieldPath"] = c.fieldPath
	}
	var list []any
	if prev, ok := f.Metadata["delta.typeChanges"].([]any); ok {
		list = append(list, prev...)
	}
	list = append(list, change)
	f.Metadata["delta.typeChanges"] = list
}

// TypeChanges returns the "delta.typeChanges" history recorded in a field's
// metadata, if any.
func TypeChanges(f *StructField) ([]map[string]any, error) {
	v, ok := f.Metadata["delta.typeChanges"]
	if !ok {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out []map[string]any
	err = json.Unmarshal(b, &out)
	return out, err
}

// intDigits is the number of decimal digits an integer type needs.
func intDigits(p PrimitiveType) int {
	switch p {
	case Byte:
		return 3
	case Short:
		return 5
	case Integer:
		return 10
	case Long:
		return 20
	}
	return -1
}

// CanWiden reports whether Delta type widening allows changing a column of
// type from to type to (from != to).
func CanWiden(from, to DataType) bool {
	switch f := from.(type) {
	case PrimitiveType:
		switch t := to.(type) {
		case PrimitiveType:
			switch f {
			case Byte:
				return t == Short || t == Integer || t == Long || t == Double
			case Short:
				return t == Integer || t == Long || t == Double
			case Integer:
				return t == Long || t == Double
			case Float:
				return t == Double
			case Date:
				return t == TimestampNTZ
			}
		case *DecimalType:
			d := intDigits(f)
			return d > 0 && t.Precision-t.Scale >= d
		}
	case *DecimalType:
		t, ok := to.(*DecimalType)
		if !ok || (t.Precision == f.Precision && t.Scale == f.Scale) {
			return false
		}
		return t.Precision >= f.Precision && t.Scale >= f.Scale && t.Scale-f.Scale <= t.Precision-f.Precision
	}
	return false
}
