package parquetio

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/shopspring/decimal"

	"github.com/cdcsink/cdc-sink/delta/dv"
)

func strp(s string) *string { return &s }

func TestPredicateOnSparkStats(t *testing.T) {
	gt := loadGolden(t, "parquet-all-types")
	stats := gt.Files[0].Stats
	cases := []struct {
		p    Predicate
		want bool
	}{
		{Eq("IntegerType", 1), true},
		{Eq("IntegerType", 199), true},
		{Eq("IntegerType", 200), false},
		{Eq("IntegerType", int64(0)), false},
		{Eq("ByteType", -128), true},
		{Eq("ByteType", -129), false},
		{Eq("FloatType", 0.234), true},
		{Eq("FloatType", 0.2), false},
		{Eq("DoubleType", 4.661261177e7), true},
		{Eq("DoubleType", 4.67e7), false},
		{Eq("decimal", decimal.RequireFromString("123.52")), true},
		{Eq("decimal", decimal.RequireFromString("123.51")), false},
		{Eq("decimal", json.Number("24580.48")), true},
		{Eq("StringType", "0"), false},
		{Eq("StringType", "5"), true},
		{Eq("StringType", "999"), false},
		{Eq("DateType", time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)), true},
		{Eq("DateType", time.Date(1970, 2, 17, 0, 0, 0, 0, time.UTC)), false},
		{Eq("TimestampType", time.Date(1970, 1, 1, 6, 30, 23, 523_000_000, time.UTC)), true},
		{Eq("TimestampType", time.Date(1970, 1, 1, 6, 30, 23, 522_999_000, time.UTC)), false},
		// max is truncated to ms by Spark: values within that ms may match
		{Eq("TimestampType", time.Date(1970, 2, 23, 22, 48, 1, 77_500_000, time.UTC)), true},
		{Eq("TimestampType", time.Date(1970, 2, 23, 22, 48, 1, 78_000_000, time.UTC)), false},
		{Eq("TimestampNTZType", time.Date(1970, 1, 3, 17, 3, 54, 0, time.UTC)), true},
		{Eq("nested_struct.ac.aca", 199), true},
		{Eq("nested_struct.ac.aca", 500), false},
		{Eq("BooleanType", true), true}, // no min/max
		{Eq("BinaryType", []byte("x")), true},
		{Eq("no_such_column", 1), true},
		{Eq("IntegerType", nil), true}, // nullCount 9
		{Eq("array_of_prims", nil), true},
		{In("IntegerType", 500, 600, 1000), false},
		{In("IntegerType", 500, 600, 150), true},
		{In("IntegerType", 300, 301, 302, 303, 304, 305, 306, 307, 308, 309, -5), false}, // sorted fast path
		{In("IntegerType", 300, 301, 302, 303, 304, 305, 306, 307, 308, 309, 5), true},
		{In("StringType", "0", "00", "000", "0000", "00000", "000000", "0000000", "00000000", "000000000"), false},
		{In("StringType", "0", "00", "000", "0000", "00000", "000000", "0000000", "00000000", "55"), true},
		{And(Eq("IntegerType", 5), Eq("StringType", "5")), true},
		{And(Eq("IntegerType", 5), Eq("StringType", "0")), false},
		{Or(Eq("IntegerType", 500), Eq("StringType", "0")), false},
		{Or(Eq("IntegerType", 500), Eq("StringType", "7")), true},
	}
	for _, c := range cases {
		if got := c.p.MayMatch(stats, nil); got != c.want {
			t.Errorf("%s: MayMatch = %v, want %v", c.p, got, c.want)
		}
	}
	// nullCount 0 -> IS NULL impossible; all-null column -> Eq impossible
	s := `{"numRecords":3,"minValues":{},"maxValues":{},"nullCount":{"a":0,"b":3}}`
	if Eq("a", nil).MayMatch(s, nil) || Eq("b", 1).MayMatch(s, nil) || !Eq("b", nil).MayMatch(s, nil) {
		t.Error("null handling")
	}
	// Missing / broken stats keep the file.
	for _, s := range []string{"", "{", `{"numRecords":1}`} {
		if !Eq("IntegerType", 12345).MayMatch(s, nil) {
			t.Errorf("stats %q pruned the file", s)
		}
	}
	// Partition values.
	pv := map[string]*string{"part": strp("5"), "p2": nil, "d": strp("2021-01-02"), "ts": strp("2020-01-01 08:09:10.001")}
	for _, c := range []struct {
		p    Predicate
		want bool
	}{
		{Eq("part", 5), true}, {Eq("part", 6), false}, {Eq("part", "5"), true}, {In("part", 1, 2, 3), false},
		{Eq("p2", nil), true}, {Eq("p2", 1), false}, {Eq("part", nil), false},
		{Eq("d", time.Date(2021, 1, 2, 0, 0, 0, 0, time.UTC)), true},
		{Eq("ts", time.Date(2020, 1, 1, 8, 9, 10, 1_000_000, time.UTC)), true},
		{Eq("ts", time.Date(2020, 1, 1, 8, 9, 10, 0, time.UTC)), false},
	} {
		if got := c.p.MayMatch("", pv); got != c.want {
			t.Errorf("partition %s: %v, want %v", c.p, got, c.want)
		}
	}
}

func openOS(root string) OpenFunc {
	return func(_ context.Context, p string) (parquet.ReaderAtSeeker, int64, io.Closer, error) {
		f, err := os.Open(filepath.Join(root, p))
		if err != nil {
			return nil, 0, nil, err
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, 0, nil, err
		}
		return f, st.Size(), f, nil
	}
}

func TestScanFilesGoldenDV(t *testing.T) {
	ctx := context.Background()
	gt := loadGolden(t, "dv-partitioned-with-checkpoint")
	var files []File
	var wantRows int
	for _, gf := range gt.Files {
		f := File{Path: gf.Path, PartitionValues: gf.PartitionValues, Stats: gf.Stats}
		if gf.DV != nil {
			bm, err := dv.Read(ctx, osDVFS(), gt.Root, gf.DV)
			if err != nil {
				t.Fatal(err)
			}
			f.DV = bm
		}
		files = append(files, f)
	}
	for _, f := range files {
		recs, err := ReadAll(ctx, mustOpen(t, filepath.Join(gt.Root, f.Path)), 0, gt.Schema, ReadOptions{PartitionValues: f.PartitionValues, Deleted: f.DV})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			wantRows += int(r.NumRows())
			r.Release()
		}
	}
	var got int
	seen := map[string]map[int64]bool{}
	for rec, err := range ScanFiles(ctx, openOS(gt.Root), files, gt.Schema, ScanOptions{WithRowIndex: true, WithFilePath: true, BatchSize: 2}) {
		if err != nil {
			t.Fatal(err)
		}
		if rec.Schema().Field(3).Name != RowIndexColumn || rec.Schema().Field(4).Name != FilePathColumn {
			t.Fatalf("schema %s", rec.Schema())
		}
		ri := rec.Column(3).(*array.Int64)
		fp := rec.Column(4).(*array.String)
		for i := 0; i < int(rec.NumRows()); i++ {
			p := fp.Value(i)
			if seen[p] == nil {
				seen[p] = map[int64]bool{}
			}
			seen[p][ri.Value(i)] = true
		}
		got += int(rec.NumRows())
		rec.Release()
	}
	if got != wantRows || got == 0 {
		t.Fatalf("scan rows %d, want %d", got, wantRows)
	}
	for _, f := range files {
		if f.DV == nil {
			continue
		}
		for _, r := range f.DV.ToArray() {
			if seen[f.Path][int64(r)] {
				t.Errorf("%s: deleted row %d returned", f.Path, r)
			}
		}
	}
	// Filter on the partition column prunes files; columns subset.
	var parts []int32
	for rec, err := range ScanFiles(ctx, openOS(gt.Root), files, gt.Schema, ScanOptions{Columns: []string{"part", "col1"}, Filter: Eq("part", 5)}) {
		if err != nil {
			t.Fatal(err)
		}
		if rec.NumCols() != 2 {
			t.Fatalf("cols %d", rec.NumCols())
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			parts = append(parts, rec.Column(0).(*array.Int32).Value(i))
		}
		rec.Release()
	}
	if len(parts) == 0 {
		t.Fatal("no rows for part=5")
	}
	for _, p := range parts {
		if p != 5 {
			t.Fatalf("filter leaked part %d", p)
		}
	}
	// Errors surface and stop the iteration.
	bad := append([]File{{Path: "missing.parquet"}}, files...)
	n := 0
	for _, err := range ScanFiles(ctx, openOS(gt.Root), bad, gt.Schema, ScanOptions{}) {
		n++
		if err == nil {
			t.Fatal("expected an error first")
		}
	}
	if n != 1 {
		t.Fatalf("iteration continued after error (%d)", n)
	}
}

func mustOpen(t testing.TB, p string) *os.File {
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestReadMissingColumnsAndWidening(t *testing.T) {
	ctx := context.Background()
	old := mustSchema(t, `{"type":"struct","fields":[{"name":"a","type":"integer","nullable":true,"metadata":{}},{"name":"f","type":"float","nullable":true,"metadata":{}},{"name":"s","type":{"type":"struct","fields":[{"name":"x","type":"integer","nullable":true,"metadata":{}}]},"nullable":true,"metadata":{}}]}`)
	asch := arrow.NewSchema([]arrow.Field{
		{Name: "a", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		{Name: "f", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
		{Name: "s", Type: arrow.StructOf(arrow.Field{Name: "x", Type: arrow.PrimitiveTypes.Int32, Nullable: true}), Nullable: true},
	}, nil)
	rb := array.NewRecordBuilder(memory.DefaultAllocator, asch)
	rb.Field(0).(*array.Int32Builder).AppendValues([]int32{1, -2, 3}, nil)
	rb.Field(1).(*array.Float32Builder).AppendValues([]float32{1.5, 2, 3}, nil)
	sb := rb.Field(2).(*array.StructBuilder)
	for i := 0; i < 3; i++ {
		sb.Append(true)
		sb.FieldBuilder(0).(*array.Int32Builder).Append(int32(i))
	}
	rec := rb.NewRecordBatch()
	defer rec.Release()
	var buf bytes.Buffer
	if _, err := WriteFile(ctx, &buf, old, []arrow.RecordBatch{rec}, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Evolved read schema: widened a (int->long), f (float->double), new
	// nested field s.y and new top-level column n.
	evolved := mustSchema(t, `{"type":"struct","fields":[{"name":"a","type":"long","nullable":true,"metadata":{}},{"name":"f","type":"double","nullable":true,"metadata":{}},{"name":"s","type":{"type":"struct","fields":[{"name":"x","type":"long","nullable":true,"metadata":{}},{"name":"y","type":"string","nullable":true,"metadata":{}}]},"nullable":true,"metadata":{}},{"name":"n","type":"decimal(10,2)","nullable":true,"metadata":{}}]}`)
	del := roaring64.BitmapOf(1)
	recs, err := ReadAll(ctx, bytes.NewReader(buf.Bytes()), int64(buf.Len()), evolved, ReadOptions{Deleted: del, WithRowIndex: true})
	if err != nil {
		t.Fatal(err)
	}
	got := jsonString(canonRows(t, recs))
	want := `[{"_row_index":0,"a":1,"f":"1.5","n":null,"s":{"x":0,"y":null}},{"_row_index":2,"a":3,"f":"3","n":null,"s":{"x":2,"y":null}}]`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	// Partition values of every kind.
	for _, c := range []struct {
		typ, val, want string
	}{
		{"long", "-5", "-5"}, {"string", "a b", `"a b"`}, {"date", "2021-02-03", "18661"},
		{"timestamp", "2020-01-01 08:09:10.001", "1577866150001000"}, {"timestamp", "1970-01-01T00:00:00.123456Z", "123456"},
		{"timestamp_ntz", "2021-11-18 02:30:00.123456", "1637202600123456"}, {"decimal(10,2)", "-1.5", `"-1.50"`},
		{"boolean", "true", "true"}, {"double", "2.5", `"2.5"`}, {"long", HiveDefaultPartition, "null"}, {"string", "", "null"},
	} {
		s := mustSchema(t, `{"type":"struct","fields":[{"name":"a","type":"integer","nullable":true,"metadata":{}},{"name":"p","type":"`+c.typ+`","nullable":true,"metadata":{}}]}`)
		recs, err := ReadAll(ctx, bytes.NewReader(buf.Bytes()), 0, s, ReadOptions{Columns: []string{"p"}, PartitionValues: map[string]*string{"p": strp(c.val)}})
		if err != nil {
			t.Fatalf("%s %s: %v", c.typ, c.val, err)
		}
		rows := canonRows(t, recs)
		if len(rows) != 3 || jsonString(rows[0]["p"]) != c.want {
			t.Errorf("partition %s %q: got %v want %s", c.typ, c.val, rows, c.want)
		}
	}
}
