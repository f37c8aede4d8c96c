package storagetest_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/delta/storagetest"
)

func TestMain(m *testing.M) {
	if storagetest.IsRacingChild() {
		os.Exit(storagetest.RacingChild(openRacingChild))
	}
	os.Exit(m.Run())
}

// openRacingChild opens the local root the parent named; with
// STORAGETEST_BROKEN set, behind a PutIfAbsent that is a plain Put.
func openRacingChild(context.Context) (delta.Storage, error) {
	var s delta.Storage = delta.NewLocalStorage(os.Getenv("STORAGETEST_DIR"))
	if os.Getenv("STORAGETEST_BROKEN") != "" {
		s = overwriting{s}
	}
	return s, nil
}

// overwriting is a Storage whose PutIfAbsent has lost its exclusivity.
type overwriting struct{ delta.Storage }

func (o overwriting) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	return o.Put(ctx, key, data)
}

// Racing processes on local disk (link(2) in LocalStorage.PutIfAbsent).
func TestLocalRacingProcesses(t *testing.T) {
	dir := t.TempDir()
	storagetest.RacingProcesses(t, 8, 25, []string{"STORAGETEST_DIR=" + dir}, delta.NewLocalStorage(dir))
}

// The racing check can fail: run TestLocalRacingProcesses in a copy of
// this binary whose children's PutIfAbsent overwrites, and expect it to
// report a key won twice.
func TestRacingProcessesCatchesLostExclusivity(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestLocalRacingProcesses$", "-test.v")
	cmd.Env = append(os.Environ(), "STORAGETEST_BROKEN=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("racing check with a plain-Put PutIfAbsent: err = %v, want a failing test:\n%s", err, out)
	}
	if !strings.Contains(string(out), "both won") {
		t.Fatalf("racing check failed, but not on a key won twice:\n%s", out)
	}
}

func TestLocalStorage(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) delta.Storage { return delta.NewLocalStorage(t.TempDir()) })
}

func TestMemStorage(t *testing.T) {
	storagetest.Run(t, func(*testing.T) delta.Storage { return delta.NewMemStorage() })
}

// A Faulty without faults is a conforming Storage (tests wrap stores in it).
func TestFaultyPassThrough(t *testing.T) {
	storagetest.Run(t, func(*testing.T) delta.Storage { return storagetest.NewFaulty(delta.NewMemStorage()) })
}

func TestFaultyScript(t *testing.T) {
	ctx := context.Background()
	mem := delta.NewMemStorage()
	transient := delta.Transient(storagetest.ErrInjected)
	f := storagetest.NewFaulty(mem,
		storagetest.Fault{Op: storagetest.OpPutIfAbsent, Pattern: "*.parquet", Before: transient, Skip: 1, Times: 1},
		storagetest.Fault{Op: storagetest.OpPutIfAbsent, Pattern: "_delta_log/*.json", After: transient, Times: 1},
		storagetest.Fault{Op: storagetest.OpGet, Pattern: "slow", Latency: time.Hour},
	)
	// Skip 1: the first data file passes, the second fails before writing.
	if err := f.PutIfAbsent(ctx, "a.parquet", []byte("a")); err != nil {
		t.Fatal(err)
	}
	err := f.PutIfAbsent(ctx, "dir/b.parquet", []byte("b"))
	if !delta.IsTransient(err) || !errors.Is(err, storagetest.ErrInjected) {
		t.Fatalf("second data file: %v, want the injected transient error", err)
	}
	if _, err := mem.Stat(ctx, "dir/b.parquet"); !delta.IsNotFound(err) {
		t.Fatalf("a Before fault must not write (stat: %v)", err)
	}
	// Times 1: the third goes through.
	if err := f.PutIfAbsent(ctx, "c.parquet", []byte("c")); err != nil {
		t.Fatal(err)
	}
	// After: the commit lands but the caller hears a failure.
	key := "_delta_log/00000000000000000000.json"
	if err := f.PutIfAbsent(ctx, key, []byte("{}")); !delta.IsTransient(err) {
		t.Fatalf("commit: %v, want the injected error", err)
	}
	if _, err := mem.Stat(ctx, key); err != nil {
		t.Fatalf("an After fault must write: %v", err)
	}
	if err := f.PutIfAbsent(ctx, key, []byte("{}")); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("retried commit: %v, want exists", err)
	}
	// Latency honours the context.
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := f.Get(cctx, "slow"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("slow get: %v", err)
	}
	if n := f.Injected(); n != 2 {
		t.Errorf("Injected = %d, want 2", n)
	}
	calls := f.Calls()
	if len(calls) != 6 || calls[1].Key != "dir/b.parquet" || calls[1].Injected == nil || calls[0].Injected != nil {
		t.Errorf("calls %+v", calls)
	}
}

// The Delta layer runs unchanged on MemStorage and through Faulty.
func TestTableOnMemStorage(t *testing.T) {
	ctx := context.Background()
	schema := `{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}}]}`
	f := storagetest.NewFaulty(delta.NewMemStorage())
	tb, err := delta.Create(ctx, f, "db/t", delta.Metadata{SchemaString: schema}, delta.Protocol{})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := tb.Exists(ctx); !ok || err != nil {
		t.Fatalf("Exists = %v, %v", ok, err)
	}
	if ok, err := delta.OpenTable(f, "db/other").Exists(ctx); ok || err != nil {
		t.Fatalf("Exists of an empty location = %v, %v", ok, err)
	}
	f.Add(storagetest.Fault{Op: storagetest.OpList, Before: delta.Transient(storagetest.ErrInjected), Times: 1})
	if _, err := tb.Exists(ctx); !delta.IsTransient(err) {
		t.Fatalf("Exists with a failing list: %v, want the transient error (not 'no table')", err)
	}
	snap, err := tb.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v, err := snap.Begin().Add(delta.Add{Path: "x.parquet", Size: 1, DataChange: true}).Commit(ctx, "WRITE", nil)
	if err != nil || v != 1 {
		t.Fatalf("commit = %d, %v", v, err)
	}
	if _, err := f.Stat(ctx, tb.CommitKey(1)); err != nil {
		t.Fatalf("CommitKey(1): %v", err)
	}
}
