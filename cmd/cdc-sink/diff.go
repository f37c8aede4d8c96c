package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/cdcsink/cdc-sink/tablerows"
)

// cmdDiff compares the live rows of two tables by key over the business
// columns (and _cdc_deleted); exit 1 on any difference.
func cmdDiff(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("diff", stderr)
	keyFlag := fs.String("key", "", "comma-separated key columns (default: the tables' cdcsink.keyColumns)")
	limit := fs.Int("limit", 20, "list at most N keys per category")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return &exitError{code: 2, msg: "usage: cdc-sink diff TABLE_A TABLE_B [--key cols] [--limit N]"}
	}
	for _, p := range pos {
		if err := tableArg("diff", p); err != nil {
			return err
		}
	}
	a, err := tablerows.OpenWith(ctx, pos[0], storageOpts)
	if err != nil {
		return fmt.Errorf("table A: %w", err)
	}
	b, err := tablerows.OpenWith(ctx, pos[1], storageOpts)
	if err != nil {
		return fmt.Errorf("table B: %w", err)
	}
	var key []string
	switch {
	case *keyFlag != "":
		key = splitList([]string{*keyFlag})
	case a.KeyColumns() != nil:
		key = a.KeyColumns()
		if bk := b.KeyColumns(); bk != nil && strings.Join(bk, ",") != strings.Join(key, ",") {
			return &exitError{code: 2, msg: fmt.Sprintf("diff: key columns differ (A: %s, B: %s): give --key", strings.Join(key, ","), strings.Join(bk, ","))}
		}
	case b.KeyColumns() != nil:
		key = b.KeyColumns()
	default:
		return &exitError{code: 2, msg: "diff: neither table has a cdcsink.keyColumns property: give --key"}
	}
	for _, k := range key {
		if a.Type(k) == nil || b.Type(k) == nil {
			return &exitError{code: 2, msg: fmt.Sprintf("diff: key column %q missing from %s", k, map[bool]string{true: "A", false: "B"}[a.Type(k) == nil])}
		}
	}
	// Compared columns: business columns of either table (a column one table
	// lacks reads as null there), plus _cdc_deleted when both have it.
	inA, inB := map[string]bool{}, map[string]bool{}
	for _, c := range a.BusinessColumns() {
		inA[c] = true
	}
	for _, c := range b.BusinessColumns() {
		inB[c] = true
	}
	var cols, onlyA, onlyB []string
	for _, c := range a.BusinessColumns() {
		cols = append(cols, c)
		if !inB[c] {
			onlyA = append(onlyA, c)
		}
	}
	for _, c := range b.BusinessColumns() {
		if !inA[c] {
			cols = append(cols, c)
			onlyB = append(onlyB, c)
		}
	}
	if a.HasDeletedColumn() && b.HasDeletedColumn() {
		cols = append(cols, tablerows.DeletedColumn)
	}
	rowsA, err := liveRows(ctx, a, key, cols)
	if err != nil {
		return fmt.Errorf("table A: %w", err)
	}
	var missA, missB []string
	type colDiff struct{ key, detail string }
	var differ []colDiff
	nB := 0
	err = scanKeyed(ctx, b, key, cols, func(k string, vals []string) error {
		nB++
		va, ok := rowsA.rows[k]
		if !ok {
			missA = append(missA, k)
			return nil
		}
		delete(rowsA.rows, k)
		var parts []string
		for i, c := range cols {
			if va[i] != vals[i] {
				parts = append(parts, fmt.Sprintf("%s: A=%s B=%s", c, va[i], vals[i]))
			}
		}
		if len(parts) > 0 {
			differ = append(differ, colDiff{k, strings.Join(parts, "; ")})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("table B: %w", err)
	}
	for k := range rowsA.rows {
		missB = append(missB, k)
	}
	sort.Strings(missA)
	sort.Strings(missB)
	sort.Slice(differ, func(i, j int) bool { return differ[i].key < differ[j].key })

	w := bufio.NewWriter(stdout)
	defer w.Flush()
	fmt.Fprintf(w, "A: %s (v%d): %d live rows\n", a.Dir, a.Version(), rowsA.n)
	fmt.Fprintf(w, "B: %s (v%d): %d live rows\n", b.Dir, b.Version(), nB)
	fmt.Fprintf(w, "key: %s; compared columns: %s\n", strings.Join(key, ","), strings.Join(cols, ","))
	if len(onlyA) > 0 {
		fmt.Fprintf(w, "columns only in A (null in B): %s\n", strings.Join(onlyA, ","))
	}
	if len(onlyB) > 0 {
		fmt.Fprintf(w, "columns only in B (null in A): %s\n", strings.Join(onlyB, ","))
	}
	list := func(title string, keys []string) { listKeys(w, title, keys, *limit) }
	list("keys only in A", missB)
	list("keys only in B", missA)
	fmt.Fprintf(w, "differing keys: %d\n", len(differ))
	for i, d := range differ {
		if i >= *limit {
			fmt.Fprintf(w, "  ... %d more\n", len(differ)-i)
			break
		}
		fmt.Fprintf(w, "  %s  %s\n", d.key, d.detail)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if rowsA.dups > 0 || len(missA)+len(missB)+len(differ) > 0 {
		msg := fmt.Sprintf("tables differ: %d keys only in A, %d only in B, %d differing", len(missB), len(missA), len(differ))
		if rowsA.dups > 0 {
			msg += fmt.Sprintf(", %d duplicate keys in A", rowsA.dups)
		}
		return &exitError{code: 1, msg: msg}
	}
	fmt.Fprintf(stdout, "tables are equal: %d live rows\n", rowsA.n)
	return nil
}

type keyedRows struct {
	rows map[string][]string
	n    int
	dups int
}

// liveRows reads the live rows of t keyed by the JSON array of key values.
func liveRows(ctx context.Context, t *tablerows.Table, key, cols []string) (*keyedRows, error) {
	kr := &keyedRows{rows: map[string][]string{}}
	err := scanKeyed(ctx, t, key, cols, func(k string, vals []string) error {
		kr.n++
		if _, dup := kr.rows[k]; dup {
			kr.dups++
		}
		kr.rows[k] = append([]string(nil), vals...)
		return nil
	})
	return kr, err
}

// scanKeyed scans the live rows of t and calls fn with the row's key text
// and the values of cols (columns t lacks are null).
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
