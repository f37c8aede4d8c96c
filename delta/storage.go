// The Storage interface (object-store primitives) and its local-disk implementation.

package delta

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Storage is the small set of object-store primitives the Delta protocol needs.
// Keys are slash-separated paths relative to the store root (no leading slash).
//
// The only primitive that must be atomic and exclusive is PutIfAbsent: it is
// how optimistic concurrency decides who owns a commit version.
//
// Errors: a missing key matches ErrObjectNotFound, an existing PutIfAbsent
// target ErrObjectExists (both permanent); failures worth retrying are
// wrapped in *TransientError (IsTransient); a cancelled ctx returns ctx.Err().
// delta/storagetest checks an implementation against this contract.
type Storage interface {
	// Get returns the whole object. A missing object returns an error
	// satisfying errors.Is(err, fs.ErrNotExist).
	Get(ctx context.Context, key string) ([]byte, error)
	// Open opens an object for random access reads (parquet footers).
	Open(ctx context.Context, key string) (ReadAtCloser, int64, error)
	// List returns the entries directly inside dir whose base name is >= from,
	// sorted by name (Size/ModTime/IsDir may be left zero: use Stat).
	// A missing dir returns an empty list and no error.
	List(ctx context.Context, dir, from string) ([]FileInfo, error)
	// PutIfAbsent atomically creates key with data; if key exists it
	// returns an error satisfying errors.Is(err, fs.ErrExist) and changes nothing.
	PutIfAbsent(ctx context.Context, key string, data []byte) error
	// Put creates or replaces key atomically (readers see old or new, never partial).
	Put(ctx context.Context, key string, data []byte) error
	// Delete removes key; deleting a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// Stat returns size and modification time of key.
	Stat(ctx context.Context, key string) (FileInfo, error)
}

// ReadAtCloser is what parquet readers need.
type ReadAtCloser interface {
	io.ReaderAt
	io.Seeker
	io.Reader
	io.Closer
}

// FileInfo describes one stored object.
type FileInfo struct {
	Name    string // base name inside the listed dir
	Key     string // full key
	Size    int64
	ModTime time.Time
	IsDir   bool
}

// LocalStorage is a Storage on a local (POSIX) filesystem rooted at Root.
// Commits use link(2), which fails with EEXIST when the target exists, so
// concurrent writers in different processes can never overwrite each other.
type LocalStorage struct {
	Root string
}

// NewLocalStorage returns a LocalStorage rooted at root.
func NewLocalStorage(root string) *LocalStorage { return &LocalStorage{Root: root} }

const (
	dirPerm  = 0o750
	filePerm = 0o640
)

func (s *LocalStorage) full(key string) (string, error) {
	clean := path.Clean("/" + key)
	if clean == "/" && key != "" && key != "." {
		return "", fmt.Errorf("invalid key %q", key)
	}
	return filepath.Join(s.Root, filepath.FromSlash(clean)), nil
}

// Get implements Storage.
func (s *LocalStorage) Get(ctx context.Context, key string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p, err := s.full(key)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(p)
	return b, classifyOS(err)
}

// Open implements Storage.
func (s *LocalStorage) Open(ctx context.Context, key string) (ReadAtCloser, int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	p, err := s.full(key)
	if err != nil {
		return nil, 0, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, 0, classifyOS(err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, classifyOS(err)
	}
	return f, st.Size(), nil
}

// List implements Storage.
func (s *LocalStorage) List(ctx context.Context, dir, from string) ([]FileInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p, err := s.full(dir)
	if err != nil {
		return nil, err
	}
	d, err := os.Open(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, classifyOS(err)
	}
	// Readdirnames: one allocation per name, no stat; the log can hold
	// tens of thousands of entries and only those >= from are kept.
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, classifyOS(err)
	}
	dir = strings.TrimSuffix(dir, "/")
	out := make([]FileInfo, 0, 16)
	for _, name := range names {
		if name < from {
			continue
		}
		out = append(out, FileInfo{Name: name, Key: path.Join(dir, name)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// writeTemp writes data to a new temp file next to final and fsyncs it.
func writeTemp(final string, data []byte) (string, error) {
	dir := filepath.Dir(final)
	if err := os.MkdirAll(dir, dirPerm); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(final)+".tmp-*")
	if err != nil {
		return "", err
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Chmod(filePerm)
	}
	if werr == nil {
		werr = f.Sync()
	}
	cerr := f.Close()
	if werr == nil {
		werr = cerr
	}
	if werr != nil {
		os.Remove(tmp)
		return "", werr
	}
	return tmp, nil
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// PutIfAbsent implements Storage: temp file + fsync + link(2).
func (s *LocalStorage) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p, err := s.full(key)
	if err != nil {
		return err
	}
	tmp, err := writeTemp(p, data)
	if err != nil {
		return classifyOS(err)
	}
	defer os.Remove(tmp)
	if err := os.Link(tmp, p); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("put %s: %w", key, fs.ErrExist)
		}
		return classifyOS(err)
	}
	syncDir(filepath.Dir(p))
	return nil
}

// Put implements Storage: temp file + fsync + rename (atomic replace).
func (s *LocalStorage) Put(ctx context.Context, key string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p, err := s.full(key)
	if err != nil {
		return err
	}
	tmp, err := writeTemp(p, data)
	if err != nil {
		return classifyOS(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return classifyOS(err)
	}
	syncDir(filepath.Dir(p))
	return nil
}

// Delete implements Storage.
func (s *LocalStorage) Delete(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p, err := s.full(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return classifyOS(err)
	}
	return nil
}

// Stat implements Storage.
func (s *LocalStorage) Stat(ctx context.Context, key string) (FileInfo, error) {
	if err := ctx.Err(); err != nil {
		return FileInfo{}, err
	}
	p, err := s.full(key)
	if err != nil {
		return FileInfo{}, err
	}
	st, err := os.Stat(p)
	if err != nil {
		return FileInfo{}, classifyOS(err)
	}
	return FileInfo{Name: st.Name(), Key: key, Size: st.Size(), ModTime: st.ModTime(), IsDir: st.IsDir()}, nil
}

// walkFiles lists all regular files under dir recursively (for vacuum).
func (s *LocalStorage) walkFiles(ctx context.Context, dir string) ([]FileInfo, error) {
	p, err := s.full(dir)
	if err != nil {
		return nil, err
	}
	var out []FileInfo
	err = filepath.WalkDir(p, func(fp string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(s.Root, fp)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return nil // vanished concurrently
		}
		out = append(out, FileInfo{Name: d.Name(), Key: filepath.ToSlash(rel), Size: info.Size(), ModTime: info.ModTime()})
		return nil
	})
	return out, err
}

// Walker is optionally implemented by a Storage that can list recursively;
// Vacuum needs it.
type Walker interface {
	WalkFiles(ctx context.Context, dir string) ([]FileInfo, error)
}

// WalkFiles implements Walker.
func (s *LocalStorage) WalkFiles(ctx context.Context, dir string) ([]FileInfo, error) {
	return s.walkFiles(ctx, dir)
}

// SeekOffset is io.Seeker's arithmetic for a reader of size bytes at cur,
// shared by the object store readers: the new absolute position, or an error
// for a bad whence or a negative result.
func SeekOffset(cur, size, offset int64, whence int) (int64, error) {
	var abs int64
	switch whence {
	case io.SeekStart:
		abs = offset
	case io.SeekCurrent:
		abs = cur + offset
	case io.SeekEnd:
		abs = size + offset
	default:
		return 0, fmt.Errorf("seek: invalid whence %d", whence)
	}
	if abs < 0 {
		return 0, fmt.Errorf("seek: negative position %d", abs)
	}
	return abs, nil
}
