// Tests of column mapping (name mode): physical names, field ids, stats, schema changes.

package delta

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	pqschema "github.com/apache/arrow-go/v18/parquet/schema"

	"github.com/cdcsink/cdc-sink/delta/parquetio"
	"github.com/cdcsink/cdc-sink/delta/schema"
	"github.com/cdcsink/cdc-sink/internal/deltacheck"
)

var cmProtocol = Protocol{MinReaderVersion: 3, MinWriterVersion: 7,
	ReaderFeatures: []string{"columnMapping"}, WriterFeatures: []string{"columnMapping"}}

// writeJSONRows writes rows (arrow JSON form, logical names) as one data
// file and commits it.
func writeJSONRows(t *testing.T, tb *Table, rows string, part string) {
	t.Helper()
	s := snap(t, tb)
	sch, err := s.Schema()
	if err != nil {
		t.Fatal(err)
	}
	rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, schema.ToArrow(sch), strings.NewReader(rows))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	a, err := s.WriteDataFile(context.Background(), []arrow.RecordBatch{rec}, map[string]*string{"part": &part})
	if err != nil {
		t.Fatal(err)
	}
	commit(t, s.Begin().Add(a))
}

// setSchema commits sch (column mapping assigned) as the new table schema.
func setSchema(t *testing.T, tb *Table, sch *schema.StructType) {
	t.Helper()
	s := snap(t, tb)
	m := s.Metadata()
	maxID, _ := strconv.ParseInt(m.Configuration[schema.MaxColumnIDProperty], 10, 64)
	mapped, maxID, err := schema.AssignColumnMapping(sch, maxID)
	if err != nil {
		t.Fatal(err)
	}
	conf := map[string]string{}
	for k, v := range m.Configuration {
		conf[k] = v
	}
	conf[schema.MaxColumnIDProperty] = strconv.FormatInt(maxID, 10)
	m.Configuration, m.SchemaString = conf, mapped.String()
	commit(t, s.Begin().SetMetadata(m))
}

// compareCM checks our rows equal delta-rs's rows for the table at dir.
func compareCM(t *testing.T, dir string, s *Snapshot, step string) int {
	t.Helper()
	got, err := canonRows(context.Background(), s)
	if err != nil {
		t.Fatalf("%s: our scan: %v", step, err)
	}
	rs := deltacheck.ReadDeltaRS(t, dir, "")
	a, b := normRows(t, got), normRows(t, rs.Rows)
	if strings.Join(a, "\n") != strings.Join(b, "\n") {
		t.Fatalf("%s: rows differ\n ours:     %s\n delta-rs: %s", step, strings.Join(a, "\n           "), strings.Join(b, "\n           "))
	}
	return len(a)
}

// A column-mapping mode name table written by us: files use physical names
// and field ids, stats and partition values physical names; delta-rs reads
// it like we do, also after dropping a top-level and a nested column and
// re-adding a column under a dropped name.
func TestColumnMappingNameWrite(t *testing.T) {
	ctx := context.Background()
	logical := schema.NewStruct(
		schema.NewField("id", schema.Long, false),
		schema.NewField("name", schema.String, true),
		schema.NewField("s", schema.NewStruct(
			schema.NewField("a", schema.Integer, true),
			schema.NewField("b", &schema.ArrayType{ElementType: schema.NewStruct(schema.NewField("x", &schema.DecimalType{Precision: 10, Scale: 2}, true)), ContainsNull: true}, true),
		), true),
		schema.NewField("m", &schema.MapType{KeyType: schema.String, ValueType: schema.NewStruct(schema.NewField("y", schema.Integer, true)), ValueContainsNull: true}, true),
		schema.NewField("dropme", schema.Integer, true),
		schema.NewField("part", schema.String, true),
	)
	mapped, maxID, err := schema.AssignColumnMapping(logical, 0)
	if err != nil {
		t.Fatal(err)
	}
	if maxID != 10 {
		t.Fatalf("maxColumnId %d, want 10 (6 columns + 4 nested fields)", maxID)
	}
	dir := t.TempDir()
	tb, err := Create(ctx, NewLocalStorage(dir), "", Metadata{SchemaString: mapped.String(), PartitionColumns: []string{"part"},
		Configuration: map[string]string{"delta.columnMapping.mode": "name", schema.MaxColumnIDProperty: strconv.FormatInt(maxID, 10)}}, cmProtocol)
	if err != nil {
		t.Fatal(err)
	}
	writeJSONRows(t, tb, `[{"id":1,"name":"one","s":{"a":10,"b":[{"x":"1.50"},null]},"m":[{"key":"k","value":{"y":7}}],"dropme":100},
		{"id":2,"name":null,"s":null,"m":null,"dropme":null}]`, "p1")

	// The file as the protocol wants it: physical names, field ids, stats
	// and partition values by physical name.
	s := snap(t, tb)
	add := s.Files()[0]
	phys := map[string]*schema.StructField{}
	for _, f := range mapped.Fields {
		phys[f.Metadata[schema.ColumnMappingPhysicalNameKey].(string)] = f
	}
	partPhys := mapped.Fields[5].Metadata[schema.ColumnMappingPhysicalNameKey].(string)
	if _, ok := add.PartitionValues[partPhys]; !ok || !strings.HasPrefix(add.Path, partPhys+"=p1/") {
		t.Fatalf("partition not keyed by physical name: %v %s", add.PartitionValues, add.Path)
	}
	st, err := add.ParsedStats()
	if err != nil || st == nil {
		t.Fatalf("stats %v %v", st, err)
	}
	for k := range st.MinValues {
		if phys[k] == nil {
			t.Fatalf("stats key %q is not a physical name: %s", k, add.Stats)
		}
	}
	key, _ := tb.DataFileKey(add.Path)
	pf, err := file.OpenParquetFile(filepath.Join(dir, key), false)
	if err != nil {
		t.Fatal(err)
	}
	root := pf.MetaData().Schema.Root()
	for i := 0; i < root.NumFields(); i++ {
		n := root.Field(i)
		f := phys[n.Name()]
		if f == nil {
			t.Fatalf("parquet column %q is not a physical name", n.Name())
		}
		if want, _ := f.Metadata[schema.ColumnMappingIDKey].(json.Number).Int64(); int64(n.FieldID()) != want {
			t.Fatalf("column %s: field id %d, want %d", f.Name, n.FieldID(), want)
		}
	}
	// Nested struct fields carry their ids too: 10 ids minus the partition column.
	var withID func(n pqschema.Node) int
	withID = func(n pqschema.Node) int {
		c := 0
		if n.FieldID() > 0 {
			c++
		}
		if g, ok := n.(*pqschema.GroupNode); ok {
			for i := 0; i < g.NumFields(); i++ {
				c += withID(g.Field(i))
			}
		}
		return c
	}
	if n := withID(root); n != 9 {
		t.Fatalf("%d Parquet fields with field ids, want 9", n)
	}
	pf.Close()
	n1 := compareCM(t, dir, s, "after first write")
	// Data skipping resolves the logical names of the filter to the
	// physical names of the stats.
	for _, c := range []struct {
		p    parquetio.Predicate
		rows int
	}{
		{parquetio.Eq("id", 1), 2}, {parquetio.Eq("id", 99), 0},
		{parquetio.Eq("s.a", 10), 2}, {parquetio.Eq("s.a", 11), 0},
		{parquetio.Eq("name", "one"), 2}, {parquetio.Eq("name", "zzz"), 0},
		{parquetio.Eq("part", "p1"), 2}, {parquetio.Eq("part", "p2"), 0},
	} {
		n := 0
		for rec, err := range s.Scan(ctx, ScanOptions{Filter: c.p}) {
			if err != nil {
				t.Fatal(err)
			}
			n += int(rec.NumRows())
			rec.Release()
		}
		if n != c.rows {
			t.Errorf("filter %s: %d rows, want %d", c.p, n, c.rows)
		}
	}

	// Drop a top-level and a nested column: metadata only, old files keep them.
	sch, _ := s.Schema()
	sch, err = schema.DropColumn(sch, "dropme")
	if err != nil {
		t.Fatal(err)
	}
	if sch, err = schema.DropColumn(sch, "s.a"); err != nil {
		t.Fatal(err)
	}
	setSchema(t, tb, sch)
	s = snap(t, tb)
	compareCM(t, dir, s, "after drop")
	// Partition columns cannot be dropped.
	noPart, err := schema.DropColumn(sch, "part")
	if err != nil {
		t.Fatal(err)
	}
	m := s.Metadata()
	m.SchemaString = noPart.String()
	if _, err := s.Begin().SetMetadata(m).Commit(ctx, "WRITE", nil); err == nil || !strings.Contains(err.Error(), "partition column") {
		t.Fatalf("dropping the partition column: %v", err)
	}
	got, _ := canonRows(ctx, s)
	if strings.Contains(strings.Join(got, ""), `"dropme"`) || strings.Contains(strings.Join(got, ""), `"a":`) {
		t.Fatalf("dropped columns still read: %v", got)
	}

	// Re-add "dropme" (as string): new id and physical name, so old files'
	// values stay invisible.
	sch, _ = s.Schema()
	sch.Fields = append(sch.Fields, schema.NewField("dropme", schema.String, true))
	setSchema(t, tb, sch)
	writeJSONRows(t, tb, `[{"id":3,"name":"three","s":{"b":[]},"m":[],"dropme":"new"}]`, "p2")
	s = snap(t, tb)
	n3 := compareCM(t, dir, s, "after re-add")
	got, _ = canonRows(ctx, s)
	for _, r := range got {
		if strings.Contains(r, `"dropme":100`) || strings.Contains(r, `"dropme":"100"`) {
			t.Fatalf("re-added column reads the dropped column's data: %s", r)
		}
	}
	if m := s.Metadata(); m.Configuration[schema.MaxColumnIDProperty] != "11" {
		t.Fatalf("maxColumnId %s, want 11", m.Configuration[schema.MaxColumnIDProperty])
	}
	t.Logf("column-mapped table written by us: delta-rs reads %d, then %d rows identically (nested values included, after drop and re-add)", n1, n3)
}

// Writes to column-mapped tables whose schema misses mapping metadata, or
// in mode id, are refused.
func TestColumnMappingWriteRefused(t *testing.T) {
	ctx := context.Background()
	plain := schema.NewStruct(schema.NewField("id", schema.Long, true))
	mapped, maxID, _ := schema.AssignColumnMapping(plain, 0)
	cases := []struct {
		name string
		sch  string
		conf map[string]string
		want string
	}{
		{"no metadata", plain.String(), map[string]string{"delta.columnMapping.mode": "name", schema.MaxColumnIDProperty: "1"}, "no column id"},
		{"id mode", mapped.String(), map[string]string{"delta.columnMapping.mode": "id", schema.MaxColumnIDProperty: strconv.FormatInt(maxID, 10)}, "mode id"},
		{"maxColumnId too small", mapped.String(), map[string]string{"delta.columnMapping.mode": "name", schema.MaxColumnIDProperty: "0"}, "> delta.columnMapping.maxColumnId"},
	}
	for _, c := range cases {
		dir := t.TempDir()
		_, err := Create(ctx, NewLocalStorage(dir), "", Metadata{SchemaString: c.sch, Configuration: c.conf}, cmProtocol)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v", c.name, err)
		}
		_ = os.RemoveAll(dir)
	}
}
