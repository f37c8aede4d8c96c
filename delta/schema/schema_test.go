package schema

import (
	"bufio"
	"encoding/json"
	"errors"
	"github.com/cdcsink/cdc-sink/internal/golden"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
)

var goldenDir = golden.Dir()

// goldenSchemas returns every distinct metaData.schemaString in the golden tables' JSON logs.
func goldenSchemas(t testing.TB) map[string]string {
	files, err := filepath.Glob(filepath.Join(goldenDir, "*", "_delta_log", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden logs under %s: %v", goldenDir, err)
	}
	out := map[string]string{}
	for _, fn := range files {
		f, err := os.Open(fn)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			var a struct {
				MetaData *struct {
					SchemaString string `json:"schemaString"`
				} `json:"metaData"`
			}
			if json.Unmarshal(sc.Bytes(), &a) == nil && a.MetaData != nil && a.MetaData.SchemaString != "" {
				out[a.MetaData.SchemaString] = fn
			}
		}
		f.Close()
	}
	return out
}

func TestGoldenSchemasRoundTrip(t *testing.T) {
	schemas := goldenSchemas(t)
	if len(schemas) < 40 {
		t.Fatalf("only %d golden schemas found", len(schemas))
	}
	var unsupported int
	for s, fn := range schemas {
		st, err := Parse(s)
		if err != nil {
			t.Errorf("%s: parse: %v", fn, err)
			continue
		}
		if got := st.String(); got != s {
			t.Errorf("%s: round trip differs\n got %s\nwant %s", fn, got, s)
		}
		if st.Validate() != nil {
			unsupported++
		} else {
			_ = ToArrow(st)
		}
		// Clone must marshal identically too.
		if got := st.Clone().String(); got != s {
			t.Errorf("%s: clone round trip differs", fn)
		}
	}
	t.Logf("%d golden schemas round-trip; %d flagged unsupported", len(schemas), unsupported)
	if unsupported == 0 {
		t.Error("expected variant/collation golden schemas to be flagged")
	}
}

func TestParseUnknownAndCollations(t *testing.T) {
	s := `{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}},` +
		`{"name":"v","type":"variant","nullable":true,"metadata":{}},` +
		`{"name":"n","type":"void","nullable":true,"metadata":{}},` +
		`{"name":"c","type":"string","nullable":true,"metadata":{"__COLLATIONS":{"c":"spark.UTF8_LCASE"}}},` +
		`{"name":"x","type":{"type":"udt","class":"Foo","sqlType":"long"},"nullable":true,"metadata":{}}]}`
	st, err := Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	if st.String() != s {
		t.Fatalf("round trip: %s", st.String())
	}
	u := st.Unsupported()
	if len(u) != 4 {
		t.Fatalf("unsupported = %q", u)
	}
	var ue *UnsupportedError
	if err := st.Validate(); !errors.As(err, &ue) || !strings.Contains(err.Error(), `"variant"`) {
		t.Fatalf("Validate = %v", err)
	}
}

func TestParseErrors(t *testing.T) {
	for _, s := range []string{
		``, `[]`, `"long"`, `{"type":"struct"}`, `{"type":"struct","fields":[{"type":"long"}]}`,
		`{"type":"struct","fields":[{"name":"a","type":"decimal(39,0)","nullable":true,"metadata":{}}]}`,
		`{"type":"struct","fields":[{"name":"a","type":"decimal(5,6)","nullable":true,"metadata":{}}]}`,
		`{"type":"struct","fields":[{"name":"a","type":{"type":"array","elementType":"long"},"nullable":true,"metadata":{}}]}`,
		`{"type":"struct","fields":[{"name":"a","type":{"type":"map","keyType":"long","valueContainsNull":true},"nullable":true,"metadata":{}}]}`,
		`{"type":"struct","fields":[{"name":"a","type":5,"nullable":true,"metadata":{}}]}`,
		`{"type":"struct","fields":[{"name":"a","type":"long","nullable":true,"metadata":[]}]}`,
	} {
		if _, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) succeeded", s)
		}
	}
}

func TestMarshalBuilt(t *testing.T) {
	st := NewStruct(
		NewField("id", Long, false),
		NewField("amt", &DecimalType{Precision: 38, Scale: 6}, true),
		NewField("tags", &ArrayType{ElementType: String, ContainsNull: true}, true),
		NewField("m", &MapType{KeyType: String, ValueType: &StructType{Fields: []*StructField{NewField("x<&>", Date, true)}}, ValueContainsNull: false}, true),
	)
	st.Fields[0].Metadata["comment"] = "pk <1>"
	st.Fields[0].Metadata["delta.columnMapping.id"] = 1
	want := `{"type":"struct","fields":[{"name":"id","type":"long","nullable":false,"metadata":{"comment":"pk <1>","delta.columnMapping.id":1}},` +
		`{"name":"amt","type":"decimal(38,6)","nullable":true,"metadata":{}},` +
		`{"name":"tags","type":{"type":"array","elementType":"string","containsNull":true},"nullable":true,"metadata":{}},` +
		`{"name":"m","type":{"type":"map","keyType":"string","valueType":{"type":"struct","fields":[{"name":"x<&>","type":"date","nullable":true,"metadata":{}}]},"valueContainsNull":false},"nullable":true,"metadata":{}}]}`
	if got := st.String(); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	b, _ := json.Marshal(struct {
		S *StructType `json:"s"`
	}{st})
	var back struct {
		S *StructType `json:"s"`
	}
	if err := json.Unmarshal(b, &back); err != nil || !Equal(back.S, st) {
		t.Fatalf("json embed round trip: %v", err)
	}
}

func TestMetadataOrderPreservedAndEdited(t *testing.T) {
	s := `{"type":"struct","fields":[{"name":"a","type":"long","nullable":true,"metadata":{"z":1,"delta.typeChanges":[{"toType":"long","fromType":"byte","tableVersion":2}],"b":"x"}}]}`
	st, err := Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	if st.String() != s {
		t.Fatalf("order lost: %s", st.String())
	}
	st.Fields[0].Metadata["z"] = 2
	st.Fields[0].Metadata["a"] = true
	delete(st.Fields[0].Metadata, "b")
	want := `{"type":"struct","fields":[{"name":"a","type":"long","nullable":true,"metadata":{"z":2,"delta.typeChanges":[{"toType":"long","fromType":"byte","tableVersion":2}],"a":true}}]}`
	if st.String() != want {
		t.Fatalf("got %s", st.String())
	}
}

func TestToArrow(t *testing.T) {
	st, err := Parse(`{"type":"struct","fields":[` +
		`{"name":"ts","type":"timestamp","nullable":true,"metadata":{}},` +
		`{"name":"ntz","type":"timestamp_ntz","nullable":false,"metadata":{}},` +
		`{"name":"d","type":"date","nullable":true,"metadata":{}},` +
		`{"name":"dec","type":"decimal(12,3)","nullable":true,"metadata":{}},` +
		`{"name":"b","type":"byte","nullable":true,"metadata":{}},` +
		`{"name":"s","type":"short","nullable":true,"metadata":{}},` +
		`{"name":"arr","type":{"type":"array","elementType":"string","containsNull":false},"nullable":true,"metadata":{}},` +
		`{"name":"m","type":{"type":"map","keyType":"string","valueType":"long","valueContainsNull":true},"nullable":true,"metadata":{}}]}`)
	if err != nil {
		t.Fatal(err)
	}
	as := ToArrow(st)
	want := []string{"timestamp[us, tz=UTC]", "timestamp[us]", "date32", "decimal(12, 3)", "int8", "int16", "list<element: utf8>", "map<utf8, int64, items_nullable>"}
	for i, f := range as.Fields() {
		if f.Type.String() != want[i] {
			t.Errorf("field %s: %s, want %s", f.Name, f.Type, want[i])
		}
	}
	if as.Field(1).Nullable {
		t.Error("ntz should be non-nullable")
	}
	back, err := FromArrowSchema(as)
	if err != nil || !Equal(back, st) {
		t.Fatalf("FromArrowSchema: %v %s", err, back)
	}
	if _, err := FromArrow(arrow.PrimitiveTypes.Uint32); err == nil {
		t.Error("uint32 should not convert")
	}
}

func mustParse(t *testing.T, s string) *StructType {
	t.Helper()
	st, err := Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func fields(defs ...string) string {
	return `{"type":"struct","fields":[` + strings.Join(defs, ",") + `]}`
}

func fld(name, typ string, nullable bool) string {
	if !strings.HasPrefix(typ, "{") {
		typ = `"` + typ + `"`
	}
	n := "false"
	if nullable {
		n = "true"
	}
	return `{"name":"` + name + `","type":` + typ + `,"nullable":` + n + `,"metadata":{}}`
}

func TestEvolveMatrix(t *testing.T) {
	arr := func(e string) string { return `{"type":"array","elementType":"` + e + `","containsNull":true}` }
	cases := []struct {
		name      string
		old, in   string
		widen     bool
		want      string // expected evolved schema ("" = error expected)
		errColumn string
	}{
		{"same", fields(fld("a", "long", false)), fields(fld("a", "long", false)), false, fields(fld("a", "long", false)), ""},
		{"add nullable", fields(fld("a", "long", false)), fields(fld("a", "long", false), fld("b", "string", true)), false,
			fields(fld("a", "long", false), fld("b", "string", true)), ""},
		{"add non-nullable made nullable", fields(fld("a", "long", true)), fields(fld("b", "date", false), fld("a", "long", true)), false,
			fields(fld("a", "long", true), fld("b", "date", true)), ""},
		{"drop column kept", fields(fld("a", "long", true), fld("b", "string", true)), fields(fld("b", "string", true)), false,
			fields(fld("a", "long", true), fld("b", "string", true)), ""},
		{"case-insensitive match keeps table name", fields(fld("Abc", "long", true)), fields(fld("abc", "long", true)), false,
			fields(fld("Abc", "long", true)), ""},
		{"relax nullability", fields(fld("a", "long", false)), fields(fld("a", "long", true)), false, fields(fld("a", "long", true)), ""},
		{"narrower incoming keeps table type", fields(fld("a", "long", true)), fields(fld("a", "integer", true)), false, fields(fld("a", "long", true)), ""},
		{"widen int->long refused without feature", fields(fld("a", "integer", true)), fields(fld("a", "long", true)), false, "", "a"},
		{"string->long refused", fields(fld("a", "string", true)), fields(fld("a", "long", true)), true, "", "a"},
		{"long->int with widening keeps long", fields(fld("a", "long", true)), fields(fld("a", "integer", true)), true, fields(fld("a", "long", true)), ""},
		{"timestamp->ntz refused", fields(fld("a", "timestamp", true)), fields(fld("a", "timestamp_ntz", true)), true, "", "a"},
		{"decimal scale up too much", fields(fld("a", "decimal(10,2)", true)), fields(fld("a", "decimal(11,4)", true)), true, "", "a"},
		{"decimal scale down", fields(fld("a", "decimal(10,4)", true)), fields(fld("a", "decimal(12,2)", true)), true, "", "a"},
		{"struct to long", fields(fld("s", fields(fld("x", "long", true)), true)), fields(fld("s", "long", true)), true, "", "s"},
		{"nested add", fields(fld("s", fields(fld("x", "long", true)), true)), fields(fld("s", fields(fld("y", "string", false), fld("x", "long", true)), true)), false,
			fields(fld("s", fields(fld("x", "long", true), fld("y", "string", true)), true)), ""},
		{"nested conflict names path", fields(fld("s", fields(fld("x", "long", true)), true)), fields(fld("s", fields(fld("x", "boolean", true)), true)), false, "", "s.x"},
		{"array element conflict", fields(fld("a", arr("long"), true)), fields(fld("a", arr("string"), true)), false, "", "a.element"},
		{"duplicate case names", fields(fld("a", "long", true)), fields(fld("a", "long", true), fld("B", "long", true), fld("b", "long", true)), false, "", "b"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			old, in := mustParse(t, c.old), mustParse(t, c.in)
			before := old.String()
			got, err := EvolveWithOptions(old, in, EvolveOptions{AllowTypeWidening: c.widen})
			if old.String() != before {
				t.Fatal("old schema modified")
			}
			if c.want == "" {
				var ie *IncompatibleError
				if !errors.As(err, &ie) {
					t.Fatalf("want IncompatibleError, got %v (%v)", err, got)
				}
				if ie.Column != c.errColumn {
					t.Fatalf("column %q, want %q (%v)", ie.Column, c.errColumn, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != c.want {
				t.Fatalf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}

func TestWideningMatrix(t *testing.T) {
	ok := [][2]string{
		{"byte", "short"}, {"byte", "integer"}, {"byte", "long"}, {"short", "integer"}, {"short", "long"}, {"integer", "long"},
		{"float", "double"}, {"byte", "double"}, {"short", "double"}, {"integer", "double"}, {"date", "timestamp_ntz"},
		{"decimal(10,2)", "decimal(12,2)"}, {"decimal(10,2)", "decimal(12,4)"}, {"byte", "decimal(3,0)"}, {"short", "decimal(7,2)"},
		{"integer", "decimal(10,0)"}, {"long", "decimal(20,0)"}, {"long", "decimal(38,18)"},
	}
	bad := [][2]string{
		{"long", "integer"}, {"long", "double"}, {"double", "float"}, {"integer", "float"}, {"date", "timestamp"},
		{"timestamp_ntz", "timestamp"}, {"string", "binary"}, {"decimal(10,2)", "decimal(10,3)"}, {"integer", "decimal(9,0)"},
		{"long", "decimal(20,1)"}, {"boolean", "integer"}, {"integer", "string"},
	}
	for _, p := range ok {
		old := mustParse(t, fields(fld("c", p[0], true)))
		in := mustParse(t, fields(fld("c", p[1], true)))
		got, err := EvolveWithOptions(old, in, EvolveOptions{AllowTypeWidening: true})
		if err != nil {
			t.Errorf("%s->%s: %v", p[0], p[1], err)
			continue
		}
		if got.Fields[0].Type.TypeName() != p[1] {
			t.Errorf("%s->%s: got %s", p[0], p[1], got.Fields[0].Type.TypeName())
		}
		tc, _ := TypeChanges(got.Fields[0])
		if len(tc) != 1 || tc[0]["fromType"] != p[0] || tc[0]["toType"] != p[1] {
			t.Errorf("%s->%s: typeChanges %v", p[0], p[1], tc)
		}
		if _, err := Evolve(old, in); err == nil || !strings.Contains(err.Error(), "typeWidening") {
			t.Errorf("%s->%s without feature: %v", p[0], p[1], err)
		}
	}
	for _, p := range bad {
		old := mustParse(t, fields(fld("c", p[0], true)))
		in := mustParse(t, fields(fld("c", p[1], true)))
		if CanWiden(mustParse(t, fields(fld("c", p[0], true))).Fields[0].Type, in.Fields[0].Type) {
			t.Errorf("%s->%s: CanWiden true", p[0], p[1])
		}
		_, err := EvolveWithOptions(old, in, EvolveOptions{AllowTypeWidening: true})
		if CanWiden(in.Fields[0].Type, old.Fields[0].Type) {
			if err != nil { // narrowing: kept
				t.Errorf("%s<-%s narrowing: %v", p[0], p[1], err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), p[0]) || !strings.Contains(err.Error(), p[1]) {
			t.Errorf("%s->%s: err %v should name both types", p[0], p[1], err)
		}
	}
}

func TestEvolveArrayElementWidening(t *testing.T) {
	old := mustParse(t, fields(fld("a", `{"type":"array","elementType":"integer","containsNull":true}`, true)))
	in := mustParse(t, fields(fld("a", `{"type":"array","elementType":"long","containsNull":true}`, true)))
	got, err := EvolveWithOptions(old, in, EvolveOptions{AllowTypeWidening: true})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"struct","fields":[{"name":"a","type":{"type":"array","elementType":"long","containsNull":true},"nullable":true,"metadata":{"delta.typeChanges":[{"fieldPath":"element","fromType":"integer","toType":"long"}]}}]}`
	if got.String() != want {
		t.Fatalf("got %s", got)
	}
}

func FuzzParseSchema(f *testing.F) {
	for s := range goldenSchemas(f) {
		f.Add(s)
	}
	f.Add(`{"type":"struct","fields":[{"name":"a","type":"decimal(5,2)","nullable":true,"metadata":{"x":[1,{"b":null}]}}]}`)
	f.Fuzz(func(t *testing.T, s string) {
		st, err := Parse(s)
		if err != nil {
			return
		}
		out := st.String()
		st2, err := Parse(out)
		if err != nil {
			t.Fatalf("re-parse of %q failed: %v", out, err)
		}
		if st2.String() != out {
			t.Fatalf("not stable: %q vs %q", out, st2.String())
		}
		if st.Validate() == nil {
			_ = ToArrow(st)
		}
		_, _ = Evolve(st, st2)
	})
}
