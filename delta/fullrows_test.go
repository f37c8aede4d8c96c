// Full-value row comparisons with delta-rs, nested types included.

package delta

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/cdcsink/cdc-sink/internal/deltacheck"
)

// Full-value row comparisons (nested types included) in the canonical form
// of scripts/deltars_rows.py.

// canonRows reads every live row of s and renders it like deltars_rows.py.
func canonRows(ctx context.Context, s *Snapshot) ([]string, error) {
	var out []string
	for rec, err := range s.Scan(ctx, ScanOptions{}) {
		if err != nil {
			return nil, err
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			row := map[string]any{}
			for c := 0; c < int(rec.NumCols()); c++ {
				row[rec.ColumnName(c)] = canonVal(rec.Column(c), i)
			}
			b, err := json.Marshal(row)
			if err != nil {
				rec.Release()
				return nil, err
			}
			out = append(out, string(b))
		}
		rec.Release()
	}
	return out, nil
}

func canonVal(a arrow.Array, i int) any {
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
		return float64(a.Value(i))
	case *array.Float64:
		return a.Value(i)
	case *array.String:
		return a.Value(i)
	case *array.Binary:
		return base64.StdEncoding.EncodeToString(a.Value(i))
	case *array.Date32:
		return time.Unix(int64(a.Value(i))*86400, 0).UTC().Format("2006-01-02")
	case *array.Timestamp:
		if a.DataType().(*arrow.TimestampType).Unit != arrow.Microsecond {
			return "<non-us timestamp>"
		}
		return int64(a.Value(i))
	case *array.Decimal128:
		return pyDecimal(a.Value(i).BigInt().String(), int(a.DataType().(*arrow.Decimal128Type).Scale))
	case *array.Struct:
		st := a.DataType().(*arrow.StructType)
		m := map[string]any{}
		for f := 0; f < st.NumFields(); f++ {
			m[st.Field(f).Name] = canonVal(a.Field(f), i)
		}
		return m
	case *array.Map:
		start, end := a.ValueOffsets(i)
		out := []any{}
		for j := start; j < end; j++ {
			out = append(out, []any{canonVal(a.Keys(), int(j)), canonVal(a.Items(), int(j))})
		}
		return out
	case *array.List:
		start, end := a.ValueOffsets(i)
		out := []any{}
		for j := start; j < end; j++ {
			out = append(out, canonVal(a.ListValues(), int(j)))
		}
		return out
	}
	return fmt.Sprintf("<unsupported %s>", a.DataType())
}

// pyDecimal formats an unscaled integer with scale like Python's str(Decimal).
func pyDecimal(unscaled string, scale int) string {
	neg := strings.HasPrefix(unscaled, "-")
	digits := strings.TrimPrefix(unscaled, "-")
	exp := -scale
	adjusted := exp + len(digits) - 1
	var s string
	if exp <= 0 && adjusted >= -6 {
		if scale == 0 {
			s = digits
		} else {
			if len(digits) <= scale {
				digits = strings.Repeat("0", scale-len(digits)+1) + digits
			}
			s = digits[:len(digits)-scale] + "." + digits[len(digits)-scale:]
		}
	} else {
		s = digits[:1]
		if len(digits) > 1 {
			s += "." + digits[1:]
		}
		s += "E"
		if adjusted >= 0 {
			s += "+"
		}
		s += strconv.Itoa(adjusted)
	}
	if neg {
		return "-" + s
	}
	return s
}

// normRows decodes canonical rows and re-encodes them with numbers in one
// form (Python prints 5.0 where Go prints 5), sorted.
func normRows(t testing.TB, rows []string) []string {
	t.Helper()
	out := make([]string, len(rows))
	for i, r := range rows {
		d := json.NewDecoder(strings.NewReader(r))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			t.Fatalf("row %q: %v", r, err)
		}
		b, err := json.Marshal(normNumbers(v))
		if err != nil {
			t.Fatal(err)
		}
		out[i] = string(b)
	}
	sort.Strings(out)
	return out
}

func normNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if n, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return json.Number(strconv.FormatInt(n, 10))
		}
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil {
			return "bad number " + string(x)
		}
		if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return json.Number(strconv.FormatInt(int64(f), 10))
		}
		return json.Number(strconv.FormatFloat(f, 'g', -1, 64))
	case map[string]any:
		for k, e := range x {
			x[k] = normNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = normNumbers(e)
		}
	}
	return v
}

// pyarrowWidenedRows is the oracle for tables delta-rs refuses (type
// widening): pyarrow reads each file and casts it to the table types.
func pyarrowWidenedRows(t testing.TB, dir string) []string {
	t.Helper()
	cmd := exec.Command(deltacheck.Python(t), filepath.Join(deltacheck.RepoRoot(), "scripts", "pyarrow_widened_rows.py"), dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pyarrow_widened_rows.py %s: %v\n%s", dir, err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[1:] // header first
}

// TestGoldenFullRows compares every value (nested structs, arrays and maps
// included) of column-mapped and type-widened golden tables with an
// independent reader: delta-rs, or pyarrow where delta-rs 1.6.6 refuses the
// table (typeWidening-preview).
func TestGoldenFullRows(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name    string
		pyarrow bool // delta-rs refuses it
	}{
		{"type-widening", true},
		{"type-widening-nested", true},
		{"table-with-columnmapping-mode-name", false},
		{"table-with-columnmapping-mode-id", false},
		{"table-with-icebegCompatV2Enabled", false},
		{"dv-with-columnmapping", false},
		{"data-skipping-basic-stats-all-types-columnmapping-name", false},
		{"data-skipping-basic-stats-all-types-columnmapping-id", false},
		{"data-reader-timestamp_ntz-id-mode", false},
		{"data-reader-timestamp_ntz-name-mode", false},
		{"data-reader-nested-struct", false},
		{"data-reader-map", false},
		{"data-reader-array-primitives", false},
		{"data-reader-array-complex-objects", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(goldenRoot, c.name)
			s, err := loadNoPanic(ctx, dir, -1)
			if err != nil {
				t.Fatal(err)
			}
			got, err := canonRows(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			if c.pyarrow {
				want = pyarrowWidenedRows(t, dir)
			} else {
				want = deltacheck.ReadDeltaRS(t, dir, "").Rows
			}
			a, b := normRows(t, got), normRows(t, want)
			if strings.Join(a, "\n") != strings.Join(b, "\n") {
				t.Fatalf("rows differ (ours %d, oracle %d):\n ours:   %s\n oracle: %s", len(a), len(b), strings.Join(a, "\n         "), strings.Join(b, "\n         "))
			}
			t.Logf("%d rows identical (all columns, nested values included)", len(a))
		})
	}
}

// TestGoldenFullRowsAll extends TestGoldenFullRows to every golden table
// both readers accept (up to 20k rows). One delta-rs process per table takes
// about a minute, so it runs with CDC_SINK_THOROUGH=1 only.
func TestGoldenFullRowsAll(t *testing.T) {
	if !thorough() {
		t.Skip("CDC_SINK_THOROUGH=1 runs the full-value comparison on all golden tables")
	}
	ctx := context.Background()
	var same, refused []string
	for _, dir := range goldenTables(t) {
		s, err := loadNoPanic(ctx, dir, -1)
		if err != nil {
			continue
		}
		name := strings.TrimPrefix(dir, goldenRoot+"/")
		got, err := canonRows(ctx, s)
		if err != nil || len(got) > 20000 {
			continue
		}
		out, err := exec.Command(deltacheck.Python(t), filepath.Join(deltacheck.RepoRoot(), "scripts", "deltars_rows.py"), dir).Output()
		if err != nil {
			refused = append(refused, name)
			continue
		}
		want := strings.Split(strings.TrimSpace(string(out)), "\n")[1:]
		if len(want) == 1 && want[0] == "" {
			want = nil
		}
		a, b := normRows(t, got), normRows(t, want)
		if strings.Join(a, "\n") != strings.Join(b, "\n") {
			t.Errorf("%s: rows differ (ours %d, delta-rs %d)", name, len(a), len(b))
			continue
		}
		same = append(same, name)
	}
	t.Logf("all values identical to delta-rs for %d golden tables; delta-rs refused %v", len(same), refused)
}
