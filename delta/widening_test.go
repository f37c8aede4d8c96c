// Tests of type widening: reading widened files exactly, and data skipping on them.

package delta

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cdcsink/cdc-sink/delta/parquetio"
	"github.com/cdcsink/cdc-sink/delta/schema"
)

// Data skipping on a widened table: stats of files written before the change
// are used where they are still exact bounds in the wide type, and ignored
// for float -> double (Spark wrote "3.4" for the float 3.4000000953674316).
func TestTypeWideningDataSkipping(t *testing.T) {
	ctx := context.Background()
	s, err := loadNoPanic(ctx, filepath.Join(goldenRoot, "type-widening"), -1)
	if err != nil {
		t.Fatal(err)
	}
	count := func(p parquetio.Predicate) int {
		n := 0
		for rec, err := range s.Scan(ctx, ScanOptions{Filter: p}) {
			if err != nil {
				t.Fatal(err)
			}
			n += int(rec.NumRows())
			rec.Release()
		}
		return n
	}
	oldFloat := float64(float32(3.4))
	// The raw float stats would prune both files, also the one holding the value.
	if raw := parquetio.Eq("float_double", oldFloat); raw.MayMatch(s.Files()[0].Stats, nil) || raw.MayMatch(s.Files()[1].Stats, nil) {
		t.Fatal("expected the raw float stats to exclude the matching file (test premise)")
	}
	cases := []struct {
		p    parquetio.Predicate
		rows int
	}{
		{parquetio.Eq("float_double", oldFloat), 2},               // float stats ignored: neither file pruned
		{parquetio.Eq("byte_long", 1), 1},                         // integer stats still prune the new file
		{parquetio.Eq("byte_long", 2), 0},                         // ... and both
		{parquetio.Eq("int_decimal", 3), 1},                       // integer stats as decimal
		{parquetio.Eq("decimal_decimal_greater_scale", 67.89), 1}, // decimal rescaled
		{parquetio.Eq("date_timestamp_ntz", time.Date(2024, 9, 9, 0, 0, 0, 0, time.UTC)), 1},
		{parquetio.Eq("date_timestamp_ntz", time.Date(2024, 9, 10, 0, 0, 0, 0, time.UTC)), 0},
	}
	for _, c := range cases {
		if got := count(c.p); got != c.rows {
			t.Errorf("%s: %d rows scanned, want %d", c.p, got, c.rows)
		}
	}
}

// The writer side of type widening: a commit may widen a column only on a
// table with the feature and delta.enableTypeWidening=true, with the change
// recorded in delta.typeChanges, and never narrow one.
func TestTypeWideningCommitChecks(t *testing.T) {
	t.Run("rewrite", testTypeChangeWithRewrite)
	ctx := context.Background()
	narrow := schema.NewStruct(schema.NewField("v", schema.Integer, true))
	wideIn := schema.NewStruct(schema.NewField("v", schema.Long, true))
	evolved, err := schema.EvolveWithOptions(narrow, wideIn, schema.EvolveOptions{AllowTypeWidening: true})
	if err != nil {
		t.Fatal(err)
	}
	twProto := Protocol{MinReaderVersion: 3, MinWriterVersion: 7, ReaderFeatures: []string{"typeWidening"}, WriterFeatures: []string{"typeWidening"}}
	on := map[string]string{"delta.enableTypeWidening": "true"}
	type commitCase struct {
		name  string
		proto Protocol
		conf  map[string]string
		to    *schema.StructType
		want  string // "" = commit succeeds
	}
	cases := []commitCase{
		{"widened", twProto, on, evolved, ""},
		{"no feature", Protocol{MinReaderVersion: 1, MinWriterVersion: 2}, on, evolved, "typeWidening"},
		{"property off", twProto, nil, evolved, "delta.enableTypeWidening"},
		{"not recorded", twProto, on, wideIn, "not recorded"},
		{"narrowing", twProto, on, schema.NewStruct(schema.NewField("v", schema.Short, true)), "not a supported widening"},
	}
	// Nested: an array element inside a struct, recorded with fieldPath.
	nNarrow := schema.NewStruct(schema.NewField("s", schema.NewStruct(schema.NewField("l", &schema.ArrayType{ElementType: schema.Float, ContainsNull: true}, true)), true))
	nIn := schema.NewStruct(schema.NewField("s", schema.NewStruct(schema.NewField("l", &schema.ArrayType{ElementType: schema.Double, ContainsNull: true}, true)), true))
	nEvolved, err := schema.EvolveWithOptions(nNarrow, nIn, schema.EvolveOptions{AllowTypeWidening: true})
	if err != nil {
		t.Fatal(err)
	}
	wrongPath := nEvolved.Clone()
	inner := wrongPath.Fields[0].Type.(*schema.StructType).Fields[0]
	inner.Metadata = map[string]any{"delta.typeChanges": []any{map[string]any{"fromType": "float", "toType": "double", "fieldPath": "key"}}}
	cases = append(cases,
		commitCase{"nested widened", twProto, on, nEvolved, ""},
		commitCase{"nested wrong fieldPath", twProto, on, wrongPath, "not recorded"},
	)
	for _, c := range cases {
		from := narrow
		if strings.HasPrefix(c.name, "nested") {
			from = nNarrow
		}
		tb, err := Create(ctx, NewLocalStorage(t.TempDir()), "", Metadata{SchemaString: from.String(), Configuration: c.conf}, c.proto)
		if err != nil {
			t.Fatal(err)
		}
		// A data file written in the narrow type: the checks are about files
		// that stay (a commit replacing every file may change types freely).
		if _, err := snap(t, tb).Begin().Add(Add{Path: "part-0.parquet", Size: 1, DataChange: true, PartitionValues: map[string]*string{}}).Commit(ctx, "WRITE", nil); err != nil {
			t.Fatal(err)
		}
		s := snap(t, tb)
		m := s.Metadata()
		m.SchemaString = c.to.String()
		_, err = s.Begin().SetMetadata(m).Commit(ctx, "WRITE", nil)
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

// schema.EvolveWithOptions records the same delta.typeChanges as Spark did
// for the golden widened tables (Spark's preview also writes tableVersion,
// which the protocol does not define; it is ignored here).
func TestEvolveTypeChangesMatchSpark(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"type-widening", "type-widening-nested"} {
		dir := filepath.Join(goldenRoot, name)
		v0, err := loadNoPanic(ctx, dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		latest, err := loadNoPanic(ctx, dir, -1)
		if err != nil {
			t.Fatal(err)
		}
		old, wide := mustSchema(t, v0), mustSchema(t, latest)
		// The incoming data has the wide types but no metadata.
		in := wide.Clone()
		for _, f := range in.Fields {
			clearMeta(f)
		}
		got, err := schema.EvolveWithOptions(old, in, schema.EvolveOptions{AllowTypeWidening: true})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !schema.Equal(got, wide) {
			t.Fatalf("%s: evolved %s, Spark %s", name, got, wide)
		}
		var walk func(path string, a, b *schema.StructType)
		walk = func(path string, a, b *schema.StructType) {
			for i, f := range a.Fields {
				g, _ := schema.TypeChanges(f)
				w, _ := schema.TypeChanges(b.Fields[i])
				for _, c := range w {
					delete(c, "tableVersion")
				}
				if fmt.Sprint(g) != fmt.Sprint(w) {
					t.Errorf("%s: %s%s: typeChanges %v, Spark %v", name, path, f.Name, g, w)
				}
				if st, ok := f.Type.(*schema.StructType); ok {
					walk(path+f.Name+".", st, b.Fields[i].Type.(*schema.StructType))
				}
			}
		}
		walk("", got, wide)
	}
}

func mustSchema(t *testing.T, s *Snapshot) *schema.StructType {
	t.Helper()
	sch, err := s.Schema()
	if err != nil {
		t.Fatal(err)
	}
	return sch
}

func clearMeta(f *schema.StructField) {
	f.Metadata = map[string]any{}
	if st, ok := f.Type.(*schema.StructType); ok {
		for _, c := range st.Fields {
			clearMeta(c)
		}
	}
}

// A commit that replaces every data file may change a column's type in any
// way (the new files carry the new type: cdc-sink's rewrite widening, table
// alter); one that keeps a file may not.
func testTypeChangeWithRewrite(t *testing.T) {
	ctx := context.Background()
	from := schema.NewStruct(schema.NewField("v", schema.Long, true))
	to := schema.NewStruct(schema.NewField("v", schema.String, true))
	tb, err := Create(ctx, NewLocalStorage(t.TempDir()), "", Metadata{SchemaString: from.String()}, Protocol{MinReaderVersion: 1, MinWriterVersion: 2})
	if err != nil {
		t.Fatal(err)
	}
	old := Add{Path: "part-0.parquet", Size: 1, DataChange: true, PartitionValues: map[string]*string{}}
	if _, err := snap(t, tb).Begin().Add(old).Commit(ctx, "WRITE", nil); err != nil {
		t.Fatal(err)
	}
	s := snap(t, tb)
	m := s.Metadata()
	m.SchemaString = to.String()
	if _, err := s.Begin().SetMetadata(m).Commit(ctx, "WRITE", nil); err == nil {
		t.Fatal("long → string keeping the old file: committed, want refused")
	}
	s = snap(t, tb)
	nw := Add{Path: "part-1.parquet", Size: 1, DataChange: true, PartitionValues: map[string]*string{}}
	if _, err := s.Begin().SetMetadata(m).Remove(RemoveFile(old, time.Now())).Add(nw).Commit(ctx, "WRITE", nil); err != nil {
		t.Fatalf("long → string replacing every file: %v", err)
	}
}

// WithReaderWriterFeature lists a feature once, keeping what a legacy
// protocol implied, without touching its argument.
func TestWithReaderWriterFeature(t *testing.T) {
	cases := []struct {
		name   string
		in     Protocol
		rf, wf []string
	}{
		{"legacy 1/2", Protocol{MinReaderVersion: 1, MinWriterVersion: 2}, []string{"typeWidening"}, []string{"appendOnly", "invariants", "typeWidening"}},
		{"legacy 2/5", Protocol{MinReaderVersion: 2, MinWriterVersion: 5}, []string{"columnMapping", "typeWidening"}, []string{"appendOnly", "invariants", "typeWidening"}},
		{"features", Protocol{MinReaderVersion: 3, MinWriterVersion: 7, ReaderFeatures: []string{"timestampNtz"}, WriterFeatures: []string{"timestampNtz", "domainMetadata"}},
			[]string{"timestampNtz", "typeWidening"}, []string{"timestampNtz", "domainMetadata", "typeWidening"}},
		{"already there", Protocol{MinReaderVersion: 3, MinWriterVersion: 7, ReaderFeatures: []string{"typeWidening"}, WriterFeatures: []string{"typeWidening"}},
			[]string{"typeWidening"}, []string{"typeWidening"}},
	}
	for _, c := range cases {
		before := fmt.Sprint(c.in)
		got := WithReaderWriterFeature(c.in, "typeWidening")
		if got.MinReaderVersion != 3 || got.MinWriterVersion != 7 || !slices.Equal(got.ReaderFeatures, c.rf) || !slices.Equal(got.WriterFeatures, c.wf) {
			t.Errorf("%s: got %+v, want 3/7 %v %v", c.name, got, c.rf, c.wf)
		}
		if fmt.Sprint(c.in) != before {
			t.Errorf("%s: argument modified: %+v", c.name, c.in)
		}
	}
}
