package merge

import (
	"math"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
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
