package rules

import (
	"errors"
	"testing"

	"github.com/shopspring/decimal"

	"github.com/cdcsink/cdc-sink/normalize"
)

// FuzzRule: any expression either fails to compile with a *ConfigError or
// evaluates on a change (with nulls, TOAST markers, decimals) to a verdict
// or a *ConfigError — never a panic.
func FuzzRule(f *testing.F) {
	for _, s := range []string{"row.amount > 0", "row.status in ['PAGO']", "has(row.note) && row.note != ''",
		"before.amount < row.amount", "row.amount * row.qty / 0 > 1", "decimal('x') > 1", "row.exists(k, k == 'id')",
		"source.ts > timestamp('2020-01-01T00:00:00Z')", "kafka.offset % 2 == 0", "int(row.amount) == 10",
		"row['amount'] == null", "op in ['c', 'u']", "string(row.amount).size() > 2", "-row.amount < 0"} {
		f.Add(s, "10.50", true)
	}
	f.Fuzz(func(t *testing.T, expr, amount string, toast bool) {
		s, err := Compile([]Rule{{Name: "f", Expr: expr, Ops: []string{"c", "u", "d", "r"}}})
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("compile error %v is not a ConfigError", err)
			}
			return
		}
		c := change()
		if d, err := decimal.NewFromString(amount); err == nil {
			c.Row[1] = d
		} else {
			c.Row[1] = nil
		}
		if toast {
			c.Row[6] = normalize.Unavailable
		}
		for _, ch := range []*normalize.Change{c, change(op('d'))} {
			if _, err := s.Check(ch); err != nil {
				var ce *ConfigError
				if !errors.As(err, &ce) {
					t.Fatalf("check error %v is not a ConfigError", err)
				}
			}
		}
	})
}
