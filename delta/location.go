// Parsing table locations (paths and URLs) and refusing unsupported ones before anything is written.

package delta

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
)

// Table locations are what users write to name a table: a local path, or a
// URL. Every command and the router parse them here, before anything is
// written, so that a typo or a backend we do not have yet is refused instead
// of becoming a local directory (filepath.Clean("s3://x") is "s3:/x").

var (
	// ErrInvalidLocation: the location is malformed or uses a scheme cdc-sink
	// does not know. Use errors.As with *LocationError for details.
	ErrInvalidLocation = errors.New("delta: invalid table location")
	// ErrBackendNotBuilt: the location names an object store (s3, abfss, gs…)
	// whose Storage backend is not in this binary (none registered).
	ErrBackendNotBuilt = errors.New("delta: object storage backend not built into this binary")
)

// LocationError is returned for a refused table location. It matches
// ErrInvalidLocation or ErrBackendNotBuilt with errors.Is.
type LocationError struct {
	Location string // as given
	Scheme   string // "" when there is none
	Reason   string
	Err      error // ErrInvalidLocation or ErrBackendNotBuilt
}

func (e *LocationError) Error() string {
	return fmt.Sprintf("table location %q: %s", e.Location, e.Reason)
}

// Unwrap returns ErrInvalidLocation or ErrBackendNotBuilt.
func (e *LocationError) Unwrap() error { return e.Err }

// Location is a parsed table location.
type Location struct {
	// Scheme is "" for a plain local path, "file" for a file:// URL, or an
	// object store scheme: "s3", "s3a", "abfss", "az", "gs".
	Scheme string
	// Bucket is the bucket (s3, s3a, gs) or container (abfss, az).
	Bucket string
	// Account is the abfss storage account host (account.dfs.core.windows.net).
	Account string
	// Path is the cleaned local path (local), or the key prefix inside the
	// bucket without leading slash (object stores).
	Path string
}

// objectSchemes are recognised object stores; their backends come later.
var objectSchemes = map[string]string{
	"s3": "S3", "s3a": "S3", "abfss": "Azure Data Lake Storage", "az": "Azure Blob Storage", "gs": "Google Cloud Storage",
}

const acceptedForms = "accepted: a local path, file:///path, s3://bucket/path, s3a://, abfss://container@account.dfs.core.windows.net/path, az://container/path, gs://bucket/path"

// schemeRE matches a URL scheme prefix. A plain relative path with a colon
// in its first segment ("a:b") matches too and is refused: write ./a:b.
var schemeRE = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*):`)

// ParseLocation parses a table location: a plain path or file:// URL (local),
// or an s3://, s3a://, abfss://container@account.dfs.core.windows.net/,
// az:// or gs:// URL. It checks syntax only; OpenStorage says whether the
// backend exists. Errors are *LocationError.
func ParseLocation(s string) (Location, error) {
	bad := func(scheme, format string, a ...any) (Location, error) {
		return Location{}, &LocationError{Location: s, Scheme: scheme, Reason: fmt.Sprintf(format, a...), Err: ErrInvalidLocation}
	}
	if strings.TrimSpace(s) == "" {
		return bad("", "empty location")
	}
	m := schemeRE.FindStringSubmatch(s)
	if m == nil {
		return Location{Path: filepath.Clean(s)}, nil
	}
	scheme := strings.ToLower(m[1])
	_, object := objectSchemes[scheme]
	if !object && scheme != "file" {
		return bad(scheme, "unsupported scheme %q (%s; a local path with a colon must start with ./)", scheme, acceptedForms)
	}
	if !strings.HasPrefix(s[len(m[0]):], "//") {
		return bad(scheme, "malformed URL: want %s://…", scheme)
	}
	u, err := url.Parse(s)
	if err != nil {
		return bad(scheme, "malformed URL: %v", err)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return bad(scheme, "query and fragment are not allowed")
	}
	if scheme == "file" {
		if u.Host != "" && u.Host != "localhost" {
			return bad(scheme, "file URL with host %q: only local files (file:///path)", u.Host)
		}
		if u.Path == "" {
			return bad(scheme, "file URL without a path")
		}
		return Location{Scheme: "file", Path: filepath.Clean(u.Path)}, nil
	}
	l := Location{Scheme: scheme, Bucket: u.Host, Path: strings.Trim(u.Path, "/")}
	switch scheme {
	case "abfss":
		if u.User == nil || u.User.Username() == "" || u.Host == "" {
			return bad(scheme, "want abfss://container@account.dfs.core.windows.net/path")
		}
		l.Bucket, l.Account = u.User.Username(), u.Host
	default:
		if u.User != nil {
			return bad(scheme, "credentials do not belong in the location")
		}
		if u.Host == "" {
			return bad(scheme, "missing bucket or container: want %s://bucket/path", scheme)
		}
	}
	return l, nil
}

// IsLocal reports whether the location is on the local filesystem.
func (l Location) IsLocal() bool { return l.Scheme == "" || l.Scheme == "file" }

// String is the canonical form: the cleaned path for local locations, the
// URL otherwise. Two spellings of one table give the same String.
func (l Location) String() string {
	if l.IsLocal() {
		return l.Path
	}
	host := l.Bucket
	if l.Scheme == "abfss" {
		host = l.Bucket + "@" + l.Account
	}
	if l.Path == "" {
		return l.Scheme + "://" + host
	}
	return l.Scheme + "://" + host + "/" + l.Path
}

// StorageOptions configures OpenStorage: what the SDKs' standard chains
// (credentials, AWS_ENDPOINT_URL_S3, AWS_REGION, …) do not cover. The local
// backend needs nothing. Each backend's options live in their own type
// (storageopts_*.go).
type StorageOptions struct {
	S3    S3Options
	Azure AzureOptions
	GCS   GCSOptions
}

// Backend opens a Storage rooted at an object store location. It must not
// write anything, and should not need the network (commands call it to
// validate a location before anything runs).
type Backend func(ctx context.Context, l Location, opts StorageOptions) (Storage, error)

var (
	backendsMu sync.RWMutex
	backends   = map[string]Backend{}
)

// RegisterBackend makes the object store backend b serve the given schemes
// (backend packages call it from init; cmd imports the ones it is built with).
func RegisterBackend(b Backend, schemes ...string) {
	backendsMu.Lock()
	defer backendsMu.Unlock()
	for _, s := range schemes {
		backends[s] = b
	}
}

// Storage returns a Storage rooted at the table location: table keys are
// relative to it (use OpenTable(store, "")). Nothing is created: the local
// backend makes directories on the first write.
func (l Location) Storage(ctx context.Context, opts StorageOptions) (Storage, error) {
	if !l.IsLocal() {
		backendsMu.RLock()
		b := backends[l.Scheme]
		backendsMu.RUnlock()
		if b != nil {
			return b(ctx, l, opts)
		}
		return nil, &LocationError{Location: l.String(), Scheme: l.Scheme, Err: ErrBackendNotBuilt,
			Reason: fmt.Sprintf("no %s backend in this binary (object storage backend not built in)", objectSchemes[l.Scheme])}
	}
	abs, err := filepath.Abs(l.Path)
	if err != nil {
		return nil, fmt.Errorf("table location %q: %w", l.Path, err)
	}
	return NewLocalStorage(abs), nil
}

// OpenStorage parses location and returns a Storage rooted at it. Object
// store locations fail with ErrBackendNotBuilt, anything else unknown with
// ErrInvalidLocation (both *LocationError), before anything is written.
func OpenStorage(ctx context.Context, location string, opts StorageOptions) (Storage, error) {
	l, err := ParseLocation(location)
	if err != nil {
		return nil, err
	}
	st, err := l.Storage(ctx, opts)
	if err != nil {
		var le *LocationError
		if errors.As(err, &le) {
			le.Location = location
		}
		return nil, err
	}
	return st, nil
}

// OpenLocation returns a handle on the table at location (see OpenStorage).
// Like OpenTable it does not read anything.
func OpenLocation(ctx context.Context, location string, opts StorageOptions) (*Table, error) {
	st, err := OpenStorage(ctx, location, opts)
	if err != nil {
		return nil, err
	}
	return OpenTable(st, ""), nil
}
