package source

import "errors"

// ErrClosed is returned by Consumer methods called after Close.
var ErrClosed = errors.New("source: consumer closed")

// transientError marks a retryable broker error. quarantine.IsTransient recognises it through
// its Transient method (source cannot import quarantine: quarantine imports source).
type transientError struct{ err error }

func (e *transientError) Error() string { return "transient: " + e.err.Error() }
func (e *transientError) Unwrap() error { return e.err }

// Transient marks the error as retryable for quarantine.IsTransient.
func (e *transientError) Transient() bool { return true }

func transient(err error) error {
	if err == nil {
		return nil
	}
	return &transientError{err: err}
}
