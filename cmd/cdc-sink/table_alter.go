package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/cdcsink/cdc-sink/delta"
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

// tableSetProperty is `cdc-sink table set-property DIR KEY=VALUE`: the
// logic (which properties, the protocol change) is maintain.SetProperty.
func tableSetProperty(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("table set-property", stderr)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return &exitError{code: 2, msg: fmt.Sprintf("table set-property: want DIR KEY=VALUE, got %d arguments", len(pos))}
	}
	dir := pos[0]
	if err := tableArg(fs.Name(), dir); err != nil {
		return err
	}
	key, value, ok := strings.Cut(pos[1], "=")
	if !ok || key == "" {
		return &exitError{code: 2, msg: fmt.Sprintf("table set-property: %q is not KEY=VALUE", pos[1])}
	}
	res, err := maintain.SetProperty(ctx, dir, key, value, storageOpts)
	if err != nil {
		return err
	}
	if !res.Committed {
		fmt.Fprintf(stdout, "table %s v%d: %s is already %s; nothing committed\n", dir, res.Version, key, value)
		return nil
	}
	fmt.Fprintf(stdout, "table %s v%d: set %s=%s (operation %s)\n", dir, res.Version, key, value, maintain.OpSetProperties)
	if key == delta.ConfEnableChangeDataFeed && strings.EqualFold(value, "true") {
		fmt.Fprintf(stdout, "the change data feed starts at version %d: read it from there (Spark: option(\"startingVersion\", %d); delta-rs: load_cdf(starting_version=%d)); a running sink picks it up at its next batch\n",
			res.Version, res.Version, res.Version)
	}
	return nil
}
