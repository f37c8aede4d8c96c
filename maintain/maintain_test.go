package maintain

import (
	"context"
	"github.com/cdcsink/cdc-sink/internal/golden"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/cdcsink/cdc-sink/internal/deltacheck"
	"github.com/cdcsink/cdc-sink/tablerows"
)

func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if fi.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(target)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}

func rows(t *testing.T, dir string) []string {
	t.Helper()
	tb, err := tablerows.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	if err := tb.Scan(context.Background(), tablerows.ScanOptions{IncludeDeleted: true}, func(r tablerows.Row) error {
		out = append(out, strings.Join(r, ","))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// Optimize of a Spark-written partitioned table with deletion vectors and a
// checkpoint: same rows for us and for delta-rs, no deletion vectors left.
func TestOptimizeGoldenPartitionedDV(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "t")
	copyTree(t, golden.Path("dv-partitioned-with-checkpoint"), dir)
	before := rows(t, dir)
	rsBefore := deltacheck.ReadDeltaRS(t, dir, "")
	res, err := Optimize(context.Background(), dir, OptimizeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Committed || res.DVFilesRemoved == 0 || res.RowsRead != res.RowsWritten {
		t.Fatalf("result %+v", res)
	}
	after := rows(t, dir)
	if strings.Join(before, "\n") != strings.Join(after, "\n") {
		t.Fatalf("content changed: %d rows before, %d after", len(before), len(after))
	}
	rsAfter := deltacheck.ReadDeltaRS(t, dir, "")
	if strings.Join(rsBefore.Rows, "\n") != strings.Join(rsAfter.Rows, "\n") || rsAfter.Version != res.Version {
		t.Fatalf("delta-rs: %d rows before, %d after (v%d)", len(rsBefore.Rows), len(rsAfter.Rows), rsAfter.Version)
	}
	tb, err := tablerows.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	parts := map[string]bool{}
	for _, a := range tb.Snap.Files() {
		if a.DeletionVector != nil {
			t.Errorf("%s still has a deletion vector", a.Path)
		}
		if a.DataChange {
			t.Errorf("%s added with dataChange=true", a.Path)
		}
		k := partKey(a.PartitionValues)
		if parts[k] {
			t.Errorf("two files for partition %s", k)
		}
		parts[k] = true
	}
	// A second run has nothing to do.
	res, err = Optimize(context.Background(), dir, OptimizeOptions{})
	if err != nil || res.Committed {
		t.Fatalf("second optimize: %+v %v", res, err)
	}
}

func TestPurgeRefusesNonCDCTable(t *testing.T) {
	_, err := PurgeTombstones(context.Background(), golden.Path("basic-decimal-table"), PurgeOptions{OlderThan: 1})
	if err == nil || !strings.Contains(err.Error(), "not a cdc-sink table") {
		t.Fatalf("err = %v", err)
	}
}
