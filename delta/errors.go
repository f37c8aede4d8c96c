// Typed errors callers decide on: unsupported features, commit conflicts, fences.

package delta

import (
	"errors"
	"fmt"
)

var (
	// ErrNotATable: the path has no _delta_log with commits or checkpoints.
	ErrNotATable = errors.New("delta: not a Delta table")
	// ErrTableExists: Create found version 0 already present.
	ErrTableExists = errors.New("delta: table already exists")
	// ErrConflict: a concurrent commit logically conflicts with ours; the
	// caller must re-read the table and redo its work. Use errors.As with
	// *ConflictError for details.
	ErrConflict = errors.New("delta: concurrent modification conflict")
	// ErrUnsupportedFeature: the table needs a protocol feature we do not
	// implement. Use errors.As with *UnsupportedFeatureError for the name.
	ErrUnsupportedFeature = errors.New("delta: unsupported table feature")
	// ErrCorruptLog: the log is unreadable or violates the protocol
	// (bad JSON, missing commits, missing protocol/metadata...).
	ErrCorruptLog = errors.New("delta: corrupt log")
)

// UnsupportedFeatureError names the feature we refuse.
type UnsupportedFeatureError struct {
	Feature string // e.g. "v2Checkpoint", "readerVersion 99"
	Reader  bool   // true: refused for reading; false: for writing
}

func (e *UnsupportedFeatureError) Error() string {
	side := "writer"
	if e.Reader {
		side = "reader"
	}
	return fmt.Sprintf("delta: unsupported %s feature %q", side, e.Feature)
}

// Is makes errors.Is(err, ErrUnsupportedFeature) true.
func (e *UnsupportedFeatureError) Is(target error) bool { return target == ErrUnsupportedFeature }

// ConflictError describes why a commit lost against a concurrent winner.
type ConflictError struct {
	ReadVersion   int64  // the snapshot version the transaction started from
	WinnerVersion int64  // the concurrent commit that conflicts
	Reason        string // human readable: "concurrent remove of part-1.parquet"
	Attempts      int    // commit attempts made
}

func (e *ConflictError) Error() string {
	if e.Reason == "" {
		return fmt.Sprintf("delta: commit conflict after %d attempts (read v%d)", e.Attempts, e.ReadVersion)
	}
	return fmt.Sprintf("delta: commit conflict with v%d (read v%d): %s", e.WinnerVersion, e.ReadVersion, e.Reason)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// ErrFenced: a transaction's precondition on an appId's txn version no
// longer holds (Transaction.ExpectTxn): another writer advanced it. Unlike
// ErrConflict it must not be retried by re-planning the same work on the
// new snapshot: the writer lost what it was advancing (a zombie after a
// rebalance) and must re-read its progress. Use errors.As with *FencedError.
var ErrFenced = errors.New("delta: fenced: another writer advanced an expected txn")

// FencedError names the appIds whose txn moved away from what was expected.
type FencedError struct {
	ReadVersion   int64 // the snapshot version the transaction started from
	WinnerVersion int64 // the commit that moved them (ReadVersion: already moved in the read snapshot)
	Fences        []Fence
}

// Fence is one failed txn precondition.
type Fence struct {
	AppID    string
	Expected int64 // -1: expected no txn for the appId
	Found    int64 // -1: none
}

func (e *FencedError) Error() string {
	s := fmt.Sprintf("delta: fenced at v%d (read v%d):", e.WinnerVersion, e.ReadVersion)
	for i, f := range e.Fences {
		if i > 0 {
			s += ","
		}
		s += fmt.Sprintf(" txn %q is %d, expected %d", f.AppID, f.Found, f.Expected)
	}
	return s
}

// Is makes errors.Is(err, ErrFenced) true.
func (e *FencedError) Is(target error) bool { return target == ErrFenced }
