package azstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"

	"github.com/cdcsink/cdc-sink/delta"
)

// Error is a failed Azure Blob operation: what was asked (Op, Key), and
// what the service answered (StatusCode, Code), or the transport failure.
// Its message names operation, account, container and key and never a
// credential or a SAS token. Classification is by wrapping: errors.Is
// ErrObjectNotFound / ErrObjectExists, delta.IsTransient.
type Error struct {
	Op         string // get, open, read, stat, list, walk, put, put-if-absent, delete
	Account    string
	Container  string
	Key        string // as given, relative to the store's root
	Blob       string // the blob name (root prefix and key)
	StatusCode int    // HTTP status; 0 when no response came
	Code       string // the service's x-ms-error-code (BlobNotFound, ServerBusy…)
	Reason     string
	Err        error // delta.ErrObjectNotFound, delta.ErrObjectExists, or the cause
}

func (e *Error) Error() string {
	where := fmt.Sprintf("azure %s %s/%s", e.Op, e.Container, e.Blob)
	if e.StatusCode != 0 {
		return fmt.Sprintf("%s (account %s): %s (HTTP %d %s)", where, e.Account, e.Reason, e.StatusCode, e.Code)
	}
	return fmt.Sprintf("%s (account %s): %s", where, e.Account, e.Reason)
}

// Unwrap returns the sentinel or the cause.
func (e *Error) Unwrap() error { return e.Err }

// errPermanent is the cause of a service answer that retrying does not change.
var errPermanent = errors.New("permanent storage error")

// classify turns an SDK error into the delta.Storage error classes:
//   - the caller's ctx cancelled or past its deadline: ctx.Err() (permanent);
//   - 404 BlobNotFound (or a bare 404 on a HEAD): ErrObjectNotFound;
//   - 409 BlobAlreadyExists, 412 ConditionNotMet (PutIfAbsent): ErrObjectExists;
//   - 408, 429, 500, 502, 503, 504 (ServerBusy, OperationTimedOut,
//     InternalError), connection resets and refusals, timeouts: Transient;
//   - ContainerNotFound, authentication and authorization failures, an
//     expired or unobtainable token, anything else: permanent, explained.
func (s *Store) classify(ctx context.Context, op, key string, err error) error {
	if err == nil {
		return nil
	}
	blobName, nerr := s.name(key)
	if nerr != nil {
		blobName = key
	}
	if cerr := ctx.Err(); cerr != nil {
		// The caller gave up: not a storage failure. Keep ctx's error
		// matchable (errors.Is context.Canceled) and not transient.
		return fmt.Errorf("azure %s %s/%s: %w", op, s.container, blobName, cerr)
	}
	e := &Error{Op: op, Account: s.account, Container: s.container, Key: key, Blob: blobName}
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		e.StatusCode, e.Code = re.StatusCode, re.ErrorCode
		return classifyResponse(e)
	}
	var af *azidentity.AuthenticationFailedError
	if errors.As(err, &af) {
		e.Reason = "could not get a token (check the identity, its tenant and client id, and that the token has not expired): " + firstLine(err.Error())
		e.Err = errPermanent
		if af.RawResponse != nil && retryableStatus(af.RawResponse.StatusCode) {
			e.Reason = "the identity endpoint is unavailable"
			e.Err = errors.New("token endpoint unavailable")
			return delta.Transient(e)
		}
		return e
	}
	var cu interface{ NonRetriable() }
	if errors.As(err, &cu) && !isNetwork(err) {
		e.Reason = "no usable credential: " + firstLine(redactErr(err))
		e.Err = errPermanent
		return e
	}
	if isNetwork(err) || errors.Is(err, context.DeadlineExceeded) {
		// No (complete) answer: a reset, a refused or timed-out
		// connection, a per-try timeout. For a write the outcome is
		// ambiguous; a retry of PutIfAbsent finds its own commit.
		e.Reason = "no complete answer from the service: " + redactErr(err)
		e.Err = err
		return delta.Transient(e)
	}
	e.Reason = redactErr(err)
	e.Err = err
	return e
}

func classifyResponse(e *Error) error {
	switch {
	case e.Code == "ContainerNotFound":
		e.Reason = fmt.Sprintf("container %q does not exist in account %q", e.Container, e.Account)
		e.Err = errPermanent
		return e
	case e.Code == "BlobNotFound" || e.StatusCode == http.StatusNotFound && (e.Code == "" || e.Code == "ResourceNotFound"):
		e.Reason = "no such object"
		e.Err = delta.ErrObjectNotFound
		return e
	case e.Code == "BlobAlreadyExists" || e.Code == "ConditionNotMet" && e.Op == "put-if-absent" ||
		e.Op == "put-if-absent" && (e.StatusCode == http.StatusConflict || e.StatusCode == http.StatusPreconditionFailed) && e.Code == "":
		e.Reason = "object already exists"
		e.Err = delta.ErrObjectExists
		return e
	case e.Code == "ConditionNotMet" && e.Op == "read":
		e.Reason = "the object was replaced while it was being read"
		e.Err = errPermanent
		return e
	case e.Code == "AuthenticationFailed" || e.Code == "InvalidAuthenticationInfo" || e.StatusCode == http.StatusUnauthorized:
		e.Reason = "authentication failed (wrong account key or SAS, expired SAS or token, or a clock far off)"
		e.Err = errPermanent
		return e
	case e.Code == "AuthorizationFailure":
		// Azure: a network rule or firewall refused the client; Azurite:
		// a bad signature (a wrong key).
		e.Reason = "authorization failed (a wrong account key or SAS, a firewall or network rule refusing this client, or a missing role assignment)"
		e.Err = errPermanent
		return e
	case e.Code == "AuthorizationPermissionMismatch" ||
		e.Code == "AuthorizationResourceTypeMismatch" || e.Code == "AuthorizationServiceMismatch" ||
		e.Code == "AuthorizationProtocolMismatch" || e.Code == "AuthorizationSourceIPMismatch" ||
		e.Code == "KeyBasedAuthenticationNotPermitted" || e.StatusCode == http.StatusForbidden:
		e.Reason = "not authorized (the identity needs the Storage Blob Data Contributor role on the container, or the SAS lacks a permission)"
		e.Err = errPermanent
		return e
	case e.Code == "ServerBusy" || e.Code == "OperationTimedOut" || e.Code == "InternalError" || retryableStatus(e.StatusCode):
		e.Reason = "the service is busy or unavailable"
		e.Err = errors.New("service unavailable")
		return delta.Transient(e)
	}
	e.Reason = "request refused"
	e.Err = errPermanent
	return e
}

func retryableStatus(code int) bool {
	switch code {
	case http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusInternalServerError,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// isNetwork reports a transport failure: no (complete) response.
func isNetwork(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return true
	}
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

// redactErr is err's message without the request URL a *url.Error carries
// (its query may hold a SAS token).
func redactErr(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Op + " " + redactURL(ue.URL) + ": " + ue.Err.Error()
	}
	return err.Error()
}

// firstLine is the first line of s, at most 300 bytes (azidentity's
// messages go on with troubleshooting links and response dumps).
func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return strings.TrimSpace(s)
}
