// Package azstore is the delta.Storage backend for Azure Blob Storage and
// ADLS Gen2 (abfss://container@account.dfs.core.windows.net/path and
// az://container/path). Both forms are served through the Blob endpoint
// (https://account.blob.core.windows.net): ADLS Gen2 accounts serve the Blob
// API too, and it has what the Delta protocol needs, a conditional create
// (If-None-Match: *) that lets exactly one writer own a commit version.
//
// Importing the package registers it for the abfss and az schemes
// (delta.RegisterBackend). Credentials, first match wins:
//
//   - AZURE_STORAGE_CONNECTION_STRING (AccountName/AccountKey, BlobEndpoint,
//     or SharedAccessSignature; Azurite's development connection string works);
//   - AZURE_STORAGE_KEY: a shared key for the account;
//   - AZURE_STORAGE_SAS_TOKEN: a SAS token appended to every request;
//   - otherwise azidentity's default chain: environment service principal
//     (AZURE_TENANT_ID, AZURE_CLIENT_ID, AZURE_CLIENT_SECRET or certificate),
//     workload identity, managed identity, Azure CLI, Azure Developer CLI.
//
// The account of an abfss:// location is the host's first label; for az://
// it is delta.AzureOptions.Account, else AZURE_STORAGE_ACCOUNT, else the
// connection string's AccountName. AzureOptions.Endpoint replaces the service
// URL (an emulator: http://127.0.0.1:10000/devstoreaccount1).
package azstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/cdcsink/cdc-sink/delta"
)

func init() {
	delta.RegisterBackend(open, "abfss", "az")
}

// BlockSize is the block size of staged uploads: an object larger than
// this is uploaded as blocks (StageBlock, BlockUploadConcurrency at a time)
// and committed with one Put Block List, which carries PutIfAbsent's
// If-None-Match condition.
const BlockSize = 8 << 20

// BlockUploadConcurrency is how many blocks of one object are staged at once.
const BlockUploadConcurrency = 4

// retryOptions bounds the SDK's own retries: a few quick ones for a
// throttled or briefly unavailable service; the pipeline's retry loop owns
// the long ones. TryTimeout turns a hung request into a transient error.
var retryOptions = policy.RetryOptions{
	MaxRetries:    3,
	RetryDelay:    200 * time.Millisecond,
	MaxRetryDelay: 3 * time.Second,
	TryTimeout:    2 * time.Minute,
}

// transport replaces the HTTP transport (tests); nil: the SDK's.
var transport policy.Transporter

// Store is a delta.Storage on one container, rooted at a key prefix.
// Safe for concurrent use.
type Store struct {
	client    *container.Client
	account   string
	container string
	prefix    string // "" or "path/inside/container" (no slashes at the ends)
}

// Open returns a Store for an abfss:// or az:// location. It builds the
// client only: no request is sent, so a wrong credential or a missing
// container shows on the first operation.
func Open(ctx context.Context, l delta.Location, opts delta.AzureOptions) (*Store, error) {
	cfg, err := resolve(l, opts, os.Getenv)
	if err != nil {
		return nil, &delta.LocationError{Location: l.String(), Scheme: l.Scheme, Reason: err.Error(), Err: delta.ErrInvalidLocation}
	}
	copts := &container.ClientOptions{ClientOptions: policy.ClientOptions{Retry: retryOptions, Transport: transport}}
	curl := strings.TrimSuffix(cfg.serviceURL, "/") + "/" + url.PathEscape(l.Bucket)
	var c *container.Client
	switch {
	case cfg.accountKey != "":
		cred, err := container.NewSharedKeyCredential(cfg.account, cfg.accountKey)
		if err != nil {
			return nil, fmt.Errorf("azure storage account %q: shared key: %w", cfg.account, err)
		}
		c, err = container.NewClientWithSharedKeyCredential(curl, cred, copts)
		if err != nil {
			return nil, fmt.Errorf("azure container %s: %w", redactURL(curl), err)
		}
	case cfg.sas != "":
		c, err = container.NewClientWithNoCredential(curl+"?"+strings.TrimPrefix(cfg.sas, "?"), copts)
		if err != nil {
			return nil, fmt.Errorf("azure container %s: %w", redactURL(curl), err)
		}
	default:
		cred, err := azidentity.NewDefaultAzureCredential(&azidentity.DefaultAzureCredentialOptions{
			ClientOptions: policy.ClientOptions{Retry: retryOptions, Transport: transport},
		})
		if err != nil {
			return nil, fmt.Errorf("azure storage account %q: no credential (set AZURE_STORAGE_CONNECTION_STRING, AZURE_STORAGE_KEY, or an identity azidentity's default chain finds): %w", cfg.account, err)
		}
		c, err = container.NewClient(curl, cred, copts)
		if err != nil {
			return nil, fmt.Errorf("azure container %s: %w", redactURL(curl), err)
		}
	}
	return &Store{client: c, account: cfg.account, container: l.Bucket, prefix: strings.Trim(l.Path, "/")}, nil
}

func open(ctx context.Context, l delta.Location, opts delta.StorageOptions) (delta.Storage, error) {
	return Open(ctx, l, opts.Azure)
}

// config is what the location, the options and the environment resolve to.
type config struct {
	account    string
	serviceURL string
	accountKey string
	sas        string
}

// resolve works out account, service URL and credential kind without I/O.
func resolve(l delta.Location, opts delta.AzureOptions, getenv func(string) string) (config, error) {
	var cfg config
	var cs map[string]string
	if s := getenv("AZURE_STORAGE_CONNECTION_STRING"); s != "" {
		var err error
		if cs, err = parseConnectionString(s); err != nil {
			return cfg, fmt.Errorf("AZURE_STORAGE_CONNECTION_STRING: %w", err)
		}
	}
	suffix := "core.windows.net"
	switch l.Scheme {
	case "abfss":
		host := strings.ToLower(l.Account)
		name, rest, _ := strings.Cut(host, ".")
		if name == "" {
			return cfg, fmt.Errorf("no storage account in host %q", l.Account)
		}
		cfg.account = name
		switch {
		case strings.HasPrefix(rest, "dfs."):
			suffix = strings.TrimPrefix(rest, "dfs.")
		case strings.HasPrefix(rest, "blob."):
			suffix = strings.TrimPrefix(rest, "blob.")
		case opts.Endpoint == "":
			return cfg, fmt.Errorf("host %q: want account.dfs.core.windows.net (or set storage.azure.endpoint)", l.Account)
		}
	case "az":
		cfg.account = opts.Account
		if cfg.account == "" {
			cfg.account = getenv("AZURE_STORAGE_ACCOUNT")
		}
		if cfg.account == "" {
			cfg.account = cs["accountname"]
		}
		if cfg.account == "" {
			return cfg, errors.New("az:// names no storage account: set storage.azure.account (CDC_SINK_STORAGE_AZURE_ACCOUNT), AZURE_STORAGE_ACCOUNT or AZURE_STORAGE_CONNECTION_STRING, or use abfss://container@account.dfs.core.windows.net/path")
		}
	default:
		return cfg, fmt.Errorf("scheme %q is not an Azure scheme", l.Scheme)
	}
	if cs != nil {
		if n := cs["accountname"]; n != "" && !strings.EqualFold(n, cfg.account) {
			return cfg, fmt.Errorf("AZURE_STORAGE_CONNECTION_STRING is for account %q, the location for %q", n, cfg.account)
		}
		cfg.accountKey = cs["accountkey"]
		cfg.sas = cs["sharedaccesssignature"]
		if e := cs["blobendpoint"]; e != "" {
			cfg.serviceURL = e
		} else if e := cs["endpointsuffix"]; e != "" {
			suffix = e
		}
		if p := cs["defaultendpointsprotocol"]; p != "" && cfg.serviceURL == "" {
			cfg.serviceURL = p + "://" + cfg.account + ".blob." + suffix
		}
		if cfg.accountKey == "" && cfg.sas == "" {
			return cfg, errors.New("AZURE_STORAGE_CONNECTION_STRING has neither AccountKey nor SharedAccessSignature")
		}
	} else if k := getenv("AZURE_STORAGE_KEY"); k != "" {
		cfg.accountKey = k
	} else if s := getenv("AZURE_STORAGE_SAS_TOKEN"); s != "" {
		cfg.sas = s
	}
	if opts.Endpoint != "" {
		cfg.serviceURL = opts.Endpoint
	}
	if cfg.serviceURL == "" {
		cfg.serviceURL = "https://" + cfg.account + ".blob." + suffix
	}
	u, err := url.Parse(cfg.serviceURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" {
		return cfg, fmt.Errorf("endpoint %q: want http(s)://host[:port][/path] without a query", redactURL(cfg.serviceURL))
	}
	return cfg, nil
}

// parseConnectionString splits "Key=Value;Key=Value" (keys lower-cased).
// Values may contain '=' (keys in base64, SAS tokens).
func parseConnectionString(s string) (map[string]string, error) {
	m := map[string]string{}
	for part := range strings.SplitSeq(s, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok || k == "" {
			return nil, errors.New("malformed: want Key=Value;Key=Value")
		}
		m[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
	}
	return m, nil
}

// redactURL drops the query (a SAS token) and user info from u.
func redactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		if i := strings.IndexByte(u, '?'); i >= 0 {
			return u[:i]
		}
		return u
	}
	p.RawQuery, p.User, p.Fragment = "", nil, ""
	return p.String()
}

// Account is the storage account name.
func (s *Store) Account() string { return s.account }

// Container is the container name.
func (s *Store) Container() string { return s.container }

// Prefix is the key prefix inside the container ("" for its root).
func (s *Store) Prefix() string { return s.prefix }

// name returns the blob name of key (cleaned like LocalStorage does).
func (s *Store) name(key string) (string, error) {
	clean := strings.TrimPrefix(path.Clean("/"+key), "/")
	if clean == "" {
		if key != "" && key != "." {
			return "", fmt.Errorf("invalid key %q", key)
		}
		return s.prefix, nil
	}
	if s.prefix == "" {
		return clean, nil
	}
	return s.prefix + "/" + clean, nil
}

func (s *Store) blob(op, key string) (*blockblob.Client, string, error) {
	n, err := s.name(key)
	if err != nil {
		return nil, "", err
	}
	if n == "" {
		return nil, "", fmt.Errorf("azure %s: empty key", op)
	}
	return s.client.NewBlockBlobClient(n), n, nil
}

// Get implements delta.Storage.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b, _, err := s.blob("get", key)
	if err != nil {
		return nil, err
	}
	resp, err := b.DownloadStream(ctx, nil)
	if err != nil {
		return nil, s.classify(ctx, "get", key, err)
	}
	body := resp.NewRetryReader(ctx, &blob.RetryReaderOptions{MaxRetries: 3})
	defer body.Close()
	var buf bytes.Buffer
	if resp.ContentLength != nil && *resp.ContentLength > 0 {
		buf.Grow(int(*resp.ContentLength))
	}
	if _, err := buf.ReadFrom(body); err != nil {
		return nil, s.classify(ctx, "get", key, err)
	}
	return buf.Bytes(), nil
}

// Stat implements delta.Storage.
func (s *Store) Stat(ctx context.Context, key string) (delta.FileInfo, error) {
	if err := ctx.Err(); err != nil {
		return delta.FileInfo{}, err
	}
	b, n, err := s.blob("stat", key)
	if err != nil {
		return delta.FileInfo{}, err
	}
	p, err := b.GetProperties(ctx, nil)
	if err != nil {
		return delta.FileInfo{}, s.classify(ctx, "stat", key, err)
	}
	fi := delta.FileInfo{Name: path.Base(n), Key: key}
	if p.ContentLength != nil {
		fi.Size = *p.ContentLength
	}
	if p.LastModified != nil {
		fi.ModTime = *p.LastModified
	}
	return fi, nil
}

// Open implements delta.Storage: the size comes from the blob's properties,
// every Read/ReadAt is one ranged GET under ctx (keep ctx alive while the
// reader is used).
func (s *Store) Open(ctx context.Context, key string) (delta.ReadAtCloser, int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	b, _, err := s.blob("open", key)
	if err != nil {
		return nil, 0, err
	}
	p, err := b.GetProperties(ctx, nil)
	if err != nil {
		return nil, 0, s.classify(ctx, "open", key, err)
	}
	var size int64
	if p.ContentLength != nil {
		size = *p.ContentLength
	}
	// Pin the version read: a Put replacing the object while it is being
	// read fails the ranged reads (412) instead of mixing two versions.
	return &reader{ctx: ctx, s: s, b: b, key: key, size: size, etag: p.ETag}, size, nil
}

// reader reads one blob with ranged GETs.
type reader struct {
	ctx  context.Context
	s    *Store
	b    *blockblob.Client
	key  string
	size int64
	etag *azcore.ETag
	off  int64
}

// ReadAt implements io.ReaderAt.
func (r *reader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("azure read %s: negative offset", r.key)
	}
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	if off >= r.size {
		return 0, io.EOF
	}
	want := int64(len(p))
	if want == 0 {
		return 0, nil
	}
	var eof error
	if off+want > r.size {
		want, eof = r.size-off, io.EOF
	}
	opts := &blob.DownloadStreamOptions{Range: blob.HTTPRange{Offset: off, Count: want}}
	if r.etag != nil {
		opts.AccessConditions = &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: r.etag}}
	}
	resp, err := r.b.DownloadStream(r.ctx, opts)
	if err != nil {
		return 0, r.s.classify(r.ctx, "read", r.key, err)
	}
	body := resp.NewRetryReader(r.ctx, &blob.RetryReaderOptions{MaxRetries: 3})
	defer body.Close()
	n, err := io.ReadFull(body, p[:want])
	if err != nil {
		return n, r.s.classify(r.ctx, "read", r.key, err)
	}
	return n, eof
}

// Read implements io.Reader.
func (r *reader) Read(p []byte) (int, error) {
	if r.off >= r.size {
		return 0, io.EOF
	}
	n, err := r.ReadAt(p, r.off)
	r.off += int64(n)
	if err == io.EOF && n > 0 {
		err = nil
	}
	return n, err
}

// Seek implements io.Seeker.
func (r *reader) Seek(offset int64, whence int) (int64, error) {
	abs, err := delta.SeekOffset(r.off, r.size, offset, whence)
	if err != nil {
		return 0, fmt.Errorf("azure seek %s: %w", r.key, err)
	}
	r.off = abs
	return abs, nil
}

// Close implements io.Closer.
func (r *reader) Close() error { return nil }

// List implements delta.Storage: a hierarchical listing (delimiter "/") of
// the blobs and virtual directories directly inside dir, names >= from,
// sorted, blobs with size and modification time.
func (s *Store) List(ctx context.Context, dir, from string) ([]delta.FileInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n, err := s.name(dir)
	if err != nil {
		return nil, err
	}
	prefix := ""
	if n != "" {
		prefix = n + "/"
	}
	keyDir := strings.Trim(path.Clean("/"+dir), "/")
	keyOf := func(name string) string {
		if keyDir == "" {
			return name
		}
		return keyDir + "/" + name
	}
	var out []delta.FileInfo
	// The service lists in name order; StartFrom would skip the names
	// below from, but its semantics on accounts without a hierarchical
	// namespace and on emulators vary, so names are filtered here.
	pager := s.client.NewListBlobsHierarchyPager("/", &container.ListBlobsHierarchyOptions{Prefix: &prefix})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, s.classify(ctx, "list", dir, err)
		}
		if page.Segment == nil {
			continue
		}
		for _, it := range page.Segment.BlobItems {
			if it.Name == nil {
				continue
			}
			base := strings.TrimPrefix(*it.Name, prefix)
			if base == "" || base < from {
				continue
			}
			fi := delta.FileInfo{Name: base, Key: keyOf(base)}
			if p := it.Properties; p != nil {
				if p.ContentLength != nil {
					fi.Size = *p.ContentLength
				}
				if p.LastModified != nil {
					fi.ModTime = *p.LastModified
				}
			}
			out = append(out, fi)
		}
		for _, bp := range page.Segment.BlobPrefixes {
			if bp.Name == nil {
				continue
			}
			base := strings.TrimSuffix(strings.TrimPrefix(*bp.Name, prefix), "/")
			if base == "" || base < from {
				continue
			}
			out = append(out, delta.FileInfo{Name: base, Key: keyOf(base), IsDir: true})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	// An ADLS Gen2 (hierarchical namespace) directory shows both as a blob
	// and as a prefix: keep one entry, the directory.
	dedup := out[:0]
	for i, fi := range out {
		if i > 0 && dedup[len(dedup)-1].Name == fi.Name {
			dedup[len(dedup)-1].IsDir = dedup[len(dedup)-1].IsDir || fi.IsDir
			continue
		}
		dedup = append(dedup, fi)
	}
	return dedup, nil
}

// WalkFiles implements delta.Walker (vacuum): a flat listing of every blob
// under dir.
func (s *Store) WalkFiles(ctx context.Context, dir string) ([]delta.FileInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n, err := s.name(dir)
	if err != nil {
		return nil, err
	}
	prefix := ""
	if n != "" {
		prefix = n + "/"
	}
	root := ""
	if s.prefix != "" {
		root = s.prefix + "/"
	}
	var out []delta.FileInfo
	// Metadata: on a hierarchical namespace account directories are blobs
	// too, marked hdi_isfolder; they are not files to vacuum.
	pager := s.client.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: &prefix, Include: container.ListBlobsInclude{Metadata: true}})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, s.classify(ctx, "walk", dir, err)
		}
		if page.Segment == nil {
			continue
		}
		for _, it := range page.Segment.BlobItems {
			if it.Name == nil || strings.HasSuffix(*it.Name, "/") {
				continue
			}
			fi := delta.FileInfo{Name: path.Base(*it.Name), Key: strings.TrimPrefix(*it.Name, root)}
			if isFolder(it.Metadata) {
				continue
			}
			if p := it.Properties; p != nil {
				if p.ResourceType != nil && *p.ResourceType == "directory" {
					continue
				}
				if p.ContentLength != nil {
					fi.Size = *p.ContentLength
				}
				if p.LastModified != nil {
					fi.ModTime = *p.LastModified
				}
			}
			out = append(out, fi)
		}
	}
	return out, nil
}

// isFolder reports the metadata of an ADLS Gen2 directory blob.
func isFolder(md map[string]*string) bool {
	for k, v := range md {
		if strings.EqualFold(k, "hdi_isfolder") && v != nil && strings.EqualFold(*v, "true") {
			return true
		}
	}
	return false
}

// upload writes data; objects larger than BlockSize are staged in blocks
// and committed with one Put Block List carrying cond.
func (s *Store) upload(ctx context.Context, op, key string, data []byte, cond *blob.AccessConditions) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b, _, err := s.blob(op, key)
	if err != nil {
		return err
	}
	_, err = b.UploadStream(ctx, bytes.NewReader(data), &blockblob.UploadStreamOptions{
		BlockSize:        BlockSize,
		Concurrency:      BlockUploadConcurrency,
		AccessConditions: cond,
	})
	if err != nil {
		return s.classify(ctx, op, key, err)
	}
	return nil
}

// PutIfAbsent implements delta.Storage with If-None-Match: * (on the single
// Put Blob, or on the Put Block List of a staged upload). The SDK does not
// retry it: a retry of a create that landed would report "exists" for the
// writer that won; a failure is returned transient instead, and the
// pipeline's retry finds its own commit (docs/architecture.md).
func (s *Store) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	rctx := policy.WithRetryOptions(ctx, policy.RetryOptions{MaxRetries: -1, TryTimeout: retryOptions.TryTimeout})
	anyETag := azcore.ETagAny
	err := s.upload(rctx, "put-if-absent", key, data, &blob.AccessConditions{
		ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: &anyETag},
	})
	return err
}

// Put implements delta.Storage: a create-or-replace (Put Blob, or staged
// blocks and Put Block List: readers see the old or the new object).
func (s *Store) Put(ctx context.Context, key string, data []byte) error {
	return s.upload(ctx, "put", key, data, nil)
}

// Delete implements delta.Storage (a missing blob is not an error).
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b, _, err := s.blob("delete", key)
	if err != nil {
		return err
	}
	_, err = b.Delete(ctx, nil)
	if err != nil {
		err = s.classify(ctx, "delete", key, err)
		if delta.IsNotFound(err) {
			return nil
		}
		return err
	}
	return nil
}

var (
	_ delta.Storage = (*Store)(nil)
	_ delta.Walker  = (*Store)(nil)
)
