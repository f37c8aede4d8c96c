// An in-memory Storage honouring the whole contract, for tests.

package delta

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
	"sync"
	"time"
)

// MemStorage is an in-memory Storage for tests: it honours the whole
// contract (PutIfAbsent exclusivity, typed errors, ctx) so code under test
// behaves as on a real store, without touching the disk. Safe for
// concurrent use. The zero value is not usable: use NewMemStorage.
type MemStorage struct {
	mu   sync.Mutex
	objs map[string]memObject
	now  func() time.Time
}

type memObject struct {
	data []byte
	mod  time.Time
}

// NewMemStorage returns an empty MemStorage.
func NewMemStorage() *MemStorage { return &MemStorage{objs: map[string]memObject{}, now: time.Now} }

// memKey normalises a key like LocalStorage does (no leading slash, no "..").
func memKey(key string) (string, error) {
	clean := strings.TrimPrefix(path.Clean("/"+key), "/")
	if clean == "" && key != "" && key != "." {
		return "", fmt.Errorf("invalid key %q", key)
	}
	return clean, nil
}

func notFound(op, key string) error { return &fs.PathError{Op: op, Path: key, Err: ErrObjectNotFound} }

func (m *MemStorage) get(ctx context.Context, op, key string) (memObject, string, error) {
	if err := ctx.Err(); err != nil {
		return memObject{}, "", err
	}
	k, err := memKey(key)
	if err != nil {
		return memObject{}, "", err
	}
	m.mu.Lock()
	o, ok := m.objs[k]
	m.mu.Unlock()
	if !ok {
		return memObject{}, k, notFound(op, key)
	}
	return o, k, nil
}

// Get implements Storage.
func (m *MemStorage) Get(ctx context.Context, key string) ([]byte, error) {
	o, _, err := m.get(ctx, "get", key)
	if err != nil {
		return nil, err
	}
	return bytes.Clone(o.data), nil
}

type memReader struct{ *bytes.Reader }

func (memReader) Close() error { return nil }

// Open implements Storage. Objects are immutable once stored (Put replaces
// the slice), so the reader needs no copy.
func (m *MemStorage) Open(ctx context.Context, key string) (ReadAtCloser, int64, error) {
	o, _, err := m.get(ctx, "open", key)
	if err != nil {
		return nil, 0, err
	}
	return memReader{bytes.NewReader(o.data)}, int64(len(o.data)), nil
}

// List implements Storage: objects and "directories" (key prefixes)
// directly inside dir.
func (m *MemStorage) List(ctx context.Context, dir, from string) ([]FileInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d, err := memKey(dir)
	if err != nil {
		return nil, err
	}
	prefix := d + "/"
	if d == "" {
		prefix = ""
	}
	seen := map[string]bool{}
	var out []FileInfo
	m.mu.Lock()
	for k, o := range m.objs {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		name, rest, sub := strings.Cut(k[len(prefix):], "/")
		if name < from || seen[name] {
			continue
		}
		seen[name] = true
		fi := FileInfo{Name: name, Key: prefix + name, IsDir: sub && rest != ""}
		if !fi.IsDir {
			fi.Size, fi.ModTime = int64(len(o.data)), o.mod
		}
		out = append(out, fi)
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (m *MemStorage) put(ctx context.Context, key string, data []byte, exclusive bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	k, err := memKey(key)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.objs[k]; ok && exclusive {
		return fmt.Errorf("put %s: %w", key, ErrObjectExists)
	}
	m.objs[k] = memObject{data: bytes.Clone(data), mod: m.now()}
	return nil
}

// PutIfAbsent implements Storage.
func (m *MemStorage) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	return m.put(ctx, key, data, true)
}

// Put implements Storage.
func (m *MemStorage) Put(ctx context.Context, key string, data []byte) error {
	return m.put(ctx, key, data, false)
}

// Delete implements Storage.
func (m *MemStorage) Delete(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	k, err := memKey(key)
	if err != nil {
		return err
	}
	m.mu.Lock()
	delete(m.objs, k)
	m.mu.Unlock()
	return nil
}

// Stat implements Storage.
func (m *MemStorage) Stat(ctx context.Context, key string) (FileInfo, error) {
	o, k, err := m.get(ctx, "stat", key)
	if err != nil {
		return FileInfo{}, err
	}
	return FileInfo{Name: path.Base(k), Key: k, Size: int64(len(o.data)), ModTime: o.mod}, nil
}

// WalkFiles implements Walker.
func (m *MemStorage) WalkFiles(ctx context.Context, dir string) ([]FileInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d, err := memKey(dir)
	if err != nil {
		return nil, err
	}
	prefix := d + "/"
	if d == "" {
		prefix = ""
	}
	var out []FileInfo
	m.mu.Lock()
	for k, o := range m.objs {
		if strings.HasPrefix(k, prefix) {
			out = append(out, FileInfo{Name: path.Base(k), Key: k, Size: int64(len(o.data)), ModTime: o.mod})
		}
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// SetModTime changes an object's modification time (retention tests).
func (m *MemStorage) SetModTime(key string, t time.Time) error {
	k, err := memKey(key)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objs[k]
	if !ok {
		return notFound("chtimes", key)
	}
	o.mod = t
	m.objs[k] = o
	return nil
}
