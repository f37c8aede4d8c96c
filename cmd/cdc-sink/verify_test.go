package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/normalize"
)

// testPG returns the DSN of the stack's Postgres and a connection to it. If
// Postgres is not reachable the test fails with how to start it, unless
// CDC_SINK_NO_PG=1 (then it is skipped).
func testPG(t *testing.T) (string, *pgx.Conn) {
	t.Helper()
	dsn := os.Getenv("CDC_SINK_PG_DSN")
	if dsn == "" {
		port := os.Getenv("CDC_SINK_PG_PORT")
		if port == "" {
			port = "55432" // scripts/stack/common.sh
		}
		dsn = "postgres://dbz:dbz@127.0.0.1:" + port + "/loja?sslmode=disable"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		if os.Getenv("CDC_SINK_NO_PG") == "1" {
			t.Skipf("Postgres not reachable (%v); skipped because CDC_SINK_NO_PG=1", err)
		}
		t.Fatalf("Postgres not reachable at %s: %v\nStart it with `make stack-up` (or `CDC_SINK_STACK_SERVICES=postgres scripts/stack/up.sh`), "+
			"point CDC_SINK_PG_DSN / CDC_SINK_PG_PORT at another server, or set CDC_SINK_NO_PG=1 to skip this test.", redactText(dsn), err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return dsn, conn
}

func pgExec(t *testing.T, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

var pgItemsSchema = &normalize.Schema{Columns: []normalize.ColumnDef{
	{Name: "id", Type: mkType(normalize.Long)},
	{Name: "name", Type: mkType(normalize.String), Nullable: true},
	{Name: "amount", Type: normalize.Type{Kind: normalize.Decimal, Precision: 12, Scale: 2}, Nullable: true},
	{Name: "price", Type: mkType(normalize.Double), Nullable: true},
	{Name: "ratio", Type: mkType(normalize.Float), Nullable: true},
	{Name: "qty", Type: mkType(normalize.Integer), Nullable: true},
	{Name: "small", Type: mkType(normalize.Short), Nullable: true},
	{Name: "active", Type: mkType(normalize.Boolean), Nullable: true},
	{Name: "born", Type: mkType(normalize.Date), Nullable: true},
	{Name: "created", Type: mkType(normalize.Timestamp), Nullable: true},
	{Name: "local", Type: mkType(normalize.TimestampNTZ), Nullable: true},
	{Name: "data", Type: mkType(normalize.Binary), Nullable: true},
	{Name: "tags", Type: normalize.Type{Kind: normalize.Array, Elem: &normalize.Type{Kind: normalize.String}}, Nullable: true},
	{Name: "doc", Type: mkType(normalize.String), Nullable: true}, // jsonb: Debezium sends the text
	{Name: "uid", Type: mkType(normalize.String), Nullable: true}, // uuid
}}

func TestVerify(t *testing.T) {
	dsn, conn := testPG(t)
	sch := fmt.Sprintf("cdcsink_verify_%d", rand.Uint32())
	pgExec(t, conn, "CREATE SCHEMA "+sch)
	t.Cleanup(func() { conn.Exec(context.Background(), "DROP SCHEMA "+sch+" CASCADE") })
	pgExec(t, conn, `CREATE TABLE `+sch+`.items (id bigint PRIMARY KEY, name text, amount numeric(12,2), price float8, ratio real,
		qty int, small smallint, active bool, born date, created timestamptz, local timestamp, data bytea, tags text[], doc jsonb, uid uuid)`)
	for i := 1; i <= 3; i++ {
		pgExec(t, conn, `INSERT INTO `+sch+`.items VALUES ($1, $2, $3::numeric, 1.5, 0.25, 7, -3, true, '2024-01-02',
			'2024-01-02 03:04:05.123456+00', '2024-01-02 04:04:05.123456', '\x000102ff', ARRAY['a','b'], '{"b": [1, 2.50], "a": "x"}',
			'b68a35a7-17ad-35b3-af2a-ae46edb4545a')`, i, fmt.Sprintf("n%d", i), "12.3")
	}
	// The table as cdc-sink would have written it (jsonb as Debezium's text,
	// with another key order and spacing).
	dir := filepath.Join(t.TempDir(), "items")
	ts := time.Date(2024, 1, 2, 3, 4, 5, 123456000, time.UTC).UnixMicro()
	var cs []*normalize.Change
	for i := int64(1); i <= 3; i++ {
		cs = append(cs, &normalize.Change{Op: normalize.OpUpsert, SourceOp: 'r', KeyNames: []string{"id"}, Key: []any{i}, Schema: pgItemsSchema,
			Row: []any{i, fmt.Sprintf("n%d", i), decimal.RequireFromString("12.30"), 1.5, float32(0.25), int32(7), int16(-3), true, int32(19724),
				ts, ts + 3600e6, []byte{0, 1, 2, 255}, []any{"a", "b"}, `{"a":"x","b":[1,2.50]}`, "b68a35a7-17ad-35b3-af2a-ae46edb4545a"},
			Version: mkVer(uint64(i))})
	}
	tb, err := merge.Open(context.Background(), dir, merge.Options{Sink: "pg"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Apply(context.Background(), &merge.Batch{Changes: cs, Offsets: map[merge.TP]int64{{Topic: "t", Partition: 0}: 3}},
		func(context.Context, int64, []merge.Reject) error { return nil }); err != nil {
		t.Fatal(err)
	}
	src := sch + ".items"
	steps := []struct {
		name     string
		sql      string
		args     []string
		wantCode int
		want     []string
	}{
		{"equal", "", []string{"verify", "--pg", dsn, "--source-table", src, "--table", dir}, 0,
			[]string{"table matches source: 3 rows", "compared columns: id,name,amount,price,ratio,qty,small,active,born,created,local,data,tags,doc,uid"}},
		{"differences", `UPDATE ` + src + ` SET amount = 12.31 WHERE id = 2; DELETE FROM ` + src + ` WHERE id = 3;
			INSERT INTO ` + src + ` (id, name) VALUES (9, 'new'); UPDATE ` + src + ` SET doc = '{"a": "y", "b": [1, 2.50]}' WHERE id = 1`,
			[]string{"verify", "--pg", dsn, "--source-table", src, "--table", dir}, 1,
			[]string{"keys missing from the table: 1\n  [9]\n", "keys missing from the source: 1\n  [3]\n", "differing rows: 2\n",
				`[2]  amount: source="12.31" table="12.30"`, `[1]  doc: source=`}},
		{"limit", "", []string{"verify", "--pg", dsn, "--source-table", src, "--table", dir, "--limit", "1"}, 1,
			[]string{"differing rows: 2\n", "  ... 1 more"}},
		{"new column in the source is reported, not compared", `ALTER TABLE ` + src + ` ADD COLUMN extra int`,
			[]string{"verify", "--pg", dsn, "--source-table", src, "--table", dir}, 1,
			[]string{"source columns not in the table (not compared): extra"}},
		{"missing flags", "", []string{"verify", "--pg", dsn}, 2, nil},
		{"no such table", "", []string{"verify", "--pg", dsn, "--source-table", sch + ".nope", "--table", dir}, 1, nil},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if st.sql != "" {
				pgExec(t, conn, st.sql)
			}
			code, out, errOut := runCLI(t, st.args...)
			if code != st.wantCode {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, st.wantCode, out, errOut)
			}
			for _, w := range st.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

func TestVerifyNeverPrintsPassword(t *testing.T) {
	dir := t.TempDir()
	buildThings(t, dir)
	for _, dsn := range []string{"postgres://dbz:s3cr3tpw@127.0.0.1:1/loja", "host=127.0.0.1 port=1 user=dbz password=s3cr3tpw dbname=loja"} {
		for _, args := range [][]string{
			{"verify", "--pg", dsn, "--source-table", "public.x", "--table", dir},
			{"slots", "--pg", dsn},
		} {
			code, out, errOut := runCLI(t, args...)
			if code == 0 || strings.Contains(out+errOut, "s3cr3tpw") || !strings.Contains(errOut, "connect to postgres") {
				t.Errorf("%v: exit %d, output:\n%s%s", args[0], code, out, errOut)
			}
		}
	}
}

func TestSlots(t *testing.T) {
	dsn, conn := testPG(t)
	name := fmt.Sprintf("cdcsink_test_%d", rand.Uint32())
	pgExec(t, conn, "SELECT pg_create_physical_replication_slot($1, true)", name)
	t.Cleanup(func() { conn.Exec(context.Background(), "SELECT pg_drop_replication_slot($1)", name) })
	// Write some WAL so the inactive slot retains something.
	sch := name + "_wal"
	pgExec(t, conn, "CREATE SCHEMA "+sch)
	t.Cleanup(func() { conn.Exec(context.Background(), "DROP SCHEMA "+sch+" CASCADE") })
	pgExec(t, conn, "CREATE TABLE "+sch+".w AS SELECT g, repeat('x', 100) AS pad FROM generate_series(1, 2000) g")
	tests := []struct {
		name    string
		args    []string
		want    []string
		notWant []string
	}{
		{"warns on inactive slot above threshold", []string{"slots", "--pg", dsn, "--warn-bytes", "1"},
			[]string{"SLOT", "RETAINED_WAL", name, "WARNING: slot " + name + " is inactive and retains"}, nil},
		{"quiet below threshold", []string{"slots", "--pg", dsn, "--warn-bytes", "1099511627776"},
			[]string{name, "ok: no inactive slot retains more than 1.0 TiB"}, []string{"WARNING: slot " + name}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, tc.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s %s", code, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(out, w) {
					t.Errorf("output has %q:\n%s", w, out)
				}
			}
		})
	}
}

// The whole path: Debezium JSON records (as the connector renders numeric,
// timestamptz, jsonb, uuid, date, int[] and text[]) replayed into a table,
// then verified against the Postgres rows they describe.
func TestVerifyReplayedTable(t *testing.T) {
	dsn, conn := testPG(t)
	sch := fmt.Sprintf("cdcsink_verify_%d", rand.Uint32())
	pgExec(t, conn, "CREATE SCHEMA "+sch)
	t.Cleanup(func() { conn.Exec(context.Background(), "DROP SCHEMA "+sch+" CASCADE") })
	pgExec(t, conn, `CREATE TABLE `+sch+`.items (id bigint PRIMARY KEY, amount numeric(12,2), created timestamptz, doc jsonb,
		uid uuid, born date, tags text[], flag boolean)`)
	pgExec(t, conn, `INSERT INTO `+sch+`.items VALUES
		(1, 12.30, '2024-01-02 05:04:05.123456+02', '{"k": [1, 2], "a": null}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '2024-01-02', '{x,y}', true),
		(2, -0.05, '1999-12-31 23:59:59+00', '[]', NULL, NULL, '{}', false)`)
	fields := []dbzField{
		{Name: "id", Type: "int64"},
		{Name: "amount", Type: "bytes", Logical: "org.apache.kafka.connect.data.Decimal", Params: map[string]string{"scale": "2", "connect.decimal.precision": "12"}},
		{Name: "created", Type: "string", Logical: "io.debezium.time.ZonedTimestamp"},
		{Name: "doc", Type: "string", Logical: "io.debezium.data.Json"},
		{Name: "uid", Type: "string", Logical: "io.debezium.data.Uuid"},
		{Name: "born", Type: "int32", Logical: "io.debezium.time.Date"},
		{Name: "tags", Type: "array", Items: "string"},
		{Name: "flag", Type: "boolean"},
	}
	in := filepath.Join(t.TempDir(), "in.jsonl")
	writeKcatLines(t, in,
		dbzRecord(0, "r", 100, fields, nil, map[string]any{"id": 1, "amount": "BM4=", "created": "2024-01-02T03:04:05.123456Z",
			"doc": `{"a":null,"k":[1,2]}`, "uid": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "born": 19724, "tags": []any{"x", "y"}, "flag": true},
			map[string]any{"id": 1}),
		dbzRecord(1, "r", 101, fields, nil, map[string]any{"id": 2, "amount": "+w==", "created": "1999-12-31T23:59:59Z",
			"doc": "[]", "uid": nil, "born": nil, "tags": []any{}, "flag": false}, map[string]any{"id": 2}),
	)
	dir := filepath.Join(t.TempDir(), "items")
	if code, out, errOut := runCLI(t, "replay", "--from-file", in, "--table", dir, "--sink-name", "v", "--quiet"); code != 0 || !strings.Contains(out, "2 live rows") {
		t.Fatalf("replay: %d %s %s", code, out, errOut)
	}
	code, out, errOut := runCLI(t, "verify", "--pg", dsn, "--source-table", sch+".items", "--table", dir)
	if code != 0 {
		t.Fatalf("verify: exit %d\n%s\n%s", code, out, errOut)
	}
	pgExec(t, conn, `UPDATE `+sch+`.items SET created = created + interval '1 microsecond', tags = '{x}' WHERE id = 1`)
	code, out, _ = runCLI(t, "verify", "--pg", dsn, "--source-table", sch+".items", "--table", dir)
	if code != 1 || !strings.Contains(out, `[1]  created: source="2024-01-02T03:04:05.123457Z" table="2024-01-02T03:04:05.123456Z"; tags: source=["x"] table=["x","y"]`) {
		t.Fatalf("verify after update: exit %d\n%s", code, out)
	}
}
