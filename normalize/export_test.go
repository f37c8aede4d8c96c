package normalize

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cdcsink/cdc-sink/envelope"
)

// RealRegistry holds the Avro schemas of the real captures (realDir).
func RealRegistry(t testing.TB) *envelope.MemoryRegistry {
	t.Helper()
	reg := envelope.NewMemoryRegistry()
	files, _ := filepath.Glob(filepath.Join(realDir, "avro-schemas", "*.avsc"))
	for _, f := range files {
		id, err := strconv.Atoi(strings.TrimSuffix(filepath.Base(f), ".avsc"))
		if err != nil {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		reg.Set(id, string(b))
	}
	return reg
}

// Taken reports whether Ordered(u, …) would return u's own result now,
// without normalizing the event again.
func (n *Normalizer) Taken(u Pending) bool { return u.ready && n.inferGen.Load() == u.gen }
