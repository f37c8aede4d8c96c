package history_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cdcsink/cdc-sink/internal/dbzgen"
	"github.com/cdcsink/cdc-sink/internal/deltacheck"
	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/source"
)

// docQueries returns the DuckDB SQL blocks of docs/history.md (the ones
// reading delta_scan), in order.
func docQueries(t *testing.T) []string { return docSQL(t, "delta_scan(") }

// docSQL returns the SQL blocks of docs/history.md that contain marker, in order.
func docSQL(t *testing.T, marker string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(deltacheck.RepoRoot(), "docs", "history.md"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, part := range strings.Split(string(b), "```sql\n")[1:] {
		q, _, _ := strings.Cut(part, "```")
		if strings.Contains(q, marker) {
			out = append(out, q)
		}
	}
	return out
}

// duckdb runs query over the history at dir (the docs' path replaced).
func duckdb(t *testing.T, query, dir string) []map[string]any {
	t.Helper()
	lines := duckdbLines(t, query, dir)
	var rows []map[string]any
	for _, l := range lines[1:] {
		var r map[string]any
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, r)
	}
	return rows
}

// duckdbLines is duckdb's output as printed: a header line, then one
// canonical JSON row per line (deltars_rows.canon, as delta-rs reads).
func duckdbLines(t *testing.T, query, dir string) []string {
	t.Helper()
	q := strings.ReplaceAll(query, "'lake/history/orders'", "'"+dir+"'")
	cmd := exec.Command(deltacheck.Python(t), filepath.Join(deltacheck.RepoRoot(), "scripts", "history_sql.py"))
	cmd.Stdin = strings.NewReader(q)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("duckdb: %v\n%s\n%s", err, stderr.String(), q)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// TestDocsQueries runs the DuckDB queries of docs/history.md as written
// over a generated stream's history: the order-102 query lists every
// record of key 102 in version order ending in the current row's state;
// the SCD type 2 query closes every interval but the last of a key, and exactly the
// live keys of the current table have an is_current row, with its version
// and status.
func TestDocsQueries(t *testing.T) {
	qs := docQueries(t)
	if len(qs) != 2 {
		t.Fatalf("docs/history.md has %d DuckDB queries, want 2 (order 102, SCD2)", len(qs))
	}
	s := dbzgen.Generate(dbzgen.Config{Seed: 4, Prefix: "loja", Schema: "public", Table: "orders", Partitions: 2,
		Keys: 150, Events: 600, SnapshotRows: 110, Tombstones: true, TxSize: 3, ToastEvery: 6, PKChangeEvery: 25, Duplicates: 0.05})
	cur, hist := t.TempDir(), t.TempDir()
	run(t, [][]*source.Record{s.Records[:300], s.Records[300:]}, cur, hist, -1, "")
	tb, err := merge.Open(context.Background(), cur, merge.Options{Sink: "s"})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := tb.Rows(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	live := map[string]merge.Row{}
	var row102 merge.Row
	for _, r := range rows {
		if fmt.Sprint(r["id"]) == "102" {
			row102 = r
		}
		if r["_cdc_deleted"] != true {
			live[fmt.Sprint(r["id"])] = r
		}
	}
	if row102 == nil {
		t.Fatal("key 102 is not in the generated stream")
	}

	got := duckdb(t, qs[0], hist)
	n := 0
	for _, e := range entries(t, hist) {
		if fmt.Sprint(e.Change.Key...) == "102" {
			n++
		}
	}
	if len(got) != n || n == 0 {
		t.Fatalf("order 102 query: %d rows, the history has %d for key 102", len(got), n)
	}
	var last map[string]any
	for i, r := range got {
		if i > 0 && r["_cdc_source_version"].(string) < got[i-1]["_cdc_source_version"].(string) {
			t.Fatalf("order 102 rows not in version order at %d", i)
		}
		if r["_cdc_outcome"] == "applied" {
			last = r
		}
	}
	if last["_cdc_source_version"] != row102["_cdc_source_version"] {
		t.Fatalf("order 102: last applied version %v, current row %v", last["_cdc_source_version"], row102["_cdc_source_version"])
	}

	scd := duckdb(t, qs[1], hist)
	current := map[string]map[string]any{}
	byKey := map[string][]map[string]any{}
	for _, r := range scd {
		k := fmt.Sprint(r["id"])
		byKey[k] = append(byKey[k], r)
		if r["is_current"] == true {
			if current[k] != nil {
				t.Fatalf("key %s has two current rows", k)
			}
			current[k] = r
		}
	}
	for k, rs := range byKey {
		for i := 0; i+1 < len(rs); i++ {
			// a later version closed it (an update: at its valid_from; a delete in between: earlier)
			vt, _ := rs[i]["valid_to"].(float64)
			next, _ := rs[i+1]["valid_from"].(float64)
			if rs[i]["valid_to"] == nil || rs[i]["is_current"] == true || vt > next {
				t.Fatalf("key %s: interval %d not closed by the next version: %v then %v", k, i, rs[i], rs[i+1])
			}
		}
	}
	if len(current) != len(live) {
		t.Fatalf("SCD2: %d current rows, the current table has %d live keys", len(current), len(live))
	}
	for k, r := range live {
		c := current[k]
		if c == nil || c["source_version"] != r["_cdc_source_version"] || c["status"] != r["status"] || c["valid_to"] != nil {
			t.Fatalf("key %s: SCD2 current row %v, current table %v %v", k, c, r["_cdc_source_version"], r["status"])
		}
	}
}
