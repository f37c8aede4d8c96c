// Package schema models Delta Lake table schemas (the Spark JSON schema
// format stored in metaData.schemaString), converts them to Arrow schemas with
// Spark-compatible physical choices, and decides schema evolution.
package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// DataType is a Delta (Spark) data type. Implementations: PrimitiveType,
// *DecimalType, *ArrayType, *MapType, *StructType and *UnknownType.
type DataType interface {
	// TypeName is the Spark simple name: "long", "decimal(10,2)", "array",
	// "map", "struct" or the unknown type's name.
	TypeName() string
	isDataType()
}

// PrimitiveType is a non-parameterised primitive type.
type PrimitiveType string

// Primitive types known to Delta.
const (
	String       PrimitiveType = "string"
	Long         PrimitiveType = "long"
	Integer      PrimitiveType = "integer"
	Short        PrimitiveType = "short"
	Byte         PrimitiveType = "byte"
	Float        PrimitiveType = "float"
	Double       PrimitiveType = "double"
	Boolean      PrimitiveType = "boolean"
	Binary       PrimitiveType = "binary"
	Date         PrimitiveType = "date"
	Timestamp    PrimitiveType = "timestamp"
	TimestampNTZ PrimitiveType = "timestamp_ntz"
)

var knownPrimitives = map[string]PrimitiveType{
	"string": String, "long": Long, "integer": Integer, "short": Short, "byte": Byte,
	"float": Float, "double": Double, "boolean": Boolean, "binary": Binary,
	"date": Date, "timestamp": Timestamp, "timestamp_ntz": TimestampNTZ,
}

// TypeName implements DataType.
func (p PrimitiveType) TypeName() string { return string(p) }
func (PrimitiveType) isDataType()        {}

// DecimalType is decimal(Precision, Scale), 1 <= Precision <= 38, 0 <= Scale <= Precision.
type DecimalType struct {
	Precision int
	Scale     int
}

// TypeName implements DataType.
func (d *DecimalType) TypeName() string {
	return "decimal(" + strconv.Itoa(d.Precision) + "," + strconv.Itoa(d.Scale) + ")"
}
func (*DecimalType) isDataType() {}

// ArrayType is an array of ElementType.
type ArrayType struct {
	ElementType  DataType
	ContainsNull bool
}

// TypeName implements DataType.
func (*ArrayType) TypeName() string { return "array" }
func (*ArrayType) isDataType()      {}

// MapType is a map from KeyType (never null) to ValueType.
type MapType struct {
	KeyType           DataType
	ValueType         DataType
	ValueContainsNull bool
}

// TypeName implements DataType.
func (*MapType) TypeName() string { return "map" }
func (*MapType) isDataType()      {}

// UnknownType is a type this package does not support (e.g. "variant",
// "void", "interval"). Parse accepts it so the caller can refuse the table
// with a clear message (see (*StructType).Unsupported).
type UnknownType struct {
	Name string          // simple name, or the "type" member of a complex type
	Raw  json.RawMessage // the type exactly as it appeared in the JSON
}

// TypeName implements DataType.
func (u *UnknownType) TypeName() string { return u.Name }
func (*UnknownType) isDataType()        {}

// StructField is one column / nested field.
type StructField struct {
	Name     string
	Type     DataType
	Nullable bool
	// Metadata is the field metadata (column mapping ids, type-change history,
	// collations, comments...). Numbers are json.Number, objects map[string]any,
	// arrays []any. Key order of parsed metadata is preserved on marshal when
	// the value was not changed.
	Metadata map[string]any

	orig []metaEntry // metadata as parsed, for byte-exact round trips
}

type metaEntry struct {
	key string
	raw json.RawMessage
	val any
}

// StructType is a struct type and also the type of a table schema.
type StructType struct {
	Fields []*StructField
}

// TypeName implements DataType.
func (*StructType) TypeName() string { return "struct" }
func (*StructType) isDataType()      {}

// NewStruct is a convenience constructor.
func NewStruct(fields ...*StructField) *StructType { return &StructType{Fields: fields} }

// NewField is a convenience constructor with empty metadata.
func NewField(name string, t DataType, nullable bool) *StructField {
	return &StructField{Name: name, Type: t, Nullable: nullable, Metadata: map[string]any{}}
}

// Field returns the field with exactly this name, or, failing that, the only
// field whose name matches case-insensitively (Delta column names are
// case-insensitive). It returns nil, -1 when absent.
func (s *StructType) Field(name string) (*StructField, int) {
	for i, f := range s.Fields {
		if f.Name == name {
			return f, i
		}
	}
	idx := -1
	for i, f := range s.Fields {
		if strings.EqualFold(f.Name, name) {
			if idx >= 0 {
				return nil, -1 // ambiguous
			}
			idx = i
		}
	}
	if idx < 0 {
		return nil, -1
	}
	return s.Fields[idx], idx
}

// FieldNames returns the top-level column names in order.
func (s *StructType) FieldNames() []string {
	out := make([]string, len(s.Fields))
	for i, f := range s.Fields {
		out[i] = f.Name
	}
	return out
}

// Unsupported lists, as "path: type" strings, every place in the schema
// that uses a type or feature this package cannot read or write: unknown
// types (variant, void, ...) and string collations (metadata "__COLLATIONS").
// A nil result means the whole schema is supported.
func (s *StructType) Unsupported() []string {
	var out []string
	var walk func(path string, t DataType)
	walk = func(path string, t DataType) {
		switch t := t.(type) {
		case *UnknownType:
			out = append(out, path+": unsupported type "+strconv.Quote(t.Name))
		case *StructType:
			for _, f := range t.Fields {
				p := f.Name
				if path != "" {
					p = path + "." + f.Name
				}
				if _, ok := f.Metadata["__COLLATIONS"]; ok {
					out = append(out, p+": string collation (metadata __COLLATIONS) is not supported")
				}
				walk(p, f.Type)
			}
		case *ArrayType:
			walk(path+".element", t.ElementType)
		case *MapType:
			walk(path+".key", t.KeyType)
			walk(path+".value", t.ValueType)
		}
	}
	walk("", s)
	return out
}

// Validate returns an *UnsupportedError if Unsupported() is not empty.
func (s *StructType) Validate() error {
	if u := s.Unsupported(); len(u) > 0 {
		return &UnsupportedError{Problems: u}
	}
	return nil
}

// UnsupportedError reports schema elements this implementation cannot handle.
type UnsupportedError struct{ Problems []string }

func (e *UnsupportedError) Error() string {
	return "delta schema uses unsupported features: " + strings.Join(e.Problems, "; ")
}

// Equal reports whether two data types are structurally identical (names,
// types, nullability; metadata ignored).
func Equal(a, b DataType) bool {
	switch a := a.(type) {
	case PrimitiveType:
		b, ok := b.(PrimitiveType)
		return ok && a == b
	case *DecimalType:
		b, ok := b.(*DecimalType)
		return ok && a.Precision == b.Precision && a.Scale == b.Scale
	case *ArrayType:
		b, ok := b.(*ArrayType)
		return ok && a.ContainsNull == b.ContainsNull && Equal(a.ElementType, b.ElementType)
	case *MapType:
		b, ok := b.(*MapType)
		return ok && a.ValueContainsNull == b.ValueContainsNull && Equal(a.KeyType, b.KeyType) && Equal(a.ValueType, b.ValueType)
	case *StructType:
		b, ok := b.(*StructType)
		if !ok || len(a.Fields) != len(b.Fields) {
			return false
		}
		for i := range a.Fields {
			fa, fb := a.Fields[i], b.Fields[i]
			if fa.Name != fb.Name || fa.Nullable != fb.Nullable || !Equal(fa.Type, fb.Type) {
				return false
			}
		}
		return true
	case *UnknownType:
		b, ok := b.(*UnknownType)
		return ok && a.Name == b.Name && bytes.Equal(a.Raw, b.Raw)
	}
	return false
}

// ---------------------------------------------------------------- parsing

var decimalRe = regexp.MustCompile(`^decimal\(\s*(\d+)\s*,\s*(-?\d+)\s*\)$`)

// maxDepth bounds nesting to keep hostile schemas from exhausting the stack.
const maxDepth = 256

// Parse parses a Delta schemaString. Unknown types parse successfully as
// *UnknownType; call Validate to refuse them.
func Parse(schemaString string) (*StructType, error) {
	return ParseBytes([]byte(schemaString))
}

// ParseBytes is Parse for a byte slice.
func ParseBytes(b []byte) (*StructType, error) {
	t, err := parseType(json.RawMessage(b), 0)
	if err != nil {
		return nil, fmt.Errorf("delta schema: %w", err)
	}
	st, ok := t.(*StructType)
	if !ok {
		return nil, fmt.Errorf("delta schema: top level type is %q, want struct", t.TypeName())
	}
	return st, nil
}

// ParseType parses a single data type in Spark JSON form (e.g. `"long"` or
// `{"type":"array",...}`).
func ParseType(b []byte) (DataType, error) { return parseType(b, 0) }

func parseType(raw json.RawMessage, depth int) (DataType, error) {
	if depth > maxDepth {
		return nil, errors.New("schema nested too deeply")
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, errors.New("empty type")
	}
	if raw[0] == '"' {
		var name string
		if err := json.Unmarshal(raw, &name); err != nil {
			return nil, err
		}
		if p, ok := knownPrimitives[name]; ok {
			return p, nil
		}
		if m := decimalRe.FindStringSubmatch(name); m != nil {
			p, err1 := strconv.Atoi(m[1])
			s, err2 := strconv.Atoi(m[2])
			if err1 != nil || err2 != nil || p < 1 || p > 38 || s < 0 || s > p {
				return nil, fmt.Errorf("invalid decimal type %q", name)
			}
			return &DecimalType{Precision: p, Scale: s}, nil
		}
		if name == "decimal" { // Spark's DecimalType.USER_DEFAULT
			return &DecimalType{Precision: 10, Scale: 0}, nil
		}
		return &UnknownType{Name: name, Raw: append(json.RawMessage(nil), raw...)}, nil
	}
	if raw[0] != '{' {
		return nil, fmt.Errorf("invalid type %s", truncate(raw))
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, err
	}
	var kind string
	if err := json.Unmarshal(obj["type"], &kind); err != nil {
		return nil, fmt.Errorf("complex type without a string \"type\": %s", truncate(raw))
	}
	switch kind {
	case "struct":
		var fields []json.RawMessage
		if f, ok := obj["fields"]; ok {
			if err := json.Unmarshal(f, &fields); err != nil {
				return nil, fmt.Errorf("struct fields: %w", err)
			}
		} else {
			return nil, errors.New("struct without \"fields\"")
		}
		st := &StructType{Fields: make([]*StructField, 0, len(fields))}
		for _, fr := range fields {
			f, err := parseField(fr, depth+1)
			if err != nil {
				return nil, err
			}
			st.Fields = append(st.Fields, f)
		}
		return st, nil
	case "array":
		et, err := parseType(obj["elementType"], depth+1)
		if err != nil {
			return nil, fmt.Errorf("array elementType: %w", err)
		}
		var cn bool
		if err := json.Unmarshal(obj["containsNull"], &cn); err != nil {
			return nil, fmt.Errorf("array containsNull: %w", err)
		}
		return &ArrayType{ElementType: et, ContainsNull: cn}, nil
	case "map":
		kt, err := parseType(obj["keyType"], depth+1)
		if err != nil {
			return nil, fmt.Errorf("map keyType: %w", err)
		}
		vt, err := parseType(obj["valueType"], depth+1)
		if err != nil {
			return nil, fmt.Errorf("map valueType: %w", err)
		}
		var vcn bool
		if err := json.Unmarshal(obj["valueContainsNull"], &vcn); err != nil {
			return nil, fmt.Errorf("map valueContainsNull: %w", err)
		}
		return &MapType{KeyType: kt, ValueType: vt, ValueContainsNull: vcn}, nil
	default:
		var buf bytes.Buffer
		if err := json.Compact(&buf, raw); err != nil {
			return nil, err
		}
		return &UnknownType{Name: kind, Raw: buf.Bytes()}, nil
	}
}

func parseField(raw json.RawMessage, depth int) (*StructField, error) {
	var fr struct {
		Name     *string         `json:"name"`
		Type     json.RawMessage `json:"type"`
		Nullable *bool           `json:"nullable"`
		Metadata json.RawMessage `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &fr); err != nil {
		return nil, fmt.Errorf("struct field: %w", err)
	}
	if fr.Name == nil {
		return nil, fmt.Errorf("struct field without name: %s", truncate(raw))
	}
	if fr.Type == nil {
		return nil, fmt.Errorf("field %q: missing type", *fr.Name)
	}
	t, err := parseType(fr.Type, depth)
	if err != nil {
		return nil, fmt.Errorf("field %q: %w", *fr.Name, err)
	}
	f := &StructField{Name: *fr.Name, Type: t, Nullable: true, Metadata: map[string]any{}}
	if fr.Nullable != nil {
		f.Nullable = *fr.Nullable
	}
	if md := bytes.TrimSpace(fr.Metadata); len(md) > 0 && !bytes.Equal(md, []byte("null")) {
		entries, err := parseOrderedObject(md)
		if err != nil {
			return nil, fmt.Errorf("field %q metadata: %w", f.Name, err)
		}
		f.orig = entries
		for _, e := range entries {
			v, err := decodeAny(e.raw)
			if err != nil {
				return nil, fmt.Errorf("field %q metadata: %w", f.Name, err)
			}
			f.Metadata[e.key] = v
		}
	}
	return f, nil
}

// parseOrderedObject splits a JSON object into its members, in order.
func parseOrderedObject(raw []byte) ([]metaEntry, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("metadata is not a JSON object")
	}
	var out []metaEntry
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k, ok := kt.(string)
		if !ok {
			return nil, errors.New("bad metadata key")
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, v); err != nil {
			return nil, err
		}
		val, err := decodeAny(buf.Bytes())
		if err != nil {
			return nil, err
		}
		out = append(out, metaEntry{key: k, raw: buf.Bytes(), val: val})
	}
	return out, nil
}

func decodeAny(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

func truncate(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "..."
	}
	return string(b)
}

// ---------------------------------------------------------------- marshaling

// MarshalJSON renders the schema exactly as Spark does (compact, fields in
// the order name, type, nullable, metadata).
func (s *StructType) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	if err := writeType(&buf, s); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// UnmarshalJSON parses a schema in Spark JSON form.
func (s *StructType) UnmarshalJSON(b []byte) error {
	p, err := ParseBytes(b)
	if err != nil {
		return err
	}
	*s = *p
	return nil
}

// String returns the Spark JSON form (the value for metaData.schemaString).
func (s *StructType) String() string {
	b, err := s.MarshalJSON()
	if err != nil {
		return fmt.Sprintf("<invalid schema: %v>", err)
	}
	return string(b)
}

// TypeJSON renders a single data type in Spark JSON form.
func TypeJSON(t DataType) ([]byte, error) {
	var buf bytes.Buffer
	err := writeType(&buf, t)
	return buf.Bytes(), err
}

func writeString(buf *bytes.Buffer, s string) {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	buf.Truncate(buf.Len() - 1) // trailing newline
}

func writeType(buf *bytes.Buffer, t DataType) error {
	switch t := t.(type) {
	case PrimitiveType:
		writeString(buf, string(t))
	case *DecimalType:
		writeString(buf, t.TypeName())
	case *UnknownType:
		if len(t.Raw) > 0 {
			buf.Write(t.Raw)
		} else {
			writeString(buf, t.Name)
		}
	case *ArrayType:
		buf.WriteString(`{"type":"array","elementType":`)
		if err := writeType(buf, t.ElementType); err != nil {
			return err
		}
		buf.WriteString(`,"containsNull":`)
		buf.WriteString(strconv.FormatBool(t.ContainsNull))
		buf.WriteByte('}')
	case *MapType:
		buf.WriteString(`{"type":"map","keyType":`)
		if err := writeType(buf, t.KeyType); err != nil {
			return err
		}
		buf.WriteString(`,"valueType":`)
		if err := writeType(buf, t.ValueType); err != nil {
			return err
		}
		buf.WriteString(`,"valueContainsNull":`)
		buf.WriteString(strconv.FormatBool(t.ValueContainsNull))
		buf.WriteByte('}')
	case *StructType:
		buf.WriteString(`{"type":"struct","fields":[`)
		for i, f := range t.Fields {
			if i > 0 {
				buf.WriteByte(',')
			}
			buf.WriteString(`{"name":`)
			writeString(buf, f.Name)
			buf.WriteString(`,"type":`)
			if f.Type == nil {
				return fmt.Errorf("field %q has no type", f.Name)
			}
			if err := writeType(buf, f.Type); err != nil {
				return err
			}
			buf.WriteString(`,"nullable":`)
			buf.WriteString(strconv.FormatBool(f.Nullable))
			buf.WriteString(`,"metadata":`)
			if err := writeMetadata(buf, f); err != nil {
				return fmt.Errorf("field %q metadata: %w", f.Name, err)
			}
			buf.WriteByte('}')
		}
		buf.WriteString(`]}`)
	case nil:
		return errors.New("nil data type")
	default:
		return fmt.Errorf("unknown data type %T", t)
	}
	return nil
}

func writeMetadata(buf *bytes.Buffer, f *StructField) error {
	buf.WriteByte('{')
	first := true
	done := make(map[string]bool, len(f.orig))
	emit := func(k string, raw []byte) {
		if !first {
			buf.WriteByte(',')
		}
		first = false
		writeString(buf, k)
		buf.WriteByte(':')
		buf.Write(raw)
	}
	for _, e := range f.orig {
		v, ok := f.Metadata[e.key]
		if !ok {
			continue
		}
		done[e.key] = true
		if reflect.DeepEqual(v, e.val) {
			emit(e.key, e.raw)
			continue
		}
		raw, err := marshalValue(v)
		if err != nil {
			return err
		}
		emit(e.key, raw)
	}
	keys := make([]string, 0, len(f.Metadata))
	for k := range f.Metadata {
		if !done[k] {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		raw, err := marshalValue(f.Metadata[k])
		if err != nil {
			return err
		}
		emit(k, raw)
	}
	buf.WriteByte('}')
	return nil
}

func marshalValue(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

// Clone returns a deep copy of the schema (metadata maps are copied one
// level deep; nested metadata values are shared).
func (s *StructType) Clone() *StructType { return cloneType(s).(*StructType) }

func cloneType(t DataType) DataType {
	switch t := t.(type) {
	case *DecimalType:
		c := *t
		return &c
	case *ArrayType:
		return &ArrayType{ElementType: cloneType(t.ElementType), ContainsNull: t.ContainsNull}
	case *MapType:
		return &MapType{KeyType: cloneType(t.KeyType), ValueType: cloneType(t.ValueType), ValueContainsNull: t.ValueContainsNull}
	case *StructType:
		out := &StructType{Fields: make([]*StructField, len(t.Fields))}
		for i, f := range t.Fields {
			out.Fields[i] = f.clone()
		}
		return out
	case *UnknownType:
		return &UnknownType{Name: t.Name, Raw: append(json.RawMessage(nil), t.Raw...)}
	}
	return t
}

func (f *StructField) clone() *StructField {
	c := &StructField{Name: f.Name, Type: cloneType(f.Type), Nullable: f.Nullable, orig: f.orig}
	c.Metadata = make(map[string]any, len(f.Metadata))
	for k, v := range f.Metadata {
		c.Metadata[k] = v
	}
	return c
}

// HasTimestampNTZ reports whether dt is or contains (in a struct, array or
// map) timestamp_ntz: such a table needs the timestampNtz reader and writer
// feature.
func HasTimestampNTZ(dt DataType) bool {
	switch x := dt.(type) {
	case PrimitiveType:
		return x == TimestampNTZ
	case *StructType:
		for _, f := range x.Fields {
			if HasTimestampNTZ(f.Type) {
				return true
			}
		}
	case *ArrayType:
		return HasTimestampNTZ(x.ElementType)
	case *MapType:
		return HasTimestampNTZ(x.KeyType) || HasTimestampNTZ(x.ValueType)
	}
	return false
}
