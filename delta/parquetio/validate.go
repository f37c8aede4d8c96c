package parquetio

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
)

// validateArray checks that an array decoded from a (possibly corrupt) file
// is internally consistent before compute kernels touch it: compute runs
// kernels on other goroutines, where a panic cannot be recovered.
func validateArray(a arrow.Array) error {
	d := a.Data()
	end := int64(d.Offset()) + int64(d.Len())
	if d.Offset() < 0 || d.Len() < 0 {
		return fmt.Errorf("negative offset/length")
	}
	bufs := d.Buffers()
	if len(bufs) > 0 && bufs[0] != nil && int64(bufs[0].Len()) < bitutil.BytesForBits(end) {
		return fmt.Errorf("%s: validity bitmap too short", a.DataType())
	}
	if d.NullN() > 0 && (len(bufs) == 0 || bufs[0] == nil) && a.DataType().ID() != arrow.NULL {
		return fmt.Errorf("%s: %d nulls but no validity bitmap", a.DataType(), d.NullN())
	}
	need := func(i int, n int64) error {
		if len(bufs) <= i || bufs[i] == nil {
			if n == 0 {
				return nil
			}
			return fmt.Errorf("%s: missing buffer %d", a.DataType(), i)
		}
		if int64(bufs[i].Len()) < n {
			return fmt.Errorf("%s: buffer %d has %d bytes, need %d", a.DataType(), i, bufs[i].Len(), n)
		}
		return nil
	}
	switch t := a.DataType().(type) {
	case *arrow.Decimal128Type:
		if t.Precision < 1 || t.Precision > 38 || t.Scale < 0 || t.Scale > t.Precision {
			return fmt.Errorf("invalid decimal(%d,%d)", t.Precision, t.Scale)
		}
		return need(1, end*16)
	case *arrow.Decimal256Type, *arrow.Decimal32Type, *arrow.Decimal64Type:
		return fmt.Errorf("unsupported %s", t)
	case *arrow.BooleanType:
		return need(1, bitutil.BytesForBits(end))
	case arrow.FixedWidthDataType:
		return need(1, end*int64(t.BitWidth()/8))
	case *arrow.StringType, *arrow.BinaryType:
		if err := need(1, (end+1)*4); err != nil {
			return err
		}
		if v, ok := a.(interface{ ValidateFull() error }); ok {
			return v.ValidateFull()
		}
	case *arrow.ListType:
		if err := need(1, (end+1)*4); err != nil {
			return err
		}
		l := a.(*array.List)
		if err := l.ValidateFull(); err != nil {
			return err
		}
		return validateArray(l.ListValues())
	case *arrow.MapType:
		if err := need(1, (end+1)*4); err != nil {
			return err
		}
		m := a.(*array.Map)
		if err := m.ValidateFull(); err != nil {
			return err
		}
		return validateArray(m.ListValues())
	case *arrow.StructType:
		s := a.(*array.Struct)
		for i := 0; i < s.NumField(); i++ {
			f := s.Field(i)
			if int64(f.Len()) < int64(d.Len()) {
				return fmt.Errorf("struct field %s shorter than struct", t.Field(i).Name)
			}
			if err := validateArray(f); err != nil {
				return err
			}
		}
	}
	return nil
}
