package delta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var cdfProtocol = Protocol{MinReaderVersion: 3, MinWriterVersion: 7,
	ReaderFeatures: []string{"deletionVectors"}, WriterFeatures: []string{"deletionVectors", "domainMetadata", FeatureChangeDataFeed}}

func TestChangeDataFeedEnabled(t *testing.T) {
	on := map[string]string{ConfEnableChangeDataFeed: "true"}
	cases := []struct {
		name string
		p    Protocol
		conf map[string]string
		want bool
	}{
		{"feature and property", cdfProtocol, on, true},
		{"property TRUE", cdfProtocol, map[string]string{ConfEnableChangeDataFeed: "TRUE"}, true},
		{"feature, property false", cdfProtocol, map[string]string{ConfEnableChangeDataFeed: "false"}, false},
		{"feature, no property", cdfProtocol, nil, false},
		{"property without the writer feature (v7)", dvProtocol, on, false},
		{"legacy writer version 4", Protocol{MinReaderVersion: 1, MinWriterVersion: 4}, on, true},
		{"writer version 2", Protocol{MinReaderVersion: 1, MinWriterVersion: 2}, on, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := ChangeDataFeedEnabled(&c.p, &Metadata{Configuration: c.conf}); got != c.want {
				t.Fatalf("got %v, want %v", got, c.want)
			}
		})
	}
}

// TestChangeDataCommits: cdc actions are written as the protocol shows,
// are never part of a snapshot (JSON replay and checkpoint alike), and a
// CDF table refuses data-removing commits that do not carry them.
func TestChangeDataCommits(t *testing.T) {
	ctx := context.Background()
	tb, dir := newTable(t, cdfProtocol, map[string]string{ConfEnableChangeDataFeed: "true", "delta.checkpointInterval": "3"})
	c, err := tb.PutChangeDataFile(ctx, []byte("PAR1 change data"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(c.Path, "_change_data/cdc-00000-") || !strings.HasSuffix(c.Path, ".c000.snappy.parquet") || c.DataChange || c.Size != 16 {
		t.Fatalf("cdc action %+v", c)
	}
	if b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(c.Path))); err != nil || string(b) != "PAR1 change data" {
		t.Fatalf("change data file: %q %v", b, err)
	}
	v1 := commit(t, snap(t, tb).Begin().Add(add("a.parquet")).AddCDC(c))
	raw, err := os.ReadFile(filepath.Join(dir, "_delta_log", fmt.Sprintf("%020d.json", v1)))
	if err != nil {
		t.Fatal(err)
	}
	var found map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var a map[string]map[string]any
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			t.Fatal(err)
		}
		if x, ok := a["cdc"]; ok {
			found = x
		}
	}
	if found == nil || found["path"] != c.Path || found["dataChange"] != false || found["size"] != float64(16) {
		t.Fatalf("commit lacks the cdc action: %s", raw)
	}
	if _, ok := found["partitionValues"].(map[string]any); !ok {
		t.Fatalf("cdc action without partitionValues: %v", found)
	}

	// A data-removing commit without change data is refused; with it, it lands.
	s := snap(t, tb)
	rm := RemoveFile(s.Files()[0], time.Now())
	_, err = s.Begin().Remove(rm).Commit(ctx, "DELETE", nil)
	if err == nil || !strings.Contains(err.Error(), ConfEnableChangeDataFeed) {
		t.Fatalf("remove without cdc on a CDF table: %v", err)
	}
	bad := c
	bad.DataChange = true
	if _, err := s.Begin().Add(add("b.parquet")).AddCDC(bad).Commit(ctx, "WRITE", nil); err == nil {
		t.Fatal("cdc with dataChange=true accepted")
	}
	// dataChange=false removes (compaction) need no change data.
	quiet := RemoveFile(s.Files()[0], time.Now())
	quiet.DataChange = false
	qa := add("a2.parquet")
	qa.DataChange = false
	commit(t, s.Begin().Remove(quiet).Add(qa)) // v2
	c2, err := tb.PutChangeDataFile(ctx, []byte("more"))
	if err != nil {
		t.Fatal(err)
	}
	s = snap(t, tb)
	v3 := commit(t, s.Begin().Remove(RemoveFile(s.Files()[0], time.Now())).Add(add("c.parquet")).AddCDC(c2)) // checkpoint
	if v3 != 3 {
		t.Fatalf("v%d", v3)
	}
	for _, fresh := range []bool{false, true} {
		if fresh {
			// the checkpoint at v3 is read instead of the JSON commits
			if err := os.Remove(filepath.Join(dir, "_delta_log", fmt.Sprintf("%020d.json", 1))); err != nil {
				t.Fatal(err)
			}
		}
		s = snap(t, OpenTable(NewLocalStorage(filepath.Dir(dir)), "t"))
		if got := fmt.Sprint(paths(s.Files())); got != "[c.parquet]" {
			t.Fatalf("fresh=%v: files %s", fresh, got)
		}
		for _, r := range s.AllTombstones() {
			if strings.HasPrefix(r.Path, ChangeDataDir) {
				t.Fatalf("change data file %s became a tombstone", r.Path)
			}
		}
		if !s.ChangeDataFeedEnabled() {
			t.Fatal("snapshot lost the CDF setting")
		}
	}
	if s.CheckpointVersion() != 3 {
		t.Fatalf("checkpoint version %d", s.CheckpointVersion())
	}
}

// TestVacuumChangeData: change data files younger than the retention stay
// (change readers of recent versions need them), older ones go, whatever
// the snapshot holds.
func TestVacuumChangeData(t *testing.T) {
	ctx := context.Background()
	tb, dir := newTable(t, cdfProtocol, map[string]string{ConfEnableChangeDataFeed: "true"})
	oldC, err := tb.PutChangeDataFile(ctx, []byte("old"))
	if err != nil {
		t.Fatal(err)
	}
	newC, err := tb.PutChangeDataFile(ctx, []byte("new"))
	if err != nil {
		t.Fatal(err)
	}
	commit(t, snap(t, tb).Begin().Add(add("a.parquet")).AddCDC(oldC, newC))
	old := time.Now().Add(-30 * 24 * time.Hour)
	for _, p := range []string{"a.parquet", oldC.Path, "_delta_log/x.tmp"} {
		fp := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(fp), 0o750); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(fp); errors.Is(err, os.ErrNotExist) {
			if err := os.WriteFile(fp, []byte("x"), 0o640); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chtimes(fp, old, old); err != nil {
			t.Fatal(err)
		}
	}
	res, err := Vacuum(ctx, tb, VacuumOptions{Execute: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(res.Files); got != "["+oldC.Path+"]" {
		t.Fatalf("vacuum deleted %s, want only the old change data file", got)
	}
	for _, p := range []string{"a.parquet", newC.Path, "_delta_log/x.tmp"} {
		if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(p))); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
	}
}
