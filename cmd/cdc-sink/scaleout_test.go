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
// consumer group, one partition each, write one table while records keep
// arriving. The table must end equal to the model with no zombie commit,
// every instance must have committed, and the commit conflicts per commit
// are reported (docs/scaling.md): re-plans (cdcsink_commit_conflicts_total)
// and rebases over a winner that touched other keys (cheap, no re-plan).
func TestRuntimeThreeInstancesConflicts(t *testing.T) {
	s := testStream(41, 6000, 300, 3, 0)
	const sink = "rt-three"
	_, brokers := newKfake(t, 3, sink+".quarantine")
	lake := t.TempDir()
	dir := tableDir(lake)
	owned := func(r *running) int { return r.log.count("partition assigned") - r.log.count("partition revoked") }
	var inst []*running
	for i, name := range []string{"A", "B", "C"} {
		cfg := testConfig(brokers, lake, sink)
		cfg.InstanceID = "inst-" + name
		inst = append(inst, startSink(t, name, cfg, runHooks{}))
		waitUntil(t, time.Minute, "the group to settle with "+strconv.Itoa(i+1)+" instance(s)", func() bool {
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
	waitProduced(t, gatedProducer(t, brokers, dir, chunks(s.Records, 20)))
	end := endOffsets(s)
	waitUntil(t, 2*time.Minute, "the table to reach the end offsets", func() bool { return caughtUp(t, dir, sink, end) })
	var commits, replans, rebases float64
	for _, r := range inst {
		mfs := scrapeMetrics(t, r.addr)
		commits += histCount(mfs, "cdcsink_commit_attempts")
		n, _ := metricSum(mfs, "cdcsink_commit_conflicts_total", nil)
		replans += n
		n, _ = metricSum(mfs, "cdcsink_commit_rebases_total", nil)
		rebases += n
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
	t.Logf("%d events, %v commits (log: %d, per instance %v): %.3f re-plans per commit (%v), %.3f rebases per commit (%v)",
		len(s.Records), commits, audit.Commits, audit.ByInstance, replans/max(commits, 1), replans, rebases/max(commits, 1), rebases)
	for _, r := range inst {
		for _, l := range strings.Split(r.log.String(), "\n") {
			if strings.Contains(l, "re-planning") {
				t.Log(l)
			}
		}
	}
	for _, v := range audit.Violations {
		t.Errorf("zombie commit: %s", v)
	}
	if len(audit.ByInstance) != 3 {
		t.Errorf("commits per instance %v, want all three instances", audit.ByInstance)
	}
	checkTable(t, dir, sink, s)
}
