// Package golden locates the Spark-written reference tables (shared/delta-golden)
// for tests: beside the repository (CI lays shared/ next to its clone), else
// the session layout /work/shared. No dependencies, so any package's tests
// can use it.
package golden

import (
	"os"
	"path/filepath"
	"runtime"
)

// Dir returns the delta-golden directory (it may not exist: tests then fail
// reading it, naming the path).
func Dir() string {
	if _, file, _, ok := runtime.Caller(0); ok {
		// internal/golden/golden.go → repository root → ../shared
		root := filepath.Dir(filepath.Dir(filepath.Dir(file)))
		p := filepath.Join(filepath.Dir(root), "shared", "delta-golden")
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			return p
		}
	}
	return "/work/shared/delta-golden"
}

// Path joins elem to Dir.
func Path(elem ...string) string { return filepath.Join(append([]string{Dir()}, elem...)...) }
