package storagetest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/cdcsink/cdc-sink/delta"
)

// Racing processes: goroutines in one process share a client, a connection
// pool and (for LocalStorage) a kernel view that a bug could serialise by
// accident; separate processes cannot. RacingProcesses re-executes the test
// binary procs times; each child's TestMain hands over to RacingChild
// (IsRacingChild tells it to), which opens the backend and races
// PutIfAbsent on every key at once. The parent then checks exactly one
// winner per key and that the stored object is the winner's.
//
// A backend test package wires it with
//
//	func TestMain(m *testing.M) {
//		if storagetest.IsRacingChild() {
//			os.Exit(storagetest.RacingChild(openFromEnv))
//		}
//		os.Exit(m.Run())
//	}
//
// where openFromEnv reads whatever the parent put into childEnv.

const (
	envChild = "CDC_SINK_STORAGETEST_RACING_CHILD"
	envKeys  = "CDC_SINK_STORAGETEST_RACING_KEYS"
)

// MinRacingProcs and MinRacingKeys are the smallest race RacingProcesses
// accepts: fewer would rarely overlap enough to catch a broken PutIfAbsent.
const (
	MinRacingProcs = 8
	MinRacingKeys  = 20
)

// IsRacingChild reports whether this process is a child of RacingProcesses.
func IsRacingChild() bool { return os.Getenv(envChild) != "" }

// racingKey is the i-th contested key: commit file names, as in a real race.
func racingKey(i int) string { return fmt.Sprintf("_delta_log/%020d.json", i) }

// racingPayload is what process p writes to key k. It names both, so the
// parent can tell whose object was stored, and is large enough (64 KiB)
// that concurrent uploads overlap on the wire instead of being one packet.
func racingPayload(p, k int) []byte {
	head := fmt.Sprintf("process %d key %d\n", p, k)
	return []byte(head + strings.Repeat(strconv.Itoa(p%10), 64<<10-len(head)))
}

// RacingProcesses runs procs child processes (copies of this test binary,
// with childEnv added to the environment) racing PutIfAbsent on the same
// keys of one store, and fails t unless every key has exactly one winner
// whose payload is what store (the parent's handle on that same root)
// reads back. childEnv must tell the child's open function where the store
// is; the root must be empty.
func RacingProcesses(t *testing.T, procs, keys int, childEnv []string, store delta.Storage) {
	t.Helper()
	if procs < MinRacingProcs || keys < MinRacingKeys {
		t.Fatalf("RacingProcesses(%d procs, %d keys): want at least %d x %d", procs, keys, MinRacingProcs, MinRacingKeys)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type child struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		out   *bufio.Scanner
		res   []string
	}
	cs := make([]*child, procs)
	for i := range cs {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(append(os.Environ(), childEnv...), envChild+"="+strconv.Itoa(i), envKeys+"="+strconv.Itoa(keys))
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatalf("start racing child %d: %v", i, err)
		}
		// After a failed check: kill (the deferred cancel ran) and reap.
		t.Cleanup(func() { _ = cmd.Wait() })
		cs[i] = &child{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	}
	// Every child has opened the store and made a request before any
	// starts, so the race is on PutIfAbsent, not on process start-up.
	for i, c := range cs {
		if !c.out.Scan() || c.out.Text() != "ready" {
			t.Fatalf("racing child %d did not get ready (said %q, %v)", i, c.out.Text(), c.out.Err())
		}
	}
	for i, c := range cs {
		if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
			t.Fatalf("start racing child %d: %v", i, err)
		}
	}
	for i, c := range cs {
		for c.out.Scan() {
			c.res = append(c.res, c.out.Text())
		}
		if err := c.cmd.Wait(); err != nil {
			t.Fatalf("racing child %d: %v (said %q)", i, err, c.res)
		}
		if len(c.res) != keys {
			t.Fatalf("racing child %d reported %d results, want %d: %q", i, len(c.res), keys, c.res)
		}
	}
	wins := make([]int, procs)
	for k := range keys {
		winner := -1
		for i, c := range cs {
			switch r := c.res[k]; r {
			case "won":
				if winner >= 0 {
					t.Fatalf("%s: processes %d and %d both won", racingKey(k), winner, i)
				}
				winner = i
			case "exists":
			default:
				t.Fatalf("%s, process %d: %s", racingKey(k), i, r)
			}
		}
		if winner < 0 {
			t.Fatalf("%s: no process won", racingKey(k))
		}
		wins[winner]++
		got, err := store.Get(ctx, racingKey(k))
		if err != nil {
			t.Fatalf("read back %s: %v", racingKey(k), err)
		}
		if string(got) != string(racingPayload(winner, k)) {
			head, _, _ := strings.Cut(string(got), "\n")
			t.Fatalf("%s holds %q..., but process %d won it", racingKey(k), head, winner)
		}
	}
	t.Logf("%d processes x %d keys: exactly one winner per key, each stored; wins per process %v", procs, keys, wins)
}

// RacingChild is the child side of RacingProcesses; call it from TestMain
// when IsRacingChild and exit with its result. open opens the store the
// parent described in childEnv.
func RacingChild(open func(ctx context.Context) (delta.Storage, error)) int {
	ctx := context.Background()
	id, err1 := strconv.Atoi(os.Getenv(envChild))
	keys, err2 := strconv.Atoi(os.Getenv(envKeys))
	if err1 != nil || err2 != nil {
		fmt.Fprintf(os.Stderr, "racing child: bad %s/%s\n", envChild, envKeys)
		return 2
	}
	st, err := open(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "racing child %d: open store: %v\n", id, err)
		return 1
	}
	// One request first: lazy clients connect and authenticate now, not
	// during the race.
	if _, err := st.Stat(ctx, "_racing/warm-up"); !delta.IsNotFound(err) {
		fmt.Fprintf(os.Stderr, "racing child %d: warm-up Stat = %v, want not found\n", id, err)
		return 1
	}
	fmt.Println("ready")
	if line, _ := bufio.NewReader(os.Stdin).ReadString('\n'); line != "go\n" {
		fmt.Fprintf(os.Stderr, "racing child %d: got %q, want go\n", id, line)
		return 1
	}
	results := make([]string, keys)
	var start, done sync.WaitGroup
	start.Add(1)
	for k := range keys { // all keys at once: this process's goroutines race too
		done.Add(1)
		go func() {
			defer done.Done()
			body := racingPayload(id, k)
			start.Wait()
			switch err := st.PutIfAbsent(ctx, racingKey(k), body); {
			case err == nil:
				results[k] = "won"
			case delta.IsExists(err) && !delta.IsTransient(err):
				results[k] = "exists"
			default:
				results[k] = "error: " + strings.ReplaceAll(err.Error(), "\n", " ")
			}
		}()
	}
	start.Done()
	done.Wait()
	for _, r := range results {
		fmt.Println(r)
	}
	return 0
}
