// The reader and writer table features we implement, and the refusal of the others.

package delta

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cdcsink/cdc-sink/delta/schema"
)

// Reader features we implement. The log layer handles them fully; data
// reading of columnMapping tables must use physical names (delta/parquetio).
var supportedReaderFeatures = map[string]bool{
	"deletionVectors":     true,
	"timestampNtz":        true,
	"columnMapping":       true,
	"v2Checkpoint":        true, // read only: UUID-named checkpoints and sidecars
	"vacuumProtocolCheck": true,
	// Old data files keep their narrow Parquet types; parquetio widens them
	// to the table type on read (checkTypeChanges refuses unknown changes).
	"typeWidening":         true,
	"typeWidening-preview": true, // Delta 3.2's name; same read/write contract
}

// Writer features our commits keep valid. Anything else makes writes refuse.
var supportedWriterFeatures = map[string]bool{
	"deletionVectors": true,
	"domainMetadata":  true,
	"appendOnly":      true,
	"invariants":      true,
	"timestampNtz":    true,
	// Writers only have to record delta.typeChanges for the changes they
	// apply (schema.EvolveWithOptions does) and keep it on later schema
	// updates (Evolve clones field metadata).
	"typeWidening":         true,
	"typeWidening-preview": true,
	// Mode "name" only (checkColumnMappingWrite): data files are written by
	// physical name with field ids and stats/partition values keyed by
	// physical name; schema.AssignColumnMapping gives new columns ids and
	// physical names and tracks delta.columnMapping.maxColumnId.
	"columnMapping": true,
	// Writers must add change data files to data-changing commits when
	// delta.enableChangeDataFeed is true (Transaction.checkChangeData
	// refuses commits that remove data without them; merge writes them).
	FeatureChangeDataFeed: true,
}

// MaxReaderVersion / MaxWriterVersion are the protocol versions we speak.
const (
	MaxReaderVersion = 3
	MaxWriterVersion = 7
)

func checkReadSupported(p *Protocol, m *Metadata) error {
	if p.MinReaderVersion > MaxReaderVersion {
		return &UnsupportedFeatureError{Feature: fmt.Sprintf("readerVersion %d", p.MinReaderVersion), Reader: true}
	}
	if p.MinReaderVersion == MaxReaderVersion {
		for _, f := range p.ReaderFeatures {
			if !supportedReaderFeatures[f] {
				return &UnsupportedFeatureError{Feature: f, Reader: true}
			}
		}
	}
	if mode := m.Configuration["delta.columnMapping.mode"]; mode != "" && mode != "none" && mode != "name" && mode != "id" {
		return &UnsupportedFeatureError{Feature: "columnMapping mode " + mode, Reader: true}
	}
	if p.HasFeature("typeWidening") || p.HasFeature("typeWidening-preview") || strings.Contains(m.SchemaString, "delta.typeChanges") {
		if err := checkTypeChanges(m.SchemaString); err != nil {
			return err
		}
	}
	return nil
}

// checkTypeChanges makes sure we can read every type change recorded in the
// schema: the protocol requires readers to fail on type changes they do not
// support instead of misreading old files.
func checkTypeChanges(schemaString string) error {
	sch, err := schema.Parse(schemaString)
	if err != nil {
		return nil // the snapshot reports the schema error itself
	}
	var walk func(path string, st *schema.StructType) error
	walk = func(path string, st *schema.StructType) error {
		for _, f := range st.Fields {
			p := f.Name
			if path != "" {
				p = path + "." + f.Name
			}
			changes, err := schema.TypeChanges(f)
			if err != nil {
				return &UnsupportedFeatureError{Feature: fmt.Sprintf("typeWidening: unreadable delta.typeChanges of %q: %v", p, err), Reader: true}
			}
			for _, c := range changes {
				from, err1 := parseTypeName(c["fromType"])
				to, err2 := parseTypeName(c["toType"])
				if err1 != nil || err2 != nil || !schema.CanWiden(from, to) {
					return &UnsupportedFeatureError{Feature: fmt.Sprintf("typeWidening: type change %v -> %v of %q", c["fromType"], c["toType"], p), Reader: true}
				}
			}
			if err := walkNested(p, f.Type, walk); err != nil {
				return err
			}
		}
		return nil
	}
	return walk("", sch)
}

// walkNested calls fn for every struct inside t (also through arrays and maps).
func walkNested(path string, t schema.DataType, fn func(string, *schema.StructType) error) error {
	switch t := t.(type) {
	case *schema.StructType:
		return fn(path, t)
	case *schema.ArrayType:
		return walkNested(path+".element", t.ElementType, fn)
	case *schema.MapType:
		if err := walkNested(path+".key", t.KeyType, fn); err != nil {
			return err
		}
		return walkNested(path+".value", t.ValueType, fn)
	}
	return nil
}

func parseTypeName(v any) (schema.DataType, error) {
	s, ok := v.(string)
	if !ok {
		return nil, fmt.Errorf("type name %v is not a string", v)
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	return schema.ParseType(b)
}

// checkWriteSupported refuses writes to tables whose writer protocol asks
// for behaviour we do not implement (constraints, generated columns,
// identity columns, row tracking, column mapping...).
func checkWriteSupported(p *Protocol, m *Metadata) error {
	if err := checkReadSupported(p, m); err != nil {
		return err
	}
	switch {
	case p.MinWriterVersion > MaxWriterVersion:
		return &UnsupportedFeatureError{Feature: fmt.Sprintf("writerVersion %d", p.MinWriterVersion)}
	case p.MinWriterVersion == MaxWriterVersion:
		for _, f := range p.WriterFeatures {
			if !supportedWriterFeatures[f] {
				return &UnsupportedFeatureError{Feature: f}
			}
		}
	case p.MinWriterVersion >= 3:
		// legacy versions 3..6 imply checkConstraints, changeDataFeed,
		// generatedColumns, columnMapping, identityColumns.
		return &UnsupportedFeatureError{Feature: fmt.Sprintf("writerVersion %d (legacy checkConstraints/generatedColumns/changeDataFeed/columnMapping/identityColumns)", p.MinWriterVersion)}
	}
	if p.MinReaderVersion == MaxReaderVersion {
		for _, f := range p.ReaderFeatures {
			if f == "v2Checkpoint" {
				return &UnsupportedFeatureError{Feature: f}
			}
		}
	}
	if err := checkColumnMappingWrite(m); err != nil {
		return err
	}
	// invariants: we cannot evaluate SQL expressions, so refuse if any exist.
	if strings.Contains(m.SchemaString, "delta.invariants") {
		return &UnsupportedFeatureError{Feature: "invariants (column has delta.invariants)"}
	}
	for k := range m.Configuration {
		if strings.HasPrefix(k, "delta.constraints.") {
			return &UnsupportedFeatureError{Feature: "checkConstraints (" + k + ")"}
		}
	}
	return nil
}

// WithReaderWriterFeature returns p with the reader+writer table feature
// (typeWidening, timestampNtz…) listed, moving a legacy protocol to reader
// 3 / writer 7 with the features its versions implied (columnMapping for
// reader 2; appendOnly and invariants for writer 2; later legacy writer
// versions are refused for writes anyway). p is not modified.
func WithReaderWriterFeature(p Protocol, feature string) Protocol {
	if p.MinReaderVersion < MaxReaderVersion {
		var implied []string
		if p.MinReaderVersion == 2 {
			implied = []string{"columnMapping"}
		}
		p.MinReaderVersion, p.ReaderFeatures = MaxReaderVersion, implied
	}
	if !slices.Contains(p.ReaderFeatures, feature) {
		p.ReaderFeatures = append(slices.Clone(p.ReaderFeatures), feature)
	}
	return WithWriterFeature(p, feature)
}

// WithWriterFeature returns p with the writer-only table feature
// (changeDataFeed…) listed, moving a legacy writer version to 7 with the
// features it implied (appendOnly and invariants for writer 2; later legacy
// versions are refused for writes anyway). p is not modified.
func WithWriterFeature(p Protocol, feature string) Protocol {
	if p.MinWriterVersion < MaxWriterVersion {
		var implied []string
		if p.MinWriterVersion >= 2 {
			implied = []string{"appendOnly", "invariants"}
		}
		p.MinWriterVersion, p.WriterFeatures = MaxWriterVersion, implied
	}
	if !slices.Contains(p.WriterFeatures, feature) {
		p.WriterFeatures = append(slices.Clone(p.WriterFeatures), feature)
	}
	return p
}

// HasFeature reports whether the protocol lists feature as reader or writer feature.
func (p *Protocol) HasFeature(feature string) bool {
	for _, f := range p.ReaderFeatures {
		if f == feature {
			return true
		}
	}
	for _, f := range p.WriterFeatures {
		if f == feature {
			return true
		}
	}
	return false
}

// ParseInterval parses Delta/Spark interval strings used in table
// properties: "interval 1 week", "interval 30 days", "7 days",
// "interval 2 hours 30 minutes", "168h" (Go form also accepted).
func ParseInterval(s string) (time.Duration, error) {
	orig := s
	s = strings.ToLower(strings.TrimSpace(s))
	s = strings.TrimPrefix(s, "interval")
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("parse interval %q: empty", orig)
	}
	if d, err := time.ParseDuration(s); err == nil {
		return d, nil
	}
	f := strings.Fields(s)
	if len(f)%2 != 0 {
		return 0, fmt.Errorf("parse interval %q: want pairs of <number> <unit>", orig)
	}
	var total time.Duration
	for i := 0; i < len(f); i += 2 {
		n, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return 0, fmt.Errorf("parse interval %q: %v", orig, err)
		}
		var unit time.Duration
		switch strings.TrimSuffix(f[i+1], "s") {
		case "nanosecond":
			unit = time.Nanosecond
		case "microsecond":
			unit = time.Microsecond
		case "millisecond":
			unit = time.Millisecond
		case "second":
			unit = time.Second
		case "minute":
			unit = time.Minute
		case "hour":
			unit = time.Hour
		case "day":
			unit = 24 * time.Hour
		case "week":
			unit = 7 * 24 * time.Hour
		case "month":
			unit = 30 * 24 * time.Hour
		case "year":
			unit = 365 * 24 * time.Hour
		default:
			return 0, fmt.Errorf("parse interval %q: unknown unit %q", orig, f[i+1])
		}
		total += time.Duration(n * float64(unit))
	}
	return total, nil
}

// checkColumnMappingWrite allows writes to column-mapped tables in mode
// "name" only, and only with a schema that follows the protocol: every field
// (nested ones too) has a unique delta.columnMapping.id and physical name,
// delta.columnMapping.maxColumnId is at least the largest id. Mode "id"
// would write the same files, but we have not verified it against other
// readers, so it stays read-only.
func checkColumnMappingWrite(m *Metadata) error {
	mode := m.Configuration["delta.columnMapping.mode"]
	switch mode {
	case "", "none":
		return nil
	case "name":
	default:
		return &UnsupportedFeatureError{Feature: "columnMapping mode " + mode + " (writes support mode name only)"}
	}
	sch, err := schema.Parse(m.SchemaString)
	if err != nil {
		return nil // reported by the schema checks
	}
	maxID, err := strconv.ParseInt(m.Configuration[schema.MaxColumnIDProperty], 10, 64)
	if err != nil {
		return &UnsupportedFeatureError{Feature: "columnMapping: table property " + schema.MaxColumnIDProperty + " missing or not a number"}
	}
	ids := map[int64]string{}
	var walk func(path string, st *schema.StructType) error
	walk = func(path string, st *schema.StructType) error {
		// Physical names must differ among siblings; tables upgraded to
		// column mapping keep their old names as physical names, so the
		// same name can appear in different structs.
		names := map[string]string{}
		for _, f := range st.Fields {
			p := f.Name
			if path != "" {
				p = path + "." + f.Name
			}
			idv, _ := f.Metadata[schema.ColumnMappingIDKey].(json.Number)
			id, err := idv.Int64()
			pn, _ := f.Metadata[schema.ColumnMappingPhysicalNameKey].(string)
			switch {
			case err != nil || pn == "":
				return &UnsupportedFeatureError{Feature: fmt.Sprintf("columnMapping: field %q has no column id / physical name (schema.AssignColumnMapping)", p)}
			case id > maxID:
				return &UnsupportedFeatureError{Feature: fmt.Sprintf("columnMapping: field %q has id %d > %s %d", p, id, schema.MaxColumnIDProperty, maxID)}
			case ids[id] != "":
				return &UnsupportedFeatureError{Feature: fmt.Sprintf("columnMapping: fields %q and %q share id %d", ids[id], p, id)}
			case names[pn] != "":
				return &UnsupportedFeatureError{Feature: fmt.Sprintf("columnMapping: fields %q and %q share physical name %q", names[pn], p, pn)}
			}
			ids[id], names[pn] = p, p
			if err := walkNested(p, f.Type, walk); err != nil {
				return err
			}
		}
		return nil
	}
	return walk("", sch)
}

// checkTypeChangesAllowed enforces the writer side of type widening when a
// commit changes the schema: a column (or nested field, array element, map
// key/value) may only change type by a supported widening, on a table that
// supports typeWidening and has delta.enableTypeWidening=true, and the
// change must be recorded in delta.typeChanges of the nearest struct field
// (schema.EvolveWithOptions does all of that but the table settings).
func checkTypeChangesAllowed(old, updated *schema.StructType, p *Protocol, m *Metadata) error {
	var changed []string
	var unrecorded string
	// owner is the updated schema's nearest StructField, rel the path from it
	// ("", "element", "key", "value.element", ...).
	var cmp func(path string, owner *schema.StructField, rel string, o, n schema.DataType) error
	cmp = func(path string, owner *schema.StructField, rel string, o, n schema.DataType) error {
		switch ot := o.(type) {
		case *schema.StructType:
			nt, ok := n.(*schema.StructType)
			if !ok {
				return nil // not a type change we judge (the schema replaces the column)
			}
			for _, of := range ot.Fields {
				nf, _ := nt.Field(of.Name)
				if nf == nil {
					continue
				}
				if err := cmp(join(path, of.Name), nf, "", of.Type, nf.Type); err != nil {
					return err
				}
			}
		case *schema.ArrayType:
			if nt, ok := n.(*schema.ArrayType); ok {
				return cmp(path+".element", owner, join(rel, "element"), ot.ElementType, nt.ElementType)
			}
		case *schema.MapType:
			if nt, ok := n.(*schema.MapType); ok {
				if err := cmp(path+".key", owner, join(rel, "key"), ot.KeyType, nt.KeyType); err != nil {
					return err
				}
				return cmp(path+".value", owner, join(rel, "value"), ot.ValueType, nt.ValueType)
			}
		default:
			if schema.Equal(o, n) {
				return nil
			}
			if !schema.CanWiden(o, n) {
				return fmt.Errorf("column %q: type change %s -> %s is not a supported widening", path, o.TypeName(), n.TypeName())
			}
			changed = append(changed, fmt.Sprintf("%s (%s -> %s)", path, o.TypeName(), n.TypeName()))
			if unrecorded == "" && !typeChangeRecorded(owner, rel, o, n) {
				unrecorded = path
			}
		}
		return nil
	}
	if err := cmp("", nil, "", old, updated); err != nil {
		return err
	}
	if len(changed) == 0 {
		return nil
	}
	if !p.HasFeature("typeWidening") && !p.HasFeature("typeWidening-preview") {
		return &UnsupportedFeatureError{Feature: "typeWidening (widening " + strings.Join(changed, ", ") + " needs the typeWidening reader+writer feature)"}
	}
	if m.Configuration["delta.enableTypeWidening"] != "true" {
		return fmt.Errorf("widening %s: table property delta.enableTypeWidening is not true", strings.Join(changed, ", "))
	}
	if unrecorded != "" {
		return fmt.Errorf("widening of %q is not recorded in delta.typeChanges", unrecorded)
	}
	return nil
}

// typeChangeRecorded reports whether owner's delta.typeChanges has the
// change from -> to at fieldPath rel.
func typeChangeRecorded(owner *schema.StructField, rel string, from, to schema.DataType) bool {
	if owner == nil {
		return false
	}
	changes, err := schema.TypeChanges(owner)
	if err != nil {
		return false
	}
	for _, c := range changes {
		fp, _ := c["fieldPath"].(string)
		f, err1 := parseTypeName(c["fromType"])
		t, err2 := parseTypeName(c["toType"])
		if fp == rel && err1 == nil && err2 == nil && schema.Equal(f, from) && schema.Equal(t, to) {
			return true
		}
	}
	return false
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
