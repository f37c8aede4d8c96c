package source

import (
	"errors"
	"strings"
)

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

// AuthError is a broker connection refused for its credentials or certificates: SASL
// authentication failed (wrong user or password, unknown mechanism), or the TLS handshake
// failed (a broker certificate the configured CA does not trust, an expired or unknown client
// certificate). Retrying without a configuration change cannot help. Detail is librdkafka's
// message, which names the endpoint ("sasl_ssl://host:port/bootstrap: SASL authentication
// error: ..."); it never holds a password.
type AuthError struct {
	Detail string
}

func (e *AuthError) Error() string {
	return "kafka: broker refused the connection's credentials or certificates: " + e.Detail +
		" (check kafka.brokers and kafka.properties: security.protocol, sasl.*, ssl.*)"
}

// isAuthFailure classifies a librdkafka client error: SASL authentication failures, TLS
// handshake failures, and TLS alerts from the broker (an expired or unknown client
// certificate arrives as a transport error carrying the alert).
func isAuthFailure(code int, msg string) bool {
	switch code {
	case codeAuthentication, codeSSL:
		return true
	case codeTransport:
		return strings.Contains(msg, "SSL alert") || strings.Contains(msg, "certificate")
	}
	return false
}
