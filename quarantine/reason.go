// Package quarantine writes records that cannot be applied, with their
// original bytes and a reason, and reads them back for audit and redrive.
// It also defines the typed errors every stage uses to say why a record is bad
// (Error) or why it could not be processed right now (Transient).
package quarantine

import (
	"errors"
	"fmt"
)

// Reason is the fixed, documented class of a quarantined record
// (docs/quarantine.md lists every class and its usual cause).
type Reason string

// The reason classes. Adding one means documenting it in docs/quarantine.md.
const (
	MalformedJSON   Reason = "malformed_json"    // value/key is not valid JSON
	MalformedAvro   Reason = "malformed_avro"    // bad Confluent framing or Avro body
	UnknownSchemaID Reason = "unknown_schema_id" // registry does not know the id (404)
	MalformedEvent  Reason = "malformed_event"   // valid JSON/Avro but not a Debezium envelope
	MissingKey      Reason = "missing_key"       // no key and no configured key columns
	UnknownOp       Reason = "unknown_op"        // op not in c,u,d,r,t,m
	MissingAfter    Reason = "missing_after"     // c/u/r without after
	MissingBefore   Reason = "missing_before"    // d without before and without key
	TypeMismatch    Reason = "type_mismatch"     // value does not match its declared type
	InvalidDecimal  Reason = "invalid_decimal"   // decimal bytes/scale unusable or not exact
	InvalidTime     Reason = "invalid_time"      // unparseable or out-of-range temporal value
	SchemaMismatch  Reason = "schema_mismatch"   // incompatible with the table's schema
	VersionConflict Reason = "version_conflict"  // same source_version, different content
	MissingVersion  Reason = "missing_version"   // no usable LSN/sequence where one is required
	UnknownTable    Reason = "unknown_table"     // topic routes to no table
	RuleViolation   Reason = "rule_violation"    // a configured quality rule (Entry.Rule) rejected the change
)

// Reasons lists every class, in documentation order.
var Reasons = []Reason{MalformedJSON, MalformedAvro, UnknownSchemaID, MalformedEvent,
	MissingKey, UnknownOp, MissingAfter, MissingBefore, TypeMismatch, InvalidDecimal,
	InvalidTime, SchemaMismatch, VersionConflict, MissingVersion, UnknownTable, RuleViolation}

// Error is a permanent failure for one record: retrying cannot fix it, so the
// record goes to quarantine with Reason and the message.
type Error struct {
	Reason Reason
	Msg    string
	Err    error // optional cause
}

// Error returns "reason: message[: cause]".
func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Reason, e.Msg, e.Err)
	}
	return string(e.Reason) + ": " + e.Msg
}

// Unwrap returns the cause, if any.
func (e *Error) Unwrap() error { return e.Err }

// Errorf builds a permanent *Error of the given class.
func Errorf(r Reason, format string, args ...any) error {
	return &Error{Reason: r, Msg: fmt.Sprintf(format, args...)}
}

// Wrap builds a permanent *Error of the given class around cause.
func Wrap(r Reason, cause error, format string, args ...any) error {
	return &Error{Reason: r, Msg: fmt.Sprintf(format, args...), Err: cause}
}

// ReasonOf reports the quarantine class of err, if err is (or wraps) a permanent *Error.
func ReasonOf(err error) (Reason, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason, true
	}
	return "", false
}

// TransientError marks a failure that may succeed on retry (registry or broker
// unreachable, timeout, storage hiccup). Such records are retried with backoff
// and never quarantined.
type TransientError struct{ Err error }

// Error returns "transient: cause".
func (e *TransientError) Error() string { return "transient: " + e.Err.Error() }

// Unwrap returns the cause.
func (e *TransientError) Unwrap() error { return e.Err }

// Transient wraps err as retryable.
func Transient(err error) error {
	if err == nil {
		return nil
	}
	return &TransientError{Err: err}
}

// IsTransient reports whether err is (or wraps) a *TransientError, or an error with a
// `Transient() bool` method that returns true (how packages that quarantine imports, such as
// source, mark retryable errors without an import cycle).
func IsTransient(err error) bool {
	var t *TransientError
	if errors.As(err, &t) {
		return true
	}
	var m interface{ Transient() bool }
	return errors.As(err, &m) && m.Transient()
}
