package s3store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"

	"github.com/cdcsink/cdc-sink/delta"
)

// Permanent failures worth telling apart (errors.Is); each error also says
// the operation and the s3:// URL involved. Messages never hold a secret.
var (
	// ErrNoSuchBucket: the bucket does not exist (or is in another account).
	ErrNoSuchBucket = errors.New("bucket does not exist")
	// ErrAccessDenied: the credentials are valid but not allowed (IAM policy,
	// bucket policy, KMS key policy).
	ErrAccessDenied = errors.New("access denied")
	// ErrCredentials: the credentials are unknown, malformed or expired.
	ErrCredentials = errors.New("invalid or expired credentials")
	// ErrWrongRegion: the bucket lives in another region than the client's.
	ErrWrongRegion = errors.New("wrong region for bucket")
)

// Error is every failure of a Store operation after the request was made.
type Error struct {
	Op  string // get, put, put-if-absent, list, stat, delete, open, read
	URL string // s3://bucket/key (or listing prefix)
	Msg string // what to do about it, when known
	Err error  // a delta sentinel, one of the Err* above, and/or the SDK error
}

func (e *Error) Error() string {
	if e.Msg != "" {
		return fmt.Sprintf("s3 %s %s: %s: %v", e.Op, e.URL, e.Msg, e.Err)
	}
	return fmt.Sprintf("s3 %s %s: %v", e.Op, e.URL, e.Err)
}

// Unwrap returns the cause(s).
func (e *Error) Unwrap() error { return e.Err }

// retryables is the SDK's own list of transient failures (connection
// resets, timeouts, throttling codes, 5xx), reused for classification.
var retryables = retry.IsErrorRetryables(retry.DefaultRetryables)

// classify turns an SDK error into a typed, classified error: not found
// and exists are permanent and match delta's sentinels; throttling, 5xx,
// timeouts and broken connections are *delta.TransientError; a cancelled
// ctx returns ctx.Err() (wrapped, never transient).
func (s *Store) classify(ctx context.Context, op, objKey string, err error) error {
	e := &Error{Op: op, URL: s.url(objKey), Err: err}
	if cerr := ctx.Err(); cerr != nil {
		e.Err = cerr
		return e
	}
	code, status := "", 0
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		code = apiErr.ErrorCode()
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	switch code {
	case "NoSuchKey", "NotFound":
		e.Err = delta.ErrObjectNotFound
		return e
	case "PreconditionFailed":
		e.Err = delta.ErrObjectExists
		return e
	case "ConditionalRequestConflict", "OperationAborted":
		// A conditional write raced another in flight on the same key: try
		// again (the retry sees the winner as 412).
		return delta.Transient(e)
	case "NoSuchBucket":
		e.Msg = fmt.Sprintf("bucket %s does not exist", s.bucket)
		e.Err = errors.Join(ErrNoSuchBucket, err)
		return e
	case "AccessDenied", "AllAccessDisabled", "AccountProblem", "InvalidObjectState":
		e.Msg = fmt.Sprintf("access denied to %s: check the IAM policy (s3:GetObject, s3:PutObject, s3:DeleteObject, s3:ListBucket on the prefix)", e.URL)
		e.Err = errors.Join(ErrAccessDenied, err)
		return e
	case "ExpiredToken", "ExpiredTokenException", "TokenRefreshRequired", "RequestExpired":
		e.Msg = "credentials expired: refresh them (AWS_SESSION_TOKEN, SSO login, web identity token)"
		e.Err = errors.Join(ErrCredentials, err)
		return e
	case "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "AuthorizationHeaderMalformed", "InvalidSecurity":
		if code == "AuthorizationHeaderMalformed" {
			e.Msg = "request refused: wrong region or malformed credentials (check AWS_REGION / storage.s3.region)"
		} else {
			e.Msg = "credentials refused: check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or the profile"
		}
		e.Err = errors.Join(ErrCredentials, err)
		return e
	case "PermanentRedirect", "IllegalLocationConstraintException":
		e.Msg = fmt.Sprintf("bucket %s is in another region: set AWS_REGION or storage.s3.region", s.bucket)
		e.Err = errors.Join(ErrWrongRegion, err)
		return e
	}
	switch {
	case status == http.StatusNotFound:
		e.Err = errors.Join(delta.ErrObjectNotFound, err)
		return e
	case status == http.StatusPreconditionFailed:
		e.Err = delta.ErrObjectExists
		return e
	case status == http.StatusForbidden:
		// HEAD responses carry no error code.
		e.Msg = fmt.Sprintf("access denied to %s: check the IAM policy and the credentials", e.URL)
		e.Err = errors.Join(ErrAccessDenied, err)
		return e
	case status == http.StatusMovedPermanently:
		e.Msg = fmt.Sprintf("bucket %s is in another region: set AWS_REGION or storage.s3.region", s.bucket)
		e.Err = errors.Join(ErrWrongRegion, err)
		return e
	case status == http.StatusTooManyRequests || status >= 500 || status == http.StatusRequestTimeout || status == http.StatusConflict:
		return delta.Transient(e)
	}
	if isTransientTransport(err) {
		return delta.Transient(e)
	}
	return e
}

func isTransientTransport(err error) bool {
	if retryables.IsErrorRetryable(err) == aws.TrueTernary {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED):
		return true
	}
	var oe *net.OpError
	return errors.As(err, &oe)
}
