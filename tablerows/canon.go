package tablerows

import (
	"encoding/base64"
	"encoding/json"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// AppendJSON appends the canonical JSON text of a[i] to dst.
func AppendJSON(dst []byte, a arrow.Array, i int) []byte {
	if a.IsNull(i) {
		return append(dst, "null"...)
	}
	switch x := a.(type) {
	case *array.Boolean:
		return strconv.AppendBool(dst, x.Value(i))
	case *array.Int8:
		return strconv.AppendInt(dst, int64(x.Value(i)), 10)
	case *array.Int16:
		return strconv.AppendInt(dst, int64(x.Value(i)), 10)
	case *array.Int32:
		return strconv.AppendInt(dst, int64(x.Value(i)), 10)
	case *array.Int64:
		return strconv.AppendInt(dst, x.Value(i), 10)
	case *array.Uint8:
		return strconv.AppendUint(dst, uint64(x.Value(i)), 10)
	case *array.Uint16:
		return strconv.AppendUint(dst, uint64(x.Value(i)), 10)
	case *array.Uint32:
		return strconv.AppendUint(dst, uint64(x.Value(i)), 10)
	case *array.Uint64:
		return strconv.AppendUint(dst, x.Value(i), 10)
	case *array.Float32:
		return AppendFloat(dst, float64(x.Value(i)), 32)
	case *array.Float64:
		return AppendFloat(dst, x.Value(i), 64)
	case *array.String:
		return AppendString(dst, x.Value(i))
	case *array.LargeString:
		return AppendString(dst, x.Value(i))
	case *array.Binary:
		return AppendString(dst, base64.StdEncoding.EncodeToString(x.Value(i)))
	case *array.LargeBinary:
		return AppendString(dst, base64.StdEncoding.EncodeToString(x.Value(i)))
	case *array.FixedSizeBinary:
		return AppendString(dst, base64.StdEncoding.EncodeToString(x.Value(i)))
	case *array.Date32:
		return AppendString(dst, FormatDate(int64(x.Value(i))))
	case *array.Timestamp:
		tt := x.DataType().(*arrow.TimestampType)
		us := int64(x.Value(i))
		switch tt.Unit {
		case arrow.Second:
			us *= 1e6
		case arrow.Millisecond:
			us *= 1e3
		case arrow.Nanosecond:
			us = floorDiv(us, 1e3)
		}
		if tt.TimeZone == "" {
			return AppendString(dst, FormatTimestampNTZ(us))
		}
		return AppendString(dst, FormatTimestamp(us))
	case *array.Decimal128:
		n := x.Value(i)
		return AppendString(dst, FormatDecimal(n.BigInt(), x.DataType().(*arrow.Decimal128Type).Scale))
	case *array.List, *array.LargeList:
		ll := x.(array.ListLike)
		s, e := ll.ValueOffsets(i)
		vals := ll.ListValues()
		dst = append(dst, '[')
		for j := s; j < e; j++ {
			if j > s {
				dst = append(dst, ',')
			}
			dst = AppendJSON(dst, vals, int(j))
		}
		return append(dst, ']')
	case *array.Map:
		s, e := x.ValueOffsets(i)
		keys, items := x.Keys(), x.Items()
		dst = append(dst, '{')
		var kb []byte
		for j := s; j < e; j++ {
			if j > s {
				dst = append(dst, ',')
			}
			kb = AppendJSON(kb[:0], keys, int(j))
			if len(kb) > 0 && kb[0] == '"' {
				dst = append(dst, kb...)
			} else {
				dst = AppendString(dst, string(kb))
			}
			dst = append(dst, ':')
			dst = AppendJSON(dst, items, int(j))
		}
		return append(dst, '}')
	case *array.Struct:
		st := x.DataType().(*arrow.StructType)
		dst = append(dst, '{')
		for j := 0; j < x.NumField(); j++ {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = AppendString(dst, st.Field(j).Name)
			dst = append(dst, ':')
			dst = AppendJSON(dst, x.Field(j), i)
		}
		return append(dst, '}')
	}
	return AppendString(dst, a.ValueStr(i))
}

// AppendString appends s as a JSON string (HTML characters not escaped).
func AppendString(dst []byte, s string) []byte {
	var sb strings.Builder
	enc := json.NewEncoder(&sb)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return append(dst, strings.TrimSuffix(sb.String(), "\n")...)
}

// AppendFloat appends f as a JSON number (shortest form that round-trips at
// the given bit size); NaN and infinities, which JSON cannot hold, become
// the strings "NaN", "Infinity" and "-Infinity".
func AppendFloat(dst []byte, f float64, bits int) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(dst, `"Infinity"`...)
	case math.IsInf(f, -1):
		return append(dst, `"-Infinity"`...)
	}
	b, err := json.Marshal(f)
	if bits == 32 {
		b, err = json.Marshal(float32(f))
	}
	if err != nil {
		return strconv.AppendFloat(dst, f, 'g', -1, bits)
	}
	return append(dst, b...)
}

// FormatDecimal renders unscaled × 10^-scale with exactly scale decimals.
func FormatDecimal(unscaled *big.Int, scale int32) string {
	neg := unscaled.Sign() < 0
	s := new(big.Int).Abs(unscaled).String()
	if scale < 0 {
		s += strings.Repeat("0", int(-scale))
	} else if scale > 0 {
		if len(s) <= int(scale) {
			s = strings.Repeat("0", int(scale)-len(s)+1) + s
		}
		s = s[:len(s)-int(scale)] + "." + s[len(s)-int(scale):]
	}
	if neg {
		s = "-" + s
	}
	return s
}

// FormatTimestamp renders microseconds since the epoch as RFC 3339 UTC with
// exactly six fractional digits.
func FormatTimestamp(us int64) string {
	return time.UnixMicro(us).UTC().Format("2006-01-02T15:04:05.000000Z")
}

// FormatTimestampNTZ renders wall-clock microseconds without a zone.
func FormatTimestampNTZ(us int64) string {
	return time.UnixMicro(us).UTC().Format("2006-01-02T15:04:05.000000")
}

// FormatDate renders days since 1970-01-01 as YYYY-MM-DD.
func FormatDate(days int64) string {
	return time.Unix(days*86400, 0).UTC().Format("2006-01-02")
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// Text returns the cell as display text: JSON strings unquoted, everything
// else as its JSON text.
func Text(v string) string {
	if len(v) >= 2 && v[0] == '"' {
		var s string
		if err := json.Unmarshal([]byte(v), &s); err == nil {
			return s
		}
	}
	return v
}
