// Package s3store is the delta.Storage backend for Amazon S3 and
// S3-compatible object stores (SeaweedFS, MinIO, Cloudflare R2…), on the AWS
// SDK for Go v2. Importing it registers the s3:// and s3a:// schemes with
// delta.RegisterBackend.
//
// Commit exclusivity is S3's conditional write: PutIfAbsent sends
// If-None-Match: * (on PutObject, or on CompleteMultipartUpload for large
// objects), so of several writers racing for one key exactly one succeeds
// and the others get 412 Precondition Failed (delta.ErrObjectExists).
package s3store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/cdcsink/cdc-sink/delta"
)

func init() {
	delta.RegisterBackend(open, "s3", "s3a")
}

// open is the delta.Backend: it builds a client from the SDK's default
// chain without any request (credentials are resolved on first use).
func open(ctx context.Context, l delta.Location, opts delta.StorageOptions) (delta.Storage, error) {
	st, err := New(ctx, Config{Bucket: l.Bucket, Prefix: l.Path, S3: opts.S3})
	if err != nil {
		return nil, &delta.LocationError{Location: l.String(), Scheme: l.Scheme, Reason: err.Error(), Err: delta.ErrInvalidLocation}
	}
	return st, nil
}

const (
	// DefaultPartSize is the multipart part size, and the object size above
	// which Put and PutIfAbsent upload in parts.
	DefaultPartSize = 16 << 20
	// MinPartSize is S3's smallest part (but the last).
	MinPartSize = 5 << 20
	// DefaultMaxAttempts bounds the SDK's own quick retries of one request
	// (standard retryer); longer waits belong to the pipeline's retry loop.
	DefaultMaxAttempts = 3
	// readAhead is the smallest ranged GET Open's reader makes: parquet
	// readers ask for the 8-byte tail, then the footer, then column chunks.
	readAhead   = 64 << 10
	partWorkers = 4
	// responseTimeout bounds the wait for a response's headers once the
	// request is sent (a 16 MiB part included).
	responseTimeout = 2 * time.Minute
)

// Config says where a Store is rooted and how to reach it.
type Config struct {
	Bucket string
	// Prefix is the key prefix of the store root inside the bucket
	// (the table path), without leading or trailing slash; "" = bucket root.
	Prefix string
	// S3 overrides the SDK's defaults (endpoint, region, path-style).
	S3 delta.S3Options
	// PartSize overrides DefaultPartSize (at least MinPartSize).
	PartSize int64
	// MaxAttempts overrides DefaultMaxAttempts (1 = no SDK retries).
	MaxAttempts int
	// HTTPClient replaces the SDK's HTTP client (tests inject faults).
	HTTPClient aws.HTTPClient
}

// Store is a delta.Storage on one bucket/prefix. Safe for concurrent use.
type Store struct {
	client   *s3.Client
	bucket   string
	prefix   string // "" or "some/prefix/"
	partSize int64
}

// New returns a Store for cfg. Credentials and region come from the SDK's
// default chain (environment, shared config and AWS_PROFILE, web identity /
// IRSA, ECS and EC2 instance metadata), then cfg.S3 overrides. No request
// is made: a wrong credential shows on the first operation.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("s3: missing bucket")
	}
	attempts := cfg.MaxAttempts
	if attempts <= 0 {
		attempts = DefaultMaxAttempts
	}
	loaders := []func(*config.LoadOptions) error{
		config.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = attempts
				o.MaxBackoff = 2 * time.Second
				// The pipeline's retry loop paces long outages; no
				// client-side retry quota on top of it.
				o.RateLimiter = ratelimit.None
			})
		}),
	}
	if cfg.S3.Region != "" {
		loaders = append(loaders, config.WithRegion(cfg.S3.Region))
	}
	if cfg.HTTPClient == nil {
		// A server that accepts a request and never answers must become a
		// (transient) timeout, not a commit stuck forever.
		loaders = append(loaders, config.WithHTTPClient(awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
			t.ResponseHeaderTimeout = responseTimeout
			if cfg.S3.ResponseTimeout > 0 {
				t.ResponseHeaderTimeout = cfg.S3.ResponseTimeout
			}
		})))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, loaders...)
	if err != nil {
		return nil, fmt.Errorf("s3: load AWS configuration: %w", err)
	}
	if awsCfg.Region == "" {
		// S3-compatible stores ignore the region but SigV4 needs one; on AWS
		// a wrong region is refused with a clear redirect error.
		awsCfg.Region = "us-east-1"
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if cfg.S3.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.S3.Endpoint)
		}
		o.UsePathStyle = cfg.S3.PathStyle
		if cfg.HTTPClient != nil {
			o.HTTPClient = cfg.HTTPClient
		}
		// S3-compatible stores often return no response checksum: not
		// worth a log line per request.
		o.DisableLogOutputChecksumValidationSkipped = true
	})
	part := cfg.PartSize
	if part <= 0 {
		part = DefaultPartSize
	}
	part = max(part, MinPartSize)
	prefix := strings.Trim(cfg.Prefix, "/")
	if prefix != "" {
		prefix += "/"
	}
	return &Store{client: client, bucket: cfg.Bucket, prefix: prefix, partSize: part}, nil
}

// Client returns the underlying S3 client.
func (s *Store) Client() *s3.Client { return s.client }

// Bucket returns the bucket name.
func (s *Store) Bucket() string { return s.bucket }

// Prefix returns the key prefix of the root ("" or ending in "/").
func (s *Store) Prefix() string { return s.prefix }

// objectKey maps a store key to the bucket key (cleaned like LocalStorage).
func (s *Store) objectKey(key string) (string, error) {
	clean := strings.TrimPrefix(path.Clean("/"+key), "/")
	if clean == "" {
		return "", fmt.Errorf("s3: invalid key %q", key)
	}
	return s.prefix + clean, nil
}

// dirPrefix maps a store directory to a listing prefix ending in "/" (or
// the root prefix).
func (s *Store) dirPrefix(dir string) string {
	clean := strings.TrimPrefix(path.Clean("/"+dir), "/")
	if clean == "" {
		return s.prefix
	}
	return s.prefix + clean + "/"
}

func (s *Store) url(objKey string) string { return "s3://" + s.bucket + "/" + objKey }

// Get implements delta.Storage.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	k, err := s.objectKey(key)
	if err != nil {
		return nil, err
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &k})
	if err != nil {
		return nil, s.classify(ctx, "get", k, err)
	}
	defer out.Body.Close()
	var buf bytes.Buffer
	if n := aws.ToInt64(out.ContentLength); n > 0 {
		buf.Grow(int(n))
	}
	if _, err := buf.ReadFrom(out.Body); err != nil {
		return nil, s.classify(ctx, "get", k, err)
	}
	return buf.Bytes(), nil
}

// Stat implements delta.Storage (HeadObject).
func (s *Store) Stat(ctx context.Context, key string) (delta.FileInfo, error) {
	if err := ctx.Err(); err != nil {
		return delta.FileInfo{}, err
	}
	k, err := s.objectKey(key)
	if err != nil {
		return delta.FileInfo{}, err
	}
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &k})
	if err != nil {
		return delta.FileInfo{}, s.classify(ctx, "stat", k, err)
	}
	return delta.FileInfo{Name: path.Base(k), Key: strings.TrimPrefix(k, s.prefix),
		Size: aws.ToInt64(out.ContentLength), ModTime: aws.ToTime(out.LastModified)}, nil
}

// Delete implements delta.Storage; a missing key is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	k, err := s.objectKey(key)
	if err != nil {
		return err
	}
	_, err = s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &k})
	if err != nil {
		if cerr := s.classify(ctx, "delete", k, err); !delta.IsNotFound(cerr) {
			return cerr
		}
	}
	return nil
}

// List implements delta.Storage: ListObjectsV2 with Delimiter "/" and
// StartAfter, so a log listing from version v reads only keys >= v.
func (s *Store) List(ctx context.Context, dir, from string) ([]delta.FileInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	prefix := s.dirPrefix(dir)
	base := strings.TrimPrefix(prefix, s.prefix)
	in := &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: aws.String(prefix), Delimiter: aws.String("/")}
	if from != "" {
		// StartAfter is exclusive; everything >= from is > from minus its
		// last byte. The few extra keys are filtered below.
		in.StartAfter = aws.String(prefix + from[:len(from)-1])
	}
	var out []delta.FileInfo
	p := s3.NewListObjectsV2Paginator(s.client, in)
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, s.classify(ctx, "list", prefix, err)
		}
		for _, o := range page.Contents {
			name := strings.TrimPrefix(aws.ToString(o.Key), prefix)
			if name == "" || strings.Contains(name, "/") || name < from {
				continue // a directory marker
			}
			out = append(out, delta.FileInfo{Name: name, Key: base + name, Size: aws.ToInt64(o.Size), ModTime: aws.ToTime(o.LastModified)})
		}
		for _, cp := range page.CommonPrefixes {
			name := strings.TrimSuffix(strings.TrimPrefix(aws.ToString(cp.Prefix), prefix), "/")
			if name == "" || name < from {
				continue
			}
			out = append(out, delta.FileInfo{Name: name, Key: base + name, IsDir: true})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// WalkFiles implements delta.Walker (vacuum): every object under dir.
func (s *Store) WalkFiles(ctx context.Context, dir string) ([]delta.FileInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	prefix := s.dirPrefix(dir)
	var out []delta.FileInfo
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: aws.String(prefix)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, s.classify(ctx, "list", prefix, err)
		}
		for _, o := range page.Contents {
			k := aws.ToString(o.Key)
			if strings.HasSuffix(k, "/") {
				continue
			}
			out = append(out, delta.FileInfo{Name: path.Base(k), Key: strings.TrimPrefix(k, s.prefix),
				Size: aws.ToInt64(o.Size), ModTime: aws.ToTime(o.LastModified)})
		}
	}
	return out, nil
}

// Put implements delta.Storage: a plain PutObject (multipart above the
// part size), atomic on S3 (readers see the old or the new object).
func (s *Store) Put(ctx context.Context, key string, data []byte) error {
	return s.put(ctx, "put", key, data, false)
}

// PutIfAbsent implements delta.Storage with If-None-Match: *. It is never
// retried by the SDK: a retry after an attempt whose outcome is unknown
// (timeout after the request was sent) would see its own object as 412
// and report a lost race. Such failures are transient and the caller
// decides (merge finds its own commit through its txn action).
func (s *Store) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	return s.put(ctx, "put-if-absent", key, data, true)
}

var star = aws.String("*")

func noRetry(o *s3.Options) { o.Retryer = aws.NopRetryer{} }

func (s *Store) put(ctx context.Context, op, key string, data []byte, ifAbsent bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	k, err := s.objectKey(key)
	if err != nil {
		return err
	}
	if int64(len(data)) > s.partSize {
		return s.putMultipart(ctx, op, k, data, ifAbsent)
	}
	in := &s3.PutObjectInput{Bucket: &s.bucket, Key: &k, Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data)))}
	var optFns []func(*s3.Options)
	if ifAbsent {
		in.IfNoneMatch = star
		optFns = append(optFns, noRetry)
	}
	if _, err := s.client.PutObject(ctx, in, optFns...); err != nil {
		return s.classify(ctx, op, k, err)
	}
	return nil
}

// putMultipart uploads data in parts (partWorkers at a time). For
// PutIfAbsent the condition goes on CompleteMultipartUpload, which S3
// evaluates atomically when the object becomes visible. Any failure aborts
// the upload so that no parts are left billed.
func (s *Store) putMultipart(ctx context.Context, op, k string, data []byte, ifAbsent bool) (err error) {
	if ifAbsent {
		// Cheap early answer for the common loser: do not upload 100 MB to
		// be refused (the condition on Complete stays the real guard).
		if _, herr := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &k}); herr == nil {
			return fmt.Errorf("s3 %s %s: %w", op, s.url(k), delta.ErrObjectExists)
		} else if cerr := s.classify(ctx, op, k, herr); !delta.IsNotFound(cerr) {
			return cerr
		}
	}
	cr, err := s.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &s.bucket, Key: &k,
		ChecksumAlgorithm: types.ChecksumAlgorithmCrc32})
	if err != nil {
		return s.classify(ctx, op, k, err)
	}
	uploadID := cr.UploadId
	defer func() {
		if err != nil {
			// Abort even if ctx is cancelled, but not forever.
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_, _ = s.client.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{Bucket: &s.bucket, Key: &k, UploadId: uploadID})
		}
	}()
	n := (int64(len(data)) + s.partSize - 1) / s.partSize
	parts := make([]types.CompletedPart, n)
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		next     = make(chan int64)
	)
	for range min(int64(partWorkers), n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				lo := i * s.partSize
				hi := min(lo+s.partSize, int64(len(data)))
				num := int32(i + 1)
				up, perr := s.client.UploadPart(pctx, &s3.UploadPartInput{Bucket: &s.bucket, Key: &k, UploadId: uploadID,
					PartNumber: aws.Int32(num), Body: bytes.NewReader(data[lo:hi]), ContentLength: aws.Int64(hi - lo),
					ChecksumAlgorithm: types.ChecksumAlgorithmCrc32})
				if perr != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = s.classify(ctx, op, k, fmt.Errorf("part %d: %w", num, perr))
						cancel()
					}
					mu.Unlock()
					continue
				}
				parts[i] = types.CompletedPart{ETag: up.ETag, PartNumber: aws.Int32(num), ChecksumCRC32: up.ChecksumCRC32}
			}
		}()
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-pctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	in := &s3.CompleteMultipartUploadInput{Bucket: &s.bucket, Key: &k, UploadId: uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}}
	var optFns []func(*s3.Options)
	if ifAbsent {
		in.IfNoneMatch = star
		optFns = append(optFns, noRetry)
	}
	if _, err := s.client.CompleteMultipartUpload(ctx, in, optFns...); err != nil {
		return s.classify(ctx, op, k, err)
	}
	return nil
}

// Open implements delta.Storage: HeadObject for the size, then ranged GETs
// behind the returned reader. The reader uses ctx for its requests.
func (s *Store) Open(ctx context.Context, key string) (delta.ReadAtCloser, int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	k, err := s.objectKey(key)
	if err != nil {
		return nil, 0, err
	}
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &k})
	if err != nil {
		return nil, 0, s.classify(ctx, "open", k, err)
	}
	size := aws.ToInt64(out.ContentLength)
	return &reader{s: s, ctx: ctx, key: k, size: size, etag: out.ETag}, size, nil
}

// reader reads one object with ranged GETs. ReadAt is safe for concurrent
// use; Read and Seek share one offset like an *os.File.
type reader struct {
	s    *Store
	ctx  context.Context
	key  string
	size int64
	etag *string // ranged reads must see the object Open saw

	mu     sync.Mutex
	pos    int64
	winOff int64
	win    []byte // last fetched window
	closed bool
}

// ReadAt implements io.ReaderAt.
func (r *reader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("s3 read %s: negative offset", r.s.url(r.key))
	}
	if off >= r.size {
		return 0, io.EOF
	}
	want := min(int64(len(p)), r.size-off)
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return 0, fmt.Errorf("s3 read %s: reader closed", r.s.url(r.key))
	}
	if off >= r.winOff && off+want <= r.winOff+int64(len(r.win)) {
		n := copy(p[:want], r.win[off-r.winOff:])
		r.mu.Unlock()
		return r.eof(n, len(p))
	}
	r.mu.Unlock()
	lo, hi := off, off+want // [lo, hi)
	if want < readAhead {
		if r.size-off <= readAhead {
			// Near the end (the footer): fetch the whole tail once.
			lo, hi = max(0, r.size-readAhead), r.size
		} else {
			hi = off + readAhead
		}
	}
	buf, err := r.fetch(lo, hi)
	if err != nil {
		return 0, err
	}
	n := copy(p[:want], buf[off-lo:])
	if hi-lo <= 4*readAhead {
		r.mu.Lock()
		r.winOff, r.win = lo, buf
		r.mu.Unlock()
	}
	return r.eof(n, len(p))
}

func (r *reader) eof(n, asked int) (int, error) {
	if n < asked {
		return n, io.EOF
	}
	return n, nil
}

func (r *reader) fetch(lo, hi int64) ([]byte, error) {
	if err := r.ctx.Err(); err != nil {
		return nil, err
	}
	out, err := r.s.client.GetObject(r.ctx, &s3.GetObjectInput{Bucket: &r.s.bucket, Key: &r.key,
		Range: aws.String(fmt.Sprintf("bytes=%d-%d", lo, hi-1)), IfMatch: r.etag})
	if err != nil {
		return nil, r.s.classify(r.ctx, "read", r.key, err)
	}
	defer out.Body.Close()
	buf := make([]byte, hi-lo)
	if _, err := io.ReadFull(out.Body, buf); err != nil {
		return nil, r.s.classify(r.ctx, "read", r.key, err)
	}
	return buf, nil
}

// Read implements io.Reader.
func (r *reader) Read(p []byte) (int, error) {
	r.mu.Lock()
	pos := r.pos
	r.mu.Unlock()
	if pos >= r.size {
		return 0, io.EOF
	}
	n, err := r.ReadAt(p, pos)
	r.mu.Lock()
	r.pos = pos + int64(n)
	r.mu.Unlock()
	if err == io.EOF && n > 0 {
		err = nil
	}
	return n, err
}

// Seek implements io.Seeker.
func (r *reader) Seek(offset int64, whence int) (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	abs, err := delta.SeekOffset(r.pos, r.size, offset, whence)
	if err != nil {
		return 0, fmt.Errorf("s3 seek %s: %w", r.key, err)
	}
	r.pos = abs
	return abs, nil
}

// Close implements io.Closer.
func (r *reader) Close() error {
	r.mu.Lock()
	r.closed, r.win = true, nil
	r.mu.Unlock()
	return nil
}

var _ delta.Storage = (*Store)(nil)
var _ delta.Walker = (*Store)(nil)
