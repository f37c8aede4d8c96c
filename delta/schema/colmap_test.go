package schema

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestAssignColumnMapping(t *testing.T) {
	s := NewStruct(
		NewField("a", Long, true),
		NewField("s", NewStruct(NewField("x", Integer, true)), true),
		NewField("l", &ArrayType{ElementType: NewStruct(NewField("y", String, true)), ContainsNull: true}, true),
		NewField("m", &MapType{KeyType: String, ValueType: NewStruct(NewField("z", Double, true)), ValueContainsNull: true}, true),
	)
	out, maxID, err := AssignColumnMapping(s, 0)
	if err != nil {
		t.Fatal(err)
	}
	if maxID != 7 {
		t.Fatalf("max id %d, want 7", maxID)
	}
	if _, ok := s.Fields[0].Metadata[ColumnMappingIDKey]; ok {
		t.Fatal("input schema modified")
	}
	ids, names := map[string]bool{}, map[string]bool{}
	if err := eachField(out, func(f *StructField) error {
		id := string(f.Metadata[ColumnMappingIDKey].(json.Number))
		pn := f.Metadata[ColumnMappingPhysicalNameKey].(string)
		if ids[id] || names[pn] || !strings.HasPrefix(pn, "col-") {
			t.Errorf("field %s: id %s name %s not unique / not col-<uuid>", f.Name, id, pn)
		}
		ids[id], names[pn] = true, true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Round trip through JSON keeps the assignment; a second call with a new
	// column keeps old ids and continues after the max.
	re, err := Parse(out.String())
	if err != nil {
		t.Fatal(err)
	}
	re.Fields = append(re.Fields, NewField("b", Boolean, true))
	again, maxID2, err := AssignColumnMapping(re, maxID)
	if err != nil || maxID2 != 8 {
		t.Fatalf("second assignment: max %d, %v", maxID2, err)
	}
	if again.Fields[0].Metadata[ColumnMappingPhysicalNameKey] != out.Fields[0].Metadata[ColumnMappingPhysicalNameKey] {
		t.Fatal("existing physical name changed")
	}
	if got := string(again.Fields[4].Metadata[ColumnMappingIDKey].(json.Number)); got != "8" {
		t.Fatalf("new column id %s, want 8", got)
	}
	// A property lagging behind the schema's ids never yields a duplicate.
	if _, m, _ := AssignColumnMapping(re, 0); m != 8 {
		t.Fatalf("lagging maxColumnId: new max %d, want 8", m)
	}

	dropped, err := DropColumn(again, "s.x")
	if err != nil {
		t.Fatal(err)
	}
	if st := dropped.Fields[1].Type.(*StructType); len(st.Fields) != 0 || len(again.Fields[1].Type.(*StructType).Fields) != 1 {
		t.Fatal("nested drop wrong or modified its input")
	}
	if dropped, err = DropColumn(dropped, "A"); err != nil || len(dropped.Fields) != 4 || dropped.Fields[0].Name != "s" {
		t.Fatalf("top-level drop: %v %v", dropped, err)
	}
	for _, bad := range []string{"nope", "a.b", "l.y"} {
		if _, err := DropColumn(again, bad); err == nil {
			t.Errorf("DropColumn(%q) succeeded", bad)
		}
	}
	if _, err := DropColumn(s, "a"); err == nil {
		t.Error("drop without column mapping succeeded")
	}
}
