// Package rules holds the data-quality rules (contract validation) that run on
// normalized changes before the fold and the MERGE: CEL expressions and the
// `required` / `ops` shorthands, compiled once, evaluated per change. It
// decides whether a change violates a rule and what the rule's action is; the
// pipeline acts on the verdict (quarantine, drop, fail, warn). Semantics are
// in docs/rules.md.
package rules

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/interpreter"
	"github.com/shopspring/decimal"

	"github.com/cdcsink/cdc-sink/normalize"
)

// Action is what happens to a change that violates a rule.
type Action string

// The actions, from the strongest: fail stops the sink without committing the
// batch; quarantine sends the original record to quarantine (reason
// rule_violation) and leaves the key as it was; drop counts and skips the
// change; warn counts, logs and applies it.
const (
	Fail       Action = "fail"
	Quarantine Action = "quarantine"
	Drop       Action = "drop"
	Warn       Action = "warn"
)

func (a Action) rank() int {
	switch a {
	case Fail:
		return 4
	case Quarantine:
		return 3
	case Drop:
		return 2
	case Warn:
		return 1
	}
	return 0
}

// Rule is one configured rule (the `rules:` list of the config file).
type Rule struct {
	// Name identifies the rule in errors, quarantine entries and metrics.
	Name string `yaml:"name"`
	// Table selects the changes the rule sees: a source table as
	// schema.table (or server.schema.table), a topic, or a glob over those
	// ("public.*"); empty or "*" is every table.
	Table string `yaml:"table"`
	// Expr is a CEL expression of type bool over row, before, op, source and
	// kafka; false (or an evaluation error) is a violation.
	Expr string `yaml:"expr"`
	// Required columns must be present and not null.
	Required []string `yaml:"required"`
	// Ops: with Expr or Required, the ops the rule is evaluated on (default
	// c, u, r: deletes only when "d" is listed); alone, the allowed ops
	// (any other op is a violation).
	Ops []string `yaml:"ops"`
	// Action: quarantine (default), drop, fail or warn.
	Action Action `yaml:"action"`
}

// Violation is one rule a change broke.
type Violation struct {
	Rule    string
	Action  Action
	Message string
}

// Verdict is the outcome of checking one change.
type Verdict struct {
	// Action is the strongest action among Violations ("" when none).
	Action     Action
	Violations []Violation
}

// Rule returns the name of the first violated rule with the verdict's action.
func (v Verdict) Rule() string {
	for _, x := range v.Violations {
		if x.Action == v.Action {
			return x.Rule
		}
	}
	return ""
}

// Message joins the violations' messages.
func (v Verdict) Message() string {
	parts := make([]string, len(v.Violations))
	for i, x := range v.Violations {
		parts[i] = fmt.Sprintf("rule %s (%s): %s", x.Rule, x.Action, x.Message)
	}
	return strings.Join(parts, "; ")
}

// ConfigError is a rule that cannot be used: it does not compile, has a
// non-boolean type, or names a column the table does not have.
type ConfigError struct {
	Rule string
	Err  error
}

func (e *ConfigError) Error() string { return fmt.Sprintf("rule %q: %v", e.Rule, e.Err) }
func (e *ConfigError) Unwrap() error { return e.Err }

// Set is a compiled list of rules. Check is safe for concurrent use.
type Set struct {
	rules []*compiled
	mu    sync.RWMutex
	// per table: the rules that select it
	byTable map[tableKey][]*compiled
	// per schema pointer: column → index (shared by the rules)
	indexes map[*normalize.Schema]map[string]int
	// per (rule, schema pointer): nil or the unknown-column error
	checked map[ruleSchema]error
}

type ruleSchema struct {
	r *compiled
	s *normalize.Schema
}

type compiled struct {
	Rule
	prg      cel.Program
	cols     []string // row columns the expression reads by name
	dynamic  bool     // row is read otherwise (iteration, computed keys)
	ops      opSet    // ops the rule is evaluated on
	opsOnly  bool     // only `ops`: the allowed ops
	before   bool     // the expression reads before
	exprText string
}

type opSet uint8

func opBit(op byte) opSet {
	switch op {
	case 'c':
		return 1
	case 'u':
		return 2
	case 'd':
		return 4
	case 'r':
		return 8
	case 't':
		return 16
	}
	return 0
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)

var env = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("row", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("before", cel.DynType),
		cel.Variable("op", cel.StringType),
		cel.Variable("source", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("kafka", cel.MapType(cel.StringType, cel.DynType)),
		cel.Function("decimal",
			cel.Overload("decimal_string", []*cel.Type{cel.StringType}, cel.DynType,
				cel.UnaryBinding(func(v ref.Val) ref.Val {
					d, err := decimal.NewFromString(string(v.(types.String)))
					if err != nil {
						return types.NewErr("decimal(%q): %v", string(v.(types.String)), err)
					}
					return Decimal{d, -1}
				}))),
		// conversions of decimal columns (row values are dyn, so these are
		// chosen at run time)
		cel.Function("double", cel.Overload("double_cdcsink_decimal", []*cel.Type{DecimalType}, cel.DoubleType,
			cel.UnaryBinding(func(v ref.Val) ref.Val { return v.ConvertToType(types.DoubleType) }))),
		cel.Function("string", cel.Overload("string_cdcsink_decimal", []*cel.Type{DecimalType}, cel.StringType,
			cel.UnaryBinding(func(v ref.Val) ref.Val { return v.ConvertToType(types.StringType) }))),
		cel.Function("int", cel.Overload("int_cdcsink_decimal", []*cel.Type{DecimalType}, cel.IntType,
			cel.UnaryBinding(func(v ref.Val) ref.Val { return v.ConvertToType(types.IntType) }))),
	)
})

// Compile checks and compiles the rules. Every problem is a *ConfigError
// naming the rule; all of them are returned (errors.Join).
func Compile(rs []Rule) (*Set, error) {
	e, err := env()
	if err != nil {
		return nil, fmt.Errorf("rules: CEL environment: %w", err)
	}
	s := &Set{byTable: map[tableKey][]*compiled{}, indexes: map[*normalize.Schema]map[string]int{}, checked: map[ruleSchema]error{}}
	var errs []error
	seen := map[string]bool{}
	for i, r := range rs {
		name := r.Name
		if name == "" {
			name = fmt.Sprintf("#%d", i+1)
		}
		c, err := compileOne(e, r)
		if err != nil {
			errs = append(errs, &ConfigError{Rule: name, Err: err})
			continue
		}
		if seen[r.Name] {
			errs = append(errs, &ConfigError{Rule: name, Err: errors.New("duplicate rule name")})
			continue
		}
		seen[r.Name] = true
		s.rules = append(s.rules, c)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

func compileOne(e *cel.Env, r Rule) (*compiled, error) {
	if !nameRE.MatchString(r.Name) {
		return nil, errors.New("name must be 1-128 characters of letters, digits, _ . : -")
	}
	if r.Action == "" {
		r.Action = Quarantine
	}
	if r.Action.rank() == 0 {
		return nil, fmt.Errorf("action %q: want quarantine, drop, fail or warn", r.Action)
	}
	if r.Table != "" {
		if _, err := path.Match(r.Table, ""); err != nil {
			return nil, fmt.Errorf("table %q: bad glob: %v", r.Table, err)
		}
	}
	c := &compiled{Rule: r}
	for _, o := range r.Ops {
		b := opBit(firstByte(o))
		if len(o) != 1 || b == 0 {
			return nil, fmt.Errorf("ops: %q is not one of c, u, d, r, t", o)
		}
		c.ops |= b
	}
	for _, col := range r.Required {
		if col == "" {
			return nil, errors.New("required: empty column name")
		}
	}
	switch {
	case r.Expr == "" && len(r.Required) == 0 && len(r.Ops) == 0:
		return nil, errors.New("needs expr, required or ops")
	case r.Expr == "" && len(r.Required) == 0:
		c.opsOnly = true
	case len(r.Ops) == 0:
		c.ops = opBit('c') | opBit('u') | opBit('r')
	}
	if r.Expr != "" {
		checked, iss := e.Compile(r.Expr)
		if iss != nil && iss.Err() != nil {
			return nil, fmt.Errorf("expr %q: %v", r.Expr, iss.Err())
		}
		if !checked.OutputType().IsExactType(types.BoolType) {
			return nil, fmt.Errorf("expr %q has type %s, not bool (compare the value, e.g. row.flag == true)", r.Expr, checked.OutputType())
		}
		prg, err := e.Program(checked, cel.EvalOptions(cel.OptOptimize))
		if err != nil {
			return nil, fmt.Errorf("expr %q: %v", r.Expr, err)
		}
		c.prg, c.exprText = prg, r.Expr
		c.cols, c.dynamic = rowRefs(checked.NativeRep())
		c.before = len(ast.MatchDescendants(ast.NavigateAST(checked.NativeRep()), func(e ast.NavigableExpr) bool {
			return e.Kind() == ast.IdentKind && e.AsIdent() == "before"
		})) > 0
	}
	c.cols = append(c.cols, r.Required...)
	slices.Sort(c.cols)
	c.cols = slices.Compact(c.cols)
	return c, nil
}

func firstByte(s string) byte {
	if s == "" {
		return 0
	}
	return s[0]
}

// rowRefs returns the row columns an expression reads by constant name
// (row.c, has(row.c), row['c']) and whether it reads row any other way.
func rowRefs(a *ast.AST) (cols []string, dynamic bool) {
	root := ast.NavigateAST(a)
	for _, id := range ast.MatchDescendants(root, func(e ast.NavigableExpr) bool {
		return e.Kind() == ast.IdentKind && e.AsIdent() == "row"
	}) {
		p, ok := id.Parent()
		switch {
		case ok && p.Kind() == ast.SelectKind && p.AsSelect().Operand().ID() == id.ID():
			cols = append(cols, p.AsSelect().FieldName())
		case ok && p.Kind() == ast.CallKind && p.AsCall().FunctionName() == operators.Index &&
			len(p.AsCall().Args()) == 2 && p.AsCall().Args()[0].ID() == id.ID() &&
			p.AsCall().Args()[1].Kind() == ast.LiteralKind:
			if s, ok := p.AsCall().Args()[1].AsLiteral().(types.String); ok {
				cols = append(cols, string(s))
			} else {
				dynamic = true
			}
		default:
			dynamic = true
		}
	}
	return cols, dynamic
}

// Len is the number of rules.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.rules)
}

// UsesBefore reports whether a rule reads the before image of updates (the
// normalizer then keeps it: normalize.Options.KeepBefore).
func (s *Set) UsesBefore() bool {
	for _, r := range s.rulesOrNil() {
		if r.before {
			return true
		}
	}
	return false
}

func (s *Set) rulesOrNil() []*compiled {
	if s == nil {
		return nil
	}
	return s.rules
}

// Names lists the rule names in configuration order.
func (s *Set) Names() []string {
	out := make([]string, len(s.rules))
	for i, r := range s.rules {
		out[i] = r.Name
	}
	return out
}

func tableNames(c *normalize.Change) []string {
	t := c.Table
	names := make([]string, 0, 4)
	if t.Table != "" {
		names = append(names, t.Table)
		if t.Schema != "" {
			names = append(names, t.Schema+"."+t.Table)
			if t.Server != "" {
				names = append(names, t.Server+"."+t.Schema+"."+t.Table)
			}
		}
	}
	if c.Coord.Topic != "" {
		names = append(names, c.Coord.Topic)
	}
	return names
}

func (r *compiled) selects(names []string) bool {
	if r.Table == "" || r.Table == "*" {
		return true
	}
	for _, n := range names {
		if ok, _ := path.Match(r.Table, n); ok {
			return true
		}
	}
	return false
}

type tableKey struct {
	id    normalize.TableID
	topic string
}

func (s *Set) forChange(c *normalize.Change) []*compiled {
	k := tableKey{c.Table, c.Coord.Topic}
	s.mu.RLock()
	rs, ok := s.byTable[k]
	s.mu.RUnlock()
	if ok {
		return rs
	}
	names := tableNames(c)
	for _, r := range s.rules {
		if r.selects(names) {
			rs = append(rs, r)
		}
	}
	s.mu.Lock()
	s.byTable[k] = rs
	s.mu.Unlock()
	return rs
}

func (s *Set) index(sc *normalize.Schema) map[string]int {
	if sc == nil {
		return nil
	}
	s.mu.RLock()
	m, ok := s.indexes[sc]
	s.mu.RUnlock()
	if ok {
		return m
	}
	m = make(map[string]int, len(sc.Columns))
	for i, c := range sc.Columns {
		m[c.Name] = i
	}
	s.mu.Lock()
	s.indexes[sc] = m
	s.mu.Unlock()
	return m
}

// columnsKnown reports (once per rule and schema) a column the rule names
// that the table does not have.
func (s *Set) columnsKnown(r *compiled, c *normalize.Change, idx map[string]int) error {
	if c.Schema == nil || c.Op != normalize.OpUpsert {
		// a delete's before image may be partial: absence says nothing
		return nil
	}
	k := ruleSchema{r, c.Schema}
	s.mu.RLock()
	err, ok := s.checked[k]
	s.mu.RUnlock()
	if ok {
		return err
	}
	for _, col := range r.cols {
		if _, ok := idx[col]; ok || slices.Contains(c.KeyNames, col) {
			continue
		}
		cols := make([]string, len(c.Schema.Columns))
		for i, cd := range c.Schema.Columns {
			cols[i] = cd.Name
		}
		err = &ConfigError{Rule: r.Name, Err: fmt.Errorf("column %q is not a column of %s (columns: %s)",
			col, tableLabel(c), strings.Join(cols, ", "))}
		break
	}
	s.mu.Lock()
	s.checked[k] = err
	s.mu.Unlock()
	return err
}

func tableLabel(c *normalize.Change) string {
	if c.Table.Table != "" {
		if c.Table.Schema != "" {
			return c.Table.Schema + "." + c.Table.Table
		}
		return c.Table.Table
	}
	return "topic " + c.Coord.Topic
}

// Check evaluates the rules that select the change. A *ConfigError (a rule
// names a column the table does not have) means the rules cannot be used
// for this table: the caller stops. A nil Set checks nothing.
func (s *Set) Check(c *normalize.Change) (Verdict, error) {
	var v Verdict
	if s == nil || len(s.rules) == 0 {
		return v, nil
	}
	rs := s.forChange(c)
	if len(rs) == 0 {
		return v, nil
	}
	op := c.SourceOp
	if op == 0 {
		op = 'd' // a bare tombstone deletes its key
	}
	bit := opBit(op)
	var act *activation
	idx := s.index(c.Schema)
	for _, r := range rs {
		if r.opsOnly {
			if r.ops&bit == 0 {
				v.add(r, fmt.Sprintf("op %q is not allowed (ops: %s)", string(op), strings.Join(r.Ops, ", ")))
			}
			continue
		}
		if r.ops&bit == 0 || c.Tombstone {
			// a bare tombstone carries no row: only the allowed-ops rules see it
			continue
		}
		if err := s.columnsKnown(r, c, idx); err != nil {
			return Verdict{}, err
		}
		if unavailable(c, idx, r.cols) {
			// The change does not carry the value (unchanged TOAST): the
			// stored one was checked when it was written.
			continue
		}
		for _, col := range r.Required {
			if x, ok := columnValue(c, idx, col); !ok || x == nil {
				v.add(r, fmt.Sprintf("required column %q is null or absent", col))
				goto next
			}
		}
		if r.prg != nil {
			if act == nil {
				act = newActivation(c, idx)
			}
			out, _, err := r.prg.Eval(act)
			switch {
			case err != nil:
				v.add(r, fmt.Sprintf("%s: evaluation error: %v", r.exprText, err))
			case out != types.True:
				if out == types.False {
					v.add(r, fmt.Sprintf("%s is false", r.exprText))
				} else {
					v.add(r, fmt.Sprintf("%s gave %v, not a bool", r.exprText, out))
				}
			}
		}
	next:
	}
	if act != nil {
		act.release()
	}
	return v, nil
}

func (v *Verdict) add(r *compiled, msg string) {
	v.Violations = append(v.Violations, Violation{Rule: r.Name, Action: r.Action, Message: msg})
	if r.Action.rank() > v.Action.rank() {
		v.Action = r.Action
	}
}

func columnValue(c *normalize.Change, idx map[string]int, col string) (any, bool) {
	if i, ok := idx[col]; ok && i < len(c.Row) {
		return c.Row[i], true
	}
	for i, n := range c.KeyNames {
		if n == col && i < len(c.Key) {
			return c.Key[i], true
		}
	}
	return nil, false
}

func unavailable(c *normalize.Change, idx map[string]int, cols []string) bool {
	for _, col := range cols {
		if i, ok := idx[col]; ok && i < len(c.Row) && normalize.IsUnavailable(c.Row[i]) {
			return true
		}
	}
	return false
}

// activation resolves the rule variables of one change, building each
// value on first use.
type activation struct {
	c      *normalize.Change
	row    *rowVal
	rowv   rowVal
	before ref.Val
	vars   map[string]ref.Val
}

var _ interpreter.Activation = (*activation)(nil)

var activations = sync.Pool{New: func() any { return new(activation) }}

// newActivation takes a pooled activation: evaluating a rule allocates
// only the values it converts.
func newActivation(c *normalize.Change, idx map[string]int) *activation {
	a := activations.Get().(*activation)
	*a = activation{c: c, rowv: rowVal{schema: c.Schema, row: c.Row, names: c.KeyNames, key: c.Key, index: idx}}
	a.row = &a.rowv
	return a
}

func (a *activation) release() {
	*a = activation{}
	activations.Put(a)
}

func (a *activation) ResolveName(name string) (any, bool) {
	c := a.c
	switch name {
	case "row":
		return a.row, true
	case "op":
		op := c.SourceOp
		if op == 0 {
			op = 'd'
		}
		return types.String(string(op)), true
	case "before":
		if a.before == nil {
			switch {
			case c.Op == normalize.OpDelete:
				a.before = a.row
			case c.Before != nil && c.BeforeSchema != nil:
				m := make(map[string]int, len(c.BeforeSchema.Columns))
				for i, cd := range c.BeforeSchema.Columns {
					m[cd.Name] = i
				}
				a.before = &rowVal{schema: c.BeforeSchema, row: c.Before, names: c.KeyNames, key: c.Key, index: m}
			default:
				a.before = types.NullValue
			}
		}
		return a.before, true
	case "source", "kafka":
		if a.vars == nil {
			a.vars = map[string]ref.Val{}
		}
		if v, ok := a.vars[name]; ok {
			return v, true
		}
		var m map[string]any
		if name == "source" {
			m = map[string]any{
				"ts":       types.Timestamp{Time: time.UnixMicro(c.SourceTsMicros).UTC()},
				"table":    types.String(tableLabel(c)),
				"schema":   types.String(c.Table.Schema),
				"db":       types.String(c.Table.DB),
				"server":   types.String(c.Table.Server),
				"snapshot": types.Bool(c.Position.Snapshot != "" && c.Position.Snapshot != "false"),
				"lsn":      types.NullValue,
				"txId":     types.NullValue,
			}
			if c.Position.HasLSN {
				m["lsn"] = types.Int(int64(c.Position.LSN))
			}
			if c.HasTxID {
				m["txId"] = types.Int(c.TxID)
			}
		} else {
			m = map[string]any{
				"topic":     types.String(c.Coord.Topic),
				"partition": types.Int(c.Coord.Partition),
				"offset":    types.Int(c.Coord.Offset),
			}
		}
		v := types.NewStringInterfaceMap(types.DefaultTypeAdapter, m)
		a.vars[name] = v
		return v, true
	}
	return nil, false
}

func (a *activation) Parent() interpreter.Activation { return nil }

// Tally counts verdicts per rule, e.g. over a sample (`cdc-sink rules check`).
type Tally struct {
	Checked    int                        // changes checked
	Violating  int                        // changes with at least one violation
	Violations map[string]int             // per rule
	ByAction   map[Action]int             // changes per verdict action
	First      map[string]string          // per rule: the first violation's message
	Examples   map[string]normalize.Coord // per rule: where the first violation was
}

// Add counts one change's verdict.
func (t *Tally) Add(c *normalize.Change, v Verdict) {
	if t.Violations == nil {
		t.Violations, t.ByAction, t.First, t.Examples = map[string]int{}, map[Action]int{}, map[string]string{}, map[string]normalize.Coord{}
	}
	t.Checked++
	if v.Action == "" {
		return
	}
	t.Violating++
	t.ByAction[v.Action]++
	for _, x := range v.Violations {
		if t.Violations[x.Rule] == 0 {
			t.First[x.Rule], t.Examples[x.Rule] = x.Message, c.Coord
		}
		t.Violations[x.Rule]++
	}
}

// Rules lists the set's rules with their actions, in configuration order.
func (s *Set) Rules() []Rule {
	out := make([]Rule, 0, s.Len())
	for _, r := range s.rulesOrNil() {
		out = append(out, r.Rule)
	}
	return out
}
