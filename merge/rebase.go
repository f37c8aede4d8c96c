// Key-level conflict rules: a commit that lost the race is rebased over a winner that changed other keys.

package merge

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/maphash"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/layout"
	"github.com/cdcsink/cdc-sink/versioning"
)

// A batch's plan depends on the stored rows of its own keys only (their
// versions decide the fold; their rows are the ones it hides and the TOAST
// values it fills). So a concurrent winner conflicts with it only if it
//   - changed the table's metadata or protocol, or a txn/domain we write
//     (delta's built-in checks),
//   - removed or re-DV'd a file our plan also rewrites (delta: a remove of a
//     path we remove), or
//   - wrote a row of a key the batch also touches (checked here, by reading
//     the keys of the winner's new files: one batch's worth of rows).
// Otherwise the winner's changes are to other keys and other files: our
// plan stays valid as it is, delta retries it at the next version, and the
// winner's actions are applied to the in-memory state when ours lands
// (rebaseLog), instead of a full reload and re-scan.

// rebaseLog is what the winners our commit was rebased over changed, in
// commit order, to apply to the state once our commit lands.
type rebaseLog struct {
	ops     []rebaseOp
	txns    map[string]int64
	domains map[string]string
	// reload: a winner did something not applied incrementally (removed a
	// file for good: optimize, purge; wrote the single-domain tracker);
	// the state is then rebuilt from the table after our commit.
	reload  bool
	commits int
}

type rebaseOp struct {
	add  *delta.Add
	dv   *roaring64.Bitmap
	keys []string // new file: key of each live row (rows[i])
	rows []int32
	vers []versioning.Version
	del  []bool
	nrow int64 // new file: physical rows
	new  bool  // a new data file (else a DV swap of a known file)
}

// batchKeys is the keys (AppendKey encoding) whose stored rows a batch
// reads or replaces.
func batchKeys(keys []string, finals []*finalState) map[string]struct{} {
	out := make(map[string]struct{}, len(keys)+len(finals))
	for _, k := range keys {
		out[k] = struct{}{}
	}
	for _, f := range finals {
		out[f.Key] = struct{}{}
		// the old key of a primary-key change matters only when its stored
		// row fills this one's unavailable TOAST values
		if f.FillKey != "" {
			out[f.FillKey] = struct{}{}
		}
	}
	return out
}

// winnerCheck is the delta.WinnerCheck of a batch with the given keys: it
// conflicts on a winner's row of one of them, and logs the rest in rb.
func (t *Table) winnerCheck(ours map[string]struct{}, rb *rebaseLog) delta.WinnerCheck {
	return func(ctx context.Context, version int64, acts []delta.Action) error {
		st := t.st
		added := map[string]bool{}
		for i := range acts {
			if a := acts[i].Add; a != nil {
				added[a.Path] = true
			}
		}
		known := func(path string) bool {
			if _, ok := st.byPath[path]; ok {
				return true
			}
			for _, op := range rb.ops {
				if op.new && op.add.Path == path {
					return true
				}
			}
			return false
		}
		var ops []rebaseOp
		for i := range acts {
			a := &acts[i]
			switch {
			case a.Txn != nil:
				if rb.txns == nil {
					rb.txns = map[string]int64{}
				}
				rb.txns[a.Txn.AppID] = a.Txn.Version
			case a.DomainMetadata != nil:
				d := a.DomainMetadata
				_, _, legacy, ok := layout.ParseTrackerDomain(t.opts.Sink, d.Domain)
				if ok && (legacy || d.Removed) {
					rb.reload = true
				} else if ok {
					if rb.domains == nil {
						rb.domains = map[string]string{}
					}
					rb.domains[d.Domain] = d.Configuration
				}
			case a.Remove != nil:
				if !added[a.Remove.Path] {
					rb.reload = true // a file gone for good; its rows' new files are checked below
				}
			case a.Add != nil:
				op := rebaseOp{add: a.Add, new: !known(a.Add.Path)}
				if a.Add.DeletionVector != nil {
					bm, err := t.ops.readDV(ctx, a.Add.DeletionVector)
					if err != nil {
						return fmt.Errorf("deletion vector of %s: %w", a.Add.Path, err)
					}
					op.dv = bm
				}
				if op.new {
					fs := &fileState{add: a.Add, dv: op.dv, rows: -1}
					var clash string
					err := t.ops.scanFile(ctx, st, fs, func(key []byte, row int, v versioning.Version, deleted bool) {
						if _, hit := ours[string(key)]; hit && clash == "" {
							clash = fmt.Sprintf("%x", key)
						}
						op.keys = append(op.keys, string(key))
						op.rows = append(op.rows, int32(row))
						op.vers = append(op.vers, v)
						op.del = append(op.del, deleted)
					})
					if err != nil {
						return fmt.Errorf("keys of %s: %w", a.Add.Path, err)
					}
					if clash != "" {
						return &delta.ConflictError{Reason: fmt.Sprintf("concurrent change of a key this batch also changes (encoded %s, in %s)", clash, a.Add.Path)}
					}
					op.nrow = fs.rows
				}
				ops = append(ops, op)
			}
		}
		rb.ops = append(rb.ops, ops...)
		rb.commits++
		return nil
	}
}

// applyRebase applies the winners' changes to the state (before our own
// commit's, afterCommit): their new files and keys, their deletion vectors,
// offsets, batch counters and tracker state.
func (t *Table) applyRebase(rb *rebaseLog) error {
	st := t.st
	// keys of other partitions' new files, located by hash after every
	// deletion vector of the winners is in (the rows they replace are dead)
	type located struct{ h, v uint64 }
	var later []located
	for _, op := range rb.ops {
		if !op.new {
			id, ok := st.byPath[op.add.Path]
			if !ok {
				return fmt.Errorf("rebase: deletion vector for unknown file %s", op.add.Path)
			}
			fs := st.files[id]
			fs.add, fs.dv = op.add, op.dv
			fs.live = fs.rows
			if op.dv != nil {
				fs.live -= int64(op.dv.GetCardinality())
			}
			continue
		}
		id := int32(len(st.files))
		fs := &fileState{add: op.add, dv: op.dv, rows: op.nrow, live: op.nrow, part: filePartition(op.add), indexed: true}
		if op.dv != nil {
			fs.live -= int64(op.dv.GetCardinality())
		}
		st.byPath[op.add.Path] = id
		st.files = append(st.files, fs)
		foreign := st.located(fs)
		fs.indexed = !foreign
		for i, k := range op.keys {
			if foreign {
				if _, ours := st.index.Get(k); !ours {
					later = append(later, located{maphash.String(st.foreign.seed, k), packForeign(id, op.rows[i], op.del[i])})
					continue
				}
				// a key in the index (it moved here from a partition of
				// ours) stays there, exact
			}
			st.index.Set(k, loc{file: id, row: op.rows[i], ver: op.vers[i], deleted: op.del[i]})
		}
	}
	for _, l := range later {
		st.foreign.add(l.h, l.v, st.rowDead)
	}
	for app, v := range rb.txns {
		if _, ok := layout.ParseBatchAppID(t.opts.Sink, app); ok {
			st.topID = max(st.topID, v)
		} else if topic, p, ok := layout.ParseOffsetAppID(t.opts.Sink, app); ok {
			st.offsets[TP{topic, p}] = v
		}
	}
	if len(rb.domains) > 0 {
		for d, cfg := range rb.domains {
			topic, p, _, _ := layout.ParseTrackerDomain(t.opts.Sink, d)
			var one []versioning.PartitionState
			if err := json.Unmarshal([]byte(cfg), &one); err != nil || len(one) != 1 || one[0].Topic != topic || one[0].Partition != p {
				return fmt.Errorf("rebase: versioning state (domain %s) is not the one of %s/%d (%v)", d, topic, p, err)
			}
			st.tracker = mergeTracker(st.tracker, &Batch{Tracker: one, Offsets: map[TP]int64{{topic, p}: 0}})
		}
	}
	return nil
}
