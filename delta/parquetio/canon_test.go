package parquetio

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// Helpers shared by tests: canonical JSON rows (same form as
// scripts/parquet_dump.py) and the pyarrow oracle.

func repoRoot(t testing.TB) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func pythonBin(t testing.TB) string {
	py := filepath.Join(repoRoot(t), ".venv", "bin", "python")
	if _, err := os.Stat(py); err != nil {
		t.Fatalf("project venv missing (%s): run scripts/venv.sh", py)
	}
	return py
}

// pyarrowRows reads a Parquet file with pyarrow and returns canonical rows.
func pyarrowRows(t testing.TB, path string, cols ...string) []map[string]any {
	t.Helper()
	args := append([]string{filepath.Join(repoRoot(t), "scripts", "parquet_dump.py"), path}, cols...)
	cmd := exec.Command(pythonBin(t), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("parquet_dump.py %s: %v\n%s\n(if pyarrow is missing: run scripts/venv.sh)", path, err, stderr.String())
	}
	var rows []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<26)
	for sc.Scan() {
		rows = append(rows, decodeCanon(t, sc.Bytes()))
	}
	return rows
}

// pyarrowRowsMany reads several files in one Python process.
func pyarrowRowsMany(t testing.TB, paths []string) map[string][]map[string]any {
	t.Helper()
	args := append([]string{filepath.Join(repoRoot(t), "scripts", "parquet_dump.py"), "--many"}, paths...)
	cmd := exec.Command(pythonBin(t), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("parquet_dump.py: %v\n%s\n(if pyarrow is missing: run scripts/venv.sh)", err, stderr.String())
	}
	res := map[string][]map[string]any{}
	cur := ""
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<26)
	for sc.Scan() {
		m := decodeCanon(t, sc.Bytes())
		if f, ok := m["__file__"].(string); ok && len(m) == 1 {
			cur = f
			res[cur] = []map[string]any{}
			continue
		}
		res[cur] = append(res[cur], m)
	}
	return res
}

func decodeCanon(t testing.TB, b []byte) map[string]any {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("bad canonical row %s: %v", b, err)
	}
	return m
}

// canonRows converts records to canonical rows (round-tripped through JSON
// so numbers compare as json.Number like the Python side).
func canonRows(t testing.TB, recs []arrow.RecordBatch) []map[string]any {
	return canonRowsStep(t, recs, 1)
}

// canonRowsStep canonicalises every step-th row (others are left nil).
func canonRowsStep(t testing.TB, recs []arrow.RecordBatch, step int) []map[string]any {
	var out []map[string]any
	for _, r := range recs {
		for i := 0; i < int(r.NumRows()); i++ {
			if len(out)%step != 0 {
				out = append(out, nil)
				continue
			}
			row := map[string]any{}
			for c := 0; c < int(r.NumCols()); c++ {
				row[r.ColumnName(c)] = canonValue(r.Column(c), i)
			}
			b, err := json.Marshal(row)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, decodeCanon(t, b))
		}
	}
	return out
}

func canonFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return strconv.FormatFloat(f, 'g', 17, 64)
}

func canonValue(a arrow.Array, i int) any {
	if a.IsNull(i) {
		return nil
	}
	switch a := a.(type) {
	case *array.Boolean:
		return a.Value(i)
	case *array.Int8:
		return a.Value(i)
	case *array.Int16:
		return a.Value(i)
	case *array.Int32:
		return a.Value(i)
	case *array.Int64:
		return a.Value(i)
	case *array.Float32:
		return canonFloat(float64(a.Value(i)))
	case *array.Float64:
		return canonFloat(a.Value(i))
	case *array.String:
		return a.Value(i)
	case *array.Binary:
		return hex.EncodeToString(a.Value(i))
	case *array.Date32:
		return int32(a.Value(i))
	case *array.Timestamp:
		u := a.DataType().(*arrow.TimestampType).Unit
		v := int64(a.Value(i))
		switch u {
		case arrow.Second:
			v *= 1e6
		case arrow.Millisecond:
			v *= 1e3
		case arrow.Nanosecond:
			v = floorDiv(v, 1000)
		}
		return v
	case *array.Decimal128:
		return formatDecimal(a.Value(i), a.DataType().(*arrow.Decimal128Type).Scale)
	case *array.Struct:
		st := a.DataType().(*arrow.StructType)
		m := map[string]any{}
		for f := 0; f < st.NumFields(); f++ {
			m[st.Field(f).Name] = canonValue(a.Field(f), i)
		}
		return m
	case *array.Map:
		start, end := a.ValueOffsets(i)
		keys, items := a.Keys(), a.Items()
		out := []any{}
		for j := start; j < end; j++ {
			out = append(out, []any{canonValue(keys, int(j)), canonValue(items, int(j))})
		}
		return out
	case *array.List:
		start, end := a.ValueOffsets(i)
		vals := a.ListValues()
		out := []any{}
		for j := start; j < end; j++ {
			out = append(out, canonValue(vals, int(j)))
		}
		return out
	}
	return fmt.Sprintf("<unsupported %s>", a.DataType())
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
