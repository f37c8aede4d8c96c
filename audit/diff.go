package audit

// Diff: two tables compared by key over their business columns.

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/cdcsink/cdc-sink/layout"
	"github.com/cdcsink/cdc-sink/tablerows"
)

// DiffOptions configure Diff.
type DiffOptions struct {
	// Key columns; nil means the tables' cdcsink.keyColumns (which must
	// agree when both have one).
	Key []string
}

// DiffReport is the result of Diff. Key lists are sorted.
type DiffReport struct {
	A, B      TableSide
	Key       []string
	Columns   []string // compared: business columns of either, plus _cdc_deleted when both have it
	ColumnsA  []string // only in A (read as null in B)
	ColumnsB  []string // only in B (read as null in A)
	OnlyInA   []string // keys live in A only
	OnlyInB   []string // keys live in B only
	Differing []KeyDiff
	DupsA     int // keys seen more than once among A's live rows (a broken table)
}

// Equal reports whether the tables hold the same live rows.
func (r *DiffReport) Equal() bool {
	return r.DupsA == 0 && len(r.OnlyInA)+len(r.OnlyInB)+len(r.Differing) == 0
}

// Diff compares the live rows of a and b by key over the business columns
// (and _cdc_deleted); metadata columns are ignored, so a table rebuilt with
// another history compares equal.
func Diff(ctx context.Context, a, b *tablerows.Table, opts DiffOptions) (*DiffReport, error) {
	key := opts.Key
	switch {
	case len(key) > 0:
	case a.KeyColumns() != nil:
		key = a.KeyColumns()
		if bk := b.KeyColumns(); bk != nil && strings.Join(bk, ",") != strings.Join(key, ",") {
			return nil, requestErr("diff: key columns differ (A: %s, B: %s): give --key", strings.Join(key, ","), strings.Join(bk, ","))
		}
	case b.KeyColumns() != nil:
		key = b.KeyColumns()
	default:
		return nil, requestErr("diff: neither table has a " + layout.ConfKeyColumns + " property: give --key")
	}
	for _, k := range key {
		if a.Type(k) == nil {
			return nil, requestErr("diff: key column %q missing from A", k)
		}
		if b.Type(k) == nil {
			return nil, requestErr("diff: key column %q missing from B", k)
		}
	}
	r := &DiffReport{Key: key}
	inA, inB := map[string]bool{}, map[string]bool{}
	for _, c := range a.BusinessColumns() {
		inA[c] = true
	}
	for _, c := range b.BusinessColumns() {
		inB[c] = true
	}
	for _, c := range a.BusinessColumns() {
		r.Columns = append(r.Columns, c)
		if !inB[c] {
			r.ColumnsA = append(r.ColumnsA, c)
		}
	}
	for _, c := range b.BusinessColumns() {
		if !inA[c] {
			r.Columns = append(r.Columns, c)
			r.ColumnsB = append(r.ColumnsB, c)
		}
	}
	if a.HasDeletedColumn() && b.HasDeletedColumn() {
		r.Columns = append(r.Columns, layout.ColDeleted)
	}
	cols := r.Columns
	rowsA := map[string][]string{}
	nA := 0
	err := scanKeyed(ctx, a, key, cols, func(k string, vals []string) error {
		nA++
		if _, dup := rowsA[k]; dup {
			r.DupsA++
		}
		rowsA[k] = append([]string(nil), vals...)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("table A: %w", err)
	}
	nB := 0
	err = scanKeyed(ctx, b, key, cols, func(k string, vals []string) error {
		nB++
		va, ok := rowsA[k]
		if !ok {
			r.OnlyInB = append(r.OnlyInB, k)
			return nil
		}
		delete(rowsA, k)
		var parts []string
		for i, c := range cols {
			if va[i] != vals[i] {
				parts = append(parts, fmt.Sprintf("%s: A=%s B=%s", c, va[i], vals[i]))
			}
		}
		if len(parts) > 0 {
			r.Differing = append(r.Differing, KeyDiff{k, strings.Join(parts, "; ")})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("table B: %w", err)
	}
	for k := range rowsA {
		r.OnlyInA = append(r.OnlyInA, k)
	}
	sort.Strings(r.OnlyInA)
	sort.Strings(r.OnlyInB)
	sortDiffs(r.Differing)
	r.A = TableSide{Dir: a.Dir, Version: a.Version(), Live: nA}
	r.B = TableSide{Dir: b.Dir, Version: b.Version(), Live: nB}
	return r, nil
}

func sortDiffs(d []KeyDiff) { sort.Slice(d, func(i, j int) bool { return d[i].Key < d[j].Key }) }

// scanKeyed scans the live rows of t and calls fn with the row's key text
// (a JSON array) and the values of cols (columns t lacks are null).
func scanKeyed(ctx context.Context, t *tablerows.Table, key, cols []string, fn func(k string, vals []string) error) error {
	var read []string
	pos := make([]int, len(cols))
	for i, c := range cols {
		pos[i] = -1
		if t.Type(c) != nil {
			pos[i] = len(read)
			read = append(read, c)
		}
	}
	kpos := make([]int, len(key))
	for i, k := range key {
		kpos[i] = len(read)
		read = append(read, k)
	}
	vals := make([]string, len(cols))
	var kb []byte
	return t.Scan(ctx, tablerows.ScanOptions{Columns: read}, func(r tablerows.Row) error {
		for i, p := range pos {
			if p < 0 {
				vals[i] = "null"
			} else {
				vals[i] = r[p]
			}
		}
		kb = append(kb[:0], '[')
		for i, p := range kpos {
			if i > 0 {
				kb = append(kb, ',')
			}
			kb = append(kb, r[p]...)
		}
		kb = append(kb, ']')
		return fn(string(kb), vals)
	})
}
