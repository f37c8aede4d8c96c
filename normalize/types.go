package normalize

import (
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/quarantine"
)

const (
	reasonType    = quarantine.TypeMismatch
	reasonDecimal = quarantine.InvalidDecimal
	reasonTime    = quarantine.InvalidTime
)

// cerr is a conversion failure below the column level; the caller adds the
// table and column name.
type cerr struct {
	r   quarantine.Reason
	msg string
}

func errf(r quarantine.Reason, format string, args ...any) *cerr {
	return &cerr{r: r, msg: fmt.Sprintf(format, args...)}
}

func (e *cerr) in(path string) *cerr { e.msg = path + ": " + e.msg; return e }

// convOp is how a value of one Connect schema becomes a Delta value.
type convOp uint8

const (
	opBool convOp = iota + 1
	opInt8
	opInt16
	opInt32
	opInt64
	opFloat32
	opFloat64
	opString
	opBytes
	opDecimal
	opVarDecimal
	opDate       // int days → Date
	opTimeMillis // int ms of day → Long µs
	opTimeMicros // int µs of day → Long µs
	opTimeNanos  // int ns of day → Long µs
	opTsMillis   // int ms → Timestamp(NTZ) µs
	opTsMicros   // int µs → Timestamp(NTZ) µs
	opTsNanos    // int ns → Timestamp(NTZ) µs
	opZonedTs    // ISO string with offset → Timestamp µs UTC
	opIsoTs      // ISO string → Timestamp(NTZ) µs
	opIsoDate    // ISO date string → Date
	opIsoTime    // ISO time string → Long µs
	opZonedTime  // ISO time with offset → String HH:MM:SS[.f]Z
	opArray
	opMap
	opStruct
)

// conv is the compiled conversion of one Connect schema.
type conv struct {
	op       convOp
	typ      Type
	optional bool
	scale    int
	prec     int
	elem     *conv    // array
	key, val *conv    // map
	fields   []conv   // struct
	names    []string // struct field names
}

// Semantic type names.
const (
	nDate           = "io.debezium.time.Date"
	nTime           = "io.debezium.time.Time"
	nMicroTime      = "io.debezium.time.MicroTime"
	nNanoTime       = "io.debezium.time.NanoTime"
	nTimestamp      = "io.debezium.time.Timestamp"
	nMicroTimestamp = "io.debezium.time.MicroTimestamp"
	nNanoTimestamp  = "io.debezium.time.NanoTimestamp"
	nZonedTimestamp = "io.debezium.time.ZonedTimestamp"
	nZonedTime      = "io.debezium.time.ZonedTime"
	nIsoDate        = "io.debezium.time.IsoDate"
	nIsoTime        = "io.debezium.time.IsoTime"
	nIsoTimestamp   = "io.debezium.time.IsoTimestamp"
	nConnectDate    = "org.apache.kafka.connect.data.Date"
	nConnectTime    = "org.apache.kafka.connect.data.Time"
	nConnectTs      = "org.apache.kafka.connect.data.Timestamp"
	nConnectDecimal = "org.apache.kafka.connect.data.Decimal"
	nVarScale       = "io.debezium.data.VariableScaleDecimal"
)

func isIntType(t string) bool {
	return t == "int8" || t == "int16" || t == "int32" || t == "int64"
}

// compile builds the conversion for Connect schema s. path names the column
// (for errors).
func (n *Normalizer) compile(s *envelope.Schema, path string) (conv, *cerr) {
	if s == nil {
		return conv{}, errf(reasonType, "%s: no schema", path)
	}
	c := conv{optional: s.Optional}
	needInt := func() *cerr {
		if !isIntType(s.Type) {
			return errf(reasonType, "%s: semantic type %s on Connect type %q (want an integer type)", path, s.Name, s.Type)
		}
		return nil
	}
	needString := func() *cerr {
		if s.Type != "string" {
			return errf(reasonType, "%s: semantic type %s on Connect type %q (want string)", path, s.Name, s.Type)
		}
		return nil
	}
	ts := Type{Kind: Timestamp}
	if n.opts.TimestampNTZ {
		ts.Kind = TimestampNTZ
	}
	var e *cerr
	switch s.Name {
	case nDate, nConnectDate:
		c.op, c.typ, e = opDate, Type{Kind: Date}, needInt()
	case nTime, nConnectTime:
		c.op, c.typ, e = opTimeMillis, Type{Kind: Long}, needInt()
	case nMicroTime:
		c.op, c.typ, e = opTimeMicros, Type{Kind: Long}, needInt()
	case nNanoTime:
		c.op, c.typ, e = opTimeNanos, Type{Kind: Long}, needInt()
	case nTimestamp, nConnectTs:
		c.op, c.typ, e = opTsMillis, ts, needInt()
	case nMicroTimestamp:
		c.op, c.typ, e = opTsMicros, ts, needInt()
	case nNanoTimestamp:
		c.op, c.typ, e = opTsNanos, ts, needInt()
	case nZonedTimestamp:
		c.op, c.typ, e = opZonedTs, Type{Kind: Timestamp}, needString()
	case nIsoTimestamp:
		c.op, c.typ, e = opIsoTs, ts, needString()
	case nIsoDate:
		c.op, c.typ, e = opIsoDate, Type{Kind: Date}, needString()
	case nIsoTime:
		c.op, c.typ, e = opIsoTime, Type{Kind: Long}, needString()
	case nZonedTime:
		c.op, c.typ, e = opZonedTime, Type{Kind: String}, needString()
	case nConnectDecimal:
		if s.Type != "bytes" {
			return c, errf(reasonDecimal, "%s: Decimal on Connect type %q (want bytes)", path, s.Type)
		}
		sc, err := strconv.Atoi(s.Parameters["scale"])
		if err != nil {
			return c, errf(reasonDecimal, "%s: Decimal without a usable scale parameter (%q)", path, s.Parameters["scale"])
		}
		p := MaxDecimalPrecision
		if ps, ok := s.Parameters["connect.decimal.precision"]; ok {
			if p, err = strconv.Atoi(ps); err != nil || p < 1 {
				return c, errf(reasonDecimal, "%s: connect.decimal.precision %q unusable", path, ps)
			}
		}
		if p > MaxDecimalPrecision {
			return c, errf(reasonDecimal, "%s: precision %d exceeds Delta's maximum %d (use decimal.handling.mode=string)", path, p, MaxDecimalPrecision)
		}
		if sc < 0 || sc > p {
			return c, errf(reasonDecimal, "%s: scale %d outside 0..precision %d", path, sc, p)
		}
		c.op, c.scale, c.prec = opDecimal, sc, p
		c.typ = Type{Kind: Decimal, Precision: p, Scale: sc}
		return c, nil
	case nVarScale:
		if n.opts.VariableScaleAsString {
			c.op, c.typ = opVarDecimal, Type{Kind: String}
		} else {
			c.op, c.typ = opVarDecimal, Type{Kind: Decimal, Precision: n.opts.VariableScalePrecision, Scale: n.opts.VariableScaleScale}
		}
		c.scale, c.prec = n.opts.VariableScaleScale, n.opts.VariableScalePrecision
		return c, nil
	}
	if e != nil {
		return c, e
	}
	if c.op != 0 {
		return c, nil
	}
	// Physical Connect types (incl. Json, Xml, Uuid, Enum, EnumSet, Interval →
	// string; Bits → bytes; MicroDuration → int64; Point/Geometry → struct).
	switch s.Type {
	case "boolean":
		c.op, c.typ = opBool, Type{Kind: Boolean}
	case "int8":
		c.op, c.typ = opInt8, Type{Kind: Byte}
	case "int16":
		c.op, c.typ = opInt16, Type{Kind: Short}
	case "int32":
		c.op, c.typ = opInt32, Type{Kind: Integer}
	case "int64":
		c.op, c.typ = opInt64, Type{Kind: Long}
	case "float32", "float": // "float"/"double": JsonConverter's spelling, if a decoder passes it through
		c.op, c.typ = opFloat32, Type{Kind: Float}
	case "float64", "double":
		c.op, c.typ = opFloat64, Type{Kind: Double}
	case "string":
		c.op, c.typ = opString, Type{Kind: String}
	case "bytes":
		c.op, c.typ = opBytes, Type{Kind: Binary}
	case "array":
		el, e := n.compile(s.Items, path+"[]")
		if e != nil {
			return c, e
		}
		c.op, c.elem = opArray, &el
		c.typ = Type{Kind: Array, Elem: &el.typ}
	case "map":
		k, e := n.compile(s.Keys, path+"{key}")
		if e != nil {
			return c, e
		}
		v, e := n.compile(s.Values, path+"{value}")
		if e != nil {
			return c, e
		}
		c.op, c.key, c.val = opMap, &k, &v
		c.typ = Type{Kind: Map, Key: &k.typ, Val: &v.typ}
	case "struct":
		c.op = opStruct
		c.fields = make([]conv, len(s.Fields))
		c.names = make([]string, len(s.Fields))
		defs := make([]ColumnDef, len(s.Fields))
		for i, f := range s.Fields {
			fc, e := n.compile(f.Schema, path+"."+f.Name)
			if e != nil {
				return c, e
			}
			c.fields[i], c.names[i] = fc, f.Name
			defs[i] = ColumnDef{Name: f.Name, Type: fc.typ, Nullable: fc.optional}
		}
		c.typ = Type{Kind: Struct, Fields: defs}
	default:
		return c, errf(reasonType, "%s: unknown Connect type %q", path, s.Type)
	}
	return c, nil
}

// toInt64 accepts the integer representations a decoder may produce.
func toInt64(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case int32:
		return int64(x), true
	case int:
		return int64(x), true
	case int16:
		return int64(x), true
	case int8:
		return int64(x), true
	case float64:
		if x == math.Trunc(x) && x >= -9.223372036854775808e18 && x < 9.223372036854775808e18 {
			return int64(x), true
		}
	case envelope.Number:
		if i, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return i, true
		}
		if f, err := strconv.ParseFloat(string(x), 64); err == nil && f == math.Trunc(f) && math.Abs(f) < 9e18 {
			return int64(f), true
		}
	}
	return 0, false
}

func toFloat64(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case float32:
		return float64(x), true
	case int64:
		return float64(x), true
	case envelope.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		if err == nil {
			return f, true
		}
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			return f, true // ±Inf for out-of-range literals
		}
	case string: // JsonConverter renders NaN/Infinity of float columns as strings
		switch x {
		case "NaN":
			return math.NaN(), true
		case "Infinity":
			return math.Inf(1), true
		case "-Infinity":
			return math.Inf(-1), true
		}
	}
	return 0, false
}

func mismatch(c *conv, v any) *cerr {
	return errf(reasonType, "value %s of Go type %T does not fit %s", short(v), v, c.typ.String())
}

func short(v any) string {
	s := fmt.Sprint(v)
	if len(s) > 64 {
		s = s[:61] + "..."
	}
	return strconv.Quote(s)
}

// convert converts one non-TOAST value. nil stays nil (NULL).
func (n *Normalizer) convert(c *conv, v any) (any, *cerr) {
	if v == nil {
		return nil, nil
	}
	switch c.op {
	case opBool:
		if b, ok := v.(bool); ok {
			return b, nil
		}
		if s, ok := v.(string); ok && (s == "true" || s == "false") {
			return s == "true", nil
		}
	case opInt8, opInt16, opInt32:
		i, ok := toInt64(v)
		if !ok {
			break
		}
		switch c.op {
		case opInt8:
			if i >= math.MinInt8 && i <= math.MaxInt8 {
				return int8(i), nil
			}
		case opInt16:
			if i >= math.MinInt16 && i <= math.MaxInt16 {
				return int16(i), nil
			}
		default:
			if i >= math.MinInt32 && i <= math.MaxInt32 {
				return int32(i), nil
			}
		}
		return nil, errf(reasonType, "integer %d out of range for %s", i, c.typ.String())
	case opInt64:
		if _, ok := v.(int64); ok {
			return v, nil // no re-boxing
		}
		if i, ok := toInt64(v); ok {
			return i, nil
		}
	case opFloat32:
		if f, ok := toFloat64(v); ok {
			return float32(f), nil
		}
	case opFloat64:
		if _, ok := v.(float64); ok {
			return v, nil
		}
		if f, ok := toFloat64(v); ok {
			return f, nil
		}
	case opString:
		switch x := v.(type) {
		case string:
			return v, nil
		case envelope.Number:
			return string(x), nil
		}
	case opBytes:
		if _, ok := v.([]byte); ok {
			return v, nil
		}
	case opDecimal:
		return decimalValue(v, c.scale, c.prec)
	case opVarDecimal:
		if n.opts.VariableScaleAsString {
			return variableScaleString(v)
		}
		return variableScaleValue(v, c.scale, c.prec)
	case opDate:
		if t, ok := v.(time.Time); ok {
			return dateDays(floorDiv(timeToMicros(t), microsPerDay))
		}
		i, ok := toInt64(v)
		if !ok {
			break
		}
		return dateDays(i)
	case opTimeMillis, opTimeMicros, opTimeNanos:
		var us int64
		if d, ok := v.(time.Duration); ok {
			us = d.Microseconds()
		} else {
			i, ok := toInt64(v)
			if !ok {
				break
			}
			switch c.op {
			case opTimeMillis:
				us = -1
				if i >= 0 && i <= maxTimeMicros/1000 {
					us = i * 1000
				}
			case opTimeMicros:
				us = i
			default:
				us = floorDiv(i, 1000)
			}
		}
		if us < 0 || us > maxTimeMicros {
			return nil, errf(reasonTime, "time of day %v outside 00:00..24:00", v)
		}
		return us, nil
	case opTsMillis, opTsMicros, opTsNanos:
		if t, ok := v.(time.Time); ok {
			return n.timestamp(timeToMicros(t), v)
		}
		i, ok := toInt64(v)
		if !ok {
			break
		}
		if pos, inf := isInfinitySentinel(i); inf {
			return n.infinity(pos, v)
		}
		switch c.op {
		case opTsMillis:
			if i > math.MaxInt64/1000 || i < math.MinInt64/1000 {
				return nil, errf(reasonTime, "timestamp %d ms out of range", i)
			}
			i *= 1000
		case opTsNanos:
			i = floorDiv(i, 1000)
		}
		if _, boxed := v.(int64); boxed && c.op == opTsMicros && i >= minTsMicros && i <= maxTsMicros {
			return v, nil // already an int64 of the right value: no re-boxing
		}
		return n.timestamp(i, v)
	case opZonedTs, opIsoTs:
		s, ok := v.(string)
		if !ok {
			break
		}
		switch s {
		case "infinity", "+infinity", "Infinity":
			return n.infinity(true, v)
		case "-infinity", "-Infinity":
			return n.infinity(false, v)
		}
		us, ok := parseTimestamp(s)
		if !ok {
			return nil, errf(reasonTime, "%q is not an ISO-8601 timestamp", s)
		}
		return n.timestamp(us, v)
	case opIsoDate:
		s, ok := v.(string)
		if !ok {
			break
		}
		days, i, ok := parseDate(s)
		if ok {
			if _, zok := parseZone(s, i); zok {
				return dateDays(days)
			}
		}
		return nil, errf(reasonTime, "%q is not an ISO-8601 date", s)
	case opIsoTime, opZonedTime:
		s, ok := v.(string)
		if !ok {
			break
		}
		us, j, fs, fe, ok := parseClock(s, 0)
		var off int64
		if ok {
			off, ok = parseZone(s, j)
		}
		if !ok {
			return nil, errf(reasonTime, "%q is not an ISO-8601 time", s)
		}
		if c.op == opIsoTime {
			if off != 0 {
				us = ((us-off*microsPerSec)%microsPerDay + microsPerDay) % microsPerDay
			}
			return us, nil
		}
		if off == 0 && j < len(s) && s[j] == 'Z' {
			return v, nil // already UTC: keep the string
		}
		utc := ((us-off*microsPerSec)%microsPerDay + microsPerDay) % microsPerDay
		return formatUTCTime(utc, s[fs:fe]), nil
	case opArray:
		arr, ok := v.([]any)
		if !ok {
			break
		}
		out := make([]any, len(arr))
		for i, el := range arr {
			x, e := n.convert(c.elem, el)
			if e != nil {
				return nil, e.in("element " + strconv.Itoa(i))
			}
			out[i] = x
		}
		return out, nil
	case opMap:
		return n.convertMap(c, v)
	case opStruct:
		r, ok := v.(*envelope.Row)
		if !ok {
			break
		}
		out := make([]any, len(c.fields))
		for i := range c.fields {
			var fv any
			if i < len(r.Names) && r.Names[i] == c.names[i] {
				fv = r.Values[i]
			} else {
				fv, _ = r.Get(c.names[i])
			}
			x, e := n.convert(&c.fields[i], fv)
			if e != nil {
				return nil, e.in("field " + c.names[i])
			}
			out[i] = x
		}
		return out, nil
	}
	return nil, mismatch(c, v)
}

func dateDays(d int64) (any, *cerr) {
	if d < minDateDays || d > maxDateDays {
		return nil, errf(reasonTime, "date %d days since 1970-01-01 is outside 0001-01-01..9999-12-31", d)
	}
	return int32(d), nil
}

func (n *Normalizer) timestamp(us int64, orig any) (any, *cerr) {
	if us < minTsMicros || us > maxTsMicros {
		return nil, errf(reasonTime, "timestamp %v is outside 0001-01-01..9999-12-31 UTC", orig)
	}
	return us, nil
}

func (n *Normalizer) infinity(pos bool, orig any) (any, *cerr) {
	if n.opts.RejectInfinity {
		return nil, errf(reasonTime, "timestamp %v is ±infinity (RejectInfinity is set)", orig)
	}
	if pos {
		return maxTsMicros, nil
	}
	return minTsMicros, nil
}

func variableScaleString(v any) (any, *cerr) {
	var sv, bv any
	switch x := v.(type) {
	case *envelope.Row:
		sv, _ = x.Get("scale")
		bv, _ = x.Get("value")
	case map[string]any:
		sv, bv = x["scale"], x["value"]
	}
	s, ok1 := toInt64(sv)
	b, ok2 := bv.([]byte)
	if !ok1 || !ok2 || len(b) == 0 || s < -1000 || s > 1000 {
		return nil, errf(reasonDecimal, "VariableScaleDecimal %v unusable", short(v))
	}
	u := new(big.Int).SetBytes(b)
	if b[0]&0x80 != 0 {
		u.Sub(u, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	return bigDecimalString(u, int(s)), nil
}

// bigDecimalString renders u·10^-scale as a plain decimal literal.
func bigDecimalString(u *big.Int, scale int) string {
	if scale <= 0 {
		return new(big.Int).Mul(u, bigPow10(-scale)).String()
	}
	s := new(big.Int).Abs(u).String()
	neg := u.Sign() < 0
	if len(s) <= scale {
		s = strings.Repeat("0", scale-len(s)+1) + s
	}
	s = s[:len(s)-scale] + "." + s[len(s)-scale:]
	if neg {
		s = "-" + s
	}
	return s
}

func (n *Normalizer) convertMap(c *conv, v any) (any, *cerr) {
	switch m := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		out := make([]MapEntry, len(keys))
		for i, k := range keys {
			kv, e := n.mapKey(c.key, k)
			if e != nil {
				return nil, e
			}
			vv, e := n.convert(c.val, m[k])
			if e != nil {
				return nil, e.in("key " + strconv.Quote(k))
			}
			out[i] = MapEntry{Key: kv, Value: vv}
		}
		return out, nil
	case []any: // JsonConverter renders non-string-keyed maps as [[k,v],...]
		out := make([]MapEntry, len(m))
		for i, p := range m {
			pair, ok := p.([]any)
			if !ok || len(pair) != 2 {
				return nil, errf(reasonType, "map entry %d is not a [key, value] pair", i)
			}
			kv, e := n.convert(c.key, pair[0])
			if e != nil {
				return nil, e.in("map key")
			}
			vv, e := n.convert(c.val, pair[1])
			if e != nil {
				return nil, e.in("map value")
			}
			out[i] = MapEntry{Key: kv, Value: vv}
		}
		return out, nil
	case []MapEntry:
		return m, nil
	}
	return nil, mismatch(c, v)
}

func (n *Normalizer) mapKey(c *conv, k string) (any, *cerr) {
	switch c.op {
	case opString:
		return k, nil
	case opInt8, opInt16, opInt32, opInt64, opFloat32, opFloat64, opDecimal:
		return n.convert(c, envelope.Number(k))
	case opBool:
		return n.convert(c, k)
	}
	return n.convert(c, k)
}

// String renders a Type in Delta/Spark SQL syntax, e.g. decimal(10,2),
// array<bigint>, struct<x:double,y:double>.
func (t Type) String() string {
	switch t.Kind {
	case Boolean:
		return "boolean"
	case Byte:
		return "byte"
	case Short:
		return "short"
	case Integer:
		return "integer"
	case Long:
		return "long"
	case Float:
		return "float"
	case Double:
		return "double"
	case Decimal:
		return "decimal(" + strconv.Itoa(t.Precision) + "," + strconv.Itoa(t.Scale) + ")"
	case String:
		return "string"
	case Binary:
		return "binary"
	case Date:
		return "date"
	case Timestamp:
		return "timestamp"
	case TimestampNTZ:
		return "timestamp_ntz"
	case Array:
		if t.Elem == nil {
			return "array<?>"
		}
		return "array<" + t.Elem.String() + ">"
	case Map:
		if t.Key == nil || t.Val == nil {
			return "map<?>"
		}
		return "map<" + t.Key.String() + "," + t.Val.String() + ">"
	case Struct:
		var b strings.Builder
		b.WriteString("struct<")
		for i, f := range t.Fields {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(f.Name)
			b.WriteByte(':')
			b.WriteString(f.Type.String())
		}
		b.WriteByte('>')
		return b.String()
	}
	return "unknown"
}
