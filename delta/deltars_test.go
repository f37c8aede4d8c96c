// Comparisons with delta-rs, an independent reader, over the tables our writer produces.

package delta

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/cdcsink/cdc-sink/internal/golden"
	"math"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/cdcsink/cdc-sink/delta/schema"
)

var goldenRoot = golden.Dir()

// deltaRS is one table as seen by delta-rs (scripts/deltars_inspect.py).
type deltaRS struct {
	Table    string          `json:"table"`
	OK       bool            `json:"ok"`
	Error    string          `json:"error"`
	Version  int64           `json:"version"`
	Schema   json.RawMessage `json:"schema"`
	Protocol struct {
		MinReaderVersion int32 `json:"minReaderVersion"`
		MinWriterVersion int32 `json:"minWriterVersion"`
	} `json:"protocol"`
	Configuration map[string]string `json:"configuration"`
	Files         []struct {
		Path string `json:"path"`
		Size int64  `json:"size"`
	} `json:"files"`
	Txns       map[string]*int64 `json:"txns"`
	RowColumns []string          `json:"rowColumns"`
	Rows       [][]string        `json:"rows"`
	RowsError  string            `json:"rowsError"`
}

// runDeltaRS runs the independent reader. A missing venv fails the test:
// the comparison is the point of these tests.
func runDeltaRS(t testing.TB, tables []string, appIDs []string, extra ...string) map[string]deltaRS {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	py := filepath.Join(root, ".venv", "bin", "python")
	if _, err := os.Stat(py); err != nil {
		t.Fatalf("python venv missing (%v): run scripts/venv.sh", err)
	}
	if out, err := exec.Command(py, "-c", "import deltalake").CombinedOutput(); err != nil {
		t.Fatalf("deltalake not importable in %s (%v: %s): run scripts/venv.sh", py, err, out)
	}
	args := append([]string{filepath.Join(root, "scripts", "deltars_inspect.py")}, tables...)
	if len(appIDs) > 0 {
		args = append(args, "--app-ids", strings.Join(appIDs, ","))
	}
	args = append(args, extra...)
	cmd := exec.Command(py, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("deltars_inspect.py: %v\n%s", err, stderr.String())
	}
	res := map[string]deltaRS{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 256<<20)
	for sc.Scan() {
		var r deltaRS
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("bad deltars output %q: %v", sc.Text(), err)
		}
		res[r.Table] = r
	}
	return res
}

// goldenTables finds every table dir (has _delta_log) plus top-level dirs
// that are not tables at all (they must be refused).
func goldenTables(t testing.TB) []string {
	var out []string
	seen := map[string]bool{}
	err := filepath.WalkDir(goldenRoot, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "_delta_log" {
			out = append(out, filepath.Dir(p))
			seen[filepath.Dir(p)] = true
			return filepath.SkipDir
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(goldenRoot)
	for _, e := range ents {
		p := filepath.Join(goldenRoot, e.Name())
		if e.IsDir() && !seen[p] {
			has := false
			for _, q := range out {
				if strings.HasPrefix(q, p+"/") {
					has = true
				}
			}
			if !has {
				out = append(out, p)
			}
		}
	}
	sort.Strings(out)
	return out
}

func loadNoPanic(ctx context.Context, dir string, version int64) (s *Snapshot, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("PANIC: %v", p)
		}
	}()
	tb := OpenTable(NewLocalStorage(dir), "")
	if version >= 0 {
		return tb.SnapshotAt(ctx, version)
	}
	return tb.Snapshot(ctx)
}

// Tables that are deliberately broken: we must refuse them.
var mustRefuse = map[string]string{
	"versions-not-contiguous":                                        "missing",
	"deltalog-invalid-protocol-version":                              "readerVersion 99",
	"deltalog-state-reconstruction-without-metadata":                 "no metaData",
	"deltalog-state-reconstruction-without-protocol":                 "no protocol",
	"deltalog-state-reconstruction-from-checkpoint-missing-metadata": "no metaData",
	"deltalog-state-reconstruction-from-checkpoint-missing-protocol": "no protocol",
	"no-delta-log-folder":                                            "not a Delta table",
	"spark-variant-checkpoint":                                       "variantType-preview",
}

func compareWithDeltaRS(t *testing.T, name string, s *Snapshot, rs deltaRS) []string {
	var diffs []string
	if s.Version() != rs.Version {
		diffs = append(diffs, fmt.Sprintf("version %d vs delta-rs %d", s.Version(), rs.Version))
	}
	ours, err1 := s.Schema()
	theirs, err2 := schema.Parse(string(rs.Schema))
	switch {
	case err1 != nil || err2 != nil:
		diffs = append(diffs, fmt.Sprintf("schema parse: ours %v, delta-rs %v", err1, err2))
	case !schema.Equal(ours, theirs):
		diffs = append(diffs, fmt.Sprintf("schema %s vs delta-rs %s", ours, theirs))
	}
	var a, b []string
	for _, f := range s.Files() {
		p, err := url.PathUnescape(f.Path)
		if err != nil {
			p = f.Path
		}
		a = append(a, fmt.Sprintf("%s|%d", p, f.Size))
	}
	for _, f := range rs.Files {
		b = append(b, fmt.Sprintf("%s|%d", f.Path, f.Size))
	}
	sort.Strings(a)
	sort.Strings(b)
	if strings.Join(a, "\n") != strings.Join(b, "\n") {
		diffs = append(diffs, fmt.Sprintf("files:\n ours    %v\n delta-rs %v", a, b))
	}
	for app, v := range s.Txns() {
		if got := rs.Txns[app]; got == nil || *got != v.Version {
			diffs = append(diffs, fmt.Sprintf("txn %s: ours %d, delta-rs %v", app, v.Version, got))
		}
	}
	if s.Protocol().MinReaderVersion != rs.Protocol.MinReaderVersion || s.Protocol().MinWriterVersion != rs.Protocol.MinWriterVersion {
		diffs = append(diffs, fmt.Sprintf("protocol %+v vs delta-rs %+v", s.Protocol(), rs.Protocol))
	}
	return diffs
}

func TestGoldenTablesVsDeltaRS(t *testing.T) {
	ctx := context.Background()
	tables := goldenTables(t)
	if len(tables) < 100 {
		t.Fatalf("only %d golden tables found under %s", len(tables), goldenRoot)
	}
	snaps := map[string]*Snapshot{}
	errs := map[string]error{}
	appIDs := map[string]bool{}
	for _, dir := range tables {
		s, err := loadNoPanic(ctx, dir, -1)
		if err != nil && strings.HasPrefix(err.Error(), "PANIC") {
			t.Errorf("%s: %v", dir, err)
		}
		if err != nil {
			errs[dir] = err
			continue
		}
		snaps[dir] = s
		for app := range s.Txns() {
			appIDs[app] = true
		}
		// every golden table with a readable log also time-travels to v0.. when its commits exist
		_ = s
	}
	var apps []string
	for a := range appIDs {
		apps = append(apps, a)
	}
	rs := runDeltaRS(t, tables, apps)
	var agree, bothRefuse, onlyUs, onlyThem, differ []string
	for _, dir := range tables {
		name := strings.TrimPrefix(dir, goldenRoot+"/")
		r, ok := rs[dir]
		if !ok {
			t.Errorf("%s: no delta-rs result", name)
			continue
		}
		s, ourErr := snaps[dir], errs[dir]
		if want, ok := mustRefuse[name]; ok {
			if ourErr == nil || !strings.Contains(ourErr.Error(), want) {
				t.Errorf("%s: must be refused with %q, got %v", name, want, ourErr)
			}
		}
		switch {
		case ourErr != nil && !r.OK:
			bothRefuse = append(bothRefuse, fmt.Sprintf("%s\n      ours: %v\n      delta-rs: %s", name, ourErr, r.Error))
		case ourErr != nil:
			onlyUs = append(onlyUs, fmt.Sprintf("%s: %v", name, ourErr))
		case !r.OK:
			onlyThem = append(onlyThem, fmt.Sprintf("%s: %s", name, r.Error))
		default:
			if d := compareWithDeltaRS(t, name, s, r); len(d) > 0 {
				differ = append(differ, name)
				t.Errorf("%s differs from delta-rs:\n  %s", name, strings.Join(d, "\n  "))
			} else {
				agree = append(agree, name)
			}
		}
	}
	t.Logf("golden tables: %d; identical to delta-rs (version, schema, files, txns, protocol): %d", len(tables), len(agree))
	t.Logf("refused by both (%d):\n    %s", len(bothRefuse), strings.Join(bothRefuse, "\n    "))
	t.Logf("refused only by us (%d):\n    %s", len(onlyUs), strings.Join(onlyUs, "\n    "))
	t.Logf("refused only by delta-rs (%d):\n    %s", len(onlyThem), strings.Join(onlyThem, "\n    "))
	if len(differ) > 0 {
		t.Logf("DIFFER (%d): %v", len(differ), differ)
	}
	if len(agree) < 60 {
		t.Errorf("only %d tables compared equal", len(agree))
	}
}

// Time travel on golden tables with several versions, against delta-rs.
func TestGoldenTimeTravelVsDeltaRS(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"time-travel-start-start20-start40", "snapshot-data2-deleted", "basic-with-inserts-deletes-checkpoint", "dv-partitioned-with-checkpoint", "checkpoint"} {
		dir := filepath.Join(goldenRoot, name)
		latest, err := loadNoPanic(ctx, dir, -1)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var specs []string
		for v := int64(0); v <= latest.Version(); v++ {
			specs = append(specs, fmt.Sprintf("%s#%d", dir, v))
		}
		all := runDeltaRS(t, specs, nil)
		for v := int64(0); v <= latest.Version(); v++ {
			s, err := loadNoPanic(ctx, dir, v)
			r := all[specs[v]]
			if err != nil || !r.OK {
				if (err == nil) != r.OK {
					t.Errorf("%s@v%d: ours %v, delta-rs %s", name, v, err, r.Error)
				}
				continue
			}
			if d := compareWithDeltaRS(t, name, s, r); len(d) > 0 {
				t.Errorf("%s@v%d differs:\n  %s", name, v, strings.Join(d, "\n  "))
			}
		}
	}
}

func TestGoldenCheckpointRewrite(t *testing.T) {
	// Re-checkpoint every readable golden table with our writer into a copy
	// of its log and check that our reader sees the same state.
	ctx := context.Background()
	n := 0
	for _, dir := range goldenTables(t) {
		s, err := loadNoPanic(ctx, dir, -1)
		if err != nil {
			continue
		}
		tmp := t.TempDir()
		mem := NewLocalStorage(tmp)
		tb := OpenTable(mem, "")
		enc, size, _, err := encodeCheckpoint(s, s.Timestamp())
		if err != nil {
			t.Fatalf("%s: encode: %v", dir, err)
		}
		sink := &collectSink{}
		if err := readCheckpointFrom(ctx, "x", bytes.NewReader(enc), int64(len(enc)), sink); err != nil {
			t.Fatalf("%s: read back: %v", dir, err)
		}
		if len(sink.adds) != len(s.Files()) || int64(sink.n) != size || sink.meta == nil || sink.proto == nil {
			t.Fatalf("%s: round trip adds %d/%d rows %d/%d", dir, len(sink.adds), len(s.Files()), sink.n, size)
		}
		_ = tb
		n++
	}
	t.Logf("re-checkpointed %d golden tables", n)
}

type collectSink struct {
	adds  []Add
	rems  []Remove
	txns  []Txn
	doms  []DomainMetadata
	meta  *Metadata
	proto *Protocol
	n     int
}

func (c *collectSink) add(a *Add)              { c.adds = append(c.adds, *a); c.n++ }
func (c *collectSink) remove(r *Remove)        { c.rems = append(c.rems, *r); c.n++ }
func (c *collectSink) txn(t Txn)               { c.txns = append(c.txns, t); c.n++ }
func (c *collectSink) domain(d DomainMetadata) { c.doms = append(c.doms, d); c.n++ }
func (c *collectSink) metadata(m *Metadata)    { x := *m; c.meta = &x; c.n++ }
func (c *collectSink) protocol(p *Protocol)    { x := *p; c.proto = &x; c.n++ }
func (c *collectSink) sidecar(string)          {}
func (c *collectSink) grow(int64)              {}

var _ = errors.Is

// scanRows reads all rows via Snapshot.Scan, formatting the columns of
// simple types the way Python's str() does; other columns become "*".
func scanRows(ctx context.Context, s *Snapshot) (cols []string, rows [][]string, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("PANIC in scan: %v", p)
		}
	}()
	for rec, err := range s.Scan(ctx, ScanOptions{}) {
		if err != nil {
			return nil, nil, err
		}
		if cols == nil {
			for _, f := range rec.Schema().Fields() {
				cols = append(cols, f.Name)
			}
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			row := make([]string, rec.NumCols())
			for c := 0; c < int(rec.NumCols()); c++ {
				row[c] = pyStr(rec.Column(c), i)
			}
			rows = append(rows, row)
		}
		rec.Release()
	}
	return cols, rows, nil
}

func pyStr(a arrow.Array, i int) string {
	if a.IsNull(i) {
		return "None"
	}
	switch c := a.(type) {
	case *array.Int8:
		return fmt.Sprint(c.Value(i))
	case *array.Int16:
		return fmt.Sprint(c.Value(i))
	case *array.Int32:
		return fmt.Sprint(c.Value(i))
	case *array.Int64:
		return fmt.Sprint(c.Value(i))
	case *array.String:
		return c.Value(i)
	case *array.Boolean:
		if c.Value(i) {
			return "True"
		}
		return "False"
	case *array.Float64:
		return pyFloat(c.Value(i))
	case *array.Float32:
		return pyFloat(float64(c.Value(i)))
	case *array.Date32:
		return time.Unix(int64(c.Value(i))*86400, 0).UTC().Format("2006-01-02")
	case *array.Timestamp:
		tt := c.DataType().(*arrow.TimestampType)
		if tt.Unit != arrow.Microsecond {
			return "*"
		}
		us := int64(c.Value(i))
		ts := time.UnixMicro(us).UTC()
		out := ts.Format("2006-01-02 15:04:05")
		if f := ts.Nanosecond() / 1000; f != 0 {
			out += fmt.Sprintf(".%06d", f)
		}
		if tt.TimeZone != "" {
			out += "+00:00"
		}
		return out
	}
	return "*"
}

// pyFloat formats like Python's repr(float).
func pyFloat(v float64) string {
	switch {
	case math.IsNaN(v):
		return "nan"
	case math.IsInf(v, 1):
		return "inf"
	case math.IsInf(v, -1):
		return "-inf"
	case v == 0:
		if math.Signbit(v) {
			return "-0.0"
		}
		return "0.0"
	}
	exp := int(math.Floor(math.Log10(math.Abs(v))))
	if exp < -4 || exp >= 16 {
		return strconv.FormatFloat(v, 'e', -1, 64)
	}
	s := strconv.FormatFloat(v, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}

// projectRows keeps the comparable columns (not "*" in ours) by name and sorts.
func projectRows(cols []string, rows [][]string, keep []string) []string {
	idx := map[string]int{}
	for i, c := range cols {
		idx[c] = i
	}
	out := make([]string, 0, len(rows))
	for _, r := range rows {
		var parts []string
		for _, k := range keep {
			if j, ok := idx[k]; ok && j < len(r) {
				parts = append(parts, r[j])
			}
		}
		out = append(out, strings.Join(parts, "\x1f"))
	}
	sort.Strings(out)
	return out
}

// TestGoldenRowsVsDeltaRS compares the live rows (DVs applied) of every
// golden table both readers accept, order-insensitively.
func TestGoldenRowsVsDeltaRS(t *testing.T) {
	ctx := context.Background()
	type ours struct {
		cols []string
		rows [][]string
	}
	got := map[string]ours{}
	var dirs []string
	var scanErrs []string
	for _, dir := range goldenTables(t) {
		s, err := loadNoPanic(ctx, dir, -1)
		if err != nil {
			continue
		}
		cols, rows, err := scanRows(ctx, s)
		if err != nil {
			if strings.Contains(err.Error(), "PANIC") {
				t.Errorf("%s: %v", dir, err)
			}
			scanErrs = append(scanErrs, fmt.Sprintf("%s: %v", strings.TrimPrefix(dir, goldenRoot+"/"), err))
			continue
		}
		if !thorough() && len(rows) > 100_000 {
			continue // the 1M-row decimal tables take ~1 min in Python: CDC_SINK_THOROUGH=1 compares them
		}
		got[dir] = ours{cols, rows}
		dirs = append(dirs, dir)
	}
	rs := runDeltaRS(t, dirs, nil, "--rows")
	var same, theirErr []string
	for _, dir := range dirs {
		name := strings.TrimPrefix(dir, goldenRoot+"/")
		r := rs[dir]
		if !r.OK || r.Rows == nil {
			theirErr = append(theirErr, fmt.Sprintf("%s: %s%s", name, r.Error, r.RowsError))
			continue
		}
		o := got[dir]
		var keep []string
		for ci, c := range o.cols {
			simple := true
			for _, row := range o.rows {
				if row[ci] == "*" {
					simple = false
					break
				}
			}
			if simple {
				keep = append(keep, c)
			}
		}
		a, b := projectRows(o.cols, o.rows, keep), projectRows(r.RowColumns, r.Rows, keep)
		if len(o.rows) != len(r.Rows) || strings.Join(a, "\n") != strings.Join(b, "\n") {
			n := min(len(a), 5)
			m := min(len(b), 5)
			t.Errorf("%s: rows differ (ours %d, delta-rs %d; compared columns %v)\n ours: %q\n delta-rs: %q", name, len(o.rows), len(r.Rows), keep, a[:n], b[:m])
			continue
		}
		same = append(same, fmt.Sprintf("%s(%d rows, %d/%d cols)", name, len(o.rows), len(keep), len(o.cols)))
	}
	t.Logf("rows identical to delta-rs for %d tables: %s", len(same), strings.Join(same, ", "))
	t.Logf("scan refused by us (%d):\n    %s", len(scanErrs), strings.Join(scanErrs, "\n    "))
	t.Logf("rows unavailable from delta-rs (%d):\n    %s", len(theirErr), strings.Join(theirErr, "\n    "))
}
