//go:build linux

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cdcsink/cdc-sink/merge"
	"golang.org/x/sys/unix"
)

// Disk faults under a real file system: the lake is a small tmpfs of its
// own, filled to the last byte (a full disk) or remounted read-only at
// chosen points of a batch. Mounting needs root; `make unit` requires it
// (CDC_SINK_NETNS=1, like the network-fault tests).

// smallDisk mounts a tmpfs of size bytes on a new directory.
func smallDisk(t *testing.T, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv(netnsEnv) != "" {
			t.Fatalf("%s is set but mounting a tmpfs needs root", netnsEnv)
		}
		t.Skipf("mounting a tmpfs needs root (set %s=1 to require it)", netnsEnv)
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Fatalf("mount tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fill writes a ballast file until the file system is full and returns it.
func fill(dir string) (string, error) {
	p := filepath.Join(dir, "ballast")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return p, err
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			return p, err
		}
	}
	// a last partial page too
	for {
		if _, err := f.Write(buf[:512]); err != nil {
			break
		}
	}
	return p, nil
}

// TestDiskFull: the lake's disk fills up right before a batch writes its
// data file, and right before it writes its log entry. Each time the write
// fails with ENOSPC, a transient error: the batch is retried, /readyz turns
// 503 naming "no space left on device", nothing is quarantined and no
// table version is half-visible (the log stays readable and contiguous);
// once space is freed the sink goes on by itself and the table equals the
// source model.
func TestDiskFull(t *testing.T) {
	for _, point := range []merge.FaultPoint{merge.FaultAfterCommit, merge.FaultBeforeCommit, merge.FaultBeforeCheckpoint} {
		what := map[merge.FaultPoint]string{merge.FaultAfterCommit: "the next data file", merge.FaultBeforeCommit: "the log entry",
			merge.FaultBeforeCheckpoint: "the checkpoint"}[point]
		t.Run(what, func(t *testing.T) {
			lake := smallDisk(t, 16<<20)
			_, brokers := newKfake(t, 3, "diskfull.quarantine")
			s := testStream(51, 1200, 200, 3, 0)
			if err := newProducer(t, brokers).produce(s.Records); err != nil {
				t.Fatal(err)
			}
			cfg := testConfig(brokers, lake, "diskfull")
			var (
				armed   atomic.Bool
				mu      sync.Mutex
				ballast string
				fillErr error
			)
			armed.Store(true)
			var commits atomic.Int32
			h := runHooks{Fault: func(p merge.FaultPoint) error {
				if p == merge.FaultAfterCommit {
					commits.Add(1)
				}
				// the third batch's point: the table exists and has data
				if p == point && commits.Load() >= 2 && armed.CompareAndSwap(true, false) {
					mu.Lock()
					ballast, fillErr = fill(lake)
					mu.Unlock()
				}
				return nil
			}}
			r := startSink(t, "diskfull", cfg, h)
			waitUntil(t, 60*time.Second, "/readyz 503 on a full disk", func() bool {
				code, body := httpGetMaybe("http://" + r.addr + "/readyz")
				return code == 503 && strings.Contains(string(body), "no space left on device")
			})
			mu.Lock()
			if fillErr != nil {
				t.Fatalf("filling the disk: %v", fillErr)
			}
			b := ballast
			mu.Unlock()
			dir := tableDir(lake)
			stuck, _ := tableProgress(t, dir, "diskfull")
			if caughtUp(t, dir, "diskfull", endOffsets(s)) {
				t.Fatal("caught up on a full disk")
			}
			if err := os.Remove(b); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, 90*time.Second, "caught up once space is freed", func() bool { return caughtUp(t, dir, "diskfull", endOffsets(s)) })
			waitUntil(t, 30*time.Second, "ready again", func() bool {
				code, _ := httpGetMaybe("http://" + r.addr + "/readyz")
				return code == 200
			})
			checkTable(t, dir, "diskfull", s)
			checkContiguous(t, "after a full disk", logVersions(t, dir))
			if q := quarantined(t, brokers, "diskfull.quarantine"); len(q) != 0 {
				t.Errorf("%d records quarantined for a full disk", len(q))
			}
			if n := r.log.count("transient apply failure, retrying"); n == 0 {
				t.Error("no retry logged")
			}
			if point == merge.FaultBeforeCheckpoint {
				// the checkpoint failed, the commit stood; nothing half-written is left for a
				// reader to trip on (checkTable read the table with delta-rs too)
				if r.log.count("checkpoint failed; the commit stands, readers replay the log") == 0 {
					t.Error("no failed checkpoint logged")
				}
				checkLogDir(t, filepath.Join(dir, "_delta_log"))
			}
			t.Logf("offsets when the disk was full: %v", stuck)
		})
	}
}

// TestReadOnlyTableDir: the lake's file system turns read-only right before
// a log entry is written. Retrying cannot help, so the sink stops with an
// error naming the table and the cause, without a half-written version;
// remounted read-write, a restarted sink catches up to the source model.
func TestReadOnlyTableDir(t *testing.T) {
	lake := smallDisk(t, 16<<20)
	_, brokers := newKfake(t, 3, "rofs.quarantine")
	s := testStream(52, 1200, 200, 3, 0)
	if err := newProducer(t, brokers).produce(s.Records); err != nil {
		t.Fatal(err)
	}
	var commits atomic.Int32
	var once sync.Once
	var roErr error
	h := runHooks{Fault: func(p merge.FaultPoint) error {
		if p == merge.FaultAfterCommit {
			commits.Add(1)
		}
		if p == merge.FaultBeforeCommit && commits.Load() >= 2 {
			once.Do(func() { roErr = unix.Mount("", lake, "", unix.MS_REMOUNT|unix.MS_RDONLY, "") })
		}
		return nil
	}}
	r := startSink(t, "rofs", testConfig(brokers, lake, "rofs"), h)
	var err error
	select {
	case err = <-r.done:
		r.done <- err
	case <-time.After(60 * time.Second):
		t.Fatal("the sink did not stop on a read-only table directory")
	}
	if roErr != nil {
		t.Fatalf("remount read-only: %v", roErr)
	}
	dir := tableDir(lake)
	if err == nil || !strings.Contains(err.Error(), "read-only file system") || !strings.Contains(err.Error(), dir) {
		t.Fatalf("error %v: want one naming %s and the read-only file system", err, dir)
	}
	checkContiguous(t, "on a read-only disk", logVersions(t, dir))
	if out, err := exec.Command("mount", "-o", "remount,rw", lake).CombinedOutput(); err != nil {
		t.Fatalf("remount rw: %v %s", err, out)
	}
	startSink(t, "rofs-2", testConfig(brokers, lake, "rofs"), runHooks{})
	waitUntil(t, 90*time.Second, "caught up after the remount", func() bool { return caughtUp(t, dir, "rofs", endOffsets(s)) })
	checkTable(t, dir, "rofs", s)
	checkContiguous(t, "after the remount", logVersions(t, dir))
}

// checkLogDir: no temp file left in the log, and _last_checkpoint names a
// checkpoint that exists.
func checkLogDir(t *testing.T, logDir string) {
	t.Helper()
	ents, err := os.ReadDir(logDir)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, e := range ents {
		have[e.Name()] = true
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temp file left in the log: %s", e.Name())
		}
	}
	b, err := os.ReadFile(filepath.Join(logDir, "_last_checkpoint"))
	if err != nil {
		return // none written yet
	}
	var lc struct{ Version int64 }
	if err := json.Unmarshal(b, &lc); err != nil {
		t.Fatalf("_last_checkpoint: %v: %s", err, b)
	}
	if cp := fmt.Sprintf("%020d.checkpoint.parquet", lc.Version); !have[cp] {
		t.Errorf("_last_checkpoint names %s, which is not in the log", cp)
	}
}
