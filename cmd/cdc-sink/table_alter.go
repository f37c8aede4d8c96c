package main

import (
	"context"
	"fmt"
	"io"

	"github.com/cdcsink/cdc-sink/maintain"
)

// tableAlter is `cdc-sink table alter DIR --column C --type T`: the logic
// is maintain.AlterColumn; this parses flags and prints.
func tableAlter(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("table alter", stderr)
	column := fs.String("column", "", "the column to change (a business column, not a key or _cdc_ column)")
	typ := fs.String("type", "", "its new Delta type: string, long, integer, short, byte, double, float, decimal(p,s), boolean, binary, date, timestamp, timestamp_ntz")
	dry := fs.Bool("dry-run", false, "read and convert every value, write and commit nothing")
	dir, err := oneDir(fs, args)
	if err != nil {
		return err
	}
	if *column == "" || *typ == "" {
		return &exitError{code: 2, msg: "table alter: --column and --type are required"}
	}
	res, err := maintain.AlterColumn(ctx, dir, *column, *typ, maintain.AlterOptions{Storage: storageOpts, DryRun: *dry})
	if err != nil {
		return err
	}
	what := fmt.Sprintf("column %s %s -> %s: %d files (%d with deletion vectors) into %d files, %d rows, %d values converted",
		res.Column, res.OldType, res.NewType, res.FilesRemoved, res.DVFilesRemoved, res.FilesAdded, res.Rows, res.Values)
	if *dry {
		fmt.Fprintf(stdout, "dry run on table %s v%d: would rewrite %s; nothing written\n", dir, res.ReadVersion, what)
	} else {
		fmt.Fprintf(stdout, "table %s v%d: rewrote %s (one commit, operation %s)\n", dir, res.Version, what, maintain.OpAlterColumn)
		if res.ProtocolUpgraded {
			fmt.Fprintln(stdout, "the table protocol now lists the timestampNtz feature (readers need Delta 3.x / delta-rs with timestamp_ntz support)")
		}
		fmt.Fprintln(stdout, "the replaced files stay on disk until `cdc-sink table vacuum` removes them after the retention period")
		fmt.Fprintf(stdout, "next: apply the held records with `cdc-sink quarantine redrive --file Q --table %s --reason schema_mismatch --requarantine NEW_FILE` (docs/runbook.md)\n", dir)
	}
	if res.Widening {
		fmt.Fprintf(stdout, "note: %s -> %s is a type widening: the sink widens such a column by itself when a change brings the wider type; the rewrite was not required\n",
			res.OldType, res.NewType)
	}
	return nil
}
