// Package audit holds the operator's checks and repairs of a sink's tables:
// comparing two tables (Diff), comparing a table with its Postgres source
// (VerifyPostgres, Slots) and re-applying quarantined records (Redrive).
//
// It sits beside pipeline, below cmd: it reads tables through tablerows,
// writes only through pipeline/merge, and returns plain reports that the
// CLI prints and the status page shows. Nothing here reads flags or
// prints.
package audit

import "fmt"

// RequestError is a request that cannot be answered as asked (no key
// columns, a key column missing, a malformed relation): the caller fixes its
// arguments. cmd maps it to exit status 2.
type RequestError struct{ Msg string }

func (e *RequestError) Error() string { return e.Msg }

func requestErr(format string, a ...any) error { return &RequestError{Msg: fmt.Sprintf(format, a...)} }

// TableSide identifies the table a report is about.
type TableSide struct {
	Dir     string
	Version int64
	Live    int // live rows read
}

// KeyDiff is one key whose rows differ, with the differing columns.
type KeyDiff struct {
	Key    string // JSON array of the key values
	Detail string // "col: A=x B=y; ..." (Diff) or "col: source=x table=y; ..." (VerifyPostgres)
}
