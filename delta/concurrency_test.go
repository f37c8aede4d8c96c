// Commit races between genuinely separate processes.

package delta

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Worker mode: the test binary re-executes itself with DELTA_TEST_WORKER
// set, so commits race from genuinely separate processes.
func TestMain(m *testing.M) {
	if mode := os.Getenv("DELTA_TEST_WORKER"); mode != "" {
		if err := worker(mode); err != nil {
			fmt.Println("ERROR", err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	code := m.Run()
	cleanupFixtures()
	os.Exit(code)
}

func worker(mode string) error {
	ctx := context.Background()
	dir, id := os.Getenv("DELTA_TEST_DIR"), os.Getenv("DELTA_TEST_ID")
	n, _ := strconv.Atoi(os.Getenv("DELTA_TEST_N"))
	tb := OpenTable(NewLocalStorage(dir), "")
	app := "proc-" + id
	switch mode {
	case "append":
		for i := 0; i < n; {
			s, err := tb.Snapshot(ctx)
			if err != nil {
				return err
			}
			if v, ok := s.TxnVersion(app); ok && v >= int64(i) {
				i = int(v) + 1 // already committed (idempotent retry)
				continue
			}
			tx := s.Begin().Add(Add{Path: fmt.Sprintf("%s-%03d.parquet", app, i), Size: 1, DataChange: true, PartitionValues: map[string]*string{}})
			tx.SetAppTransaction(app, int64(i))
			if _, err := tx.Commit(ctx, "WRITE", nil); err != nil {
				if errors.Is(err, ErrConflict) {
					continue
				}
				return err
			}
			i++
		}
		fmt.Println("OK")
	case "rewrite":
		s, err := tb.Snapshot(ctx)
		if err != nil {
			return err
		}
		tx := s.Begin().Remove(RemoveFile(s.Files()[0], time.Now())).Add(Add{Path: "rewritten-by-" + id, Size: 1, DataChange: true})
		os.WriteFile(filepath.Join(dir, "ready-"+id), nil, 0o640)
		for {
			if _, err := os.Stat(filepath.Join(dir, "go")); err == nil {
				break
			}
			time.Sleep(time.Millisecond)
		}
		v, err := tx.Commit(ctx, "DELETE", nil)
		var ce *ConflictError
		switch {
		case errors.As(err, &ce):
			fmt.Println("CONFLICT", ce.Reason)
		case err != nil:
			return err
		default:
			fmt.Println("WON", v)
		}
	}
	return nil
}

func startWorkers(t *testing.T, mode, dir string, n, procs int) []*exec.Cmd {
	var cmds []*exec.Cmd
	for p := 0; p < procs; p++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "DELTA_TEST_WORKER="+mode, "DELTA_TEST_DIR="+dir, "DELTA_TEST_ID="+strconv.Itoa(p), "DELTA_TEST_N="+strconv.Itoa(n))
		cmds = append(cmds, cmd)
	}
	return cmds
}

func TestMultiProcessBlindAppends(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	ctx := context.Background()
	dir := t.TempDir()
	if _, err := Create(ctx, NewLocalStorage(dir), "", Metadata{SchemaString: testSchema}, Protocol{}); err != nil {
		t.Fatal(err)
	}
	const perProc, procs = 50, 2
	cmds := startWorkers(t, "append", dir, perProc, procs)
	outs := make([][]byte, procs)
	errs := make([]error, procs)
	done := make(chan int)
	for i, c := range cmds {
		go func(i int, c *exec.Cmd) { outs[i], errs[i] = c.CombinedOutput(); done <- i }(i, c)
	}
	for range cmds {
		<-done
	}
	for i := range cmds {
		if errs[i] != nil || !strings.Contains(string(outs[i]), "OK") {
			t.Fatalf("worker %d: %v\n%s", i, errs[i], outs[i])
		}
	}
	tb := OpenTable(NewLocalStorage(dir), "")
	s := snap(t, tb)
	if s.Version() != perProc*procs {
		t.Fatalf("version %d, want %d", s.Version(), perProc*procs)
	}
	// every version 1..100 holds exactly one add, all distinct, none lost
	seen := map[string]bool{}
	rebased := 0
	for v := int64(1); v <= s.Version(); v++ {
		acts, err := tb.readCommit(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		adds := 0
		for _, a := range acts {
			if a.CommitInfo != nil {
				if rv, ok := a.CommitInfo["readVersion"].(float64); ok && int64(rv) != v-1 {
					rebased++
				}
			}
			if a.Add != nil {
				adds++
				if seen[a.Add.Path] {
					t.Fatalf("duplicate commit of %s", a.Add.Path)
				}
				seen[a.Add.Path] = true
			}
		}
		if adds != 1 {
			t.Fatalf("v%d has %d adds", v, adds)
		}
	}
	if len(s.Files()) != perProc*procs || len(seen) != perProc*procs {
		t.Fatalf("files %d", len(s.Files()))
	}
	for p := 0; p < procs; p++ {
		if v, ok := s.TxnVersion(fmt.Sprintf("proc-%d", p)); !ok || v != perProc-1 {
			t.Fatalf("txn proc-%d = %d %v", p, v, ok)
		}
	}
	t.Logf("2 processes x %d commits: versions 1..%d contiguous, %d commits rebased over a concurrent winner, checkpoint at v%d", perProc, s.Version(), rebased, s.CheckpointVersion())
}

func TestMultiProcessRewriteConflict(t *testing.T) {
	ctx := context.Background()
	for round := 0; round < 3; round++ {
		dir := t.TempDir()
		tb, err := Create(ctx, NewLocalStorage(dir), "", Metadata{SchemaString: testSchema}, Protocol{})
		if err != nil {
			t.Fatal(err)
		}
		commit(t, snap(t, tb).Begin().Add(add("base.parquet")))
		cmds := startWorkers(t, "rewrite", dir, 1, 2)
		outs := make([][]byte, 2)
		done := make(chan error, 2)
		for i, c := range cmds {
			go func(i int, c *exec.Cmd) {
				var err error
				outs[i], err = c.CombinedOutput()
				done <- err
			}(i, c)
		}
		for deadline := time.Now().Add(60 * time.Second); ; {
			_, e0 := os.Stat(filepath.Join(dir, "ready-0"))
			_, e1 := os.Stat(filepath.Join(dir, "ready-1"))
			if e0 == nil && e1 == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("workers not ready")
			}
			time.Sleep(5 * time.Millisecond)
		}
		os.WriteFile(filepath.Join(dir, "go"), nil, 0o640)
		for range cmds {
			if err := <-done; err != nil {
				t.Fatalf("worker failed: %v\n%s\n%s", err, outs[0], outs[1])
			}
		}
		all := string(outs[0]) + string(outs[1])
		if strings.Count(all, "WON") != 1 || strings.Count(all, "CONFLICT") != 1 {
			t.Fatalf("want exactly one winner and one conflict:\n%s", all)
		}
		s := snap(t, tb)
		if s.Version() != 2 || len(s.Files()) != 1 || !strings.HasPrefix(s.Files()[0].Path, "rewritten-by-") {
			t.Fatalf("v%d files %v", s.Version(), paths(s.Files()))
		}
	}
}
