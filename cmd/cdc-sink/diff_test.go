package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// copyDir copies a table directory (tests only).
func copyTableDir(t *testing.T, src, dst string) {
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

func TestDiff(t *testing.T) {
	tmp := t.TempDir()
	a := filepath.Join(tmp, "a")
	buildThings(t, a)
	same := filepath.Join(tmp, "same")
	copyTableDir(t, a, same)
	// An independently built table with the same content, different history
	// (one batch, other sink, so metadata columns differ).
	rebuilt := filepath.Join(tmp, "rebuilt")
	applyChanges(t, rebuilt, "rebuild", 2,
		thingUpsert(1, allTypesRow(1, "one", "12.30"), mkVer(10)),
		thingUpsert(2, allTypesRow(2, "two v2", "2.00"), mkVer(20)))
	// A corrupted copy: 1's amount changed, 2 deleted, 5 added.
	bad := filepath.Join(tmp, "bad")
	copyTableDir(t, a, bad)
	applyChanges(t, bad, "things", 9,
		thingUpsert(1, allTypesRow(1, "one", "12.31"), mkVer(40)),
		thingDelete(2, mkVer(41)),
		thingUpsert(5, allTypesRow(5, "five", "5.00"), mkVer(42)))

	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     []string
	}{
		{"equal copy", []string{"diff", a, same}, 0, []string{"tables are equal: 2 live rows", "key: id; compared columns: id,name,amount"}},
		{"equal rebuilt (metadata ignored)", []string{"diff", a, rebuilt}, 0, []string{"tables are equal: 2 live rows"}},
		{"corrupted", []string{"diff", a, bad}, 1, []string{
			"keys only in A: 1\n  [2]\n",
			"keys only in B: 1\n  [5]\n",
			"differing keys: 1\n  [1]  amount: A=\"12.30\" B=\"12.31\"\n",
		}},
		{"limit", []string{"diff", a, bad, "--limit", "0"}, 1, []string{"keys only in A: 1\n  ... 1 more"}},
		{"explicit key", []string{"diff", "--key", "id", a, same}, 0, []string{"tables are equal"}},
		{"bad key", []string{"diff", "--key", "nope", a, same}, 2, nil},
		{"one arg", []string{"diff", a}, 2, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, tc.args...)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.wantCode, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if code == 1 && !strings.Contains(errOut, "tables differ: 1 keys only in A, 1 only in B, 1 differing") {
				t.Errorf("stderr: %s", errOut)
			}
		})
	}
}
