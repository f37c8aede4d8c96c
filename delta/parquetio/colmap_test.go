package parquetio

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/cdcsink/cdc-sink/delta/schema"
)

func cmField(name string, t schema.DataType, id int, phys string) *schema.StructField {
	f := schema.NewField(name, t, true)
	f.Metadata[schema.ColumnMappingIDKey] = json.Number(strings.TrimSpace(jsonString(id)))
	f.Metadata[schema.ColumnMappingPhysicalNameKey] = phys
	return f
}

// Mode id resolves columns (nested too) by field id, mode name by physical
// name; a mode-id read of a file without field ids is refused.
func TestColumnMappingResolution(t *testing.T) {
	ctx := context.Background()
	mk := func(prefix string) *schema.StructType {
		return schema.NewStruct(
			cmField("a", schema.Long, 1, prefix+"a"),
			cmField("s", schema.NewStruct(cmField("x", schema.String, 3, prefix+"x")), 2, prefix+"s"),
			cmField("l", &schema.ArrayType{ElementType: schema.NewStruct(cmField("y", schema.Integer, 5, prefix+"y")), ContainsNull: true}, 4, prefix+"l"),
			cmField("m", &schema.MapType{KeyType: schema.String, ValueType: schema.NewStruct(cmField("z", schema.Integer, 7, prefix+"z")), ValueContainsNull: true}, 6, prefix+"m"),
		)
	}
	written := mk("col-")
	rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, schema.ToArrow(written), strings.NewReader(`[{"a":5,"s":{"x":"v"},"l":[{"y":1}],"m":[{"key":"k","value":{"z":2}}]}]`))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	var buf bytes.Buffer
	if _, err := WriteFile(ctx, &buf, written, []arrow.RecordBatch{rec}, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Same ids, other physical names (as after a rename of the physical
	// names, or files written by an id-mode writer).
	renamed := mk("other-")
	read := func(sch *schema.StructType, mode string, data []byte) (string, error) {
		recs, err := ReadAll(ctx, bytes.NewReader(data), int64(len(data)), sch, ReadOptions{ColumnMappingMode: mode})
		if err != nil {
			return "", err
		}
		defer func() {
			for _, r := range recs {
				r.Release()
			}
		}()
		return jsonString(canonRows(t, recs)), nil
	}
	const full = `[{"a":5,"l":[{"y":1}],"m":[["k",{"z":2}]],"s":{"x":"v"}}]`
	for _, c := range []struct {
		sch  *schema.StructType
		mode string
		want string
	}{
		{written, "name", full},
		{written, "id", full},
		{renamed, "id", full},
		{renamed, "name", `[{"a":null,"l":null,"m":null,"s":null}]`},
	} {
		got, err := read(c.sch, c.mode, buf.Bytes())
		if err != nil || got != c.want {
			t.Errorf("mode %s: %s %v, want %s", c.mode, got, err, c.want)
		}
	}
	// A file without field ids (plain names) in mode id: refused, not nulls.
	plain := schema.NewStruct(schema.NewField("a", schema.Long, true))
	prec, _, _ := array.RecordFromJSON(memory.DefaultAllocator, schema.ToArrow(plain), strings.NewReader(`[{"a":1}]`))
	defer prec.Release()
	var pbuf bytes.Buffer
	if _, err := WriteFile(ctx, &pbuf, plain, []arrow.RecordBatch{prec}, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := read(schema.NewStruct(cmField("a", schema.Long, 1, "a")), "id", pbuf.Bytes()); err == nil || !strings.Contains(err.Error(), "no Parquet field ids") {
		t.Errorf("mode id on a file without ids: %v", err)
	}
}
