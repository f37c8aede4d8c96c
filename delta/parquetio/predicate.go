package parquetio

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/cdcsink/cdc-sink/delta/schema"
)

// Predicate prunes files by their add.stats and partitionValues. It is
// conservative: MayMatch returns false only when no row of the file can
// satisfy the predicate. Missing or unparsable stats mean "may match".
type Predicate interface {
	// MayMatch reports whether a file with these stats (the add.stats JSON
	// string, possibly "") and partition values may contain matching rows.
	MayMatch(stats string, partitionValues map[string]*string) bool
	String() string
	eval(s *fileStats, pv map[string]*string) bool
}

// Eq matches rows where column col (dotted path for nested fields) equals
// value. value may be any Go integer or float, string, bool, time.Time
// (timestamp / timestamp_ntz / date columns; dates compare by UTC day),
// decimal.Decimal, json.Number, or nil. Eq(col, nil) is null-safe equality
// (IS NULL) and uses nullCount.
func Eq(col string, value any) Predicate { return &inPred{col: col, vals: []pval{normValue(value)}} }

// In matches rows where col equals any of values (see Eq for value types).
// Large integer or string sets are binary-searched per file.
func In(col string, values ...any) Predicate {
	p := &inPred{col: col, vals: make([]pval, len(values))}
	for i, v := range values {
		p.vals[i] = normValue(v)
	}
	p.prepare()
	return p
}

// And matches when all ps match.
func And(ps ...Predicate) Predicate { return andPred(ps) }

// Or matches when any of ps matches.
func Or(ps ...Predicate) Predicate { return orPred(ps) }

// ---------------------------------------------------------------- stats

type fileStats struct {
	known      bool
	numRecords int64 // -1 unknown
	min, max   map[string]any
	nulls      map[string]any
}

func parseStats(s string) *fileStats {
	fs := &fileStats{numRecords: -1}
	if strings.TrimSpace(s) == "" {
		return fs
	}
	var raw struct {
		NumRecords *json.Number   `json:"numRecords"`
		MinValues  map[string]any `json:"minValues"`
		MaxValues  map[string]any `json:"maxValues"`
		NullCount  map[string]any `json:"nullCount"`
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return fs
	}
	fs.known = true
	if raw.NumRecords != nil {
		if n, err := raw.NumRecords.Int64(); err == nil {
			fs.numRecords = n
		}
	}
	fs.min, fs.max, fs.nulls = raw.MinValues, raw.MaxValues, raw.NullCount
	return fs
}

func lookupPath(m map[string]any, col string) (any, bool) {
	if m == nil {
		return nil, false
	}
	if v, ok := m[col]; ok {
		return v, true
	}
	parts := strings.Split(col, ".")
	var cur any = m
	for _, p := range parts {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		v, ok := mm[p]
		if !ok {
			// case-insensitive fallback
			found := false
			for k, x := range mm {
				if strings.EqualFold(k, p) {
					v, found = x, true
					break
				}
			}
			if !found {
				return nil, false
			}
		}
		cur = v
	}
	return cur, true
}

// ---------------------------------------------------------------- values

type pkind int

const (
	pNull pkind = iota
	pNum
	pStr
	pTime
	pBool
	pOther
)

type pval struct {
	kind  pkind
	num   decimal.Decimal
	isInt bool
	i     int64
	s     string
	us    int64 // time: micros since epoch
	day   string
	b     bool
	raw   any
}

func normValue(v any) pval {
	switch x := v.(type) {
	case nil:
		return pval{kind: pNull}
	case int:
		return intVal(int64(x))
	case int8:
		return intVal(int64(x))
	case int16:
		return intVal(int64(x))
	case int32:
		return intVal(int64(x))
	case int64:
		return intVal(x)
	case uint8:
		return intVal(int64(x))
	case uint16:
		return intVal(int64(x))
	case uint32:
		return intVal(int64(x))
	case uint64:
		if x > math.MaxInt64 {
			return pval{kind: pNum, num: decimal.NewFromUint64(x)}
		}
		return intVal(int64(x))
	case uint:
		return normValue(uint64(x))
	case float32:
		return floatVal(float64(x))
	case float64:
		return floatVal(x)
	case decimal.Decimal:
		p := pval{kind: pNum, num: x}
		if x.IsInteger() && x.NumDigits() <= 18 {
			p.isInt, p.i = true, x.IntPart()
		}
		return p
	case json.Number:
		d, err := decimal.NewFromString(string(x))
		if err != nil {
			return pval{kind: pOther, raw: v}
		}
		return normValue(d)
	case string:
		return pval{kind: pStr, s: x}
	case bool:
		return pval{kind: pBool, b: x}
	case time.Time:
		u := x.UTC()
		return pval{kind: pTime, us: u.UnixMicro(), day: u.Format("2006-01-02")}
	}
	return pval{kind: pOther, raw: v}
}

func intVal(i int64) pval { return pval{kind: pNum, num: decimal.NewFromInt(i), isInt: true, i: i} }

func floatVal(f float64) pval {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return pval{kind: pOther, raw: f}
	}
	return pval{kind: pNum, num: decimal.NewFromFloat(f)}
}

func (v pval) String() string {
	switch v.kind {
	case pNull:
		return "NULL"
	case pNum:
		return v.num.String()
	case pStr:
		return strconv.Quote(v.s)
	case pTime:
		return time.UnixMicro(v.us).UTC().Format(time.RFC3339Nano)
	case pBool:
		return strconv.FormatBool(v.b)
	}
	return fmt.Sprint(v.raw)
}

// bound is a parsed min or max stat.
type bound struct {
	kind pkind
	num  decimal.Decimal
	s    string
	ok   bool
}

func parseBound(x any) bound {
	switch b := x.(type) {
	case json.Number:
		d, err := decimal.NewFromString(string(b))
		if err != nil {
			return bound{}
		}
		return bound{kind: pNum, num: d, ok: true}
	case string:
		return bound{kind: pStr, s: b, ok: true}
	}
	return bound{}
}

// timeOf interprets a string stat as a timestamp or date.
func timeOf(s string) (us int64, day string, isDate bool, ok bool) {
	if len(s) == 10 {
		if t, err := time.ParseInLocation("2006-01-02", s, time.UTC); err == nil {
			return t.UnixMicro(), s, true, true
		}
	}
	for _, l := range []string{"2006-01-02T15:04:05.999999999Z07:00", "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999"} {
		if t, err := time.ParseInLocation(l, s, time.UTC); err == nil {
			return t.UnixMicro(), "", false, true
		}
	}
	return 0, "", false, false
}

// cmpToBound compares v with a bound: -1, 0, 1, or ok=false when not comparable.
// For timestamp max bounds, slack of 1ms compensates Spark's truncation.
func cmpToBound(v pval, b bound, isMax bool) (int, bool) {
	if !b.ok {
		return 0, false
	}
	switch v.kind {
	case pNum:
		if b.kind != pNum {
			return 0, false
		}
		return v.num.Cmp(b.num), true
	case pStr:
		if b.kind == pStr {
			return strings.Compare(v.s, b.s), true
		}
		if b.kind == pNum {
			d, err := decimal.NewFromString(v.s)
			if err != nil {
				return 0, false
			}
			return d.Cmp(b.num), true
		}
	case pTime:
		if b.kind != pStr {
			return 0, false
		}
		us, day, isDate, ok := timeOf(b.s)
		if !ok {
			return 0, false
		}
		if isDate {
			return strings.Compare(v.day, day), true
		}
		if isMax {
			us += 999 // max may be truncated to milliseconds
		}
		switch {
		case v.us < us:
			return -1, true
		case v.us > us:
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

// ---------------------------------------------------------------- predicates

type inPred struct {
	col    string
	vals   []pval
	ints   []int64  // sorted, when every value is an integer (fast path)
	strs   []string // sorted, when every value is a string (fast path)
	hasNil bool
}

func (p *inPred) prepare() {
	allInt, allStr := len(p.vals) > 8, len(p.vals) > 8
	for _, v := range p.vals {
		if v.kind == pNull {
			p.hasNil = true
			continue
		}
		allInt = allInt && v.kind == pNum && v.isInt
		allStr = allStr && v.kind == pStr
	}
	if allInt {
		for _, v := range p.vals {
			if v.kind != pNull {
				p.ints = append(p.ints, v.i)
			}
		}
		sort.Slice(p.ints, func(i, j int) bool { return p.ints[i] < p.ints[j] })
	}
	if allStr {
		for _, v := range p.vals {
			if v.kind != pNull {
				p.strs = append(p.strs, v.s)
			}
		}
		sort.Strings(p.strs)
	}
}

func (p *inPred) String() string {
	if len(p.vals) == 1 {
		return p.col + " = " + p.vals[0].String()
	}
	var b strings.Builder
	b.WriteString(p.col + " IN (")
	for i, v := range p.vals {
		if i > 0 {
			b.WriteString(", ")
		}
		if i == 10 {
			fmt.Fprintf(&b, "... %d more", len(p.vals)-10)
			break
		}
		b.WriteString(v.String())
	}
	b.WriteString(")")
	return b.String()
}

func (p *inPred) MayMatch(stats string, pv map[string]*string) bool {
	return p.eval(parseStats(stats), pv)
}

func (p *inPred) eval(s *fileStats, pv map[string]*string) bool {
	if part, ok := lookupPartition(pv, p.col); ok {
		for _, v := range p.vals {
			if partitionEquals(part, v) {
				return true
			}
		}
		return false
	}
	if !s.known {
		return true
	}
	nc, hasNC := lookupPath(s.nulls, p.col)
	var nulls int64 = -1
	if n, ok := nc.(json.Number); ok && hasNC {
		nulls, _ = n.Int64()
	}
	if p.hasNil || (len(p.vals) == 1 && p.vals[0].kind == pNull) {
		if nulls != 0 {
			return true
		}
		if len(p.vals) == 1 {
			return false
		}
	}
	if nulls >= 0 && s.numRecords >= 0 && nulls >= s.numRecords {
		return false // all values null
	}
	mn, hasMin := lookupPath(s.min, p.col)
	mx, hasMax := lookupPath(s.max, p.col)
	if !hasMin && !hasMax {
		return true
	}
	lo, hi := bound{}, bound{}
	if hasMin {
		lo = parseBound(mn)
	}
	if hasMax {
		hi = parseBound(mx)
	}
	// fast paths
	if p.ints != nil && lo.kind == pNum && hi.kind == pNum && lo.ok && hi.ok && lo.num.IsInteger() && hi.num.IsInteger() {
		l, h := lo.num.IntPart(), hi.num.IntPart()
		i := sort.Search(len(p.ints), func(i int) bool { return p.ints[i] >= l })
		return i < len(p.ints) && p.ints[i] <= h
	}
	if p.strs != nil && lo.kind == pStr && hi.kind == pStr && lo.ok && hi.ok {
		i := sort.SearchStrings(p.strs, lo.s)
		return i < len(p.strs) && p.strs[i] <= hi.s
	}
	for _, v := range p.vals {
		if v.kind == pNull {
			continue
		}
		if c, ok := cmpToBound(v, lo, false); ok && c < 0 {
			continue
		}
		if c, ok := cmpToBound(v, hi, true); ok && c > 0 {
			continue
		}
		return true
	}
	return false
}

// partitionEquals compares a partition value string with v.
func partitionEquals(part *string, v pval) bool {
	isNull := part == nil || *part == "" || *part == HiveDefaultPartition
	if v.kind == pNull || isNull {
		return v.kind == pNull && isNull
	}
	s := *part
	switch v.kind {
	case pStr:
		return s == v.s
	case pNum:
		d, err := decimal.NewFromString(s)
		if err != nil {
			return true // not comparable: keep the file
		}
		return d.Equal(v.num)
	case pBool:
		b, err := strconv.ParseBool(strings.ToLower(s))
		return err != nil || b == v.b
	case pTime:
		if len(s) == 10 {
			return s == v.day
		}
		us, err := ParseTimestamp(s)
		return err != nil || us == v.us
	}
	return true
}

type andPred []Predicate

func (a andPred) MayMatch(stats string, pv map[string]*string) bool {
	return a.eval(parseStats(stats), pv)
}
func (a andPred) eval(s *fileStats, pv map[string]*string) bool {
	for _, p := range a {
		if !p.eval(s, pv) {
			return false
		}
	}
	return true
}
func (a andPred) String() string { return joinPreds([]Predicate(a), " AND ") }

type orPred []Predicate

func (o orPred) MayMatch(stats string, pv map[string]*string) bool {
	return o.eval(parseStats(stats), pv)
}
func (o orPred) eval(s *fileStats, pv map[string]*string) bool {
	if len(o) == 0 {
		return false
	}
	for _, p := range o {
		if p.eval(s, pv) {
			return true
		}
	}
	return false
}
func (o orPred) String() string { return joinPreds([]Predicate(o), " OR ") }

func joinPreds(ps []Predicate, sep string) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = "(" + p.String() + ")"
	}
	return strings.Join(parts, sep)
}

// ---------------------------------------------------------------- widened columns

// StatsSafeFilter returns p adjusted to how readSchema's stats are stored:
//
//   - Column-mapped tables key stats by physical name: they are renamed to
//     the logical names p uses (without this no file would be pruned).
//   - Min/max of columns whose delta.typeChanges include float -> double are
//     ignored. Files written before such a change carry float stats in the
//     shortest float32 text ("3.4"), which is not a bound of the same value
//     read as a double (3.4000000953674316), so they could prune a matching
//     file. The other widenings (integers, decimals, integer -> double or
//     decimal, date -> timestamp_ntz, compared by day) keep old stats exact
//     bounds.
//
// p is returned unchanged when nothing needs adjusting.
func StatsSafeFilter(p Predicate, readSchema *schema.StructType) Predicate {
	if p == nil || readSchema == nil {
		return p
	}
	if _, ok := p.(*statsAdjust); ok {
		return p
	}
	var cols []string
	var walk func(prefix string, st *schema.StructType) *renames
	walk = func(prefix string, st *schema.StructType) *renames {
		var rn *renames
		for _, f := range st.Fields {
			path := f.Name
			if prefix != "" {
				path = prefix + "." + f.Name
			}
			changes, _ := schema.TypeChanges(f)
			for _, c := range changes {
				if c["fromType"] == "float" && c["fieldPath"] == nil {
					cols = append(cols, path)
					break
				}
			}
			var sub *renames
			if st, ok := f.Type.(*schema.StructType); ok {
				sub = walk(path, st)
			}
			if pn := physicalName(f); pn != f.Name || sub != nil {
				if rn == nil {
					rn = &renames{}
				}
				rn.add(pn, f.Name, sub)
			}
		}
		return rn
	}
	rn := walk("", readSchema)
	if len(cols) == 0 && rn == nil {
		return p
	}
	return &statsAdjust{p: p, ignore: cols, rename: rn}
}

// renames maps the physical names of one struct level to logical names.
type renames struct {
	logical map[string]string
	sub     map[string]*renames
}

func (r *renames) add(phys, logical string, sub *renames) {
	if r.logical == nil {
		r.logical, r.sub = map[string]string{}, map[string]*renames{}
	}
	r.logical[phys], r.sub[phys] = logical, sub
}

// apply returns m with physical keys renamed (a new map; m is not changed).
func (r *renames) apply(m map[string]any) map[string]any {
	if r == nil || m == nil {
		return m
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		name, sub := k, (*renames)(nil)
		if l, ok := r.logical[k]; ok {
			name, sub = l, r.sub[k]
		}
		if mm, ok := v.(map[string]any); ok && sub != nil {
			v = sub.apply(mm)
		}
		out[name] = v
	}
	return out
}

// statsAdjust evaluates p with stats renamed and the min/max of ignore removed.
type statsAdjust struct {
	p      Predicate
	ignore []string
	rename *renames
}

func (f *statsAdjust) MayMatch(stats string, pv map[string]*string) bool {
	return f.eval(parseStats(stats), pv)
}

func (f *statsAdjust) eval(s *fileStats, pv map[string]*string) bool {
	if f.rename != nil {
		s.min, s.max, s.nulls = f.rename.apply(s.min), f.rename.apply(s.max), f.rename.apply(s.nulls)
	}
	for _, c := range f.ignore {
		dropPath(s.min, c)
		dropPath(s.max, c)
	}
	return f.p.eval(s, pv)
}

func (f *statsAdjust) String() string {
	if len(f.ignore) == 0 {
		return f.p.String()
	}
	return f.p.String() + " (ignoring min/max of " + strings.Join(f.ignore, ", ") + ")"
}

// dropPath deletes the dotted path col from nested stats maps (names match
// case-insensitively, like lookupPath).
func dropPath(m map[string]any, col string) {
	parts := strings.Split(col, ".")
	for i, p := range parts {
		if m == nil {
			return
		}
		key, found := p, false
		if _, ok := m[p]; ok {
			found = true
		} else {
			for k := range m {
				if strings.EqualFold(k, p) {
					key, found = k, true
					break
				}
			}
		}
		if !found {
			return
		}
		if i == len(parts)-1 {
			delete(m, key)
			return
		}
		m, _ = m[key].(map[string]any)
	}
}
