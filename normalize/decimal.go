package normalize

import (
	"math/big"
	"strconv"
	"strings"

	"github.com/shopspring/decimal"

	"github.com/cdcsink/cdc-sink/envelope"
)

// MaxDecimalPrecision is the largest Delta decimal precision.
const MaxDecimalPrecision = 38

var pow10 [2*MaxDecimalPrecision + 2]*big.Int

func init() {
	p := big.NewInt(1)
	for i := range pow10 {
		pow10[i] = new(big.Int).Set(p)
		p.Mul(p, big.NewInt(10))
	}
}

func bigPow10(n int) *big.Int {
	if n < len(pow10) {
		return pow10[n]
	}
	return new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(n)), nil)
}

var int64Pow10 = [...]int64{1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18}

// decimalFromBytes decodes Kafka Connect Decimal bytes (unscaled, big-endian
// two's complement) at the given scale, checking |unscaled| < 10^precision.
func decimalFromBytes(b []byte, scale, precision int) (decimal.Decimal, *cerr) {
	if len(b) == 0 {
		return decimal.Decimal{}, errf(reasonDecimal, "empty decimal bytes")
	}
	if len(b) <= 8 {
		v := int64(int8(b[0])) // sign-extend
		for _, x := range b[1:] {
			v = v<<8 | int64(x)
		}
		if e := checkInt64Precision(v, precision); e != nil {
			return decimal.Decimal{}, e
		}
		return decimal.New(v, int32(-scale)), nil
	}
	u := new(big.Int).SetBytes(b)
	if b[0]&0x80 != 0 { // negative: subtract 2^(8n)
		u.Sub(u, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	return finishBig(u, scale, precision)
}

func checkInt64Precision(v int64, precision int) *cerr {
	if precision >= 19 {
		return nil
	}
	a := v
	if a < 0 {
		if a == -a { // MinInt64
			return errf(reasonDecimal, "unscaled value %d has more than %d digits", v, precision)
		}
		a = -a
	}
	if a >= int64Pow10[precision] {
		return errf(reasonDecimal, "unscaled value %d has more than %d digits (precision)", v, precision)
	}
	return nil
}

func finishBig(u *big.Int, scale, precision int) (decimal.Decimal, *cerr) {
	if u.CmpAbs(bigPow10(precision)) >= 0 {
		return decimal.Decimal{}, errf(reasonDecimal, "value %s×10^-%d has more than %d digits (precision)", u.String(), scale, precision)
	}
	return decimal.NewFromBigInt(u, int32(-scale)), nil
}

// rescaleExact returns unscaled·10^-fromScale expressed at toScale, failing if
// digits would be lost.
func rescaleExact(u *big.Int, fromScale, toScale int) (*big.Int, bool) {
	switch {
	case fromScale == toScale:
		return u, true
	case fromScale < toScale:
		return new(big.Int).Mul(u, bigPow10(toScale-fromScale)), true
	default:
		q, r := new(big.Int).QuoRem(u, bigPow10(fromScale-toScale), new(big.Int))
		if r.Sign() != 0 {
			return nil, false
		}
		return q, true
	}
}

// decimalFromText parses a decimal literal ("-12.340", "1e3") exactly and
// expresses it at scale; "NaN"/"Infinity" and values needing more fraction
// digits than scale fail.
func decimalFromText(s string, scale, precision int) (decimal.Decimal, *cerr) {
	t := strings.TrimSpace(s)
	if t == "" || strings.ContainsAny(t, "nNiI") { // NaN, Infinity
		return decimal.Decimal{}, errf(reasonDecimal, "%q is not a finite decimal", s)
	}
	d, err := decimal.NewFromString(t)
	if err != nil {
		return decimal.Decimal{}, errf(reasonDecimal, "%q is not a decimal literal", s)
	}
	u, ok := rescaleExact(d.Coefficient(), int(-d.Exponent()), scale)
	if !ok {
		return decimal.Decimal{}, errf(reasonDecimal, "%q has more than %d fraction digits (scale); not exact", s, scale)
	}
	return finishBig(u, scale, precision)
}

// decimalFromRat converts an exact rational (goavro decimal) to scale.
func decimalFromRat(r *big.Rat, scale, precision int) (decimal.Decimal, *cerr) {
	n := new(big.Int).Mul(r.Num(), bigPow10(scale))
	q, rem := new(big.Int).QuoRem(n, r.Denom(), new(big.Int))
	if rem.Sign() != 0 {
		return decimal.Decimal{}, errf(reasonDecimal, "%s is not exact at scale %d", r.String(), scale)
	}
	return finishBig(q, scale, precision)
}

// decimalValue converts any representation the decoder may hand for a
// Connect Decimal: []byte (the normal case), envelope.Number or string
// (decimal.format=NUMERIC), float64 (shortest round-trip text), *big.Rat.
func decimalValue(v any, scale, precision int) (any, *cerr) {
	var d decimal.Decimal
	var e *cerr
	switch x := v.(type) {
	case []byte:
		d, e = decimalFromBytes(x, scale, precision)
	case envelope.Number:
		d, e = decimalFromText(string(x), scale, precision)
	case string:
		d, e = decimalFromText(x, scale, precision)
	case float64:
		d, e = decimalFromText(strconv.FormatFloat(x, 'f', -1, 64), scale, precision)
	case int64:
		d, e = decimalFromText(strconv.FormatInt(x, 10), scale, precision)
	case *big.Rat:
		d, e = decimalFromRat(x, scale, precision)
	case decimal.Decimal:
		u, ok := rescaleExact(x.Coefficient(), int(-x.Exponent()), scale)
		if !ok {
			return nil, errf(reasonDecimal, "%s is not exact at scale %d", x.String(), scale)
		}
		d, e = finishBig(u, scale, precision)
	default:
		return nil, errf(reasonDecimal, "decimal value of Go type %T", v)
	}
	if e != nil {
		return nil, e
	}
	return d, nil
}

// variableScaleValue converts io.debezium.data.VariableScaleDecimal
// {scale int32, value bytes} to Decimal(precision, scale) exactly.
func variableScaleValue(v any, scale, precision int) (any, *cerr) {
	var sv, bv any
	switch x := v.(type) {
	case *envelope.Row:
		sv, _ = x.Get("scale")
		bv, _ = x.Get("value")
	case map[string]any:
		sv, bv = x["scale"], x["value"]
	default:
		return nil, errf(reasonDecimal, "VariableScaleDecimal value of Go type %T (want struct {scale, value})", v)
	}
	s, ok := toInt64(sv)
	if !ok || s < -1000 || s > 1000 {
		return nil, errf(reasonDecimal, "VariableScaleDecimal scale %v unusable", sv)
	}
	b, ok := bv.([]byte)
	if !ok || len(b) == 0 {
		return nil, errf(reasonDecimal, "VariableScaleDecimal value %v (%T) is not decimal bytes", bv, bv)
	}
	u := new(big.Int).SetBytes(b)
	if b[0]&0x80 != 0 {
		u.Sub(u, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	var r *big.Int
	if s < 0 {
		r = new(big.Int).Mul(u, bigPow10(int(-s)+scale))
	} else {
		r, ok = rescaleExact(u, int(s), scale)
		if !ok {
			return nil, errf(reasonDecimal, "VariableScaleDecimal %s×10^-%d needs scale %d > %d: not exactly representable as decimal(%d,%d)", u, s, s, scale, precision, scale)
		}
	}
	d, e := finishBig(r, scale, precision)
	if e != nil {
		return nil, errf(reasonDecimal, "VariableScaleDecimal %s×10^-%d does not fit decimal(%d,%d)", u, s, precision, scale)
	}
	return d, nil
}
