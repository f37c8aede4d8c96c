package main

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
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
		// partition's files each
		all, err := merge.Open(context.Background(), dir, merge.Options{Sink: sink})
		if err != nil {
			t.Fatal(err)
		}
		n, _ := all.IndexKeys()
		total := float64(n)
		// A too: the partitions it gave up left its index (merge.Table.Release)
		for i, n := range indexed {
			if n > 0.5*total {
				t.Errorf("instance %c indexes %v of %v keys, want about a third", 'A'+i, n, total)
			}
		}
	}
	checkTable(t, dir, sink, s)
}

// TestThreeInstancesFaults: three instances of one sink, each its own OS
// process (kfake, a local table, the partition-aligned layout), through the
// rebalances of scale-out: A alone, B and C added, B killed with SIGKILL, C
// stopped (SIGSTOP) while holding a planned batch, B restarted and taking
// C's partitions over with A, then C resumed. C's held batch must be
// fenced, no commit of a fenced instance may land (every commit of the log
// checked), all three must have committed, and the table must end equal to
// the model. The real-broker, s3:// version is integration's TestScaleOut.
func TestThreeInstancesFaults(t *testing.T) {
	s := testStream(43, 3000, 300, 3, 0)
	const sink = "rt-three-faults"
	_, brokers := newKfake(t, 3, sink+".quarantine")
	lake := t.TempDir()
	dir := tableDir(lake)
	cs := chunks(s.Records, 8)
	owned := func(p *sinkProc) int {
		select {
		case <-p.exited:
			return 0
		default:
		}
		return p.stderr.count("partition assigned") - p.stderr.count("partition revoked")
	}
	settle := func(what string, procs ...*sinkProc) {
		waitUntil(t, time.Minute, what, func() bool {
			n := 0
			for _, p := range procs {
				p.alive(t)
				if owned(p) == 0 {
					return false
				}
				n += owned(p)
			}
			return n == 3
		})
	}
	start := func(name, marker string) *sinkProc {
		cfg := writeBinConfigSession(t, brokers, lake, sink, "", 6000)
		b, err := os.ReadFile(cfg)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, cfg, string(b)+"instance_id: "+name+"\n")
		return startChild(t, name, cfg, marker)
	}
	produced := map[int32]int64{}
	produce := func(c []*source.Record) {
		waitProduced(t, gatedProducer(t, brokers, dir, [][]*source.Record{c}))
		for _, r := range c {
			produced[r.Partition] = max(produced[r.Partition], r.Offset+1)
		}
	}

	a := start("A", "")
	settle("A to own every partition", a)
	produce(cs[0])
	waitUntil(t, time.Minute, "A to commit the first chunk", func() bool { a.alive(t); return caughtUp(t, dir, sink, produced) })
	b := start("B", "")
	marker := t.TempDir() + "/pause"
	c := start("C", marker)
	settle("A, B and C to share the partitions", a, b, c)
	produce(cs[1])
	produce(cs[2])
	waitUntil(t, time.Minute, "the three to commit two chunks", func() bool { return caughtUp(t, dir, sink, produced) })

	if st, _ := b.signal(t, syscall.SIGKILL, 30*time.Second); st.Success() {
		t.Fatal("B survived SIGKILL")
	}
	produce(cs[3])
	settle("A and C to take the killed B's partition over", a, c)
	waitUntil(t, time.Minute, "A and C to commit B's records", func() bool { return caughtUp(t, dir, sink, produced) })

	// C stops itself right before its next commit, holding a planned batch
	writeFile(t, marker, "")
	produce(cs[4])
	waitUntil(t, time.Minute, "C to pause holding a batch", func() bool { c.alive(t); return c.stderr.count(pausingMsg) == 1 })
	_, heldVer := tableProgress(t, dir, sink)
	b2 := start("B", "") // B again, as after a pod restart
	waitUntil(t, time.Minute, "A and the restarted B to take the paused C's partitions over", func() bool {
		a.alive(t)
		b2.alive(t)
		return owned(a)+owned(b2) == 3
	})
	waitUntil(t, time.Minute, "A and B to commit the records C holds", func() bool { return caughtUp(t, dir, sink, produced) })
	if err := c.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, time.Minute, "the resumed C's held batch to be fenced", func() bool {
		c.alive(t)
		return strings.Contains(c.stderr.String(), "batch fenced")
	})
	settle("the resumed C to rejoin", a, b2, c)
	for _, ch := range cs[5:] {
		produce(ch)
	}
	waitUntil(t, 2*time.Minute, "the table to reach the end offsets", func() bool { return caughtUp(t, dir, sink, endOffsets(s)) })
	for _, p := range []*sinkProc{a, b2, c} {
		if st, _ := p.signal(t, syscall.SIGTERM, time.Minute); !st.Success() {
			t.Errorf("exit %v:\n%s", st, p.stderr.String())
		}
	}
	audit, err := merge.AuditFencing(context.Background(), delta.NewLocalStorage(dir), sink)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("log: %d commits (%d checked by fromOffsets), per instance %v; C paused at v%d; re-plans A/B/C %d/%d/%d",
		audit.Commits, audit.Checked, audit.ByInstance, heldVer, a.stderr.count("concurrent commit won, re-planning batch"),
		b.stderr.count("concurrent commit won, re-planning batch")+b2.stderr.count("concurrent commit won, re-planning batch"),
		c.stderr.count("concurrent commit won, re-planning batch"))
	for _, v := range audit.Violations {
		t.Errorf("zombie commit: %s", v)
	}
	if len(audit.ByInstance) != 3 {
		t.Errorf("commits per instance %v, want all three instances", audit.ByInstance)
	}
	checkTable(t, dir, sink, s)
}
