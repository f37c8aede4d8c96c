package tablerows

import (
	"math"
	"math/big"
	"testing"
)

func TestFormatters(t *testing.T) {
	tests := []struct{ name, got, want string }{
		{"decimal", FormatDecimal(big.NewInt(1230), 2), "12.30"},
		{"decimal small", FormatDecimal(big.NewInt(5), 4), "0.0005"},
		{"decimal negative small", FormatDecimal(big.NewInt(-5), 2), "-0.05"},
		{"decimal zero", FormatDecimal(big.NewInt(0), 3), "0.000"},
		{"decimal scale 0", FormatDecimal(big.NewInt(-17), 0), "-17"},
		{"decimal negative scale", FormatDecimal(big.NewInt(12), -2), "1200"},
		{"timestamp", FormatTimestamp(1704164645123456), "2024-01-02T03:04:05.123456Z"},
		{"timestamp whole second", FormatTimestamp(0), "1970-01-01T00:00:00.000000Z"},
		{"timestamp before epoch", FormatTimestamp(-1), "1969-12-31T23:59:59.999999Z"},
		{"timestamp ntz", FormatTimestampNTZ(1704164645000001), "2024-01-02T03:04:05.000001"},
		{"date", FormatDate(19724), "2024-01-02"},
		{"date before epoch", FormatDate(-1), "1969-12-31"},
		{"double", string(AppendFloat(nil, 0.1, 64)), "0.1"},
		{"float32 shortest", string(AppendFloat(nil, float64(float32(0.1)), 32)), "0.1"},
		{"big double", string(AppendFloat(nil, 1e21, 64)), "1e+21"},
		{"nan", string(AppendFloat(nil, math.NaN(), 64)), `"NaN"`},
		{"-inf", string(AppendFloat(nil, math.Inf(-1), 64)), `"-Infinity"`},
		{"string no html escape", string(AppendString(nil, "a<b>&\"\n")), `"a<b>&\"\n"`},
		{"text unquotes", Text(`"a\"b"`), `a"b`},
		{"text keeps numbers", Text(`12`), `12`},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.name, tc.got, tc.want)
		}
	}
}
