package audit

// VerifyPostgres: a table compared with its Postgres source table, values
// canonicalised to the table's column types (pgCanon).

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
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

// ConnectPostgres connects with a DSN; the password never reaches an error.
func ConnectPostgres(ctx context.Context, dsn string) (*pgx.Conn, error) {
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

// VerifyOptions configure VerifyPostgres.
type VerifyOptions struct {
	SourceTable string   // schema.table (or table)
	Key         []string // nil: the table's cdcsink.keyColumns, else the source's primary key
}

// VerifyReport is the result of VerifyPostgres. Key lists are sorted.
type VerifyReport struct {
	Source            string
	SourceRows        int
	Table             TableSide
	Key               []string
	Columns           []string // compared: columns in both
	SourceOnly        []string // source columns not in the table (not compared)
	TableOnly         []string // table columns not in the source (not compared)
	MissingFromTable  []string // keys
	MissingFromSource []string // keys
	Differing         []KeyDiff
	DupsInTable       int
}

// Equal reports whether the table's live rows equal the source's rows.
func (r *VerifyReport) Equal() bool {
	return r.DupsInTable == 0 && r.SourceRows == r.Table.Live &&
		len(r.MissingFromTable)+len(r.MissingFromSource)+len(r.Differing) == 0
}

// VerifyPostgres compares the live rows of t with the rows of the source
// table over the columns both have. The source is streamed; the table's
// rows are held in memory as hashes plus values.
func VerifyPostgres(ctx context.Context, conn *pgx.Conn, t *tablerows.Table, opts VerifyOptions) (*VerifyReport, error) {
	src := opts.SourceTable
	pgCols, pk, err := pgTableColumns(ctx, conn, src)
	if err != nil {
		return nil, err
	}
	key := opts.Key
	if len(key) == 0 {
		key = t.KeyColumns()
	}
	if len(key) == 0 {
		key = pk
	}
	if len(key) == 0 {
		return nil, requestErr("verify: no key columns (table has no cdcsink.keyColumns, source has no primary key): give --key")
	}
	r := &VerifyReport{Source: src, Key: key}
	inTable := map[string]bool{}
	for _, c := range t.BusinessColumns() {
		inTable[c] = true
	}
	var cols []pgColumn
	inPG := map[string]bool{}
	for _, c := range pgCols {
		inPG[c.name] = true
		if inTable[c.name] {
			cols = append(cols, c)
		} else {
			r.SourceOnly = append(r.SourceOnly, c.name)
		}
	}
	for _, c := range t.BusinessColumns() {
		if !inPG[c] {
			r.TableOnly = append(r.TableOnly, c)
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
			return nil, requestErr("verify: key column %q is not in both the table and the source", k)
		}
		kpos[i] = j
	}
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.name
	}
	r.Columns = names
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
	nTable := 0
	vals := make([]string, len(cols))
	err = t.Scan(ctx, tablerows.ScanOptions{Columns: names}, func(row tablerows.Row) error {
		copy(vals, row)
		norm(vals)
		nTable++
		k := keyText(vals)
		if _, dup := tbl[k]; dup {
			r.DupsInTable++
		}
		tbl[k] = stored{hashRow(vals), append([]string(nil), vals...)}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read table: %w", err)
	}
	r.Table = TableSide{Dir: t.Dir, Version: t.Version(), Live: nTable}
	// Source side, streamed.
	var sel []string
	for i, c := range cols {
		q := pgx.Identifier{c.name}.Sanitize()
		if needsText(types[i]) {
			q += "::text"
		}
		sel = append(sel, q)
	}
	rel, err := quoteRelation(src)
	if err != nil {
		return nil, err
	}
	rows, err := conn.Query(ctx, "SELECT "+strings.Join(sel, ", ")+" FROM "+rel)
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", src, err)
	}
	defer rows.Close()
	for rows.Next() {
		raw, err := rows.Values()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", src, err)
		}
		r.SourceRows++
		for i, v := range raw {
			s, err := pgCanon(v, types[i])
			if err != nil {
				return nil, fmt.Errorf("%s.%s: %w", src, cols[i].name, err)
			}
			vals[i] = s
		}
		norm(vals)
		k := keyText(vals)
		st, ok := tbl[k]
		if !ok {
			r.MissingFromTable = append(r.MissingFromTable, k)
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
		r.Differing = append(r.Differing, KeyDiff{k, strings.Join(parts, "; ")})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", src, err)
	}
	for k := range tbl {
		r.MissingFromSource = append(r.MissingFromSource, k)
	}
	sort.Strings(r.MissingFromTable)
	sort.Strings(r.MissingFromSource)
	sortDiffs(r.Differing)
	return r, nil
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
		return "", requestErr("source table %q: want schema.table", s)
	}
	for _, p := range parts {
		if p == "" {
			return "", requestErr("source table %q: want schema.table", s)
		}
	}
	return pgx.Identifier(parts).Sanitize(), nil
}

// pgTableColumns returns the columns (in order) and primary key of a table.
func pgTableColumns(ctx context.Context, conn *pgx.Conn, src string) ([]pgColumn, []string, error) {
	rel, err := quoteRelation(src)
	if err != nil {
		return nil, nil, err
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
