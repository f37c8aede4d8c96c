// Package gcsstore is the Google Cloud Storage (gs://) delta.Storage backend,
// on cloud.google.com/go/storage (JSON API over HTTP).
//
// Importing it registers the backend for the "gs" scheme (delta.RegisterBackend);
// cmd/cdc-sink imports it only when built with the gcs build tag, so that the
// default binary does not carry the SDK.
//
// Credentials are Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS,
// gcloud's user credentials, workload identity, the metadata server). With
// STORAGE_EMULATOR_HOST or delta.GCSOptions.Endpoint set, requests go to that
// endpoint without authentication (emulators).
//
// Commits are exclusive through ifGenerationMatch=0 (storage.Conditions{DoesNotExist: true}):
// GCS creates the object only if no live generation exists, else answers 412.
package gcsstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/url"
	"os"
	"path"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/storage"
	gax "github.com/googleapis/gax-go/v2"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"

	"github.com/cdcsink/cdc-sink/delta"
)

func init() { delta.RegisterBackend(open, "gs") }

// Bounded SDK retries: the pipeline's retry loop owns the long ones, so a
// request is tried at most maxAttempts times (about 1.5 s of backoff) and a
// resumable upload chunk is retried for at most chunkRetryDeadline.
const (
	maxAttempts        = 3
	chunkRetryDeadline = 30 * time.Second
	// chunkSize: objects up to this size are one request; larger ones a
	// resumable upload in chunks of this size (the SDK buffers one chunk).
	chunkSize = 16 << 20
)

var retryBackoff = gax.Backoff{Initial: 250 * time.Millisecond, Max: 2 * time.Second, Multiplier: 2}

// Store is a delta.Storage on one GCS bucket, rooted at a key prefix. It
// also implements delta.Walker (vacuum). Safe for concurrent use. The HTTP
// client is created on first use, so New and the registered backend never
// touch the network.
type Store struct {
	bucket string
	prefix string // "" or "a/b/" (trailing slash)
	conn   *conn
}

var _ delta.Storage = (*Store)(nil)
var _ delta.Walker = (*Store)(nil)

// New returns a Store for the objects under prefix (a key prefix without
// leading slash, "" for the whole bucket) in bucket. Nothing is contacted:
// the client (and credential lookup) is created on the first operation.
func New(bucket, prefix string, opts delta.GCSOptions) (*Store, error) {
	if err := checkBucket(bucket); err != nil {
		return nil, err
	}
	p := strings.Trim(path.Clean("/"+prefix), "/")
	if p != "" {
		p += "/"
	}
	c, err := sharedConn(opts)
	if err != nil {
		return nil, err
	}
	return &Store{bucket: bucket, prefix: p, conn: c}, nil
}

// NewWithClient returns a Store that uses client (tests, embedding; the
// caller owns and closes client). Retries are still bounded per request.
func NewWithClient(client *storage.Client, bucket, prefix string) (*Store, error) {
	s, err := New(bucket, prefix, delta.GCSOptions{})
	if err != nil {
		return nil, err
	}
	s.conn = &conn{client: client}
	return s, nil
}

// String is the store's root as a gs:// URL.
func (s *Store) String() string { return "gs://" + s.bucket + "/" + strings.TrimSuffix(s.prefix, "/") }

// open is the registered delta.Backend.
func open(_ context.Context, l delta.Location, opts delta.StorageOptions) (delta.Storage, error) {
	s, err := New(l.Bucket, l.Path, opts.GCS)
	if err != nil {
		return nil, &delta.LocationError{Location: l.String(), Scheme: l.Scheme, Reason: err.Error(), Err: delta.ErrInvalidLocation}
	}
	return s, nil
}

// bucketRE: GCS bucket names (3–63 characters, or up to 222 with dots).
var bucketRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$`)

func checkBucket(b string) error {
	if !bucketRE.MatchString(b) || strings.Contains(b, "..") {
		return fmt.Errorf("invalid GCS bucket name %q (lowercase letters, digits, '-', '_' and '.')", b)
	}
	for _, part := range strings.Split(b, ".") {
		if len(part) > 63 {
			return fmt.Errorf("invalid GCS bucket name %q: a dot-separated part is longer than 63 characters", b)
		}
	}
	return nil
}

// conn is a lazily created client, shared by every Store with the same
// endpoint configuration (a process opens many tables, each many times).
type conn struct {
	endpoint string // effective emulator/override endpoint, "" = Google
	mu       sync.Mutex
	client   *storage.Client
}

var (
	connsMu sync.Mutex
	conns   = map[string]*conn{}
)

// sharedConn returns the conn for opts (and STORAGE_EMULATOR_HOST as set now).
func sharedConn(opts delta.GCSOptions) (*conn, error) {
	ep := ""
	if opts.Endpoint != "" {
		var err error
		if ep, err = normalizeEndpoint(opts.Endpoint); err != nil {
			return nil, err
		}
	}
	key := ep + "\x00" + os.Getenv("STORAGE_EMULATOR_HOST")
	connsMu.Lock()
	defer connsMu.Unlock()
	c := conns[key]
	if c == nil {
		c = &conn{endpoint: ep}
		conns[key] = c
	}
	return c, nil
}

// normalizeEndpoint accepts an emulator base URL (http://host:port) or the
// JSON API root (…/storage/v1/) and returns the latter.
func normalizeEndpoint(e string) (string, error) {
	if !strings.Contains(e, "://") {
		e = "http://" + e
	}
	u, err := url.Parse(e)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", fmt.Errorf("invalid GCS endpoint %q: want http(s)://host[:port]", e)
	}
	if u.User != nil {
		return "", fmt.Errorf("invalid GCS endpoint: credentials do not belong in the endpoint URL")
	}
	if p := strings.Trim(u.Path, "/"); p == "" {
		u.Path = "/storage/v1/"
	} else {
		u.Path = "/" + p + "/"
	}
	return u.String(), nil
}

// get returns the client, creating it on first use. A failure (no
// credentials found) is not cached: the next operation tries again.
func (c *conn) get(ctx context.Context) (*storage.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.client != nil {
		return c.client, nil
	}
	opts := []option.ClientOption{storage.WithJSONReads(), storage.WithDisabledClientMetrics()}
	if c.endpoint != "" {
		opts = append(opts, option.WithEndpoint(c.endpoint), option.WithoutAuthentication())
	}
	cl, err := storage.NewClient(ctx, opts...)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("gcs: create client (Application Default Credentials: GOOGLE_APPLICATION_CREDENTIALS, "+
			"gcloud auth application-default login, workload identity or the metadata server; "+
			"STORAGE_EMULATOR_HOST or storage.gcs.endpoint for an emulator): %w", err)
	}
	c.client = cl
	return cl, nil
}

// full is the object name of key (normalised like delta.MemStorage: no
// leading slash, no "..").
func (s *Store) full(key string) (string, error) {
	clean := strings.TrimPrefix(path.Clean("/"+key), "/")
	if clean == "" {
		return "", fmt.Errorf("gcs: invalid key %q", key)
	}
	return s.prefix + clean, nil
}

// attempts bounds and records the SDK's retries of one call. Uploads are
// retried inside google.golang.org/api up to the context's deadline only,
// so the bound is kept here: at most limit-1 retries per request (per chunk
// for a resumable upload). retried says whether a failure was retried: an
// error after a retry may hide an earlier attempt that succeeded.
type attempts struct {
	limit   int32
	n       atomic.Int32
	retried atomic.Bool
}

func newAttempts(requests int) *attempts {
	return &attempts{limit: int32((maxAttempts-1)*max(requests, 1) + 1)}
}

func (a *attempts) shouldRetry(err error) bool {
	if !storage.ShouldRetry(err) || a.n.Add(1) >= a.limit {
		return false
	}
	a.retried.Store(true)
	return true
}

// object returns the handle for name with bounded retries under policy.
// Handle retry configs are set per handle, never on the client (the SDK
// merges handle options into a shared config otherwise).
func (s *Store) object(cl *storage.Client, name string, policy storage.RetryPolicy, a *attempts) *storage.ObjectHandle {
	if a == nil {
		a = newAttempts(1)
	}
	return cl.Bucket(s.bucket).Object(name).Retryer(
		storage.WithMaxAttempts(maxAttempts),
		storage.WithBackoff(retryBackoff),
		storage.WithPolicy(policy),
		storage.WithErrorFunc(a.shouldRetry),
	)
}

func (s *Store) begin(ctx context.Context, key string) (*storage.Client, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	name, err := s.full(key)
	if err != nil {
		return nil, "", err
	}
	cl, err := s.conn.get(ctx)
	if err != nil {
		return nil, "", s.classify(ctx, "connect", name, err)
	}
	return cl, name, nil
}

// Get implements delta.Storage.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	cl, name, err := s.begin(ctx, key)
	if err != nil {
		return nil, err
	}
	r, err := s.object(cl, name, storage.RetryIdempotent, nil).NewReader(ctx)
	if err != nil {
		return nil, s.classify(ctx, "get", name, err)
	}
	defer r.Close()
	var buf bytes.Buffer
	if n := r.Attrs.Size; n > 0 {
		buf.Grow(int(n))
	}
	if _, err := buf.ReadFrom(r); err != nil {
		return nil, s.classify(ctx, "get", name, err)
	}
	return buf.Bytes(), nil
}

// Open implements delta.Storage: reads are ranged requests on the
// generation seen at Open, so an object replaced meanwhile never mixes.
func (s *Store) Open(ctx context.Context, key string) (delta.ReadAtCloser, int64, error) {
	cl, name, err := s.begin(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	obj := s.object(cl, name, storage.RetryIdempotent, nil)
	attrs, err := obj.Attrs(ctx)
	if err != nil {
		return nil, 0, s.classify(ctx, "open", name, err)
	}
	return &reader{s: s, ctx: ctx, name: name, obj: obj.Generation(attrs.Generation), size: attrs.Size}, attrs.Size, nil
}

// List implements delta.Storage: one delimited listing from dir/from.
func (s *Store) List(ctx context.Context, dir, from string) ([]delta.FileInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d := strings.Trim(path.Clean("/"+dir), "/")
	rel := ""
	if d != "" {
		rel = d + "/"
	}
	cl, err := s.conn.get(ctx)
	if err != nil {
		return nil, s.classify(ctx, "connect", s.prefix+rel, err)
	}
	q := &storage.Query{Prefix: s.prefix + rel, Delimiter: "/", StartOffset: s.prefix + rel + from}
	if err := q.SetAttrSelection([]string{"Name", "Size", "Updated"}); err != nil {
		return nil, err
	}
	it := cl.Bucket(s.bucket).Retryer(storage.WithMaxAttempts(maxAttempts), storage.WithBackoff(retryBackoff)).Objects(ctx, q)
	out := make([]delta.FileInfo, 0, 16)
	for {
		a, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			return nil, s.classify(ctx, "list", q.Prefix, err)
		}
		fi := delta.FileInfo{}
		if a.Prefix != "" {
			fi.Name, fi.IsDir = strings.TrimSuffix(strings.TrimPrefix(a.Prefix, q.Prefix), "/"), true
		} else {
			fi.Name, fi.Size, fi.ModTime = strings.TrimPrefix(a.Name, q.Prefix), a.Size, a.Updated
		}
		// "" is a folder placeholder object (dir/); a prefix can pass
		// StartOffset with a name below from ("a/" vs from "a-").
		if fi.Name == "" || strings.Contains(fi.Name, "/") || fi.Name < from {
			continue
		}
		fi.Key = rel + fi.Name
		out = append(out, fi)
	}
	// GCS orders by full name: "a.json" before the prefix "a/", while
	// base names sort "a" first.
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// WalkFiles implements delta.Walker: every object under dir, recursively.
func (s *Store) WalkFiles(ctx context.Context, dir string) ([]delta.FileInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d := strings.Trim(path.Clean("/"+dir), "/")
	rel := ""
	if d != "" {
		rel = d + "/"
	}
	cl, err := s.conn.get(ctx)
	if err != nil {
		return nil, s.classify(ctx, "connect", s.prefix+rel, err)
	}
	q := &storage.Query{Prefix: s.prefix + rel}
	if err := q.SetAttrSelection([]string{"Name", "Size", "Updated"}); err != nil {
		return nil, err
	}
	it := cl.Bucket(s.bucket).Retryer(storage.WithMaxAttempts(maxAttempts), storage.WithBackoff(retryBackoff)).Objects(ctx, q)
	var out []delta.FileInfo
	for {
		a, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			return nil, s.classify(ctx, "walk", q.Prefix, err)
		}
		k := strings.TrimPrefix(a.Name, s.prefix)
		if k == "" || strings.HasSuffix(k, "/") {
			continue
		}
		out = append(out, delta.FileInfo{Name: path.Base(k), Key: k, Size: a.Size, ModTime: a.Updated})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// chunks is how many requests an upload of data takes.
func chunks(data []byte) int { return len(data)/chunkSize + 1 }

// write uploads data to name: one request up to chunkSize, else a
// resumable upload in chunks. The object appears only when complete.
func (s *Store) write(ctx context.Context, obj *storage.ObjectHandle, name string, data []byte) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel() // aborts the upload if Close is not reached
	w := obj.NewWriter(wctx)
	w.ChunkSize = chunkSize
	w.ChunkRetryDeadline = chunkRetryDeadline
	w.ContentType = "application/octet-stream"
	if strings.HasSuffix(name, ".json") {
		w.ContentType = "application/json"
	}
	w.CRC32C, w.SendCRC32C = crc32.Checksum(data, castagnoli), true
	if _, err := w.Write(data); err != nil {
		_ = w.Close()
		return err
	}
	return w.Close()
}

// PutIfAbsent implements delta.Storage with ifGenerationMatch=0.
func (s *Store) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	cl, name, err := s.begin(ctx, key)
	if err != nil {
		return err
	}
	a := newAttempts(chunks(data))
	obj := s.object(cl, name, storage.RetryIdempotent, a)
	err = s.write(ctx, obj.If(storage.Conditions{DoesNotExist: true}), name, data)
	if err == nil {
		return nil
	}
	cerr := s.classify(ctx, "put-if-absent", name, err)
	if delta.IsExists(cerr) && a.retried.Load() {
		// A retried attempt lost to an existing object: it may be our own
		// first attempt, which landed but whose answer was lost. The
		// object holding exactly our bytes means we created it.
		got, gerr := s.Get(ctx, key)
		switch {
		case gerr == nil && bytes.Equal(got, data):
			return nil
		case gerr != nil:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return delta.Transient(fmt.Errorf("gcs put-if-absent %s: outcome unknown (precondition failed after a retry, read-back failed: %v)", s.url(name), gerr))
		}
	}
	return cerr
}

// Put implements delta.Storage: an overwrite (GCS replaces the object
// atomically on completion). Retried like an idempotent request: writing
// the same bytes twice leaves the same object.
func (s *Store) Put(ctx context.Context, key string, data []byte) error {
	cl, name, err := s.begin(ctx, key)
	if err != nil {
		return err
	}
	err = s.write(ctx, s.object(cl, name, storage.RetryAlways, newAttempts(chunks(data))), name, data)
	return s.classify(ctx, "put", name, err)
}

// Delete implements delta.Storage; a missing object is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	cl, name, err := s.begin(ctx, key)
	if err != nil {
		return err
	}
	err = s.object(cl, name, storage.RetryAlways, nil).Delete(ctx)
	if errors.Is(err, storage.ErrObjectNotExist) && ctx.Err() == nil {
		return nil
	}
	return s.classify(ctx, "delete", name, err)
}

// Stat implements delta.Storage.
func (s *Store) Stat(ctx context.Context, key string) (delta.FileInfo, error) {
	cl, name, err := s.begin(ctx, key)
	if err != nil {
		return delta.FileInfo{}, err
	}
	a, err := s.object(cl, name, storage.RetryIdempotent, nil).Attrs(ctx)
	if err != nil {
		return delta.FileInfo{}, s.classify(ctx, "stat", name, err)
	}
	return delta.FileInfo{Name: path.Base(name), Key: strings.TrimPrefix(name, s.prefix), Size: a.Size, ModTime: a.Updated}, nil
}

// reader implements delta.ReadAtCloser with ranged reads. ReadAt is safe
// for concurrent use; Read and Seek share a position like an *os.File.
type reader struct {
	s    *Store
	ctx  context.Context
	name string
	obj  *storage.ObjectHandle
	size int64

	mu     sync.Mutex
	pos    int64
	stream *storage.Reader // open at streamPos, for sequential Reads
	spos   int64
	closed bool
}

func (r *reader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("gcs read %s: negative offset %d", r.s.url(r.name), off)
	}
	if off >= r.size {
		return 0, io.EOF
	}
	n := int64(len(p))
	if rest := r.size - off; n > rest {
		n = rest
	}
	if n == 0 {
		return 0, nil
	}
	rr, err := r.obj.NewRangeReader(r.ctx, off, n)
	if err != nil {
		return 0, r.s.classify(r.ctx, "read", r.name, err)
	}
	defer rr.Close()
	got, err := io.ReadFull(rr, p[:n])
	if err != nil {
		return got, r.s.classify(r.ctx, "read", r.name, err)
	}
	if got < len(p) {
		return got, io.EOF
	}
	return got, nil
}

func (r *reader) Read(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, fmt.Errorf("gcs read %s: reader closed", r.s.url(r.name))
	}
	if r.pos >= r.size {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	if r.stream != nil && r.spos != r.pos {
		r.stream.Close()
		r.stream = nil
	}
	if r.stream == nil {
		st, err := r.obj.NewRangeReader(r.ctx, r.pos, -1)
		if err != nil {
			return 0, r.s.classify(r.ctx, "read", r.name, err)
		}
		r.stream, r.spos = st, r.pos
	}
	n, err := r.stream.Read(p)
	r.pos += int64(n)
	r.spos = r.pos
	if err == io.EOF {
		r.stream.Close()
		r.stream = nil
		if r.pos < r.size {
			return n, delta.Transient(fmt.Errorf("gcs read %s: stream ended at %d of %d bytes", r.s.url(r.name), r.pos, r.size))
		}
		return n, io.EOF
	}
	if err != nil {
		r.stream.Close()
		r.stream = nil
		return n, r.s.classify(r.ctx, "read", r.name, err)
	}
	return n, nil
}

func (r *reader) Seek(offset int64, whence int) (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	abs, err := delta.SeekOffset(r.pos, r.size, offset, whence)
	if err != nil {
		return 0, fmt.Errorf("gcs seek %s: %w", r.s.url(r.name), err)
	}
	r.pos = abs
	return abs, nil
}

func (r *reader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	if r.stream != nil {
		err := r.stream.Close()
		r.stream = nil
		return err
	}
	return nil
}
