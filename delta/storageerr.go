// Classification of storage errors into transient and permanent.

package delta

import (
	"errors"
	"io/fs"
	"syscall"
)

// Storage errors are classified so that exactly one place (the pipeline's
// retry loop) decides to retry: a TransientError may succeed when the same
// operation is tried again; anything else is permanent. A missing object and
// an existing PutIfAbsent target are permanent and typed.
var (
	// ErrObjectNotFound is matched (errors.Is) by every Storage error for a
	// missing key. It is fs.ErrNotExist, so *fs.PathError from os matches.
	ErrObjectNotFound = fs.ErrNotExist
	// ErrObjectExists is matched by PutIfAbsent's error when the key exists.
	ErrObjectExists = fs.ErrExist
)

// TransientError marks a storage failure that may succeed on retry
// (timeout, throttling, store briefly unavailable, full disk being freed).
// Its Transient method lets packages that do not import delta recognise it
// (quarantine.IsTransient).
type TransientError struct{ Err error }

func (e *TransientError) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *TransientError) Unwrap() error { return e.Err }

// Transient reports true.
func (e *TransientError) Transient() bool { return true }

// Transient wraps err as retryable (nil stays nil).
func Transient(err error) error {
	if err == nil {
		return nil
	}
	return &TransientError{Err: err}
}

// IsTransient reports whether err is (or wraps) a *TransientError or any
// error with a Transient() bool method returning true.
func IsTransient(err error) bool {
	var m interface{ Transient() bool }
	return errors.As(err, &m) && m.Transient()
}

// IsNotFound reports whether err says the object does not exist.
func IsNotFound(err error) bool { return errors.Is(err, ErrObjectNotFound) }

// IsExists reports whether err says a PutIfAbsent target already exists.
func IsExists(err error) bool { return errors.Is(err, ErrObjectExists) }

// classifyOS marks the local filesystem errors worth retrying: interrupted
// or would-block calls, stale NFS handles, timeouts, and a full disk or
// quota (the sink waits, logging each retry, instead of crash-looping).
// Everything else (permissions, not found, I/O errors) is permanent.
func classifyOS(err error) error {
	if err == nil {
		return nil
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case syscall.EINTR, syscall.EAGAIN, syscall.EBUSY, syscall.ETIMEDOUT, syscall.ESTALE,
			syscall.ENOSPC, syscall.EDQUOT:
			return Transient(err)
		}
	}
	return err
}
