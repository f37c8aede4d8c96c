package storagetest

import (
	"context"
	"errors"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/cdcsink/cdc-sink/delta"
)

// Op names a Storage operation for Fault matching.
type Op string

// Storage operations.
const (
	OpGet         Op = "get"
	OpOpen        Op = "open"
	OpList        Op = "list"
	OpPutIfAbsent Op = "put-if-absent"
	OpPut         Op = "put"
	OpDelete      Op = "delete"
	OpStat        Op = "stat"
)

// ErrInjected is the default cause of injected failures.
var ErrInjected = errors.New("storagetest: injected fault")

// Fault is one scripted failure. A call matches when Op and Pattern match;
// the first Skip matching calls pass, the next Times (0: all) fail.
type Fault struct {
	Op Op // "" matches every operation
	// Pattern is a path.Match pattern against the key (the dir for List);
	// a pattern without "/" is matched against the base name, so
	// "*.parquet" means any data file. "" matches every key.
	Pattern string
	// Before is returned instead of doing the operation.
	Before error
	// After is returned after the operation succeeded: the outcome is
	// ambiguous for the caller, as with a lost response from an object store.
	After error
	// Latency delays the call (respecting ctx) before anything else.
	Latency time.Duration
	Skip    int
	Times   int
}

type faultState struct {
	Fault
	seen, fired int
}

// Faulty wraps a Storage and injects scripted failures. Safe for
// concurrent use.
type Faulty struct {
	delta.Storage
	mu     sync.Mutex
	faults []*faultState
	calls  []Call
}

// Call is one operation seen by Faulty.
type Call struct {
	Op       Op
	Key      string
	Injected error // the injected error, nil if none
}

// NewFaulty wraps s.
func NewFaulty(s delta.Storage, faults ...Fault) *Faulty {
	f := &Faulty{Storage: s}
	for _, fl := range faults {
		f.Add(fl)
	}
	return f
}

// Add scripts one more fault (earlier faults are checked first).
func (f *Faulty) Add(fl Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = append(f.faults, &faultState{Fault: fl})
}

// Reset removes all faults.
func (f *Faulty) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = nil
}

// Calls returns the operations seen so far.
func (f *Faulty) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Call(nil), f.calls...)
}

// Injected counts the failures injected so far.
func (f *Faulty) Injected() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if c.Injected != nil {
			n++
		}
	}
	return n
}

func matches(pattern, key string) bool {
	if pattern == "" {
		return true
	}
	if !strings.Contains(pattern, "/") {
		key = path.Base(key)
	}
	ok, _ := path.Match(pattern, key)
	return ok
}

// pick finds the fault for this call and counts it.
func (f *Faulty) pick(op Op, key string) (latency time.Duration, before, after error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, fs := range f.faults {
		if fs.Op != "" && fs.Op != op || !matches(fs.Pattern, key) {
			continue
		}
		fs.seen++
		if fs.seen <= fs.Skip || fs.Times > 0 && fs.fired >= fs.Times {
			continue
		}
		fs.fired++
		latency, before, after = fs.Latency, fs.Before, fs.After
		break
	}
	inj := before
	if inj == nil {
		inj = after
	}
	f.calls = append(f.calls, Call{Op: op, Key: key, Injected: inj})
	return latency, before, after
}

// run applies the fault for (op, key) around do.
func (f *Faulty) run(ctx context.Context, op Op, key string, do func() error) error {
	latency, before, after := f.pick(op, key)
	if latency > 0 {
		t := time.NewTimer(latency)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	if before != nil {
		return before
	}
	if err := do(); err != nil {
		return err
	}
	return after
}

// Get implements delta.Storage.
func (f *Faulty) Get(ctx context.Context, key string) (b []byte, err error) {
	err = f.run(ctx, OpGet, key, func() error { b, err = f.Storage.Get(ctx, key); return err })
	if err != nil {
		return nil, err
	}
	return b, nil
}

// Open implements delta.Storage.
func (f *Faulty) Open(ctx context.Context, key string) (r delta.ReadAtCloser, n int64, err error) {
	err = f.run(ctx, OpOpen, key, func() error { r, n, err = f.Storage.Open(ctx, key); return err })
	if err != nil {
		if r != nil {
			r.Close()
		}
		return nil, 0, err
	}
	return r, n, nil
}

// List implements delta.Storage.
func (f *Faulty) List(ctx context.Context, dir, from string) (ls []delta.FileInfo, err error) {
	err = f.run(ctx, OpList, dir, func() error { ls, err = f.Storage.List(ctx, dir, from); return err })
	if err != nil {
		return nil, err
	}
	return ls, nil
}

// PutIfAbsent implements delta.Storage.
func (f *Faulty) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	return f.run(ctx, OpPutIfAbsent, key, func() error { return f.Storage.PutIfAbsent(ctx, key, data) })
}

// Put implements delta.Storage.
func (f *Faulty) Put(ctx context.Context, key string, data []byte) error {
	return f.run(ctx, OpPut, key, func() error { return f.Storage.Put(ctx, key, data) })
}

// Delete implements delta.Storage.
func (f *Faulty) Delete(ctx context.Context, key string) error {
	return f.run(ctx, OpDelete, key, func() error { return f.Storage.Delete(ctx, key) })
}

// Stat implements delta.Storage.
func (f *Faulty) Stat(ctx context.Context, key string) (fi delta.FileInfo, err error) {
	err = f.run(ctx, OpStat, key, func() error { fi, err = f.Storage.Stat(ctx, key); return err })
	if err != nil {
		return delta.FileInfo{}, err
	}
	return fi, nil
}

// WalkFiles implements delta.Walker when the wrapped store does (no faults:
// vacuum is not what these tests exercise).
func (f *Faulty) WalkFiles(ctx context.Context, dir string) ([]delta.FileInfo, error) {
	w, ok := f.Storage.(delta.Walker)
	if !ok {
		return nil, errors.New("storagetest: wrapped storage cannot list recursively")
	}
	return w.WalkFiles(ctx, dir)
}
