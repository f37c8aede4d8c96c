//go:build e2e && soak

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cdcsink/cdc-sink/internal/deltacheck"
)

// TestSoak (make soak DURATION=30m; not in CI) runs the real stack under a steady generated load
// for CDC_SINK_SOAK_DURATION and injects one fault at random per round: kill -9 of a sink, of
// Connect or of the broker, the broker frozen (SIGSTOP: every connection to it goes silent, as in
// a network partition), the sinks' disk full. After every round the load stops and the test
// waits for a quiet point: both tables equal Postgres (verify), delta-rs reads the same rows with
// no key twice, nothing was quarantined, and each history table holds every topic offset exactly
// once. Every fourth quiet point, `cdc-sink table optimize` compacts both tables beside the
// running sinks and the checks run again. The figures (records, faults of each kind, recovery
// times) go to the log and, when
// CDC_SINK_SOAK_REPORT names a file, to that file as JSON.
func TestSoak(t *testing.T) {
	needStack(t)
	dur, err := time.ParseDuration(os.Getenv("CDC_SINK_SOAK_DURATION"))
	if err != nil || dur <= 0 {
		t.Fatalf("CDC_SINK_SOAK_DURATION=%q: want a duration such as 30m (make soak DURATION=30m)", os.Getenv("CDC_SINK_SOAK_DURATION"))
	}
	ctx := context.Background()
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	t.Logf("soak: %s, seed %d", dur, seed)
	f := newFixture(t)
	w := f.w

	// The sinks' tables and histories on a tmpfs of their own, so "disk full" fills only them.
	disk := ""
	if os.Geteuid() == 0 {
		disk = filepath.Join(suiteDir, "lake")
		if err := os.MkdirAll(disk, 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=3g", "tmpfs", disk).CombinedOutput(); err != nil {
			t.Fatalf("mount tmpfs: %v %s", err, out)
		}
		t.Cleanup(func() { _ = exec.Command("umount", "-l", disk).Run() })
		for _, p := range f.pipes {
			p.Sink.TableDir = filepath.Join(disk, p.Mode, "table")
			p.History = p.Sink.TableDir + "-history"
			p.Sink.ExtraConfig = fmt.Sprintf("history:\n  map:\n    %s: %s\n", p.Topic, p.History)
			p.Sink.WriteConfig(t)
		}
	} else {
		t.Log("soak: not root: no tmpfs, so no disk-full faults")
	}

	mustExec(t, f.pg, fmt.Sprintf(tableDDL, f.table))
	mustExec(t, f.pg, "SET synchronous_commit = on") // see TestPipeline's seed phase
	for _, p := range f.pipes {
		mustExec(t, f.pg, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", p.Publication, f.source))
		mustExec(t, f.pg, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", p.Slot)
	}
	w.nextID = 0
	for range 300 {
		if err := w.insert(ctx, f.pg, w.newID()); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range f.pipes {
		registerConnector(t, p.Connector, connectorConfig(p.Mode, f.table, p.Slot, p.Publication, p.Prefix))
	}
	for _, p := range f.pipes {
		p := p
		waitFor(t, p.Mode+" snapshot on the topic", 4*time.Minute, func() bool {
			return connectorRunning(p.Connector) && highWater(p.Topic) >= 300
		}, f.diag)
		p.Sink.Start(t)
	}
	if err := w.marker(ctx, f.pg); err != nil {
		t.Fatal(err)
	}
	f.converge(t, 4*time.Minute)

	type faultRec struct {
		Kind     string        `json:"kind"`
		Round    int           `json:"round"`
		Held     time.Duration `json:"held_ns"`     // how long the fault lasted (pause, disk full)
		Recovery time.Duration `json:"recovery_ns"` // fault cleared → every table at the topic end as of then
		Quiet    time.Duration `json:"quiet_ns"`    // load stopped → verify passes for every table
	}
	var faults []faultRec
	optimized := 0 // quiet points followed by a table optimize of every table
	kinds := []string{"sink-kill-9", "connect-kill-9", "broker-kill-9", "broker-freeze", "disk-full"}
	if disk == "" {
		kinds = kinds[:4]
	}
	start := time.Now()
	for round := 1; time.Since(start) < dur; round++ {
		// load: paced random transactions on their own connection until stopped
		stop, done := make(chan struct{}), make(chan error, 1)
		wc := pgConn(t)
		go func() {
			defer wc.Close(ctx)
			for {
				select {
				case <-stop:
					done <- nil
					return
				default:
				}
				if err := w.randomTx(ctx, wc); err != nil {
					done <- err
					return
				}
				time.Sleep(40 * time.Millisecond) // pacing the load, not synchronisation
			}
		}()
		// let the load run, then the fault, then some more load
		waitCommits(t, f, 3)
		kind := kinds[rng.IntN(len(kinds))]
		rec := faultRec{Kind: kind, Round: round}
		hold := time.Duration(5+rng.IntN(26)) * time.Second
		switch kind {
		case "sink-kill-9":
			p := f.pipes[rng.IntN(len(f.pipes))]
			p.Sink.Kill9(t)
			p.Sink.Start(t)
		case "connect-kill-9":
			killAndWait(t, stackPid(t, "connect"), syscall.SIGKILL, 30*time.Second)
			stackUp(t, "connect")
			f.connectorsRunning(t)
		case "broker-kill-9":
			killAndWait(t, stackPid(t, "kafka"), syscall.SIGKILL, 30*time.Second)
			stackUp(t, "kafka")
			f.connectorsRunning(t)
		case "broker-freeze":
			pid := stackPid(t, "kafka")
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			t0 := time.Now()
			sleepOrFail(t, f, hold)
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			rec.Held = time.Since(t0)
			f.connectorsRunning(t)
		case "disk-full":
			t0 := time.Now()
			ballast := fillDisk(t, disk)
			sleepOrFail(t, f, hold)
			if err := os.Remove(ballast); err != nil {
				t.Fatal(err)
			}
			rec.Held = time.Since(t0)
		}
		// recovery: every table reaches the topic end as it is when the fault has cleared
		t0 := time.Now()
		target := map[string]int64{}
		for _, p := range f.pipes {
			// a broker just thawed or restarted may not answer the probe's 5 s query: the
			// target is the topic end once it answers (-1 made the wait below trivially true)
			waitFor(t, fmt.Sprintf("round %d (%s): the end offset of %s", round, kind, p.Topic), 2*time.Minute, func() bool {
				target[p.Mode] = highWater(p.Topic)
				return target[p.Mode] >= 0
			}, f.diag)
		}
		for _, p := range f.pipes {
			p := p
			waitFor(t, fmt.Sprintf("round %d (%s): %s table at offset %d", round, kind, p.Mode, target[p.Mode]), 10*time.Minute, func() bool {
				f.requireSinksAlive(t)
				_, next := tableInfo(p.Sink.TableDir, p.Sink.Name, p.Topic)
				return next >= target[p.Mode]
			}, f.diag)
		}
		rec.Recovery = time.Since(t0)
		waitCommits(t, f, 2)
		close(stop)
		if err := <-done; err != nil {
			t.Fatalf("round %d: workload: %v", round, err)
		}
		// quiet point
		t1 := time.Now()
		if err := w.marker(ctx, f.pg); err != nil {
			t.Fatal(err)
		}
		f.converge(t, 10*time.Minute)
		rec.Quiet = time.Since(t1)
		for _, p := range f.pipes {
			f.noDuplicateKeys(t, p)
			f.historyAtEnd(t, p)
		}
		if round%4 == 0 {
			// compaction beside the running sinks, as operators run it (docs/runbook.md: keep
			// files with deletion vectors under ~500 for delta-rs readers); the tables must
			// read the same afterwards
			for _, p := range f.pipes {
				out, code := runCLI("table", "optimize", p.Sink.TableDir)
				if code != 0 {
					t.Fatalf("round %d: table optimize %s: exit %d: %s", round, p.Sink.TableDir, code, out)
				}
				t.Logf("round %d: %s", round, strings.TrimSpace(strings.SplitN(out, "\n", 2)[0]))
			}
			optimized++
			f.converge(t, 10*time.Minute)
			for _, p := range f.pipes {
				f.noDuplicateKeys(t, p)
			}
		}
		faults = append(faults, rec)
		t.Logf("round %d: %s (held %s): recovered in %s, quiet point in %s; topic ends %v", round, kind,
			rec.Held.Round(10*time.Millisecond), rec.Recovery.Round(10*time.Millisecond), rec.Quiet.Round(10*time.Millisecond), target)
	}

	// figures
	byKind := map[string]int{}
	var longest faultRec
	for _, r := range faults {
		byKind[r.Kind]++
		if r.Recovery > longest.Recovery {
			longest = r
		}
	}
	records := map[string]int64{}
	for _, p := range f.pipes {
		records[p.Mode] = highWater(p.Topic)
	}
	report := map[string]any{
		"duration_s": time.Since(start).Seconds(), "seed": seed, "rounds": len(faults), "faults": byKind,
		"records": records, "lost": 0, "duplicates": 0, "quarantined": 0, "optimized_rounds": optimized,
		"longest_recovery_s": longest.Recovery.Seconds(), "longest_recovery_kind": longest.Kind, "rounds_detail": faults,
	}
	b, _ := json.MarshalIndent(report, "", "  ")
	t.Logf("soak figures:\n%s", b)
	if p := os.Getenv("CDC_SINK_SOAK_REPORT"); p != "" {
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// waitCommits waits until every table has committed n more versions (the load is flowing).
func waitCommits(t *testing.T, f *fixture, n int64) {
	t.Helper()
	for _, p := range f.pipes {
		p := p
		v0 := tableVersion(p.Sink.TableDir)
		waitFor(t, fmt.Sprintf("%s table to commit %d more versions", p.Mode, n), 5*time.Minute, func() bool {
			f.requireSinksAlive(t)
			return tableVersion(p.Sink.TableDir) >= v0+n
		}, f.diag)
	}
}

// sleepOrFail holds a fault for d while checking that the sinks ride through it.
func sleepOrFail(t *testing.T, f *fixture, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		f.requireSinksAlive(t)
		time.Sleep(500 * time.Millisecond) // holding the fault, not synchronisation
	}
}

// connectorsRunning waits until both connectors run again, restarting a failed task (a broker
// or worker restart can fail Debezium's task: not a sink problem).
func (f *fixture) connectorsRunning(t *testing.T) {
	t.Helper()
	for _, p := range f.pipes {
		p := p
		waitFor(t, p.Mode+" connector RUNNING", 4*time.Minute, func() bool {
			s, _ := connectorState(p.Connector)
			if strings.Contains(s, "FAILED") {
				t.Logf("%s connector %s: restarting failed task", p.Mode, s)
				_, _, _ = connectReq("POST", "/connectors/"+p.Connector+"/restart?includeTasks=true&onlyFailed=true", nil)
			}
			return s == "RUNNING RUNNING"
		}, f.diag)
	}
}

// fillDisk takes every free byte of the file system at dir with one ballast file.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "ballast")
	fh, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	// the free count includes blocks the file system keeps for itself: halve the chunk on
	// ENOSPC until a page no longer fits
	var off int64
	for chunk := int64(st.Bavail) * int64(st.Bsize); chunk >= 4096; {
		switch err := syscall.Fallocate(int(fh.Fd()), 0, off, chunk); {
		case err == nil:
			off += chunk
		case err == syscall.ENOSPC:
			chunk /= 2
		default:
			t.Fatalf("fallocate ballast: %v", err)
		}
	}
	return p
}

// noDuplicateKeys: delta-rs reads each key at most once (live rows and tombstones).
func (f *fixture) noDuplicateKeys(t *testing.T, p *pipe) {
	t.Helper()
	tb := deltacheck.ReadDeltaRS(t, p.Sink.TableDir, "")
	n := map[string]int{}
	for _, r := range deltacheck.Decode(t, tb.Rows) {
		n[fmt.Sprint(r["id"])]++
	}
	var dup []string
	for id, c := range n {
		if c > 1 {
			dup = append(dup, fmt.Sprintf("%s×%d", id, c))
		}
	}
	sort.Strings(dup)
	if len(dup) > 0 {
		t.Fatalf("%s: keys in more than one row of %s: %s", p.Mode, p.Sink.TableDir, clip(strings.Join(dup, " "), 500))
	}
}

// historyAtEnd waits until the table is at the topic's end, then requires one history row per
// topic offset.
func (f *fixture) historyAtEnd(t *testing.T, p *pipe) {
	t.Helper()
	hw := highWater(p.Topic)
	waitFor(t, p.Mode+" table at the topic's end", 2*time.Minute, func() bool {
		_, next := tableInfo(p.Sink.TableDir, p.Sink.Name, p.Topic)
		return next == hw
	}, f.diag)
	if missing, dup := historyCoverage(t, p.History, p.Topic, hw); len(missing)+len(dup) > 0 {
		t.Fatalf("%s: history vs topic offsets [0, %d): missing %s, more than once %s", p.Mode, hw,
			clip(fmt.Sprint(missing), 300), clip(fmt.Sprint(dup), 300))
	}
}
