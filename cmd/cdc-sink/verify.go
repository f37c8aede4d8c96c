package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/cdcsink/cdc-sink/audit"
	"github.com/cdcsink/cdc-sink/tablerows"
)

// pgConnect connects with a DSN and never lets the password reach an error.
func pgConnect(ctx context.Context, dsn string) (*pgx.Conn, error) {
	if dsn == "" {
		return nil, &exitError{code: 2, msg: "--pg DSN is required (e.g. postgres://user@127.0.0.1:5432/db; the password may come from PGPASSWORD or ~/.pgpass)"}
	}
	return audit.ConnectPostgres(ctx, dsn)
}

// cmdVerify compares a table with its Postgres source table.
func cmdVerify(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("verify", stderr)
	dsn := fs.String("pg", "", "Postgres DSN (password never printed)")
	src := fs.String("source-table", "", "source table, schema.table")
	dir := fs.String("table", "", "Delta table directory")
	limit := fs.Int("limit", 20, "list at most N differing keys per category")
	keyFlag := fs.String("key", "", "key columns (default: the table's cdcsink.keyColumns, else the primary key)")
	if err := noPositional(fs, args); err != nil {
		return err
	}
	if *src == "" || *dir == "" {
		return &exitError{code: 2, msg: "verify: --pg DSN --source-table schema.table --table DIR are required"}
	}
	if err := tableArg("verify", *dir); err != nil {
		return err
	}
	t, err := tablerows.OpenWith(ctx, *dir, storageOpts)
	if err != nil {
		return err
	}
	conn, err := pgConnect(ctx, *dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	r, err := audit.VerifyPostgres(ctx, conn, t, audit.VerifyOptions{SourceTable: *src, Key: splitList([]string{*keyFlag})})
	if err != nil {
		return auditErr(err)
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	fmt.Fprintf(w, "source: %s: %d rows\n", r.Source, r.SourceRows)
	fmt.Fprintf(w, "table:  %s (v%d): %d live rows\n", r.Table.Dir, r.Table.Version, r.Table.Live)
	fmt.Fprintf(w, "key: %s; compared columns: %s\n", strings.Join(r.Key, ","), strings.Join(r.Columns, ","))
	if len(r.SourceOnly) > 0 {
		fmt.Fprintf(w, "source columns not in the table (not compared): %s\n", strings.Join(r.SourceOnly, ","))
	}
	if len(r.TableOnly) > 0 {
		fmt.Fprintf(w, "table columns not in the source (not compared): %s\n", strings.Join(r.TableOnly, ","))
	}
	if r.SourceRows != r.Table.Live {
		fmt.Fprintf(w, "row counts differ: source %d, table %d\n", r.SourceRows, r.Table.Live)
	}
	listKeys(w, "keys missing from the table", r.MissingFromTable, *limit)
	listKeys(w, "keys missing from the source", r.MissingFromSource, *limit)
	printDiffs(w, "differing rows", r.Differing, *limit)
	if err := w.Flush(); err != nil {
		return err
	}
	if !r.Equal() {
		return &exitError{code: 1, msg: fmt.Sprintf("table differs from source: %d keys missing from the table, %d missing from the source, %d differing rows",
			len(r.MissingFromTable), len(r.MissingFromSource), len(r.Differing))}
	}
	fmt.Fprintf(stdout, "table matches source: %d rows\n", r.SourceRows)
	return nil
}

// cmdSlots lists replication slots and the WAL they retain.
func cmdSlots(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("slots", stderr)
	dsn := fs.String("pg", "", "Postgres DSN (password never printed)")
	warn := fs.Int64("warn-bytes", 1<<30, "warn about inactive slots retaining more WAL than this")
	if err := noPositional(fs, args); err != nil {
		return err
	}
	conn, err := pgConnect(ctx, *dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	slots, err := audit.Slots(ctx, conn)
	if err != nil {
		return err
	}
	str := func(p *string) string {
		if p == nil {
			return "-"
		}
		return *p
	}
	num := func(p *int64) string {
		if p == nil {
			return "-"
		}
		return humanBytes(*p)
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	if len(slots) == 0 {
		fmt.Fprintln(w, "no replication slots")
		return w.Flush()
	}
	header := []string{"SLOT", "PLUGIN", "TYPE", "DATABASE", "ACTIVE", "RESTART_LSN", "CONFIRMED_FLUSH_LSN", "RETAINED_WAL", "LAG"}
	var table [][]string
	for _, s := range slots {
		row := []string{s.Name, orDash(s.Plugin), s.Type, orDash(s.Database), strconv.FormatBool(s.Active),
			str(s.RestartLSN), str(s.ConfirmedLSN), num(s.RetainedBytes), num(s.LagBytes)}
		for j, c := range row {
			row[j] = string(tablerows.AppendString(nil, c))
		}
		table = append(table, row)
	}
	writeTextTable(w, header, table)
	warned := false
	for _, s := range slots {
		if !s.Retaining(*warn) {
			continue
		}
		warned = true
		fmt.Fprintf(w, "WARNING: slot %s is inactive and retains %s of WAL (threshold %s). Postgres keeps this WAL until the slot's consumer (Debezium) reconnects and confirms it; the disk can fill up. Restart the connector, or drop the slot if it is abandoned (SELECT pg_drop_replication_slot('%s')) and re-snapshot: see docs/runbook.md.\n",
			s.Name, humanBytes(*s.RetainedBytes), humanBytes(*warn), s.Name)
	}
	if !warned {
		fmt.Fprintln(w, "ok: no inactive slot retains more than", humanBytes(*warn))
	}
	return w.Flush()
}
