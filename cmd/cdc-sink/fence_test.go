package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/merge"
)

// Child mode of the test binary (TestMain): `cdc-sink run` with the
// configuration file in CDCSINK_TEST_CHILD, in its own OS process, so that
// the test can SIGSTOP it. When the file named by CDCSINK_TEST_PAUSE exists
// at a commit, the child removes it, says so on stderr and stops itself
// right before the commit: it is paused while holding a planned batch.
const (
	childEnv   = "CDCSINK_TEST_CHILD"
	pauseEnv   = "CDCSINK_TEST_PAUSE"
	pausingMsg = "test child: pausing before commit"
)

func runTestChild() {
	cfgFile := os.Getenv(childEnv)
	if cfgFile == "" {
		return
	}
	cfg, err := loadConfig([]string{"--config", cfgFile}, os.Getenv, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	storageOpts = cfg.Storage.options() // as cmdRun does
	logger := newLogger(cfg.Log, os.Stderr)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	marker := os.Getenv(pauseEnv)
	h := runHooks{stdout: io.Discard, Quiet: true, Fault: func(point merge.FaultPoint) error {
		if point == merge.FaultBeforeCommit && marker != "" && os.Remove(marker) == nil {
			logger.Info(pausingMsg)
			_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		}
		return nil
	}}
	if err := runSink(ctx, cfg, logger, h); err != nil {
		logger.Error("run failed", "err", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// startChild runs the test binary in child mode (a separate process).
func startChild(t *testing.T, name, cfgFile, pauseMarker string) *sinkProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+cfgFile, pauseEnv+"="+pauseMarker)
	p := startProc(t, name, cmd)
	// runs before startProc's kill: a paused child is resumed first
	t.Cleanup(func() { _ = p.cmd.Process.Signal(syscall.SIGCONT) })
	return p
}

// TestFencedZombieInstance: instance A (its own process) is stopped (SIGSTOP)
// while holding a planned batch of all three partitions; instance B joins,
// gets the partitions once A's session expires, and commits them past A's
// batch. A is resumed (SIGCONT) and goes on with its commit: it must be
// fenced (no commit of A advances a partition from an offset the table no
// longer had: checked on every commit of the Delta log), re-read its
// partitions from the table, rejoin the group, and the table must end equal
// to the model.
func TestFencedZombieInstance(t *testing.T) {
	s := testStream(31, 1500, 300, 3, 0)
	const sink = "rt-fence"
	_, brokers := newKfake(t, 3, sink+".quarantine")
	lake := t.TempDir()
	dir := tableDir(lake)
	cs := chunks(s.Records, 10)
	owned := func(l *logSink) int { return l.count("partition assigned") - l.count("partition revoked") }

	marker := t.TempDir() + "/pause"
	aAddr := freePort(t)
	a := startChild(t, "A", writeBinConfigSession(t, brokers, lake, sink, aAddr, 6000), marker)
	waitProduced(t, gatedProducer(t, brokers, dir, cs[:3]))
	waitUntil(t, time.Minute, "A to own all 3 partitions and commit", func() bool {
		a.alive(t)
		return owned(a.stderr) == 3 && diskVersion(dir) >= 2
	})
	// arm the pause, then give A records: it stops right before committing them
	writeFile(t, marker, "")
	if err := newProducer(t, brokers).produce(cs[3]); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, time.Minute, "A to pause holding a batch", func() bool { a.alive(t); return a.stderr.count(pausingMsg) == 1 })
	held, heldVer := tableProgress(t, dir, sink)
	t.Logf("A paused holding a batch; table at v%d, offsets %v", heldVer, held)

	// B commits in small batches and is held right after its first commit,
	// so that A's held batch reaches past what B committed: without the
	// fence A's re-planned batch would land on top of B's commit.
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseB := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseB)
	bCfg := testConfig(brokers, lake, sink)
	bCfg.Batch.MaxRecords = 10
	movedAll := func() bool {
		offs, _ := tableProgress(t, dir, sink)
		for p, o := range held {
			if offs[p] <= o {
				return false
			}
		}
		return true
	}
	var holding atomic.Bool
	b := startSink(t, "B", bCfg, runHooks{Fault: func(point merge.FaultPoint) error {
		// held once every partition A holds records of has moved past A's start
		if point == merge.FaultAfterCommit && !holding.Load() && movedAll() {
			holding.Store(true)
			<-release
		}
		return nil
	}})
	waitUntil(t, time.Minute, "B to take the partitions over from the stopped A and move them all", func() bool {
		return owned(b.log) == 3 && holding.Load()
	})
	bOffs, bVer := tableProgress(t, dir, sink)
	t.Logf("B committed v%d: offsets %v", bVer, bOffs)
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); !strings.Contains(a.stderr.String(), "batch fenced") && diskVersion(dir) <= bVer; {
		a.alive(t)
		if time.Now().After(deadline) {
			lg := a.stderr.String()
			t.Fatalf("A's held batch was neither fenced nor landed within a minute of SIGCONT; A's log ends:\n%s", lg[max(0, len(lg)-8000):])
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, as waitUntil does
	}
	releaseB()
	waitProduced(t, gatedProducer(t, brokers, dir, cs[4:7]))
	waitProduced(t, gatedProducer(t, brokers, dir, cs[7:]))
	end := endOffsets(s)
	waitUntil(t, 2*time.Minute, "the table to reach the end offsets", func() bool { a.alive(t); return caughtUp(t, dir, sink, end) })
	if st, _ := a.signal(t, syscall.SIGTERM, time.Minute); !st.Success() {
		t.Errorf("A exited with %v:\n%s", st, a.stderr.String())
	}
	if _, err := b.stop(t, time.Minute); err != nil {
		t.Fatalf("B: %v", err)
	}
	audit, err := merge.AuditFencing(context.Background(), delta.NewLocalStorage(dir), sink)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("log: %d commits, %d with fromOffsets, per instance %v; A fenced %d time(s), re-seeks %d, left to new owner %d",
		audit.Commits, audit.Checked, audit.ByInstance, a.stderr.count("batch fenced: another instance advanced partitions of it; re-reading them from the table"),
		a.stderr.count("partition fenced: re-reading it from the table's offset"), a.stderr.count("partition fenced and no longer assigned: left to its new owner"))
	if !strings.Contains(a.stderr.String(), "batch fenced") {
		t.Errorf("A's held batch was not fenced")
	}
	for _, v := range audit.Violations {
		t.Errorf("zombie commit: %s", v)
	}
	if len(audit.ByInstance) != 2 {
		t.Errorf("commits per instance %v, want two instances", audit.ByInstance)
	}
	checkTable(t, dir, sink, s)
}
