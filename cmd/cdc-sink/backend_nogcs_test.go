//go:build !gcs

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Without the gcs build tag a gs:// table is refused before anything is
// read or written, saying how to get a binary with GCS support.
func TestGCSRefusedWithoutBuildTag(t *testing.T) {
	cwd := t.TempDir()
	t.Chdir(cwd)
	tmp := t.TempDir()
	in := filepath.Join(tmp, "in.jsonl")
	writeKcatLines(t, in, dbzRecord(0, "c", 100, itemsInt, nil, map[string]any{"id": 1, "qty": 5, "name": "a"}, map[string]any{"id": 1}))
	q := filepath.Join(tmp, "q.jsonl")
	for _, args := range [][]string{
		{"replay", "--from-file", in, "--table", "gs://lake/lake/items", "--quarantine-file", q, "--sink-name", "items"},
		{"table", "show", "gs://lake/orders"},
		{"diff", "gs://lake/a", filepath.Join(tmp, "b")},
	} {
		code, out, errOut := runCLI(t, args...)
		if code == 0 || !strings.Contains(errOut, "built without Google Cloud Storage support") ||
			!strings.Contains(errOut, "go build -tags gcs") || !strings.Contains(errOut, "gs://lake/") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want a refusal naming the location and the gcs build tag", args, code, out, errOut)
		}
		for _, dir := range []string{cwd, tmp} {
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				if e.Name() != "in.jsonl" {
					t.Errorf("%v wrote %s in %s", args, e.Name(), dir)
				}
			}
		}
	}
	cfg := defaultConfig()
	cfg.Kafka.Topics = []string{"dbz.public.orders"}
	cfg.Kafka.Brokers = []string{"127.0.0.1:9092"}
	cfg.Table.PathTemplate = "gs://lake/{schema}.{table}"
	if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "go build -tags gcs") {
		t.Errorf("config with a gs:// template: %v, want the build-tag refusal", err)
	}
}
