// Package deltacheck reads Delta tables through independent readers (delta-rs
// via the project's Python venv) so tests can check that the tables cdc-sink
// writes read back identically elsewhere.
package deltacheck

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"testing"
	"time"
)

// RepoRoot is the repository root (where go.mod is).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Python returns the venv interpreter, failing the test (not skipping) when
// the venv is missing: CI creates it with scripts/venv.sh.
func Python(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("CDC_SINK_PYTHON"); p != "" {
		return p
	}
	p := filepath.Join(RepoRoot(), ".venv", "bin", "python")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("python venv missing (%v): run scripts/venv.sh", err)
	}
	return p
}

// Table is a table as delta-rs reads it.
type Table struct {
	Version int64
	Columns []string
	// Rows are canonical JSON objects (scripts/deltars_rows.py), sorted.
	Rows []string
}

// ReadDeltaRS reads every row of the table at dir with delta-rs. where is an
// optional SQL predicate (DataFusion syntax).
func ReadDeltaRS(t testing.TB, dir, where string) Table {
	t.Helper()
	return ReadDeltaRSWith(t, dir, where, nil)
}

// ReadDeltaRSWith is ReadDeltaRS for a table URL (s3://…) with delta-rs
// storage options (AWS_ENDPOINT_URL, AWS_ALLOW_HTTP, …).
func ReadDeltaRSWith(t testing.TB, dir, where string, storageOptions map[string]string) Table {
	t.Helper()
	return readDeltaRS(t, dir, where, -1, storageOptions)
}

// ReadDeltaRSAt is ReadDeltaRS of the table as of version (time travel).
func ReadDeltaRSAt(t testing.TB, dir, where string, version int64) Table {
	t.Helper()
	return readDeltaRS(t, dir, where, version, nil)
}

// readTimeout bounds one delta-rs read (a large e2e table reads in seconds).
const readTimeout = 5 * time.Minute

func readDeltaRS(t testing.TB, dir, where string, version int64, storageOptions map[string]string) Table {
	t.Helper()
	args := []string{filepath.Join(RepoRoot(), "scripts", "deltars_rows.py"), dir}
	if where != "" {
		args = append(args, "--where", where)
	}
	if version >= 0 {
		args = append(args, "--version", fmt.Sprint(version))
	}
	keys := make([]string, 0, len(storageOptions))
	for k := range storageOptions {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "--storage-option", k+"="+storageOptions[k])
	}
	// A bound on the reader: delta-rs can deadlock (delta-io/delta-rs#4657: a scan of a table
	// with more deletion-vector files than tokio's blocking pool, 512, hung a soak at 0 CPU).
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, Python(t), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if ctx.Err() != nil {
		t.Fatalf("delta-rs read of %s did not finish in %s (a hung reader: delta-rs#4657 deadlocks on tables with more than ~500 files carrying deletion vectors)\n%s", dir, readTimeout, stderr.String())
	}
	if err != nil {
		t.Fatalf("delta-rs read of %s failed: %v\n%s", dir, err, stderr.String())
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	var tb Table
	first := true
	for sc.Scan() {
		if first {
			var h struct {
				Version int64    `json:"version"`
				Columns []string `json:"columns"`
			}
			if err := json.Unmarshal(sc.Bytes(), &h); err != nil {
				t.Fatalf("delta-rs header: %v", err)
			}
			tb.Version, tb.Columns = h.Version, h.Columns
			first = false
			continue
		}
		tb.Rows = append(tb.Rows, sc.Text())
	}
	return tb
}

// Decode parses canonical rows into maps (numbers as json.Number).
func Decode(t testing.TB, rows []string) []map[string]any {
	t.Helper()
	out := make([]map[string]any, len(rows))
	for i, r := range rows {
		d := json.NewDecoder(bytes.NewReader([]byte(r)))
		d.UseNumber()
		if err := d.Decode(&out[i]); err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
	}
	return out
}

// ByKey indexes decoded rows by the string form of column key.
func ByKey(rows []map[string]any, key string) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, r := range rows {
		out[fmt.Sprint(r[key])] = r
	}
	return out
}

// ReadSpark reads the tables with pyspark + delta-spark (one Spark session
// for all of them: startup dominates) and returns them by directory.
// Version is not reported (-1).
func ReadSpark(t testing.TB, dirs ...string) map[string]Table {
	t.Helper()
	args := append([]string{filepath.Join(RepoRoot(), "scripts", "spark_rows.py")}, dirs...)
	return runTables(t, "spark read", args)
}

// ReadCDF reads the Change Data Feed of the tables from startingVersion on
// with engine "deltars" (DeltaTable.load_cdf) or "spark" (readChangeFeed),
// by directory. Rows hold the table's columns, _change_type and
// _commit_version (canonical JSON, sorted); Version is not reported (-1).
func ReadCDF(t testing.TB, engine string, startingVersion int64, dirs ...string) map[string]Table {
	t.Helper()
	args := append([]string{filepath.Join(RepoRoot(), "scripts", "cdf_rows.py"), engine, fmt.Sprint(startingVersion)}, dirs...)
	return runTables(t, engine+" change data feed read", args)
}

// runTables runs a script printing {"table": ...} headers, each followed by
// its rows.
func runTables(t testing.TB, what string, args []string) map[string]Table {
	t.Helper()
	cmd := exec.Command(Python(t), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s failed: %v\n%s", what, err, tail(stderr.String(), 4000))
	}
	res := map[string]Table{}
	var cur string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var h struct {
			Table   string   `json:"table"`
			Count   int      `json:"count"`
			Columns []string `json:"columns"`
		}
		if bytes.HasPrefix(line, []byte(`{"table":`)) && json.Unmarshal(line, &h) == nil && h.Table != "" {
			cur = h.Table
			res[cur] = Table{Version: -1, Columns: h.Columns}
			continue
		}
		tb := res[cur]
		tb.Rows = append(tb.Rows, string(line))
		res[cur] = tb
	}
	return res
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
