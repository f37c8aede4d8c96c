// Package versioning defines the LSN-based source_version of a change and its
// total order per key. docs/versioning.md gives the rule and why it holds.
package versioning

// Phase separates snapshot rows from streamed changes inside one epoch:
// a snapshot row always ranks below every streamed change of the same epoch.
type Phase uint8

const (
	PhaseSnapshot Phase = 0 // op=r from an initial or blocking snapshot
	PhaseStream   Phase = 1 // streamed c/u/d/t, and incremental-snapshot rows
)

// Version is the total order of changes for one key. Fields compare
// lexicographically in declaration order.
//
//   - Epoch increases each time a (re-)snapshot starts after streamed changes
//     in a partition, so a new snapshot supersedes everything before it.
//   - Commit is source.sequence[0] (last committed LSN before this event's
//     transaction; null means 0).
//   - LSN is source.sequence[1] / source.lsn of the change.
//   - Seq breaks ties only for changes that carry no LSN of their own
//     (incremental-snapshot rows, bare tombstones, unwrap records without
//     __lsn); it is 0 for every change that has an LSN, so a redelivered
//     duplicate compares equal to the original.
type Version struct {
	Epoch  uint32
	Phase  Phase
	Commit uint64
	LSN    uint64
	Seq    uint64
}

// Compare returns -1, 0 or +1.
func (v Version) Compare(o Version) int {
	switch {
	case v.Epoch != o.Epoch:
		return cmpU(uint64(v.Epoch), uint64(o.Epoch))
	case v.Phase != o.Phase:
		return cmpU(uint64(v.Phase), uint64(o.Phase))
	case v.Commit != o.Commit:
		return cmpU(v.Commit, o.Commit)
	case v.LSN != o.LSN:
		return cmpU(v.LSN, o.LSN)
	default:
		return cmpU(v.Seq, o.Seq)
	}
}

// Less reports v < o.
func (v Version) Less(o Version) bool { return v.Compare(o) < 0 }

func cmpU(a, b uint64) int {
	if a < b {
		return -1
	}
	if a > b {
		return 1
	}
	return 0
}

// Position is what one event says about its place in the source stream,
// before partition context is applied (see Tracker).
type Position struct {
	// Snapshot is source.snapshot as sent ("true", "first", "last",
	// "first_in_data_collection", "last_in_data_collection", "incremental",
	// "false" or "").
	Snapshot string
	// HasCommit is false when sequence[0] was null or absent.
	HasCommit bool
	Commit    uint64
	// HasLSN is false when the event carries no LSN (incremental snapshot,
	// tombstone, unwrap form without __lsn).
	HasLSN bool
	LSN    uint64
}
