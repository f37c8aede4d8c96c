package deepbits

import (
	"math"
	"reflect"
	"testing"
)

type inner struct {
	f  float64
	xs []any
}

type outer struct {
	Name string
	In   *inner
	M    map[string]any
	A    [2]float32
}

func TestEqual(t *testing.T) {
	nan, negNaN := math.NaN(), math.Float64frombits(math.Float64bits(math.NaN())|1<<63)
	mk := func(f float64, xs ...any) outer {
		return outer{Name: "n", In: &inner{f: f, xs: xs}, M: map[string]any{"k": []any{f}}, A: [2]float32{1, float32(f)}}
	}
	for _, c := range []struct {
		name   string
		a, b   any
		want   bool
		likeDE bool // reflect.DeepEqual gives the same answer
	}{
		{"equal nested values", mk(1.5, "x", int64(2)), mk(1.5, "x", int64(2)), true, true},
		{"NaN everywhere", mk(nan, nan), mk(nan, nan), true, false},
		{"NaN payloads differ", mk(nan), mk(negNaN), false, true},
		{"zero and negative zero", mk(0), mk(math.Copysign(0, -1)), false, false},
		{"unexported float differs", mk(1), mk(2), false, true},
		{"element type differs", mk(1, int64(1)), mk(1, int32(1)), false, true},
		{"nil and empty slice", []any(nil), []any{}, false, true},
		{"nil and empty map", map[string]int(nil), map[string]int{}, false, true},
		{"map value differs", map[string]any{"a": 1}, map[string]any{"a": 2}, false, true},
		{"map key missing", map[string]any{"a": 1}, map[string]any{"b": 1}, false, true},
		{"nil pointers", (*inner)(nil), (*inner)(nil), true, true},
		{"nil and non-nil pointer", (*inner)(nil), &inner{}, false, true},
		{"different types", int64(1), 1, false, true},
		{"untyped nils", nil, nil, true, true},
		{"strings", "a", "b", false, true},
	} {
		if got := Equal(c.a, c.b); got != c.want {
			t.Errorf("%s: Equal = %v, want %v", c.name, got, c.want)
		}
		if de := reflect.DeepEqual(c.a, c.b); (de == c.want) != c.likeDE {
			t.Errorf("%s: reflect.DeepEqual = %v; the case expects it to %s", c.name, de, map[bool]string{true: "agree", false: "differ"}[c.likeDE])
		}
	}
}
