package rules

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/cdcsink/cdc-sink/normalize"
)

var ordersSchema = &normalize.Schema{Columns: []normalize.ColumnDef{
	{Name: "id", Type: normalize.Type{Kind: normalize.Long}},
	{Name: "amount", Type: normalize.Type{Kind: normalize.Decimal, Precision: 12, Scale: 2}, Nullable: true},
	{Name: "status", Type: normalize.Type{Kind: normalize.String}, Nullable: true},
	{Name: "created_at", Type: normalize.Type{Kind: normalize.Timestamp}, Nullable: true},
	{Name: "due", Type: normalize.Type{Kind: normalize.Date}, Nullable: true},
	{Name: "qty", Type: normalize.Type{Kind: normalize.Integer}, Nullable: true},
	{Name: "note", Type: normalize.Type{Kind: normalize.String}, Nullable: true},
	{Name: "ratio", Type: normalize.Type{Kind: normalize.Double}, Nullable: true},
}}

type rowOpt func(c *normalize.Change)

func set(col string, v any) rowOpt {
	return func(c *normalize.Change) { c.Row[c.Schema.Index(col)] = v }
}

func op(o byte) rowOpt {
	return func(c *normalize.Change) {
		c.SourceOp = o
		if o == 'd' {
			c.Op = normalize.OpDelete
		}
	}
}

func change(opts ...rowOpt) *normalize.Change {
	ts := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	c := &normalize.Change{
		Table:    normalize.TableID{Server: "loja", DB: "loja", Schema: "public", Table: "orders"},
		Op:       normalize.OpUpsert,
		SourceOp: 'u',
		KeyNames: []string{"id"},
		Key:      []any{int64(7)},
		Schema:   ordersSchema,
		Row: []any{int64(7), decimal.RequireFromString("10.50"), "PAGO", ts.UnixMicro(),
			int32(20000), int32(3), "hello", 0.5},
		SourceTsMicros: ts.UnixMicro(),
		Position:       normalize.Change{}.Position,
		Coord:          normalize.Coord{Topic: "loja.public.orders", Partition: 2, Offset: 41},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

func mustCompile(t *testing.T, rs ...Rule) *Set {
	t.Helper()
	s, err := Compile(rs)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return s
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name   string
		rule   Rule
		change *normalize.Change
		want   Action // "" = passes
		msg    string // substring of the violation message
	}{
		{"decimal positive", Rule{Expr: "row.amount > 0"}, change(), "", ""},
		{"decimal zero", Rule{Expr: "row.amount > 0"}, change(set("amount", decimal.Zero)), Quarantine, "is false"},
		{"decimal negative", Rule{Expr: "row.amount > 0"}, change(set("amount", decimal.RequireFromString("-0.01"))), Quarantine, "is false"},
		{"decimal exact vs double literal", Rule{Expr: "row.amount == 10.5"}, change(), "", ""},
		{"decimal exact cents", Rule{Expr: "row.amount >= decimal('10.51')"}, change(), Quarantine, "is false"},
		{"decimal times int", Rule{Expr: "row.amount * row.qty == decimal('31.50')"}, change(), "", ""},
		{"decimal to double", Rule{Expr: "double(row.amount) < 11.0"}, change(), "", ""},
		{"decimal to string", Rule{Expr: "string(row.amount) == '10.50'"}, change(), "", ""},
		{"null arithmetic is a violation", Rule{Expr: "row.amount > 0"}, change(set("amount", nil)), Quarantine, "evaluation error"},
		{"null compared", Rule{Expr: "row.amount == null || row.amount > 0"}, change(set("amount", nil)), "", ""},
		{"int overflow is a violation", Rule{Expr: "row.id + 9223372036854775807 > 0"}, change(), Quarantine, "evaluation error"},
		{"string in list", Rule{Expr: "row.status in ['CRIADO', 'PAGO', 'ENVIADO']"}, change(), "", ""},
		{"string not in list", Rule{Expr: "row.status in ['CRIADO', 'PAGO']"}, change(set("status", "PERDIDO")), Quarantine, "is false"},
		{"timestamp", Rule{Expr: "row.created_at > timestamp('2026-01-01T00:00:00Z')"}, change(), "", ""},
		{"timestamp too old", Rule{Expr: "row.created_at > timestamp('2027-01-01T00:00:00Z')"}, change(), Quarantine, ""},
		{"date as timestamp", Rule{Expr: "row.due == timestamp('2024-10-04T00:00:00Z')"}, change(), "", ""},
		{"double", Rule{Expr: "row.ratio < 1.0"}, change(), "", ""},
		{"op variable", Rule{Expr: "op == 'u'"}, change(), "", ""},
		{"source ts", Rule{Expr: "source.ts == timestamp('2026-03-04T05:06:07Z') && source.table == 'public.orders'"}, change(), "", ""},
		{"kafka coordinates", Rule{Expr: "kafka.partition == 2 && kafka.offset == 41 && kafka.topic == 'loja.public.orders'"}, change(), "", ""},
		{"has", Rule{Expr: "has(row.note)"}, change(set("note", nil)), "", ""},
		{"index form", Rule{Expr: "row['qty'] == 3"}, change(), "", ""},
		{"required present", Rule{Required: []string{"status", "amount"}}, change(), "", ""},
		{"required null", Rule{Required: []string{"status", "amount"}}, change(set("amount", nil)), Quarantine, `"amount" is null`},
		{"required key column", Rule{Required: []string{"id"}}, change(), "", ""},
		{"action drop", Rule{Expr: "row.qty < 3", Action: Drop}, change(), Drop, ""},
		{"action warn", Rule{Expr: "row.qty < 3", Action: Warn}, change(), Warn, ""},
		{"action fail", Rule{Expr: "row.qty < 3", Action: Fail}, change(), Fail, ""},
		// deletes: only rules naming d
		{"delete skipped by default", Rule{Expr: "row.amount > 100"}, change(op('d')), "", ""},
		{"delete with d", Rule{Expr: "row.amount > 100", Ops: []string{"d"}}, change(op('d')), Quarantine, ""},
		{"delete before is row", Rule{Expr: "before.amount == row.amount", Ops: []string{"d"}}, change(op('d')), "", ""},
		{"snapshot read", Rule{Expr: "row.amount > 100", Ops: []string{"c", "u"}}, change(op('r')), "", ""},
		{"allowed ops: delete refused", Rule{Ops: []string{"c", "u", "r"}}, change(op('d')), Quarantine, `op "d" is not allowed`},
		{"allowed ops: update", Rule{Ops: []string{"c", "u", "r"}}, change(), "", ""},
		{"tombstone is a delete", Rule{Ops: []string{"c", "u", "r"}}, change(op(0), func(c *normalize.Change) { c.Op, c.Tombstone, c.Schema, c.Row = normalize.OpDelete, true, nil, nil }), Quarantine, `op "d"`},
		// TOAST: a rule reading an unavailable column is not evaluated
		{"unavailable skips", Rule{Expr: "row.note != ''"}, change(set("note", normalize.Unavailable)), "", ""},
		{"unavailable skips required", Rule{Required: []string{"note"}}, change(set("note", normalize.Unavailable)), "", ""},
		{"unavailable absent for dynamic reads", Rule{Expr: "row.exists(k, k == 'note')"}, change(set("note", normalize.Unavailable)), Quarantine, "is false"},
		{"dynamic read", Rule{Expr: "row.exists(k, k == 'note')"}, change(), "", ""},
		{"before null without KeepBefore", Rule{Expr: "before == null"}, change(), "", ""},
		{"before of an update", Rule{Expr: "before.amount < row.amount"}, change(func(c *normalize.Change) {
			c.BeforeSchema = ordersSchema
			c.Before = append([]any(nil), c.Row...)
			c.Before[1] = decimal.RequireFromString("9.99")
		}), "", ""},
		{"pk change create half", Rule{Expr: "row.id > 0"}, change(func(c *normalize.Change) { c.OldKey = []any{int64(6)}; c.SourceOp = 'c' }), "", ""},
		// table selection
		{"other table", Rule{Table: "public.customers", Expr: "false"}, change(), "", ""},
		{"glob", Rule{Table: "public.*", Expr: "false"}, change(), Quarantine, ""},
		{"topic", Rule{Table: "loja.public.orders", Expr: "false"}, change(), Quarantine, ""},
		{"bare table", Rule{Table: "orders", Expr: "false"}, change(), Quarantine, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.rule
			r.Name = "r1"
			s := mustCompile(t, r)
			v, err := s.Check(tt.change)
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			if v.Action != tt.want {
				t.Fatalf("action %q, want %q (%s)", v.Action, tt.want, v.Message())
			}
			if tt.want != "" {
				if v.Rule() != "r1" || !strings.Contains(v.Message(), tt.msg) {
					t.Fatalf("rule %q message %q, want r1 and %q", v.Rule(), v.Message(), tt.msg)
				}
			}
		})
	}
}

func TestStrongestActionWins(t *testing.T) {
	s := mustCompile(t,
		Rule{Name: "w", Expr: "false", Action: Warn},
		Rule{Name: "q", Expr: "false"},
		Rule{Name: "d", Expr: "false", Action: Drop},
		Rule{Name: "ok", Expr: "true", Action: Fail},
	)
	v, err := s.Check(change())
	if err != nil {
		t.Fatal(err)
	}
	if v.Action != Quarantine || v.Rule() != "q" || len(v.Violations) != 3 {
		t.Fatalf("verdict %+v", v)
	}
}

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		rules []Rule
		want  string
	}{
		{[]Rule{{Name: "a", Expr: "row.amount >"}}, `rule "a": expr`},
		{[]Rule{{Name: "a", Expr: "row.amount + 1"}}, "not bool"},
		{[]Rule{{Name: "a", Expr: "row.amount"}}, "not bool"},
		{[]Rule{{Name: "a", Expr: "nope > 1"}}, "undeclared reference"},
		{[]Rule{{Name: "a", Expr: "true", Action: "explode"}}, `action "explode"`},
		{[]Rule{{Name: "a"}}, "needs expr, required or ops"},
		{[]Rule{{Name: "a", Ops: []string{"x"}}}, `"x" is not one of`},
		{[]Rule{{Name: "a", Expr: "true"}, {Name: "a", Expr: "true"}}, "duplicate rule name"},
		{[]Rule{{Name: "", Expr: "true"}}, `rule "#1"`},
		{[]Rule{{Name: "a b", Expr: "true"}}, "name must be"},
		{[]Rule{{Name: "a", Table: "[", Expr: "true"}}, "bad glob"},
	}
	for _, tt := range tests {
		_, err := Compile(tt.rules)
		var ce *ConfigError
		if err == nil || !errors.As(err, &ce) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Compile(%+v) = %v, want ConfigError containing %q", tt.rules, err, tt.want)
		}
	}
}

func TestUnknownColumnNamesRule(t *testing.T) {
	for _, r := range []Rule{
		{Name: "typo", Expr: "row.amout > 0"},
		{Name: "typo", Required: []string{"amout"}},
		{Name: "typo", Expr: "row['amout'] > 0"},
	} {
		s := mustCompile(t, r)
		_, err := s.Check(change())
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Rule != "typo" || !strings.Contains(err.Error(), `column "amout" is not a column of public.orders`) {
			t.Fatalf("%+v: err %v", r, err)
		}
		// a delete's partial before says nothing about the columns
		if _, err := mustCompile(t, Rule{Name: "d", Expr: "row.amout > 0", Ops: []string{"d"}}).Check(change(op('d'))); err != nil {
			t.Fatalf("delete: %v", err)
		}
	}
}

func TestNilSet(t *testing.T) {
	var s *Set
	v, err := s.Check(change())
	if err != nil || v.Action != "" || s.Len() != 0 {
		t.Fatalf("nil set: %+v %v", v, err)
	}
}

func BenchmarkCheck(b *testing.B) {
	for _, bc := range []struct {
		name  string
		rules []Rule
	}{
		{"none", nil},
		{"decimal>0", []Rule{{Name: "a", Expr: "row.amount > 0"}}},
		{"string-in", []Rule{{Name: "a", Expr: "row.status in ['CRIADO', 'PAGO', 'ENVIADO']"}}},
		{"int-range", []Rule{{Name: "a", Expr: "row.qty >= 0 && row.qty < 1000"}}},
		{"required", []Rule{{Name: "a", Required: []string{"status", "amount"}}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s, err := Compile(bc.rules)
			if err != nil {
				b.Fatal(err)
			}
			c := change()
			b.ReportAllocs()
			for b.Loop() {
				v, err := s.Check(c)
				if err != nil || v.Action != "" {
					b.Fatal(v, err)
				}
			}
		})
	}
}
