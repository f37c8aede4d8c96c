package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A release binary (main.Version set by -ldflags) records its version in
// every commit's commitInfo.engineInfo, not the library default "dev".
func TestEngineInfoFromBuildVersion(t *testing.T) {
	bin := sinkBinary(t)
	tmp := t.TempDir()
	in := filepath.Join(tmp, "in.jsonl")
	writeKcatLines(t, in,
		dbzRecord(0, "c", 100, itemsInt, nil, map[string]any{"id": 1, "qty": 5, "name": "a"}, map[string]any{"id": 1}),
		dbzRecord(1, "u", 200, itemsInt, nil, map[string]any{"id": 1, "qty": 6, "name": "a"}, map[string]any{"id": 1}))
	table := filepath.Join(tmp, "items")
	cmd := exec.Command(bin, "replay", "--from-file", in, "--table", table, "--quarantine-file", filepath.Join(tmp, "q.jsonl"),
		"--sink-name", "items", "--quiet", "--batch-records", "1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("replay: %v\n%s", err, out)
	}
	commits, err := filepath.Glob(filepath.Join(table, "_delta_log", "*.json"))
	if err != nil || len(commits) < 2 {
		t.Fatalf("commits %v, %v: want the create and the batches", commits, err)
	}
	want := "cdc-sink/" + testBuildVersion
	for _, c := range commits {
		data, err := os.ReadFile(c)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var a struct {
				CommitInfo *struct {
					EngineInfo string `json:"engineInfo"`
				} `json:"commitInfo"`
			}
			if err := json.Unmarshal([]byte(line), &a); err != nil {
				t.Fatalf("%s: %v", c, err)
			}
			if a.CommitInfo != nil {
				found = true
				if a.CommitInfo.EngineInfo != want {
					t.Errorf("%s: engineInfo %q, want %q", filepath.Base(c), a.CommitInfo.EngineInfo, want)
				}
			}
		}
		if !found {
			t.Errorf("%s: no commitInfo", filepath.Base(c))
		}
	}
}
