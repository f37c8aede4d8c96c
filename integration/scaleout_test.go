//go:build e2e

package integration

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/merge"
)

// scaleParts is the scale-out topic's partition count: one per instance.
const scaleParts = 3

// owned is how many partitions the instance's current process holds by its log ("partition
// assigned" minus "partition revoked" since its last start); 0 when it is not running.
func (s *sinkProc) owned() int {
	if !s.Alive() {
		return 0
	}
	b, _ := os.ReadFile(s.LogPath)
	lg := string(b)
	if i := strings.LastIndex(lg, "---- start #"); i >= 0 {
		lg = lg[i:]
	}
	return strings.Count(lg, `"msg":"partition assigned"`) - strings.Count(lg, `"msg":"partition revoked"`)
}

// TestScaleOut: several instances of one sink on one table, on the real broker and an s3://
// table (docs/scaling.md). The kfake versions (local tables, the model) are in cmd/cdc-sink:
// TestRuntimeThreeInstancesConflicts, TestFencedZombieInstance, TestThreeInstancesFaults.
func TestScaleOut(t *testing.T) {
	needStack(t)
	id := fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffffff)
	f := &fixture{t: t, table: "e2e_" + id, pg: pgConn(t)}
	f.source = "public." + f.table
	f.w = newWorkload(f.table, uint64(time.Now().UnixNano()))
	t.Cleanup(f.cleanup) // drops the table (no pipes of its own)
	mustExec(t, f.pg, fmt.Sprintf(tableDDL, f.table))
	for range 300 {
		if err := f.w.insert(context.Background(), f.pg, f.w.newID()); err != nil {
			t.Fatal(err)
		}
	}
	f.scaleOutS3(t, startS3(t, t))
}

// scaleOutS3: a connector of its own captures the source table into a
// topic of three partitions, and three instances of one sink (one consumer group,
// instance_id a/b/c, the partition-aligned layout) write one s3:// table on SeaweedFS while a
// paced workload runs: A alone, then B and C added, B killed with SIGKILL and restarted, C
// stopped with SIGSTOP until A and B have taken its partition over and resumed. Then the
// table equals Postgres (verify, delta-rs), no commit of a fenced instance landed (every
// commit's fromOffsets checked against the log, merge.AuditFencing), all three committed and
// nothing was quarantined; re-plans per commit are reported.
func (f *fixture) scaleOutS3(t *testing.T, s3 *s3Target) {
	ctx := context.Background()
	id := strings.TrimPrefix(f.table, "e2e_")
	name, prefix := "e2e-scale-"+id, "e2e_scale_"+id
	topic := prefix + ".public." + f.table
	mustExec(t, f.pg, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", prefix, f.source))
	cc := connectorConfig("json", f.table, prefix, prefix, prefix)
	cc["topic.creation.default.partitions"] = fmt.Sprint(scaleParts)
	f.t.Cleanup(func() { // after the suite's sinks: before f.cleanup drops the table
		deleteConnector(name)
		c := pgConn(f.t)
		if err := dropSlot(c, prefix); err != nil {
			f.t.Logf("cleanup: %v", err)
		}
		_, _ = c.Exec(context.Background(), "DROP PUBLICATION IF EXISTS "+prefix)
		deleteTopics(topic)
	})
	registerConnector(t, name, cc)
	waitFor(t, "scale-out connector RUNNING", 3*time.Minute, func() bool { return connectorRunning(name) }, f.diag)

	table := "s3://" + s3Bucket + "/cdc/" + f.table + "-scale"
	inst := map[string]*sinkProc{}
	for _, n := range []string{"a", "b", "c"} {
		s := newInstance(t, name, n, topic, table)
		s.ExtraConfig = s3.storageConfig()
		s.MaxRecords = 50 // many commits per instance
		s.WriteConfig(t)
		t.Cleanup(s.Stop)
		inst[n] = s
	}
	a, b, c := inst["a"], inst["b"], inst["c"]
	diag := func() string {
		var sb strings.Builder
		st, _ := connectorState(name)
		fmt.Fprintf(&sb, "connector %s: %s; table %s at v%d\n", name, st, table, s3.latest(t, table))
		for _, n := range []string{"a", "b", "c"} {
			s := inst[n]
			fmt.Fprintf(&sb, "=== instance %s: alive=%v owns %d; log tail (%s):\n%s\n", n, s.Alive(), s.owned(), s.LogPath, s.Tail(15))
		}
		return sb.String() + "weed log tail:\n" + tailLines(s3.srv.Log(), 10)
	}
	// settle waits until the running instances own every partition, each at least one.
	settle := func(what string, owners ...*sinkProc) {
		waitFor(t, what, 2*time.Minute, func() bool {
			n := 0
			for _, s := range owners {
				if !s.Alive() {
					t.Fatalf("instance %s exited unexpectedly (%v)\n%s", s.Instance, s.exitErr, s.Tail(40))
				}
				if s.owned() == 0 {
					return false
				}
				n += s.owned()
			}
			return n == scaleParts
		}, diag)
	}
	// commits waits for the table to gain n versions.
	commits := func(what string, n int64) {
		v0 := s3.latest(t, table)
		waitFor(t, what, 2*time.Minute, func() bool { return s3.latest(t, table) >= v0+n }, diag)
	}

	var stop atomic.Bool
	done := make(chan error, 1)
	wc := pgConn(t)
	go func() {
		// paced changes until the rebalances below are through (at least 60 transactions)
		for i := 0; i < 60 || !stop.Load(); i++ {
			if err := f.w.randomTx(ctx, wc); err != nil {
				done <- err
				return
			}
			time.Sleep(80 * time.Millisecond) // pacing the load, not synchronisation
		}
		done <- nil
	}()
	t0 := time.Now()
	a.Start(t)
	settle("instance a to own all partitions", a)
	commits("instance a to commit the snapshot and changes", 3)
	b.Start(t)
	settle("instances a, b to share the partitions", a, b)
	commits("commits with a and b", 3)
	c.Start(t)
	settle("instances a, b, c to share the partitions", a, b, c)
	commits("commits with a, b and c", 3)
	b.Kill9(t)
	t.Logf("kill -9 instance b at table v%d", s3.latest(t, table))
	settle("a and c to take b's partition over", a, c)
	commits("commits after b's kill", 2)
	b.Start(t)
	settle("the restarted b to rejoin", a, b, c)
	c.Pause(t)
	vPause := s3.latest(t, table)
	t.Logf("SIGSTOP instance c at table v%d", vPause)
	waitFor(t, "a and b to take the paused c's partition over", 2*time.Minute, func() bool {
		return a.owned()+b.owned() == scaleParts
	}, diag)
	commits("commits while c is paused", 2)
	c.Resume(t)
	t.Logf("SIGCONT instance c at table v%d (paused since v%d)", s3.latest(t, table), vPause)
	settle("the resumed c to rejoin", a, b, c)
	commits("commits after c rejoined", 2)
	stop.Store(true)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("workload did not finish in 3 min")
	}
	if err := f.w.marker(ctx, f.pg); err != nil {
		t.Fatal(err)
	}
	var last string
	waitFor(t, "scale-out table == postgres (cdc-sink verify)", 3*time.Minute, func() bool {
		out, code := verify(f.source, table)
		last = out
		return code == 0
	}, func() string { return diag() + "\nlast verify:\n" + clip(last, 400) })
	elapsed := time.Since(t0)
	for _, s := range []*sinkProc{a, b, c} {
		s.Stop()
		if q, err := os.ReadFile(s.QuarantinePath()); err == nil && len(strings.TrimSpace(string(q))) > 0 {
			t.Fatalf("instance %s quarantined records:\n%.2000s", s.Instance, q)
		}
	}

	st, err := delta.OpenStorage(ctx, table, s3.opts)
	if err != nil {
		t.Fatal(err)
	}
	audit, err := merge.AuditFencing(ctx, st, name)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range audit.Violations {
		t.Errorf("zombie commit landed: %s", v)
	}
	if len(audit.ByInstance) != 3 {
		t.Errorf("commits per instance %v, want all three instances", audit.ByInstance)
	}
	count := func(msg string) (n int) {
		for _, s := range []*sinkProc{a, b, c} {
			n += s.LogCount(msg)
		}
		return n
	}
	replans := count("concurrent commit won, re-planning batch")
	t.Logf("scale-out on %s: %d commits in %s (%d checked by fromOffsets, per instance %v); %d re-plans (%.3f per commit); "+
		"c fenced: %d batch(es), %d partition re-seek(s), %d left to the new owner; starts a/b/c %d/%d/%d",
		table, audit.Commits, elapsed.Round(time.Second), audit.Checked, audit.ByInstance, replans, float64(replans)/float64(max(1, audit.Commits)),
		c.LogCount("batch fenced"), c.LogCount("partition fenced: re-reading"), c.LogCount("partition fenced and no longer assigned"),
		a.starts, b.starts, c.starts)
	s3.deltaRS(t)
	f.deltaRSCheckDir(t, "scale-out", table)
}
