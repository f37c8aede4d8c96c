package parquetio

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/cdcsink/cdc-sink/delta/schema"
)

const allTypesSchema = `{"type":"struct","fields":[
{"name":"id","type":"long","nullable":false,"metadata":{}},
{"name":"b","type":"byte","nullable":true,"metadata":{}},
{"name":"s","type":"short","nullable":true,"metadata":{}},
{"name":"i","type":"integer","nullable":true,"metadata":{}},
{"name":"l","type":"long","nullable":true,"metadata":{}},
{"name":"f","type":"float","nullable":true,"metadata":{}},
{"name":"d","type":"double","nullable":true,"metadata":{}},
{"name":"dec9","type":"decimal(9,2)","nullable":true,"metadata":{}},
{"name":"dec18","type":"decimal(18,4)","nullable":true,"metadata":{}},
{"name":"dec38","type":"decimal(38,10)","nullable":true,"metadata":{}},
{"name":"bool","type":"boolean","nullable":true,"metadata":{}},
{"name":"str","type":"string","nullable":true,"metadata":{}},
{"name":"bin","type":"binary","nullable":true,"metadata":{}},
{"name":"dt","type":"date","nullable":true,"metadata":{}},
{"name":"ts","type":"timestamp","nullable":true,"metadata":{}},
{"name":"ntz","type":"timestamp_ntz","nullable":true,"metadata":{}},
{"name":"st","type":{"type":"struct","fields":[{"name":"x","type":"integer","nullable":true,"metadata":{}},{"name":"y","type":{"type":"struct","fields":[{"name":"z","type":"string","nullable":true,"metadata":{}}]},"nullable":true,"metadata":{}}]},"nullable":true,"metadata":{}},
{"name":"arr","type":{"type":"array","elementType":"long","containsNull":true},"nullable":true,"metadata":{}},
{"name":"arrs","type":{"type":"array","elementType":{"type":"struct","fields":[{"name":"a","type":"string","nullable":true,"metadata":{}}]},"containsNull":true},"nullable":true,"metadata":{}},
{"name":"m","type":{"type":"map","keyType":"string","valueType":"decimal(10,3)","valueContainsNull":true},"nullable":true,"metadata":{}},
{"name":"mm","type":{"type":"map","keyType":"integer","valueType":{"type":"array","elementType":"timestamp","containsNull":true},"valueContainsNull":true},"nullable":true,"metadata":{}}
]}`

func mustSchema(t testing.TB, s string) *schema.StructType {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(s)); err != nil {
		t.Fatal(err)
	}
	st, err := schema.Parse(buf.String())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

var (
	farFuture = time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC).UnixMicro()
	farPast   = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	pre1970   = time.Date(1969, 7, 20, 20, 17, 40, 123456000, time.UTC).UnixMicro()
)

// genRow produces deterministic values (nil = null) for row r.
func genRow(r int) []any {
	null := func(k int) bool { return (r+k)%7 == 0 }
	v := func(k int, x any) any {
		if null(k) {
			return nil
		}
		return x
	}
	sign := int64(1)
	if r%2 == 1 {
		sign = -1
	}
	ts := []int64{pre1970, farFuture, farPast, 0, 1_700_000_000_123_456, -1}[r%6] + int64(r)
	if r%6 == 1 {
		ts = farFuture - int64(r)
	}
	if r%6 == 2 {
		ts = farPast + int64(r)
	}
	str := []string{"", "a", "héllo wörld ✓", strings.Repeat("x", 40), "zzz", "<&>\"'"}[r%6] + fmt.Sprint(r)
	var st any
	if !null(11) {
		st = []any{v(12, int32(r*3)), func() any {
			if null(13) {
				return nil
			}
			return []any{v(14, fmt.Sprintf("z%d", r))}
		}()}
	}
	var arr any
	if !null(15) {
		a := []any{}
		for j := 0; j < r%4; j++ {
			if j == 2 {
				a = append(a, nil)
			} else {
				a = append(a, sign*int64(j*r))
			}
		}
		arr = a
	}
	var arrs any
	if !null(16) {
		arrs = []any{[]any{fmt.Sprint("s", r)}, nil, []any{nil}}
	}
	var m any
	if !null(17) {
		m = [][2]any{{"k1", decimal128.FromI64(sign * int64(r) * 1001)}, {"k2", nil}}
	}
	var mm any
	if !null(18) {
		mm = [][2]any{{int32(r), []any{ts, nil}}}
	}
	return []any{
		int64(r),
		v(1, int8(sign*int64(r%128))),
		v(2, int16(sign*int64(r*300))),
		v(3, int32(sign*int64(r)*70000)),
		v(4, sign*int64(r)*1e12),
		v(5, float32(sign)*float32(r)*1.25),
		v(6, float64(sign)*float64(r)*1e-3),
		v(7, decimal128.FromI64(sign*int64(r)*12345)),
		v(8, decimal128.FromI64(sign*int64(r)*123456789012)),
		v(9, decimal128.FromBigInt(bigPow(r, sign))),
		v(10, r%3 == 0),
		v(19, str),
		v(20, []byte{byte(r), 0, 255}),
		v(21, arrow.Date32(int32(sign)*int32(r*1000))),
		v(22, ts),
		v(23, ts),
		st, arr, arrs, m, mm,
	}
}

func bigPow(r int, sign int64) *big.Int {
	x := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(r%28)), nil)
	x.Mul(x, big.NewInt(int64(r)+7))
	if sign < 0 {
		x.Neg(x)
	}
	return x
}

// appendValue appends a Go value to a builder of the matching Arrow type.
func appendValue(t testing.TB, b array.Builder, v any) {
	if v == nil {
		b.AppendNull()
		return
	}
	switch b := b.(type) {
	case *array.Int8Builder:
		b.Append(v.(int8))
	case *array.Int16Builder:
		b.Append(v.(int16))
	case *array.Int32Builder:
		b.Append(v.(int32))
	case *array.Int64Builder:
		b.Append(v.(int64))
	case *array.Float32Builder:
		b.Append(v.(float32))
	case *array.Float64Builder:
		b.Append(v.(float64))
	case *array.Decimal128Builder:
		b.Append(v.(decimal128.Num))
	case *array.BooleanBuilder:
		b.Append(v.(bool))
	case *array.StringBuilder:
		b.Append(v.(string))
	case *array.BinaryBuilder:
		b.Append(v.([]byte))
	case *array.Date32Builder:
		b.Append(v.(arrow.Date32))
	case *array.TimestampBuilder:
		b.Append(arrow.Timestamp(v.(int64)))
	case *array.StructBuilder:
		b.Append(true)
		vals := v.([]any)
		for i := range vals {
			appendValue(t, b.FieldBuilder(i), vals[i])
		}
	case *array.MapBuilder:
		b.Append(true)
		for _, kv := range v.([][2]any) {
			appendValue(t, b.KeyBuilder(), kv[0])
			appendValue(t, b.ItemBuilder(), kv[1])
		}
	case *array.ListBuilder:
		b.Append(true)
		for _, e := range v.([]any) {
			appendValue(t, b.ValueBuilder(), e)
		}
	default:
		t.Fatalf("no appender for %T", b)
	}
}

func buildRecord(t testing.TB, sch *arrow.Schema, from, to int) arrow.RecordBatch {
	rb := array.NewRecordBuilder(memory.DefaultAllocator, sch)
	defer rb.Release()
	for r := from; r < to; r++ {
		row := genRow(r)
		for c := range row {
			appendValue(t, rb.Field(c), row[c])
		}
	}
	return rb.NewRecordBatch()
}

func TestWriteRoundTripAllTypes(t *testing.T) {
	ctx := context.Background()
	st := mustSchema(t, allTypesSchema)
	asch := schema.ToArrow(st)
	recs := []arrow.RecordBatch{buildRecord(t, asch, 0, 30), buildRecord(t, asch, 30, 64)}
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	for _, codec := range []string{Snappy, Zstd} {
		var buf bytes.Buffer
		fs, err := WriteFile(ctx, &buf, st, recs, WriteOptions{Compression: codec, RowGroupRows: 20})
		if err != nil {
			t.Fatal(err)
		}
		if fs.NumRecords != 64 || fs.Size != int64(buf.Len()) {
			t.Fatalf("stats %+v, len %d", fs, buf.Len())
		}
		want := canonRows(t, recs)

		// our reader
		got, err := ReadAll(ctx, bytes.NewReader(buf.Bytes()), int64(buf.Len()), st, ReadOptions{BatchSize: 9})
		if err != nil {
			t.Fatal(err)
		}
		gotRows := canonRows(t, got)
		for _, r := range got {
			r.Release()
		}
		compareRows(t, "our reader ("+codec+")", gotRows, want)

		// pyarrow
		path := filepath.Join(t.TempDir(), "rt.parquet")
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		compareRows(t, "pyarrow ("+codec+")", pyarrowRows(t, path), want)

		// physical types as Spark writes/expects them (delta.md §1.9)
		pf, err := file.NewParquetReader(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		if pf.NumRowGroups() != 4 {
			t.Errorf("row groups %d, want 4", pf.NumRowGroups())
		}
		phys := map[string]string{}
		sc := pf.MetaData().Schema
		for i := 0; i < sc.NumColumns(); i++ {
			c := sc.Column(i)
			phys[c.Path()] = c.PhysicalType().String() + " " + c.LogicalType().String()
		}
		expect := map[string]string{
			"b": "INT32 Int(bitWidth=8, isSigned=true)", "s": "INT32 Int(bitWidth=16, isSigned=true)",
			"dec9": "INT32 Decimal(precision=9, scale=2)", "dec18": "INT64 Decimal(precision=18, scale=4)",
			"dec38": "FIXED_LEN_BYTE_ARRAY Decimal(precision=38, scale=10)", "dt": "INT32 Date",
			"ts":  "INT64 Timestamp(isAdjustedToUTC=true, timeUnit=microseconds, is_from_converted_type=false, force_set_converted_type=false)",
			"ntz": "INT64 Timestamp(isAdjustedToUTC=false, timeUnit=microseconds, is_from_converted_type=false, force_set_converted_type=false)",
			"str": "BYTE_ARRAY String", "bin": "BYTE_ARRAY None",
		}
		for k, v := range expect {
			if phys[k] != v {
				t.Errorf("column %s: %q, want %q", k, phys[k], v)
			}
		}
		checkStats(t, fs.StatsJSON, recs)
	}
}

func compareRows(t *testing.T, what string, got, want []map[string]any) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d rows, want %d", what, len(got), len(want))
	}
	for i := range got {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Fatalf("%s: row %d differs\n got  %s\n want %s", what, i, jsonString(got[i]), jsonString(want[i]))
		}
	}
}

// checkStats recomputes the expected stats from the input rows, independently.
func checkStats(t *testing.T, statsJSON string, recs []arrow.RecordBatch) {
	t.Helper()
	var st struct {
		NumRecords  int64          `json:"numRecords"`
		MinValues   map[string]any `json:"minValues"`
		MaxValues   map[string]any `json:"maxValues"`
		NullCount   map[string]any `json:"nullCount"`
		TightBounds bool           `json:"tightBounds"`
	}
	dec := json.NewDecoder(strings.NewReader(statsJSON))
	dec.UseNumber()
	if err := dec.Decode(&st); err != nil {
		t.Fatalf("stats %s: %v", statsJSON, err)
	}
	if st.NumRecords != 64 || !st.TightBounds {
		t.Fatalf("stats header: %s", statsJSON)
	}
	rows := canonRows(t, recs)
	num := func(v any) float64 {
		switch x := v.(type) {
		case json.Number:
			f, _ := x.Float64()
			return f
		case string:
			var f float64
			fmt.Sscan(x, &f)
			return f
		}
		return math.NaN()
	}
	for _, col := range []string{"b", "s", "i", "l", "f", "d", "dec9", "dec18", "dec38"} {
		lo, hi, nulls := math.Inf(1), math.Inf(-1), 0
		for _, r := range rows {
			if r[col] == nil {
				nulls++
				continue
			}
			lo, hi = math.Min(lo, num(r[col])), math.Max(hi, num(r[col]))
		}
		if got := num(st.MinValues[col]); math.Abs(got-lo) > 1e-6*math.Abs(lo) {
			t.Errorf("min %s = %v, want %v", col, st.MinValues[col], lo)
		}
		if got := num(st.MaxValues[col]); math.Abs(got-hi) > 1e-6*math.Abs(hi) {
			t.Errorf("max %s = %v, want %v", col, st.MaxValues[col], hi)
		}
		if fmt.Sprint(st.NullCount[col]) != fmt.Sprint(nulls) {
			t.Errorf("nullCount %s = %v, want %d", col, st.NullCount[col], nulls)
		}
	}
	// timestamps: min truncated to ms, max rounded up to ms
	var lo, hi int64 = math.MaxInt64, math.MinInt64
	for _, r := range rows {
		if r["ts"] != nil {
			v, _ := r["ts"].(json.Number).Int64()
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	wantMin := time.UnixMilli(floorDiv(lo, 1000)).UTC().Format("2006-01-02T15:04:05.000Z")
	if st.MinValues["ts"] != wantMin {
		t.Errorf("ts min %v, want %s", st.MinValues["ts"], wantMin)
	}
	if hi == farFuture && st.MaxValues["ts"] != nil {
		// 9999-12-31T23:59:59.999999 rounds up past year 9999: must be omitted
		t.Errorf("ts max %v should be omitted", st.MaxValues["ts"])
	}
	if st.MinValues["ntz"] != strings.TrimSuffix(wantMin, "Z") {
		t.Errorf("ntz min %v", st.MinValues["ntz"])
	}
	// strings: min present (maybe truncated), max omitted when > 32 chars
	var smin, smax string
	first := true
	for _, r := range rows {
		if s, ok := r["str"].(string); ok {
			if first || s < smin {
				smin = s
			}
			if first || s > smax {
				smax = s
			}
			first = false
		}
	}
	if st.MinValues["str"] != truncateRunes(smin, 32) {
		t.Errorf("str min %q want %q", st.MinValues["str"], smin)
	}
	if len([]rune(smax)) <= 32 && st.MaxValues["str"] != smax {
		t.Errorf("str max %q want %q", st.MaxValues["str"], smax)
	}
	// nested struct mirrors the schema; arrays/maps/bool/binary have nullCount only
	nested, _ := st.MinValues["st"].(map[string]any)
	if nested == nil || nested["x"] == nil {
		t.Errorf("nested min missing: %s", statsJSON)
	}
	for _, c := range []string{"bool", "bin", "arr", "m", "mm", "arrs"} {
		if _, ok := st.MinValues[c]; ok {
			t.Errorf("min for %s should be absent", c)
		}
		if _, ok := st.NullCount[c]; !ok {
			t.Errorf("nullCount for %s missing", c)
		}
	}
	// struct child null count includes rows where the parent is null
	var xNulls int
	for _, r := range rows {
		if r["st"] == nil || r["st"].(map[string]any)["x"] == nil {
			xNulls++
		}
	}
	if got := fmt.Sprint(st.NullCount["st"].(map[string]any)["x"]); got != fmt.Sprint(xNulls) {
		t.Errorf("st.x nullCount %s want %d", got, xNulls)
	}
}

// TestWriteFileOneRecord: a file of one record is written row group by row
// group straight to the output (Writer.write whole); it must hold the same
// rows, row groups and stats as the buffered path that several records take.
func TestWriteFileOneRecord(t *testing.T) {
	ctx := context.Background()
	st := mustSchema(t, allTypesSchema)
	asch := schema.ToArrow(st)
	one := buildRecord(t, asch, 0, 64)
	defer one.Release()
	two := []arrow.RecordBatch{buildRecord(t, asch, 0, 30), buildRecord(t, asch, 30, 64)}
	defer func() {
		for _, r := range two {
			r.Release()
		}
	}()
	write := func(recs []arrow.RecordBatch) ([]byte, FileStats) {
		var buf bytes.Buffer
		fs, err := WriteFile(ctx, &buf, st, recs, WriteOptions{RowGroupRows: 20})
		if err != nil {
			t.Fatal(err)
		}
		if fs.NumRecords != 64 || fs.Size != int64(buf.Len()) {
			t.Fatalf("stats %+v, len %d", fs, buf.Len())
		}
		return buf.Bytes(), fs
	}
	wholeBytes, wholeStats := write([]arrow.RecordBatch{one})
	_, bufferedStats := write(two)
	if wholeStats.StatsJSON != bufferedStats.StatsJSON {
		t.Errorf("stats differ:\nwhole    %s\nbuffered %s", wholeStats.StatsJSON, bufferedStats.StatsJSON)
	}
	pf, err := file.NewParquetReader(bytes.NewReader(wholeBytes))
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int64
	for i := 0; i < pf.NumRowGroups(); i++ {
		sizes = append(sizes, pf.MetaData().RowGroup(i).NumRows())
	}
	if fmt.Sprint(sizes) != "[20 20 20 4]" {
		t.Errorf("row groups %v, want [20 20 20 4]", sizes)
	}
	want := canonRows(t, two)
	got, err := ReadAll(ctx, bytes.NewReader(wholeBytes), int64(len(wholeBytes)), st, ReadOptions{BatchSize: 9})
	if err != nil {
		t.Fatal(err)
	}
	gotRows := canonRows(t, got)
	for _, r := range got {
		r.Release()
	}
	compareRows(t, "our reader", gotRows, want)
	path := filepath.Join(t.TempDir(), "one.parquet")
	if err := os.WriteFile(path, wholeBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	compareRows(t, "pyarrow", pyarrowRows(t, path), want)
}
