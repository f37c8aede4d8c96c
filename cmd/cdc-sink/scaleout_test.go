package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/source"
)

// histCount is the number of observations of a histogram family.
func histCount(mfs map[string]*dto.MetricFamily, name string) float64 {
	var n float64
	if mf := mfs[name]; mf != nil {
		for _, m := range mf.GetMetric() {
			n += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return n
}

// TestRuntimeThreeInstancesConflicts: three instances of one sink in one
// consumer group write one table while records keep arriving: A alone
// first (it owns every partition), then B and C join and take one
// partition each. The table must end equal to the model with no zombie
// commit, every instance must have committed, and the commit conflicts
// per commit are reported for both layouts (docs/scaling.md): re-plans
// (cdcsink_commit_conflicts_total) and rebases over a winner that touched
// other keys (cheap, no re-plan). With tables.layout=partition no re-plan
// is ever caused by a shared file (only a key two instances both touched:
// a primary-key change moving a key across partitions), and each
// instance's key index holds its own partitions' keys only.
func TestRuntimeThreeInstancesConflicts(t *testing.T) {
	for _, layout := range []string{"partition", "batch"} {
		t.Run(layout, func(t *testing.T) { threeInstances(t, layout) })
	}
}

func threeInstances(t *testing.T, layout string) {
	s := testStream(41, 6000, 300, 3, 0)
	sink := "rt-three-" + layout
	_, brokers := newKfake(t, 3, sink+".quarantine")
	lake := t.TempDir()
	dir := tableDir(lake)
	owned := func(r *running) int { return r.log.count("partition assigned") - r.log.count("partition revoked") }
	settle := func(inst []*running) {
		waitUntil(t, time.Minute, "the group to settle with "+strconv.Itoa(len(inst))+" instance(s)", func() bool {
			n := 0
			for _, r := range inst {
				if owned(r) == 0 {
					return false
				}
				n += owned(r)
			}
			return n == 3
		})
	}
	start := func(name string) *running {
		cfg := testConfig(brokers, lake, sink)
		cfg.InstanceID = "inst-" + name
		cfg.Table.Layout = layout
		return startSink(t, name, cfg, runHooks{})
	}
	cs := chunks(s.Records, 20)
	inst := []*running{start("A")}
	settle(inst)
	// the snapshot and the first stream chunk, written by A alone
	first := s.Records[:0:0]
	for _, c := range cs[:4] {
		first = append(first, c...)
	}
	waitProduced(t, gatedProducer(t, brokers, dir, [][]*source.Record{first}))
	firstEnd := map[int32]int64{}
	for _, r := range first {
		firstEnd[r.Partition] = max(firstEnd[r.Partition], r.Offset+1)
	}
	waitUntil(t, 2*time.Minute, "A to write the first chunks", func() bool { return caughtUp(t, dir, sink, firstEnd) })
	for _, name := range []string{"B", "C"} {
		inst = append(inst, start(name))
		settle(inst)
	}
	waitProduced(t, gatedProducer(t, brokers, dir, cs[4:]))
	end := endOffsets(s)
	waitUntil(t, 2*time.Minute, "the table to reach the end offsets", func() bool { return caughtUp(t, dir, sink, end) })
	var commits, replans, rebases float64
	var indexed []float64
	for _, r := range inst {
		mfs := scrapeMetrics(t, r.addr)
		commits += histCount(mfs, "cdcsink_commit_attempts")
		n, _ := metricSum(mfs, "cdcsink_commit_conflicts_total", nil)
		replans += n
		n, _ = metricSum(mfs, "cdcsink_commit_rebases_total", nil)
		rebases += n
		n, _ = metricSum(mfs, "cdcsink_index_keys", map[string]string{"kind": "indexed"})
		indexed = append(indexed, n)
	}
	for _, r := range inst {
		if _, err := r.stop(t, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	audit, err := merge.AuditFencing(context.Background(), delta.NewLocalStorage(dir), sink)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("layout %s: %d events, %v commits (log: %d, per instance %v): %.3f re-plans per commit (%v), %.3f rebases per commit (%v); keys indexed per instance (A, B, C) %v",
		layout, len(s.Records), commits, audit.Commits, audit.ByInstance, replans/max(commits, 1), replans, rebases/max(commits, 1), rebases, indexed)
	for _, r := range inst {
		for _, l := range strings.Split(r.log.String(), "\n") {
			if !strings.Contains(l, "re-planning") {
				continue
			}
			t.Log(l)
			if layout == "partition" && (strings.Contains(l, "concurrent remove") || strings.Contains(l, "while we read the whole table")) {
				t.Errorf("layout partition: a re-plan on a file another instance also changed: %s", l)
			}
		}
	}
	for _, v := range audit.Violations {
		t.Errorf("zombie commit: %s", v)
	}
	if len(audit.ByInstance) != 3 {
		t.Errorf("commits per instance %v, want all three instances", audit.ByInstance)
	}
	if layout == "partition" {
		// B and C joined after A wrote the first chunks: they adopted one
		// partition's files each (A keeps the keys it indexed while it owned all three)
		all, err := merge.Open(context.Background(), dir, merge.Options{Sink: sink})
		if err != nil {
			t.Fatal(err)
		}
		n, _ := all.IndexKeys()
		total := float64(n)
		for i, n := range indexed[1:] {
			if n > 0.5*total {
				t.Errorf("instance %c indexes %v of %v keys, want about a third", 'B'+i, n, total)
			}
		}
	}
	checkTable(t, dir, sink, s)
}
