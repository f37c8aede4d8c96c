package merge

import (
	"math"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/cdcsink/cdc-sink/normalize"
)

// TestAppendValueRange: a value outside its column's range is refused,
// never truncated (int32(x) would wrap 2^31 to -2^31 without a word).
func TestAppendValueRange(t *testing.T) {
	for _, tc := range []struct {
		typ arrow.DataType
		v   any
		ok  bool
	}{
		{arrow.PrimitiveTypes.Int8, int64(127), true},
		{arrow.PrimitiveTypes.Int8, int64(128), false},
		{arrow.PrimitiveTypes.Int8, int64(-129), false},
		{arrow.PrimitiveTypes.Int16, int64(-32768), true},
		{arrow.PrimitiveTypes.Int16, int64(32768), false},
		{arrow.PrimitiveTypes.Int32, int64(math.MaxInt32), true},
		{arrow.PrimitiveTypes.Int32, int64(math.MaxInt32) + 1, false},
		{arrow.PrimitiveTypes.Int32, int64(math.MinInt32) - 1, false},
		{arrow.PrimitiveTypes.Int64, int64(math.MinInt64), true},
		{arrow.PrimitiveTypes.Float32, 1.5, true},
		{arrow.PrimitiveTypes.Float32, math.Inf(-1), true},
		{arrow.PrimitiveTypes.Float32, 1e300, false},
	} {
		b := array.NewBuilder(memory.DefaultAllocator, tc.typ)
		err := AppendValue(b, tc.v)
		b.Release()
		if tc.ok != (err == nil) {
			t.Errorf("%s ← %v: err %v, want ok=%v", tc.typ, tc.v, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "does not fit column type "+tc.typ.String()) {
			t.Errorf("%s ← %v: error %q does not name the column type", tc.typ, tc.v, err)
		}
	}
}

// TestBuildRecordReservesData: the string and binary columns' value buffers
// are sized once for the whole batch (growing by doubling was a third of a
// large batch's record build), and the reservation changes no value: nulls,
// TOAST markers, strings given to a binary column and empty values come out
// as they went in.
func TestBuildRecordReservesData(t *testing.T) {
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "b", Type: arrow.BinaryTypes.Binary, Nullable: true},
	}, nil)
	long := strings.Repeat("x", 5000)
	rows := [][]any{
		{int64(1), "héllo", []byte{0, 1, 2}},
		{int64(2), nil, "as-string"},
		{int64(3), normalize.Unavailable, nil},
		{int64(4), "", []byte{}},
		{int64(5), long, normalize.Unavailable},
	}
	want := len("héllo") + len(long)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	reserveData(b.Fields(), rows)
	if got := b.Field(1).(*array.StringBuilder).DataCap(); got < want {
		t.Errorf("string column reserved %d bytes, want ≥ %d", got, want)
	}
	if got := b.Field(2).(*array.BinaryBuilder).DataCap(); got < 3+len("as-string") {
		t.Errorf("binary column reserved %d bytes, want ≥ %d", got, 3+len("as-string"))
	}

	rec, err := buildRecord(sc, rows)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	s := rec.Column(1).(*array.String)
	bin := rec.Column(2).(*array.Binary)
	for i, row := range rows {
		switch v := row[1].(type) {
		case string:
			if s.IsNull(i) || s.Value(i) != v {
				t.Errorf("row %d: s = %q (null %v), want %q", i, s.Value(i), s.IsNull(i), v)
			}
		default:
			if !s.IsNull(i) {
				t.Errorf("row %d: s = %q, want null", i, s.Value(i))
			}
		}
		switch v := row[2].(type) {
		case []byte:
			if bin.IsNull(i) || string(bin.Value(i)) != string(v) {
				t.Errorf("row %d: b = %x, want %x", i, bin.Value(i), v)
			}
		case string:
			if bin.IsNull(i) || string(bin.Value(i)) != v {
				t.Errorf("row %d: b = %q, want %q", i, bin.Value(i), v)
			}
		default:
			if !bin.IsNull(i) {
				t.Errorf("row %d: b = %x, want null", i, bin.Value(i))
			}
		}
	}
}
