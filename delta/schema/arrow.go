package schema

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
)

// ToArrow converts a Delta schema to an Arrow schema with the physical types
// Spark/Delta expect in Parquet (see delta.md §1.9):
//
//	timestamp     -> Timestamp(us, "UTC")   (INT64 TIMESTAMP(isAdjustedToUTC=true, MICROS))
//	timestamp_ntz -> Timestamp(us)          (INT64 TIMESTAMP(isAdjustedToUTC=false, MICROS))
//	date          -> date32
//	decimal(p,s)  -> decimal128(p,s)        (INT32/INT64/FLBA with StoreDecimalAsInteger)
//	byte/short    -> int8/int16
//	string/binary -> utf8/binary
//	array/map/struct -> list/map/struct
//
// Unknown types are mapped to arrow.Null; callers should Validate first.
func ToArrow(s *StructType) *arrow.Schema {
	fields := make([]arrow.Field, len(s.Fields))
	for i, f := range s.Fields {
		fields[i] = ArrowField(f)
	}
	return arrow.NewSchema(fields, nil)
}

// ArrowField converts one field.
func ArrowField(f *StructField) arrow.Field {
	return arrow.Field{Name: f.Name, Type: ArrowType(f.Type), Nullable: f.Nullable}
}

// ArrowType converts one data type.
func ArrowType(t DataType) arrow.DataType {
	switch t := t.(type) {
	case PrimitiveType:
		switch t {
		case String:
			return arrow.BinaryTypes.String
		case Binary:
			return arrow.BinaryTypes.Binary
		case Long:
			return arrow.PrimitiveTypes.Int64
		case Integer:
			return arrow.PrimitiveTypes.Int32
		case Short:
			return arrow.PrimitiveTypes.Int16
		case Byte:
			return arrow.PrimitiveTypes.Int8
		case Float:
			return arrow.PrimitiveTypes.Float32
		case Double:
			return arrow.PrimitiveTypes.Float64
		case Boolean:
			return arrow.FixedWidthTypes.Boolean
		case Date:
			return arrow.FixedWidthTypes.Date32
		case Timestamp:
			return &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}
		case TimestampNTZ:
			return &arrow.TimestampType{Unit: arrow.Microsecond}
		}
	case *DecimalType:
		return &arrow.Decimal128Type{Precision: int32(t.Precision), Scale: int32(t.Scale)}
	case *ArrayType:
		return arrow.ListOfField(arrow.Field{Name: "element", Type: ArrowType(t.ElementType), Nullable: t.ContainsNull})
	case *MapType:
		return arrow.MapOfFields(
			arrow.Field{Name: "key", Type: ArrowType(t.KeyType)},
			arrow.Field{Name: "value", Type: ArrowType(t.ValueType), Nullable: t.ValueContainsNull})
	case *StructType:
		fields := make([]arrow.Field, len(t.Fields))
		for i, f := range t.Fields {
			fields[i] = ArrowField(f)
		}
		return arrow.StructOf(fields...)
	}
	return arrow.Null
}

// FromArrow converts an Arrow type back to a Delta type, for callers that
// build records first. Timestamps with a time zone map to timestamp, without
// to timestamp_ntz; uint types and other Arrow-only types are an error.
func FromArrow(dt arrow.DataType) (DataType, error) {
	switch dt := dt.(type) {
	case *arrow.StringType, *arrow.LargeStringType, *arrow.StringViewType:
		return String, nil
	case *arrow.BinaryType, *arrow.LargeBinaryType, *arrow.BinaryViewType, *arrow.FixedSizeBinaryType:
		return Binary, nil
	case *arrow.Int64Type:
		return Long, nil
	case *arrow.Int32Type:
		return Integer, nil
	case *arrow.Int16Type:
		return Short, nil
	case *arrow.Int8Type:
		return Byte, nil
	case *arrow.Float32Type:
		return Float, nil
	case *arrow.Float64Type:
		return Double, nil
	case *arrow.BooleanType:
		return Boolean, nil
	case *arrow.Date32Type:
		return Date, nil
	case *arrow.TimestampType:
		if dt.TimeZone == "" {
			return TimestampNTZ, nil
		}
		return Timestamp, nil
	case *arrow.Decimal128Type:
		return &DecimalType{Precision: int(dt.Precision), Scale: int(dt.Scale)}, nil
	case *arrow.ListType:
		et, err := FromArrow(dt.Elem())
		if err != nil {
			return nil, err
		}
		return &ArrayType{ElementType: et, ContainsNull: dt.ElemField().Nullable}, nil
	case *arrow.MapType:
		kt, err := FromArrow(dt.KeyType())
		if err != nil {
			return nil, err
		}
		vt, err := FromArrow(dt.ItemType())
		if err != nil {
			return nil, err
		}
		return &MapType{KeyType: kt, ValueType: vt, ValueContainsNull: dt.ItemField().Nullable}, nil
	case *arrow.StructType:
		st := &StructType{}
		for _, f := range dt.Fields() {
			t, err := FromArrow(f.Type)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f.Name, err)
			}
			st.Fields = append(st.Fields, NewField(f.Name, t, f.Nullable))
		}
		return st, nil
	}
	return nil, fmt.Errorf("arrow type %s has no Delta equivalent", dt)
}

// FromArrowSchema converts a whole Arrow schema.
func FromArrowSchema(s *arrow.Schema) (*StructType, error) {
	t, err := FromArrow(arrow.StructOf(s.Fields()...))
	if err != nil {
		return nil, err
	}
	return t.(*StructType), nil
}
