package delta

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
)

// failingReads makes ranged reads of checkpoint files fail with a transient
// error after the first few succeed (a connection reset mid-download).
type failingReads struct {
	Storage
	left atomic.Int32
}

type failingReader struct {
	ReadAtCloser
	f *failingReads
}

func (r failingReader) ReadAt(p []byte, off int64) (int, error) {
	if r.f.left.Add(-1) < 0 {
		return 0, Transient(syscall.ECONNRESET)
	}
	return r.ReadAtCloser.ReadAt(p, off)
}

func (f *failingReads) Open(ctx context.Context, key string) (ReadAtCloser, int64, error) {
	r, n, err := f.Storage.Open(ctx, key)
	if err != nil || !strings.HasSuffix(key, ".checkpoint.parquet") {
		return r, n, err
	}
	return failingReader{r, f}, n, nil
}

// A transient failure while reading a checkpoint stays transient (the
// pipeline retries it); it is not reported as a corrupt log.
func TestCheckpointReadKeepsTransientClass(t *testing.T) {
	ctx := context.Background()
	tb, dir := newTable(t, dvProtocol, map[string]string{"delta.checkpointInterval": "1000"})
	commit(t, snap(t, tb).Begin().Add(add("a.parquet"), add("b.parquet")).SetAppTransaction("app", 1))
	if err := WriteCheckpoint(ctx, snap(t, tb)); err != nil {
		t.Fatal(err)
	}
	// log cleanup: only the checkpoint can give the state, so a failed read
	// of it cannot fall back to replaying the commits
	for _, v := range []string{"00000000000000000000.json", "00000000000000000001.json"} {
		if err := os.Remove(filepath.Join(dir, "_delta_log", v)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := OpenTable(NewLocalStorage(filepath.Dir(dir)), "t").Snapshot(ctx); err != nil {
		t.Fatalf("the checkpoint alone does not load: %v", err)
	}
	failed := 0
	for _, ok := range []int32{0, 1, 2} {
		fr := &failingReads{Storage: NewLocalStorage(filepath.Dir(dir))}
		fr.left.Store(ok)
		_, err := OpenTable(fr, "t").Snapshot(ctx)
		if err == nil {
			continue // the reads it needed all succeeded
		}
		failed++
		if !IsTransient(err) || errors.Is(err, ErrCorruptLog) {
			t.Fatalf("after %d good reads: %v (transient %v, corrupt %v): want transient, not corrupt",
				ok, err, IsTransient(err), errors.Is(err, ErrCorruptLog))
		}
	}
	if failed == 0 {
		t.Fatal("no checkpoint read failed: the test proves nothing")
	}
}
