package parquetio

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/arrow/scalar"

	"github.com/cdcsink/cdc-sink/delta/schema"
)

// HiveDefaultPartition is the directory/partition value Spark uses for null.
const HiveDefaultPartition = "__HIVE_DEFAULT_PARTITION__"

var tsLayouts = []string{
	"2006-01-02 15:04:05.999999999",
	"2006-01-02T15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02T15:04:05.999999999",
	"2006-01-02",
}

// ParseTimestamp parses a Delta partition timestamp: "yyyy-MM-dd HH:mm:ss[.ffffff]"
// (taken as UTC), or ISO-8601 with a zone ("1970-01-01T00:00:00.123456Z").
// It returns microseconds since the epoch.
func ParseTimestamp(s string) (int64, error) {
	for _, l := range tsLayouts {
		if t, err := time.ParseInLocation(l, s, time.UTC); err == nil {
			return t.Unix()*1e6 + int64(t.Nanosecond()/1000), nil
		}
	}
	return 0, fmt.Errorf("invalid timestamp %q", s)
}

// ParsePartitionValue converts a Delta partition value string to an Arrow
// scalar of schema.ArrowType(t). nil, "" and __HIVE_DEFAULT_PARTITION__
// give a null scalar.
func ParsePartitionValue(v *string, t schema.DataType) (scalar.Scalar, error) {
	at := schema.ArrowType(t)
	if v == nil || *v == "" || *v == HiveDefaultPartition {
		return scalar.MakeNullScalar(at), nil
	}
	s := *v
	switch tt := t.(type) {
	case schema.PrimitiveType:
		switch tt {
		case schema.String:
			return scalar.NewStringScalar(s), nil
		case schema.Binary:
			return scalar.NewBinaryScalar(memory.NewBufferBytes([]byte(s)), arrow.BinaryTypes.Binary), nil
		case schema.Boolean:
			b, err := strconv.ParseBool(strings.ToLower(s))
			if err != nil {
				return nil, err
			}
			return scalar.NewBooleanScalar(b), nil
		case schema.Byte:
			n, err := strconv.ParseInt(s, 10, 8)
			return scalar.NewInt8Scalar(int8(n)), err
		case schema.Short:
			n, err := strconv.ParseInt(s, 10, 16)
			return scalar.NewInt16Scalar(int16(n)), err
		case schema.Integer:
			n, err := strconv.ParseInt(s, 10, 32)
			return scalar.NewInt32Scalar(int32(n)), err
		case schema.Long:
			n, err := strconv.ParseInt(s, 10, 64)
			return scalar.NewInt64Scalar(n), err
		case schema.Float:
			f, err := strconv.ParseFloat(s, 32)
			return scalar.NewFloat32Scalar(float32(f)), err
		case schema.Double:
			f, err := strconv.ParseFloat(s, 64)
			return scalar.NewFloat64Scalar(f), err
		case schema.Date:
			d, err := time.ParseInLocation("2006-01-02", s, time.UTC)
			if err != nil {
				return nil, err
			}
			return scalar.NewDate32Scalar(arrow.Date32(d.Unix() / 86400)), nil
		case schema.Timestamp, schema.TimestampNTZ:
			us, err := ParseTimestamp(s)
			if err != nil {
				return nil, err
			}
			return scalar.NewTimestampScalar(arrow.Timestamp(us), at), nil
		}
	case *schema.DecimalType:
		n, err := decimal128.FromString(s, int32(tt.Precision), int32(tt.Scale))
		if err != nil {
			return nil, err
		}
		return scalar.NewDecimal128Scalar(n, at), nil
	}
	return nil, fmt.Errorf("type %s cannot be a partition column", t.TypeName())
}
