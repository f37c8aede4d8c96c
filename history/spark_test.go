package history_test

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cdcsink/cdc-sink/internal/dbzgen"
	"github.com/cdcsink/cdc-sink/internal/deltacheck"
	"github.com/cdcsink/cdc-sink/source"
)

// sparkDocQueries returns the Spark SQL blocks of docs/history.md (the ones
// reading delta.`…`), in order.
func sparkDocQueries(t *testing.T) []string { return docSQL(t, "delta.`") }

// sparkSQL runs the queries in one Spark session (scripts/spark_sql.py):
// per query, its rows as canonical JSON lines, in the query's order.
func sparkSQL(t *testing.T, queries []string) [][]string {
	t.Helper()
	in, err := json.Marshal(queries)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(deltacheck.Python(t), filepath.Join(deltacheck.RepoRoot(), "scripts", "spark_sql.py"))
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		s := stderr.String()
		t.Fatalf("spark sql: %v\n%s", err, s[max(0, len(s)-4000):])
	}
	var res [][]string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.HasPrefix(l, `{"query":`) {
			res = append(res, nil)
			continue
		}
		if len(res) == 0 {
			t.Fatalf("spark sql: row before any query header: %s", l)
		}
		res[len(res)-1] = append(res[len(res)-1], recanon(t, l))
	}
	if len(res) != len(queries) {
		t.Fatalf("spark sql: %d results for %d queries", len(res), len(queries))
	}
	return res
}

// recanon re-encodes a JSON row (keys sorted, numbers as written) so rows
// printed by different scripts compare as text.
func recanon(t *testing.T, l string) string {
	t.Helper()
	d := json.NewDecoder(strings.NewReader(l))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		t.Fatalf("%v: %s", err, l)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDocsQueriesSpark runs the Spark SQL of docs/history.md as written
// (pyspark + delta-spark, one session) — "how did order 102 reach this
// state" and SCD type 2 over a generated stream's history, SCD type 2 over
// a history with truncates, late, stale and duplicate changes — and checks
// each returns exactly DuckDB's rows for the DuckDB form, in order; the SCD2
// results are also the materialized SCD2 tables' (TestSCD2Materialized,
// TestSCD2Truncate check that for DuckDB).
func TestDocsQueriesSpark(t *testing.T) {
	duck, spark := docQueries(t), sparkDocQueries(t)
	if len(spark) != 2 || len(duck) != 2 {
		t.Fatalf("docs/history.md has %d Spark and %d DuckDB queries, want 2 each (order 102, SCD2)", len(spark), len(duck))
	}
	s := dbzgen.Generate(dbzgen.Config{Seed: 4, Prefix: "loja", Schema: "public", Table: "orders", Partitions: 2,
		Keys: 150, Events: 600, SnapshotRows: 110, Tombstones: true, TxSize: 3, ToastEvery: 6, PKChangeEvery: 25, Duplicates: 0.05})
	cur, hist := t.TempDir(), t.TempDir()
	run(t, [][]*source.Record{s.Records[:300], s.Records[300:]}, cur, hist, -1, "")
	truncHist, _ := truncateStream(t)

	type q struct{ name, spark, duck, dir string }
	qs := []q{{"order 102", spark[0], duck[0], hist}, {"SCD2", spark[1], duck[1], hist}, {"SCD2 with truncates", spark[1], duck[1], truncHist}}
	var sqls []string
	for _, x := range qs {
		sqls = append(sqls, strings.ReplaceAll(x.spark, "`lake/history/orders`", "`"+x.dir+"`"))
	}
	got := sparkSQL(t, sqls)
	for i, x := range qs {
		lines := duckdbLines(t, x.duck, x.dir)[1:]
		want := make([]string, len(lines))
		for j, l := range lines {
			want[j] = recanon(t, l)
		}
		if len(want) == 0 {
			t.Fatalf("%s: DuckDB returns no rows", x.name)
		}
		sameRows(t, x.name+": Spark vs DuckDB", got[i], want)
		t.Logf("%s: %d rows, equal", x.name, len(want))
	}
}
