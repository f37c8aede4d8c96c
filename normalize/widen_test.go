package normalize

import (
	"fmt"
	"testing"

	"github.com/shopspring/decimal"
)

func decT(p, s int) Type { return Type{Kind: Decimal, Precision: p, Scale: s} }
func arr(e Type) Type    { return Type{Kind: Array, Elem: &e} }

func TestWiden(t *testing.T) {
	k := func(kind Kind) Type { return Type{Kind: kind} }
	st := func(fs ...ColumnDef) Type { return Type{Kind: Struct, Fields: fs} }
	cases := []struct {
		a, b Type
		want Type
		ok   bool
	}{
		{k(Byte), k(Short), k(Short), true},
		{k(Short), k(Integer), k(Integer), true},
		{k(Integer), k(Long), k(Long), true},
		{k(Long), k(Byte), k(Long), true},
		{k(Float), k(Double), k(Double), true},
		{k(Integer), k(Double), k(Double), true},
		{k(Integer), k(Float), k(Double), true},
		{k(Long), k(Double), k(Double), true},
		{decT(10, 2), decT(12, 4), decT(12, 4), true},
		{decT(10, 2), decT(10, 4), decT(12, 4), true},
		{decT(12, 4), decT(10, 2), decT(12, 4), true},
		{decT(38, 0), decT(38, 2), Type{}, false},
		{k(Integer), decT(12, 2), decT(12, 2), true},
		{k(Integer), decT(5, 2), decT(12, 2), true},
		{k(Long), decT(10, 2), decT(22, 2), true},
		{decT(0, 2), decT(38, 2), decT(38, 2), true}, // no precision = 38
		{k(Date), k(TimestampNTZ), k(TimestampNTZ), true},
		{k(Date), k(Timestamp), k(Timestamp), true},
		{k(Timestamp), k(TimestampNTZ), Type{}, false},
		{k(Long), k(String), Type{}, false},
		{k(Double), decT(10, 2), Type{}, false},
		{k(Boolean), k(Integer), Type{}, false},
		{arr(k(Integer)), arr(k(Long)), arr(k(Long)), true},
		{arr(k(Integer)), arr(k(String)), Type{}, false},
		{st(ColumnDef{Name: "x", Type: k(Integer)}), st(ColumnDef{Name: "x", Type: k(Long)}, ColumnDef{Name: "y", Type: k(String)}),
			st(ColumnDef{Name: "x", Type: k(Long)}, ColumnDef{Name: "y", Type: k(String), Nullable: true}), true},
		{st(ColumnDef{Name: "x", Type: k(Integer)}), k(Integer), Type{}, false},
	}
	for _, c := range cases {
		got, ok := Widen(c.a, c.b)
		if ok != c.ok || (ok && !TypeEqual(got, c.want)) {
			t.Errorf("Widen(%s, %s) = %s, %v; want %s, %v", c.a, c.b, got, ok, c.want, c.ok)
		}
		// symmetric
		if got2, ok2 := Widen(c.b, c.a); ok2 != ok || (ok && !TypeEqual(got2, got) && c.a.Kind != Struct) {
			t.Errorf("Widen(%s, %s) = %s, %v: not symmetric with %s, %v", c.b, c.a, got2, ok2, got, ok)
		}
	}
}

func TestCast(t *testing.T) {
	k := func(kind Kind) Type { return Type{Kind: kind} }
	cases := []struct {
		v        any
		from, to Type
		want     any
		err      bool
	}{
		{int8(-3), k(Byte), k(Short), int16(-3), false},
		{int16(300), k(Short), k(Integer), int32(300), false},
		{int32(-7), k(Integer), k(Long), int64(-7), false},
		{int64(7), k(Integer), k(Long), int64(7), false}, // already wide (filled from the table)
		{float32(0.5), k(Float), k(Double), 0.5, false},
		{int64(1) << 40, k(Long), k(Double), float64(1 << 40), false},
		{int32(12), k(Integer), decT(12, 2), decimal.New(12, 0), false},
		{int32(2), k(Date), k(TimestampNTZ), int64(2 * 86_400_000_000), false},
		{nil, k(Integer), k(Long), nil, false},
		{"x", k(String), k(Long), nil, true},
		{int64(1) << 40, k(Long), k(Integer), nil, true},
		{[]any{int32(1), nil}, arr(k(Integer)), arr(k(Long)), []any{int64(1), nil}, false},
	}
	for _, c := range cases {
		got, err := Cast(c.v, c.from, c.to)
		if (err != nil) != c.err {
			t.Errorf("Cast(%v, %s, %s): err %v, want error %v", c.v, c.from, c.to, err, c.err)
			continue
		}
		if c.err {
			continue
		}
		if d, ok := c.want.(decimal.Decimal); ok {
			if g, ok := got.(decimal.Decimal); !ok || !g.Equal(d) {
				t.Errorf("Cast(%v, %s, %s) = %v (%T), want %v", c.v, c.from, c.to, got, got, d)
			}
			continue
		}
		if fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", c.want) {
			t.Errorf("Cast(%v, %s, %s) = %v (%T), want %v (%T)", c.v, c.from, c.to, got, got, c.want, c.want)
		}
	}
}
