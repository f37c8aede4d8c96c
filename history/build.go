// Building history rows: the table schema of a source table's history and one row per accepted change.

package history

import (
	"fmt"
	"slices"
	"time"

	"github.com/cdcsink/cdc-sink/delta/schema"
	"github.com/cdcsink/cdc-sink/layout"
	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/normalize"
)

// metaFields follow the key columns, the op and the images in every history
// table; the partition column _cdc_source_date is among them.
func metaFields(keyStruct *schema.StructType) []*schema.StructField {
	return []*schema.StructField{
		schema.NewField(layout.HistUnavailable, &schema.ArrayType{ElementType: schema.String, ContainsNull: false}, true),
		schema.NewField(layout.HistOldKey, keyStruct, true),
		schema.NewField(layout.HistKeyMoved, schema.Boolean, false),
		schema.NewField(layout.HistTombstone, schema.Boolean, false),
		schema.NewField(layout.ColVersion, schema.String, false),
		schema.NewField(layout.ColSourceTs, schema.Timestamp, true),
		schema.NewField(layout.HistSourceDate, schema.Date, true),
		schema.NewField(layout.HistTxID, schema.Long, true),
		schema.NewField(layout.ColTopic, schema.String, true),
		schema.NewField(layout.ColPartition, schema.Integer, true),
		schema.NewField(layout.ColOffset, schema.Long, true),
		schema.NewField(layout.ColBatchID, schema.Long, false),
		schema.NewField(layout.ColIngestTs, schema.Timestamp, false),
	}
}

// fixed names a history table's own columns; a key column may not use them.
var fixed = []string{layout.ColOp, layout.HistOutcome, layout.HistBefore, layout.HistAfter}

// historySchema is the Delta schema of a history table with the given key
// columns and image struct (the business columns after privacy). An image
// with no columns yet (the table starts with a Kafka tombstone, or with
// columns known only as null) leaves the before/after structs out: Parquet
// has no empty group, so no file could hold them. The first change with a
// typed column adds both (withImages), and files written before read them
// as null, as Delta reads any column a file lacks.
func historySchema(keyNames []string, keyTypes []schema.DataType, image *schema.StructType) (*schema.StructType, error) {
	st := &schema.StructType{}
	keyStruct := &schema.StructType{}
	for i, k := range keyNames {
		if slices.Contains(fixed, k) || layout.IsMetaColumn(k) {
			return nil, fmt.Errorf("key column %q collides with a history column name", k)
		}
		st.Fields = append(st.Fields, schema.NewField(k, keyTypes[i], true))
		keyStruct.Fields = append(keyStruct.Fields, schema.NewField(k, keyTypes[i], true))
	}
	st.Fields = append(st.Fields,
		schema.NewField(layout.ColOp, schema.String, false),
		schema.NewField(layout.HistOutcome, schema.String, false),
	)
	st.Fields = append(st.Fields, metaFields(keyStruct)...)
	return withImages(st, image), nil
}

// withImages is sch with the before/after image structs of type image,
// placed after _cdc_outcome (their place in every history table), when sch
// lacks them and image has columns; else sch itself.
func withImages(sch *schema.StructType, image *schema.StructType) *schema.StructType {
	if f, _ := sch.Field(layout.HistAfter); f != nil || len(image.Fields) == 0 {
		return sch
	}
	out := &schema.StructType{Fields: append(slices.Clip(sch.Fields), schema.NewField(layout.HistBefore, image, true), schema.NewField(layout.HistAfter, image.Clone(), true))}
	return imagesInPlace(out)
}

// imagesInPlace moves the before/after structs that schema evolution
// appended (a history started without images) back after _cdc_outcome.
// Without column mapping, Parquet columns are found by name, so the order
// of the schema's fields is free; this keeps every history table's the same.
func imagesInPlace(sch *schema.StructType) *schema.StructType {
	var rest, images []*schema.StructField
	for _, f := range sch.Fields {
		if f.Name == layout.HistBefore || f.Name == layout.HistAfter {
			images = append(images, f)
		} else {
			rest = append(rest, f)
		}
	}
	at := slices.IndexFunc(rest, func(f *schema.StructField) bool { return f.Name == layout.HistOutcome })
	if len(images) == 0 || at < 0 {
		return sch
	}
	out := &schema.StructType{Fields: slices.Concat(rest[:at+1], images, rest[at+1:])}
	if schema.Equal(out, sch) {
		return sch
	}
	return out
}

// imageStruct is the struct type of the before/after images for changes
// with source schema s: every business column the privacy settings keep
// (hashed ones as strings), nullable; columns known only as null so far are
// left out until a typed change brings them (as merge does).
func imageStruct(s *normalize.Schema, p *tablePrivacy) (*schema.StructType, error) {
	st := &schema.StructType{}
	if s == nil {
		return st, nil
	}
	for _, c := range s.Columns {
		if c.NullOnly || p.excluded(c.Name) {
			continue
		}
		if layout.IsMetaColumn(c.Name) {
			return nil, fmt.Errorf("source column %q uses the reserved _cdc_ prefix", c.Name)
		}
		dt, err := merge.DeltaType(c.Type)
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", c.Name, err)
		}
		if p.hashed(c.Name) {
			dt = schema.String
		}
		st.Fields = append(st.Fields, schema.NewField(c.Name, dt, true))
	}
	return st, nil
}

// keyTypeOf is the Delta type of key column i of c: from its schema, else
// from the Go type of the value (a delete without schema).
func keyTypeOf(c *normalize.Change, i int) (schema.DataType, error) {
	name := c.KeyNames[i]
	if c.Schema != nil {
		if j := c.Schema.Index(name); j >= 0 {
			return merge.DeltaType(c.Schema.Columns[j].Type)
		}
	}
	if i < len(c.Key) {
		switch c.Key[i].(type) {
		case bool:
			return schema.Boolean, nil
		case int8:
			return schema.Byte, nil
		case int16:
			return schema.Short, nil
		case int32:
			return schema.Integer, nil
		case int64:
			return schema.Long, nil
		case float32:
			return schema.Float, nil
		case float64:
			return schema.Double, nil
		case []byte:
			return schema.Binary, nil
		case string:
			return schema.String, nil
		}
	}
	return nil, fmt.Errorf("key column %s: no schema and no typed value to take its type from", name)
}

// opLetter is the op recorded for c (as merge records _cdc_op).
func opLetter(c *normalize.Change) string {
	if c.SourceOp != 0 {
		return string(rune(c.SourceOp))
	}
	if c.Op == normalize.OpDelete {
		return "d"
	}
	return "u"
}

// rowMeta is what a row takes from the batch rather than from its change.
type rowMeta struct {
	BatchID int64
	Now     time.Time
}

// layoutOf indexes a history schema's columns for row building.
type layoutOf struct {
	sch     *schema.StructType
	keyCols []string
	image   *schema.StructType
	pos     map[string]int
	// imageN, keyN: the normalized types of the image fields and key
	// columns (ok false: a type cdc-sink does not map, never cast to).
	imageN, keyN []typed
	maps         map[*normalize.Schema]*sourceMap
}

type typed struct {
	t  normalize.Type
	ok bool
}

// sourceMap lays the columns of one source schema out in the history.
type sourceMap struct {
	idx []int // image field j → source column index (-1: none)
	// cast[j], keyCast[i]: the source type differs from the history's
	// (which is wider: evolve widened it, or the change predates a
	// widening); nil: written as is.
	cast, keyCast []*castSpec
}

// castSpec converts a source value to the history field's wider type, as
// merge converts it for the current table.
type castSpec struct{ from, to normalize.Type }

func (c *castSpec) apply(v any) (any, error) {
	if c == nil {
		return v, nil
	}
	return normalize.Cast(v, c.from, c.to)
}

func newLayout(sch *schema.StructType, keyCols []string) (*layoutOf, error) {
	l := &layoutOf{sch: sch, keyCols: keyCols, pos: map[string]int{}, maps: map[*normalize.Schema]*sourceMap{}}
	for i, f := range sch.Fields {
		l.pos[f.Name] = i
	}
	if _, ok := l.pos[layout.HistOutcome]; !ok {
		return nil, fmt.Errorf("schema lacks %s: not a cdc-sink history table", layout.HistOutcome)
	}
	l.image = &schema.StructType{} // no images yet (historySchema)
	if j, ok := l.pos[layout.HistAfter]; ok {
		img, isStruct := sch.Fields[j].Type.(*schema.StructType)
		if !isStruct {
			return nil, fmt.Errorf("column %s is not a struct: not a cdc-sink history table", layout.HistAfter)
		}
		l.image = img
	}
	for _, f := range l.image.Fields {
		nt, err := merge.NormalizeType(f.Type)
		l.imageN = append(l.imageN, typed{nt, err == nil})
	}
	for _, k := range keyCols {
		p, ok := l.pos[k]
		if !ok {
			return nil, fmt.Errorf("schema lacks key column %s", k)
		}
		nt, err := merge.NormalizeType(sch.Fields[p].Type)
		l.keyN = append(l.keyN, typed{nt, err == nil})
	}
	return l, nil
}

func castTo(from normalize.Type, to typed) *castSpec {
	if !to.ok || normalize.TypeEqual(from, to.t) {
		return nil
	}
	return &castSpec{from: from, to: to.t}
}

func (l *layoutOf) sourceMap(s *normalize.Schema) *sourceMap {
	if m, ok := l.maps[s]; ok {
		return m
	}
	m := &sourceMap{idx: make([]int, len(l.image.Fields)), cast: make([]*castSpec, len(l.image.Fields)), keyCast: make([]*castSpec, len(l.keyCols))}
	for j, f := range l.image.Fields {
		k := s.Index(f.Name)
		m.idx[j] = k
		if k >= 0 && !s.Columns[k].NullOnly {
			m.cast[j] = castTo(s.Columns[k].Type, l.imageN[j])
		}
	}
	for i, name := range l.keyCols {
		if k := s.Index(name); k >= 0 && !s.Columns[k].NullOnly {
			m.keyCast[i] = castTo(s.Columns[k].Type, l.keyN[i])
		}
	}
	l.maps[s] = m
	return m
}

// imageValue lays row (aligned with s) out as the image struct: excluded
// columns are absent from the struct, hashed ones replaced by their digest
// (of the source value), unavailable TOAST values null, values of a type
// narrower than the history's converted to it exactly.
func (l *layoutOf) imageValue(s *normalize.Schema, row []any, p *tablePrivacy) (any, error) {
	if s == nil || row == nil {
		return nil, nil
	}
	m := l.sourceMap(s)
	out := make([]any, len(m.idx))
	for j, k := range m.idx {
		if k < 0 || k >= len(row) {
			continue
		}
		v := row[k]
		if normalize.IsUnavailable(v) || v == nil {
			continue
		}
		name := l.image.Fields[j].Name
		if p.hashed(name) {
			out[j] = p.hash(v)
			continue
		}
		c, err := m.cast[j].apply(v)
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", name, err)
		}
		out[j] = c
	}
	return out, nil
}

// keyValues is key (of a change with schema s, nil when it has none) in
// the history's key types.
func (l *layoutOf) keyValues(s *normalize.Schema, key []any) ([]any, error) {
	out := make([]any, len(l.keyCols))
	var m *sourceMap
	if s != nil {
		m = l.sourceMap(s)
	}
	for i := range l.keyCols {
		if i >= len(key) {
			break
		}
		v := key[i]
		if m != nil {
			var err error
			if v, err = m.keyCast[i].apply(v); err != nil {
				return nil, fmt.Errorf("key column %s: %w", l.keyCols[i], err)
			}
		}
		out[i] = v
	}
	return out, nil
}

func unavailableColumns(s *normalize.Schema, row []any, p *tablePrivacy) []any {
	if s == nil {
		return nil
	}
	var out []any
	for k, v := range row {
		if normalize.IsUnavailable(v) && k < len(s.Columns) && !p.excluded(s.Columns[k].Name) {
			out = append(out, s.Columns[k].Name)
		}
	}
	return out
}

// row is the history row of change c with outcome o.
func (l *layoutOf) row(c *normalize.Change, o merge.Outcome, m rowMeta, p *tablePrivacy) ([]any, error) {
	r := make([]any, len(l.sch.Fields))
	set := func(name string, v any) {
		if i, ok := l.pos[name]; ok {
			r[i] = v
		}
	}
	if c.Op != normalize.OpTruncate {
		key, err := l.keyValues(keySchema(c), c.Key)
		if err != nil {
			return nil, err
		}
		for i, k := range l.keyCols {
			if i < len(c.Key) {
				set(k, key[i])
			}
		}
	}
	set(layout.ColOp, opLetter(c))
	set(layout.HistOutcome, o.String())
	image := func(name string, s *normalize.Schema, row []any) error {
		v, err := l.imageValue(s, row, p)
		if err != nil {
			return fmt.Errorf("%s image: %w", name, err)
		}
		set(name, v)
		return nil
	}
	switch c.Op {
	case normalize.OpUpsert:
		if err := image(layout.HistBefore, c.BeforeSchema, c.Before); err != nil {
			return nil, err
		}
		if err := image(layout.HistAfter, c.Schema, c.Row); err != nil {
			return nil, err
		}
		if u := unavailableColumns(c.Schema, c.Row, p); len(u) > 0 {
			set(layout.HistUnavailable, u)
		}
	case normalize.OpDelete:
		if err := image(layout.HistBefore, c.Schema, c.Row); err != nil {
			return nil, err
		}
		if u := unavailableColumns(c.Schema, c.Row, p); len(u) > 0 {
			set(layout.HistUnavailable, u)
		}
	}
	if len(c.OldKey) > 0 {
		// the old key has the key's types (the change carries one schema)
		ok, err := l.keyValues(keySchema(c), c.OldKey)
		if err != nil {
			return nil, fmt.Errorf("old key: %w", err)
		}
		set(layout.HistOldKey, ok)
	}
	set(layout.HistKeyMoved, c.KeyMoved)
	set(layout.HistTombstone, c.Tombstone)
	set(layout.ColVersion, c.Version.String())
	if c.SourceTsMicros != 0 {
		set(layout.ColSourceTs, c.SourceTsMicros)
	}
	set(layout.HistSourceDate, rowDate(c, m.Now))
	if c.HasTxID {
		set(layout.HistTxID, c.TxID)
	}
	if c.Coord.Topic != "" {
		set(layout.ColTopic, c.Coord.Topic)
		set(layout.ColPartition, c.Coord.Partition)
		set(layout.ColOffset, c.Coord.Offset)
	}
	set(layout.ColBatchID, m.BatchID)
	set(layout.ColIngestTs, m.Now.UnixMicro())
	return r, nil
}

// keySchema is the schema c's key values are typed by (nil: none, as a
// delete without a value schema; its values are written as they are).
func keySchema(c *normalize.Change) *normalize.Schema {
	if c.Schema != nil {
		return c.Schema
	}
	return c.BeforeSchema
}

// rowDate is the partition of c's row: its source commit date, or for a
// record without a source time (a Kafka tombstone) the ingest date, so
// retention purges it too.
func rowDate(c *normalize.Change, now time.Time) int32 {
	if c.SourceTsMicros != 0 {
		return sourceDate(c.SourceTsMicros)
	}
	return sourceDate(now.UnixMicro())
}

// sourceDate is the UTC date of a source commit time, as days since the epoch.
func sourceDate(us int64) int32 {
	const day = 86400 * 1_000_000
	d := us / day
	if us%day < 0 {
		d-- // floor: before 1970
	}
	return int32(d)
}

// dateString is the partition value of a date (days since the epoch).
func dateString(days int32) string {
	return time.Unix(int64(days)*86400, 0).UTC().Format(time.DateOnly)
}
