package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/cdcsink/cdc-sink/audit"
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
	r, err := audit.Diff(ctx, a, b, audit.DiffOptions{Key: splitList([]string{*keyFlag})})
	if err != nil {
		return auditErr(err)
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	fmt.Fprintf(w, "A: %s (v%d): %d live rows\n", r.A.Dir, r.A.Version, r.A.Live)
	fmt.Fprintf(w, "B: %s (v%d): %d live rows\n", r.B.Dir, r.B.Version, r.B.Live)
	fmt.Fprintf(w, "key: %s; compared columns: %s\n", strings.Join(r.Key, ","), strings.Join(r.Columns, ","))
	if len(r.ColumnsA) > 0 {
		fmt.Fprintf(w, "columns only in A (null in B): %s\n", strings.Join(r.ColumnsA, ","))
	}
	if len(r.ColumnsB) > 0 {
		fmt.Fprintf(w, "columns only in B (null in A): %s\n", strings.Join(r.ColumnsB, ","))
	}
	list := func(title string, keys []string) { listKeys(w, title, keys, *limit) }
	list("keys only in A", r.OnlyInA)
	list("keys only in B", r.OnlyInB)
	printDiffs(w, "differing keys", r.Differing, *limit)
	if err := w.Flush(); err != nil {
		return err
	}
	if !r.Equal() {
		msg := fmt.Sprintf("tables differ: %d keys only in A, %d only in B, %d differing", len(r.OnlyInA), len(r.OnlyInB), len(r.Differing))
		if r.DupsA > 0 {
			msg += fmt.Sprintf(", %d duplicate keys in A", r.DupsA)
		}
		return &exitError{code: 1, msg: msg}
	}
	fmt.Fprintf(stdout, "tables are equal: %d live rows\n", r.A.Live)
	return nil
}

// printDiffs prints a titled count and the first limit differing keys.
func printDiffs(w io.Writer, title string, differ []audit.KeyDiff, limit int) {
	fmt.Fprintf(w, "%s: %d\n", title, len(differ))
	for i, d := range differ {
		if i >= limit {
			fmt.Fprintf(w, "  ... %d more\n", len(differ)-i)
			break
		}
		fmt.Fprintf(w, "  %s  %s\n", d.Key, d.Detail)
	}
}

// auditErr maps an audit.RequestError to a usage error (exit 2).
func auditErr(err error) error {
	var re *audit.RequestError
	if errors.As(err, &re) {
		return &exitError{code: 2, msg: re.Msg}
	}
	return err
}
