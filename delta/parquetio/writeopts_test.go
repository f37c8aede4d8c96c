package parquetio

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
)

func TestWriteOptionsPartitionsAndIndexedCols(t *testing.T) {
	ctx := context.Background()
	st := mustSchema(t, `{"type":"struct","fields":[{"name":"p","type":"string","nullable":true,"metadata":{}},{"name":"a","type":"long","nullable":true,"metadata":{}},{"name":"s","type":{"type":"struct","fields":[{"name":"x","type":"integer","nullable":true,"metadata":{}},{"name":"y","type":"integer","nullable":true,"metadata":{}}]},"nullable":true,"metadata":{}},{"name":"b","type":"integer","nullable":true,"metadata":{}}]}`)
	// Record with columns in another order, an int32 for the long column, no "b", and the partition column.
	asch := arrow.NewSchema([]arrow.Field{
		{Name: "S", Type: arrow.StructOf(arrow.Field{Name: "x", Type: arrow.PrimitiveTypes.Int32, Nullable: true}, arrow.Field{Name: "y", Type: arrow.PrimitiveTypes.Int32, Nullable: true}), Nullable: true},
		{Name: "a", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		{Name: "p", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	rb := array.NewRecordBuilder(memory.DefaultAllocator, asch)
	sb := rb.Field(0).(*array.StructBuilder)
	for i := 0; i < 4; i++ {
		sb.Append(true)
		sb.FieldBuilder(0).(*array.Int32Builder).Append(int32(i))
		sb.FieldBuilder(1).(*array.Int32Builder).Append(int32(-i))
		rb.Field(1).(*array.Int32Builder).Append(int32(i * 10))
		rb.Field(2).(*array.StringBuilder).Append("x")
	}
	rec := rb.NewRecordBatch()
	defer rec.Release()
	for _, c := range []struct {
		opts WriteOptions
		want string
	}{
		{WriteOptions{PartitionColumns: []string{"p"}},
			`{"numRecords":4,"minValues":{"a":0,"s":{"x":0,"y":-3}},"maxValues":{"a":30,"s":{"x":3,"y":0}},"nullCount":{"a":0,"s":{"x":0,"y":0},"b":4},"tightBounds":true}`},
		{WriteOptions{PartitionColumns: []string{"p"}, NumIndexedCols: 2},
			`{"numRecords":4,"minValues":{"a":0,"s":{"x":0}},"maxValues":{"a":30,"s":{"x":3}},"nullCount":{"a":0,"s":{"x":0}},"tightBounds":true}`},
		{WriteOptions{PartitionColumns: []string{"p"}, StatsColumns: []string{"s.y", "b"}},
			`{"numRecords":4,"minValues":{"s":{"y":-3}},"maxValues":{"s":{"y":0}},"nullCount":{"s":{"y":0},"b":4},"tightBounds":true}`},
		{WriteOptions{PartitionColumns: []string{"p"}, DisableStats: true}, ``},
	} {
		var buf bytes.Buffer
		fs, err := WriteFile(ctx, &buf, st, []arrow.RecordBatch{rec}, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		if fs.StatsJSON != c.want {
			t.Errorf("opts %+v:\n got  %s\n want %s", c.opts, fs.StatsJSON, c.want)
		}
		pf, err := file.NewParquetReader(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		var cols []string
		for i := 0; i < pf.MetaData().Schema.NumColumns(); i++ {
			cols = append(cols, pf.MetaData().Schema.Column(i).Path())
		}
		if strings.Join(cols, ",") != "a,s.x,s.y,b" {
			t.Errorf("file columns %v", cols)
		}
	}
	// errors
	if _, err := WriteFile(ctx, &bytes.Buffer{}, st, nil, WriteOptions{PartitionColumns: []string{"nope"}}); err == nil {
		t.Error("unknown partition column accepted")
	}
	if _, err := WriteFile(ctx, &bytes.Buffer{}, st, nil, WriteOptions{Compression: "lz4x"}); err == nil {
		t.Error("unknown codec accepted")
	}
	nn := mustSchema(t, `{"type":"struct","fields":[{"name":"q","type":"long","nullable":false,"metadata":{}}]}`)
	if _, err := WriteFile(ctx, &bytes.Buffer{}, nn, []arrow.RecordBatch{rec}, WriteOptions{}); err == nil {
		t.Error("missing non-nullable column accepted")
	}
}
