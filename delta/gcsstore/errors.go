package gcsstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"syscall"

	"cloud.google.com/go/storage"
	"golang.org/x/oauth2"
	"google.golang.org/api/googleapi"

	"github.com/cdcsink/cdc-sink/delta"
)

// Error is a classified GCS failure: the operation, the object (as a gs://
// URL) and what happened. It never carries request headers or credentials.
// It matches delta.ErrObjectNotFound or delta.ErrObjectExists when that is
// what GCS said; retryable ones are wrapped in *delta.TransientError.
type Error struct {
	Op     string // get, open, read, list, walk, put, put-if-absent, delete, stat, connect
	Object string // gs://bucket/name (or the listed prefix)
	Code   int    // HTTP status when GCS answered, else 0
	Msg    string // what it means for the user
	Err    error  // the SDK's error (or a delta sentinel)
}

func (e *Error) Error() string {
	s := "gcs " + e.Op + " " + e.Object + ": " + e.Msg
	if e.Err != nil && !errors.Is(e.Err, delta.ErrObjectNotFound) && !errors.Is(e.Err, delta.ErrObjectExists) {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

func (s *Store) url(name string) string { return "gs://" + s.bucket + "/" + name }

// classify turns an SDK error into a typed one. The caller's cancellation
// wins over whatever the SDK made of it, and is never transient.
func (s *Store) classify(ctx context.Context, op, name string, err error) error {
	if err == nil {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("gcs %s %s: %w", op, s.url(name), cerr)
	}
	e := &Error{Op: op, Object: s.url(name), Err: err}
	var ae *googleapi.Error
	var re *oauth2.RetrieveError
	switch {
	case errors.Is(err, storage.ErrObjectNotExist):
		e.Code, e.Msg, e.Err = http.StatusNotFound, "object not found", delta.ErrObjectNotFound
		return e
	case errors.Is(err, storage.ErrBucketNotExist):
		e.Code, e.Msg = http.StatusNotFound, fmt.Sprintf("bucket %q does not exist (or these credentials cannot see it)", s.bucket)
		return e
	case errors.As(err, &ae):
		e.Code = ae.Code
		return s.classifyHTTP(e, ae)
	case errors.As(err, &re):
		// The token endpoint refused the credentials (revoked, wrong
		// audience…): retrying does not help; 5xx from it may.
		if re.Response != nil && (re.Response.StatusCode >= 500 || re.Response.StatusCode == http.StatusTooManyRequests) {
			e.Msg = "token endpoint unavailable"
			return delta.Transient(e)
		}
		e.Msg = "credentials refused by the token endpoint (check Application Default Credentials)"
		return e
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EPIPE):
		e.Msg = "request failed (timeout or connection lost)" + ambiguous(op)
		return delta.Transient(e)
	case isNetErr(err) || storage.ShouldRetry(err):
		e.Msg = "network error" + ambiguous(op)
		return delta.Transient(e)
	}
	e.Msg = "failed"
	return e
}

// ambiguous is said of a failed write: it may have landed all the same.
func ambiguous(op string) string {
	switch op {
	case "put", "put-if-absent", "delete":
		return "; the write may or may not have happened"
	}
	return ""
}

func isNetErr(err error) bool {
	var ue *url.Error
	var oe *net.OpError
	var ne net.Error
	return errors.As(err, &ue) || errors.As(err, &oe) || (errors.As(err, &ne) && ne.Timeout())
}

func (s *Store) classifyHTTP(e *Error, ae *googleapi.Error) error {
	switch c := ae.Code; {
	case c == http.StatusPreconditionFailed:
		e.Msg, e.Err = "object already exists (ifGenerationMatch=0 failed)", delta.ErrObjectExists
		return e
	case c == http.StatusNotFound:
		// Object operations report a missing bucket as 404 too; the SDK
		// maps a missing object to ErrObjectNotExist, so this is the bucket.
		e.Msg = fmt.Sprintf("not found (does bucket %q exist?)", s.bucket)
		return e
	case c == http.StatusUnauthorized:
		e.Msg = "not authenticated: no valid credentials (Application Default Credentials: GOOGLE_APPLICATION_CREDENTIALS, workload identity, the metadata server)"
		return e
	case c == http.StatusForbidden:
		e.Msg = fmt.Sprintf("permission denied on bucket %q: the principal needs roles/storage.objectUser on it "+
			"(or storage.objects.create, get, list and delete)", s.bucket)
		return e
	case c == http.StatusRequestTimeout, c == http.StatusTooManyRequests, c >= 500:
		e.Msg = fmt.Sprintf("service unavailable or throttled (HTTP %d)", c) + ambiguous(e.Op)
		return delta.Transient(e)
	}
	e.Msg = fmt.Sprintf("refused (HTTP %d)", ae.Code)
	return e
}
