package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/shopspring/decimal"

	"github.com/cdcsink/cdc-sink/delta/schema"
	"github.com/cdcsink/cdc-sink/internal/redact"
	"github.com/cdcsink/cdc-sink/tablerows"
)

// pgConnect connects with a DSN and never lets the password reach an error.
func pgConnect(ctx context.Context, dsn string) (*pgx.Conn, error) {
	if dsn == "" {
		return nil, &exitError{code: 2, msg: "--pg DSN is required (e.g. postgres://user@127.0.0.1:5432/db; the password may come from PGPASSWORD or ~/.pgpass)"}
	}
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	c, err := pgx.Connect(cctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("connect to postgres %s: %s", redact.String(dsn), redact.String(err.Error()))
	}
	return c, nil
}

type pgColumn struct {
	name    string
	pgType  string // format_type
	typName string
	jsonish bool // json/jsonb: compared as parsed JSON
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
	pgCols, pk, err := pgTableColumns(ctx, conn, *src)
	if err != nil {
		return err
	}
	key := splitList([]string{*keyFlag})
	if len(key) == 0 {
		key = t.KeyColumns()
	}
	if len(key) == 0 {
		key = pk
	}
	if len(key) == 0 {
		return &exitError{code: 2, msg: "verify: no key columns (table has no cdcsink.keyColumns, source has no primary key): give --key"}
	}
	inTable := map[string]bool{}
	for _, c := range t.BusinessColumns() {
		inTable[c] = true
	}
	var cols []pgColumn
	var pgOnly, tableOnly []string
	inPG := map[string]bool{}
	for _, c := range pgCols {
		inPG[c.name] = true
		if inTable[c.name] {
			cols = append(cols, c)
		} else {
			pgOnly = append(pgOnly, c.name)
		}
	}
	for _, c := range t.BusinessColumns() {
		if !inPG[c] {
			tableOnly = append(tableOnly, c)
		}
	}
	colIdx := map[string]int{}
	for i, c := range cols {
		colIdx[c.name] = i
	}
	kpos := make([]int, len(key))
	for i, k := range key {
		j, ok := colIdx[k]
		if !ok {
			return &exitError{code: 2, msg: fmt.Sprintf("verify: key column %q is not in both the table and the source", k)}
		}
		kpos[i] = j
	}
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.name
	}
	types := make([]schema.DataType, len(cols))
	for i, c := range cols {
		types[i] = t.Type(c.name)
	}
	norm := func(vals []string) {
		for i, c := range cols {
			if c.jsonish {
				vals[i] = normJSONCell(vals[i])
			}
		}
	}
	keyText := func(vals []string) string {
		var b []byte
		b = append(b, '[')
		for i, p := range kpos {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, vals[p]...)
		}
		return string(append(b, ']'))
	}
	// Table side: live rows.
	type stored struct {
		hash [32]byte
		vals []string
	}
	tbl := map[string]stored{}
	nTable, dupTable := 0, 0
	vals := make([]string, len(cols))
	err = t.Scan(ctx, tablerows.ScanOptions{Columns: names}, func(r tablerows.Row) error {
		copy(vals, r)
		norm(vals)
		nTable++
		k := keyText(vals)
		if _, dup := tbl[k]; dup {
			dupTable++
		}
		tbl[k] = stored{hashRow(vals), append([]string(nil), vals...)}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read table: %w", err)
	}
	// Source side, streamed.
	var sel []string
	for i, c := range cols {
		q := pgx.Identifier{c.name}.Sanitize()
		if needsText(types[i]) {
			q += "::text"
		}
		sel = append(sel, q)
	}
	rel, err := quoteRelation(*src)
	if err != nil {
		return &exitError{code: 2, msg: err.Error()}
	}
	rows, err := conn.Query(ctx, "SELECT "+strings.Join(sel, ", ")+" FROM "+rel)
	if err != nil {
		return fmt.Errorf("query %s: %w", *src, err)
	}
	defer rows.Close()
	nPG := 0
	var missInTable []string
	type diffRow struct{ key, detail string }
	var differ []diffRow
	for rows.Next() {
		raw, err := rows.Values()
		if err != nil {
			return fmt.Errorf("read %s: %w", *src, err)
		}
		nPG++
		for i, v := range raw {
			s, err := pgCanon(v, types[i])
			if err != nil {
				return fmt.Errorf("%s.%s: %w", *src, cols[i].name, err)
			}
			vals[i] = s
		}
		norm(vals)
		k := keyText(vals)
		st, ok := tbl[k]
		if !ok {
			missInTable = append(missInTable, k)
			continue
		}
		delete(tbl, k)
		if st.hash == hashRow(vals) {
			continue
		}
		var parts []string
		for i := range cols {
			if st.vals[i] != vals[i] {
				parts = append(parts, fmt.Sprintf("%s: source=%s table=%s", cols[i].name, vals[i], st.vals[i]))
			}
		}
		differ = append(differ, diffRow{k, strings.Join(parts, "; ")})
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read %s: %w", *src, err)
	}
	var missInSource []string
	for k := range tbl {
		missInSource = append(missInSource, k)
	}
	sort.Strings(missInTable)
	sort.Strings(missInSource)
	sort.Slice(differ, func(i, j int) bool { return differ[i].key < differ[j].key })

	w := bufio.NewWriter(stdout)
	defer w.Flush()
	fmt.Fprintf(w, "source: %s: %d rows\n", *src, nPG)
	fmt.Fprintf(w, "table:  %s (v%d): %d live rows\n", t.Dir, t.Version(), nTable)
	fmt.Fprintf(w, "key: %s; compared columns: %s\n", strings.Join(key, ","), strings.Join(names, ","))
	if len(pgOnly) > 0 {
		fmt.Fprintf(w, "source columns not in the table (not compared): %s\n", strings.Join(pgOnly, ","))
	}
	if len(tableOnly) > 0 {
		fmt.Fprintf(w, "table columns not in the source (not compared): %s\n", strings.Join(tableOnly, ","))
	}
	list := func(title string, keys []string) { listKeys(w, title, keys, *limit) }
	if nPG != nTable {
		fmt.Fprintf(w, "row counts differ: source %d, table %d\n", nPG, nTable)
	}
	list("keys missing from the table", missInTable)
	list("keys missing from the source", missInSource)
	fmt.Fprintf(w, "differing rows: %d\n", len(differ))
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
	if dupTable > 0 || nPG != nTable || len(missInTable)+len(missInSource)+len(differ) > 0 {
		return &exitError{code: 1, msg: fmt.Sprintf("table differs from source: %d keys missing from the table, %d missing from the source, %d differing rows",
			len(missInTable), len(missInSource), len(differ))}
	}
	fmt.Fprintf(stdout, "table matches source: %d rows\n", nPG)
	return nil
}

func hashRow(vals []string) [32]byte {
	h := sha256.New()
	for _, v := range vals {
		h.Write([]byte(v))
		h.Write([]byte{0})
	}
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

// needsText: columns read from Postgres as text (exact numeric digits; any
// type Debezium renders as a string: uuid, json, enum, time with zone…).
func needsText(dt schema.DataType) bool {
	switch dt.(type) {
	case *schema.DecimalType:
		return true
	case schema.PrimitiveType:
		return dt == schema.String
	}
	return false
}

// quoteRelation quotes schema.table (or table) as identifiers.
func quoteRelation(s string) (string, error) {
	parts := strings.Split(s, ".")
	if len(parts) > 2 || len(parts) == 0 {
		return "", fmt.Errorf("--source-table %q: want schema.table", s)
	}
	for _, p := range parts {
		if p == "" {
			return "", fmt.Errorf("--source-table %q: want schema.table", s)
		}
	}
	return pgx.Identifier(parts).Sanitize(), nil
}

// pgTableColumns returns the columns (in order) and primary key of a table.
func pgTableColumns(ctx context.Context, conn *pgx.Conn, src string) ([]pgColumn, []string, error) {
	rel, err := quoteRelation(src)
	if err != nil {
		return nil, nil, &exitError{code: 2, msg: err.Error()}
	}
	rows, err := conn.Query(ctx, `SELECT a.attname, format_type(a.atttypid, a.atttypmod), t.typname
		FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
		WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`, rel)
	if err != nil {
		return nil, nil, fmt.Errorf("columns of %s: %w", src, err)
	}
	var cols []pgColumn
	for rows.Next() {
		var c pgColumn
		if err := rows.Scan(&c.name, &c.pgType, &c.typName); err != nil {
			return nil, nil, err
		}
		c.jsonish = c.typName == "json" || c.typName == "jsonb"
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("columns of %s: %w", src, err)
	}
	if len(cols) == 0 {
		return nil, nil, fmt.Errorf("source table %s has no columns", src)
	}
	var pk []string
	prow, err := conn.Query(ctx, `SELECT a.attname FROM pg_index i
		JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) ON true
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
		WHERE i.indrelid = $1::regclass AND i.indisprimary ORDER BY k.ord`, rel)
	if err != nil {
		return nil, nil, fmt.Errorf("primary key of %s: %w", src, err)
	}
	for prow.Next() {
		var n string
		if err := prow.Scan(&n); err != nil {
			return nil, nil, err
		}
		pk = append(pk, n)
	}
	return cols, pk, prow.Err()
}

// normJSONCell re-encodes a cell holding JSON text (a JSON string whose
// content is a JSON document) with sorted keys and no insignificant space,
// so jsonb's own formatting and Debezium's text compare equal.
func normJSONCell(cell string) string {
	if cell == "null" {
		return cell
	}
	s := tablerows.Text(cell)
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return cell
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return cell
	}
	return string(tablerows.AppendString(nil, strings.TrimSuffix(buf.String(), "\n")))
}

// pgCanon maps a value read by pgx to the canonical JSON text of the table
// column type dt (package tablerows).
func pgCanon(v any, dt schema.DataType) (string, error) {
	if v == nil {
		return "null", nil
	}
	switch t := dt.(type) {
	case *schema.DecimalType:
		var d decimal.Decimal
		switch x := v.(type) {
		case string:
			if x == "NaN" || strings.Contains(x, "Infinity") {
				return strconv.Quote(x), nil
			}
			var err error
			if d, err = decimal.NewFromString(x); err != nil {
				return "", err
			}
		case pgtype.Numeric:
			if !x.Valid {
				return "null", nil
			}
			d = decimal.NewFromBigInt(x.Int, x.Exp)
		default:
			return "", fmt.Errorf("unexpected %T for %s", v, dt.TypeName())
		}
		r := d.Round(int32(t.Scale))
		if !r.Equal(d) {
			return strconv.Quote(d.String()), nil // not representable: differs by construction
		}
		return strconv.Quote(tablerows.FormatDecimal(r.Coefficient(), int32(t.Scale))), nil
	case *schema.ArrayType:
		xs, ok := v.([]any)
		if !ok {
			return "", fmt.Errorf("unexpected %T for array", v)
		}
		var b []byte
		b = append(b, '[')
		for i, e := range xs {
			if i > 0 {
				b = append(b, ',')
			}
			s, err := pgCanon(e, t.ElementType)
			if err != nil {
				return "", err
			}
			b = append(b, s...)
		}
		return string(append(b, ']')), nil
	case schema.PrimitiveType:
		switch t {
		case schema.String:
			switch x := v.(type) {
			case string:
				return string(tablerows.AppendString(nil, x)), nil
			case [16]byte:
				return strconv.Quote(fmt.Sprintf("%x-%x-%x-%x-%x", x[0:4], x[4:6], x[6:8], x[8:10], x[10:16])), nil
			}
			return string(tablerows.AppendString(nil, fmt.Sprint(v))), nil
		case schema.Boolean:
			if b, ok := v.(bool); ok {
				return strconv.FormatBool(b), nil
			}
		case schema.Byte, schema.Short, schema.Integer, schema.Long:
			switch x := v.(type) {
			case int16:
				return strconv.FormatInt(int64(x), 10), nil
			case int32:
				return strconv.FormatInt(int64(x), 10), nil
			case int64:
				return strconv.FormatInt(x, 10), nil
			case int8:
				return strconv.FormatInt(int64(x), 10), nil
			case uint32:
				return strconv.FormatUint(uint64(x), 10), nil
			case pgtype.Time: // Debezium MicroTime
				return strconv.FormatInt(x.Microseconds, 10), nil
			case pgtype.Interval: // Debezium MicroDuration: a month is 30.4375 days
				us := x.Microseconds + int64(x.Days)*86400e6 + int64(float64(x.Months)*30.4375*86400e6)
				return strconv.FormatInt(us, 10), nil
			case time.Time: // a date/timestamp the table stores as a number
				return strconv.FormatInt(x.UnixMicro(), 10), nil
			}
		case schema.Float, schema.Double:
			bits := 64
			if t == schema.Float {
				bits = 32
			}
			switch x := v.(type) {
			case float32:
				return string(tablerows.AppendFloat(nil, float64(x), bits)), nil
			case float64:
				return string(tablerows.AppendFloat(nil, x, bits)), nil
			}
		case schema.Binary:
			if b, ok := v.([]byte); ok {
				return strconv.Quote(base64.StdEncoding.EncodeToString(b)), nil
			}
		case schema.Date:
			if x, ok := v.(time.Time); ok {
				y, m, d := x.Date()
				return strconv.Quote(fmt.Sprintf("%04d-%02d-%02d", y, m, d)), nil
			}
		case schema.Timestamp:
			if x, ok := v.(time.Time); ok {
				return strconv.Quote(tablerows.FormatTimestamp(x.UnixMicro())), nil
			}
		case schema.TimestampNTZ:
			if x, ok := v.(time.Time); ok {
				// pgx returns timestamp without time zone as that wall clock in UTC.
				wall := time.Date(x.Year(), x.Month(), x.Day(), x.Hour(), x.Minute(), x.Second(), x.Nanosecond(), time.UTC)
				return strconv.Quote(tablerows.FormatTimestampNTZ(wall.UnixMicro())), nil
			}
		}
	}
	// Fallback: JSON of the value (structs, maps, unexpected encodings).
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("cannot map %T to %s", v, dt.TypeName())
	}
	return string(b), nil
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
	var inRecovery bool
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil {
		return fmt.Errorf("slots: %w", err)
	}
	cur := "pg_current_wal_lsn()"
	if inRecovery {
		cur = "pg_last_wal_replay_lsn()"
	}
	rows, err := conn.Query(ctx, `SELECT slot_name, coalesce(plugin, ''), slot_type, coalesce(database, ''), active,
		restart_lsn::text, confirmed_flush_lsn::text,
		pg_wal_lsn_diff(`+cur+`, restart_lsn)::bigint,
		pg_wal_lsn_diff(`+cur+`, confirmed_flush_lsn)::bigint
		FROM pg_replication_slots ORDER BY slot_name`)
	if err != nil {
		return fmt.Errorf("slots: %w", err)
	}
	defer rows.Close()
	type slot struct {
		name, plugin, typ, db string
		active                bool
		restart, confirmed    *string
		retained, lag         *int64
	}
	var slots []slot
	for rows.Next() {
		var s slot
		if err := rows.Scan(&s.name, &s.plugin, &s.typ, &s.db, &s.active, &s.restart, &s.confirmed, &s.retained, &s.lag); err != nil {
			return fmt.Errorf("slots: %w", err)
		}
		slots = append(slots, s)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("slots: %w", err)
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
		table = append(table, []string{s.name, orDash(s.plugin), s.typ, orDash(s.db), strconv.FormatBool(s.active),
			str(s.restart), str(s.confirmed), num(s.retained), num(s.lag)})
	}
	quoted := make([][]string, len(table))
	for i, r := range table {
		quoted[i] = make([]string, len(r))
		for j, c := range r {
			quoted[i][j] = string(tablerows.AppendString(nil, c))
		}
	}
	writeTextTable(w, header, quoted)
	var warnings []string
	for _, s := range slots {
		if s.active || s.retained == nil || *s.retained <= *warn {
			continue
		}
		warnings = append(warnings, fmt.Sprintf("WARNING: slot %s is inactive and retains %s of WAL (threshold %s). Postgres keeps this WAL until the slot's consumer (Debezium) reconnects and confirms it; the disk can fill up. Restart the connector, or drop the slot if it is abandoned (SELECT pg_drop_replication_slot('%s')) and re-snapshot: see docs/runbook.md.",
			s.name, humanBytes(*s.retained), humanBytes(*warn), s.name))
	}
	for _, m := range warnings {
		fmt.Fprintln(w, m)
	}
	if len(warnings) == 0 {
		fmt.Fprintln(w, "ok: no inactive slot retains more than", humanBytes(*warn))
	}
	return w.Flush()
}
