package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cdcsink/cdc-sink/internal/deltacheck"
)

// TestOtherEnginesReadOurTables: DuckDB (its delta extension, loaded offline
// from the PyPI wheel) and polars read a table cdc-sink wrote — several
// batches, so deletion vectors and tombstones — with the same live rows as
// delta-rs.
func TestOtherEnginesReadOurTables(t *testing.T) {
	tmp := t.TempDir()
	in := filepath.Join(tmp, "items.jsonl")
	live := azureLoad(t, in) // 120 inserts, updates, deletes
	table := filepath.Join(tmp, "items")
	if code, out, errOut := runCLI(t, "replay", "--from-file", in, "--table", table, "--sink-name", "items",
		"--batch-records", "50", "--quiet"); code != 0 {
		t.Fatalf("replay: exit %d\n%s\n%s", code, out, errOut)
	}
	cols := []string{"id", "qty", "name"}
	project := func(rows []string) string {
		var out []string
		for _, r := range deltacheck.Decode(t, rows) {
			var b strings.Builder
			for _, c := range cols {
				b.WriteString(deltaString(r[c]) + "|")
			}
			out = append(out, b.String())
		}
		return sortedLines(strings.Join(out, "\n"))
	}
	rs := deltacheck.ReadDeltaRS(t, table, "NOT _cdc_deleted").Rows
	if len(rs) != live {
		t.Fatalf("delta-rs: %d live rows, want %d", len(rs), live)
	}
	want := project(rs)
	for _, engine := range []string{"duckdb", "polars"} {
		cmd := exec.Command(deltacheck.Python(t), append([]string{filepath.Join(deltacheck.RepoRoot(), "scripts", "engines_rows.py"), engine, table}, cols...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v\n%s", engine, err, stderr.String())
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if got := project(lines[1:]); got != want {
			t.Errorf("%s reads other live rows than delta-rs:\n%s\nwant\n%s", engine, got, want)
		}
	}
}

func deltaString(v any) string {
	if v == nil {
		return "<null>"
	}
	return fmt.Sprint(v)
}
