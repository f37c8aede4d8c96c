// Fencing of zombie writers: a batch commits only if the table still holds the offsets it was read from.

package merge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/cdcsink/cdc-sink/delta"
)

// ErrFenced: another writer advanced a partition this batch was advancing
// (Batch.From no longer matches the table). Permanent for the batch: it is
// never re-planned; the caller re-reads the table's offsets for its
// partitions and re-seeks them, or drops a partition it no longer owns. Use
// errors.As with *FencedError for the partitions.
var ErrFenced = errors.New("fenced: another writer advanced the partition")

// FencedError lists the partitions whose table offset moved away from the
// batch's From, with the offset the table has now (-1: none).
type FencedError struct {
	Table      string
	Partitions map[TP]int64 // partition → table's next offset now
	From       map[TP]int64 // partition → what the batch expected
	Err        error        // the delta.FencedError when the commit itself was fenced
}

func (e *FencedError) Error() string {
	tps := e.Sorted()
	parts := make([]string, len(tps))
	for i, tp := range tps {
		parts[i] = fmt.Sprintf("%s/%d at %d (batch read from %d)", tp.Topic, tp.Partition, e.Partitions[tp], e.From[tp])
	}
	return fmt.Sprintf("table %s: %v: %s", e.Table, ErrFenced, strings.Join(parts, ", "))
}

// Is makes errors.Is(err, ErrFenced) true.
func (e *FencedError) Is(target error) bool { return target == ErrFenced }

// Unwrap returns the delta error, if any.
func (e *FencedError) Unwrap() error { return e.Err }

// Sorted returns the fenced partitions in (topic, partition) order.
func (e *FencedError) Sorted() []TP {
	out := make([]TP, 0, len(e.Partitions))
	for tp := range e.Partitions {
		out = append(out, tp)
	}
	slices.SortFunc(out, TP.Compare)
	return out
}

// fence is one txn precondition of a commit: the offset appId of tp must
// still be table (-1: absent) when the commit lands.
type fence struct {
	tp    TP
	appID string
	from  int64 // Batch.From
	table int64 // the table's txn version expected by delta (-1: none)
}

// checkFence compares the batch's From with the table as just refreshed and
// returns the commit's preconditions. A partition whose table offset is not
// the one the batch was read from fences the whole batch: nothing is
// planned, quarantined or written.
func (t *Table) checkFence(b *Batch) ([]fence, error) {
	if b.From == nil || t.st == nil {
		return nil, nil
	}
	var pending map[TP]int64
	if t.pending != nil {
		pending = t.pending.offsets()
	}
	var out []fence
	var fe *FencedError
	for tp := range b.Offsets {
		from, ok := b.From[tp]
		if !ok {
			continue
		}
		table := int64(-1)
		now := int64(-1)
		if o, ok := t.st.offsets[tp]; ok {
			table, now = o, o
		} else if o, ok := pending[tp]; ok {
			// table-less progress the first commit takes over (NextOffset saw it)
			now = o
		}
		if now != from {
			if fe == nil {
				fe = &FencedError{Table: t.dir, Partitions: map[TP]int64{}, From: map[TP]int64{}}
			}
			fe.Partitions[tp], fe.From[tp] = now, from
			continue
		}
		out = append(out, fence{tp: tp, appID: offsetAppID(t.opts.Sink, tp), from: from, table: table})
	}
	if fe != nil {
		return nil, fe
	}
	sort.Slice(out, func(i, j int) bool { return out[i].appID < out[j].appID })
	return out, nil
}

// fencedByCommit turns delta's fence (a writer moved an offset between our
// refresh and our commit) into the partitions fenced.
func (t *Table) fencedByCommit(de *delta.FencedError, expect []fence, err error) error {
	byApp := make(map[string]fence, len(expect))
	for _, e := range expect {
		byApp[e.appID] = e
	}
	fe := &FencedError{Table: t.dir, Partitions: map[TP]int64{}, From: map[TP]int64{}, Err: err}
	for _, f := range de.Fences {
		if e, ok := byApp[f.AppID]; ok {
			fe.Partitions[e.tp], fe.From[e.tp] = f.Found, e.from
		}
	}
	return fe
}

// FenceAudit is what AuditFencing found in a table's log.
type FenceAudit struct {
	Commits    int            // commits read
	Checked    int            // commits carrying fromOffsets (written with Batch.From)
	ByInstance map[string]int // commits per operationParameters.instance
	// Violations: commits that advanced a partition from an offset the
	// table did not have at that point (a zombie's commit landed).
	Violations []string
}

// AuditFencing reads every commit of the table's log in order and checks the
// fencing invariant: each commit that says which offsets it advanced from
// (operationParameters.fromOffsets) found the table at exactly those offsets.
// For tests and audits; it needs the commits since version 0.
func AuditFencing(ctx context.Context, store delta.Storage, sink string) (*FenceAudit, error) {
	tbl := delta.OpenTable(store, "")
	latest, err := tbl.LatestVersion(ctx)
	if err != nil {
		return nil, err
	}
	out := &FenceAudit{ByInstance: map[string]int{}}
	cur := map[string]int64{} // offset appId → version
	for v := int64(0); v <= latest; v++ {
		data, err := store.Get(ctx, tbl.CommitKey(v))
		if err != nil {
			return nil, fmt.Errorf("read commit %d: %w", v, err)
		}
		acts, err := delta.ParseCommit(tbl.CommitKey(v), data)
		if err != nil {
			return nil, err
		}
		out.Commits++
		var params map[string]any
		for _, a := range acts {
			if a.CommitInfo != nil {
				params, _ = a.CommitInfo["operationParameters"].(map[string]any)
			}
		}
		if inst, ok := params["instance"].(string); ok {
			out.ByInstance[inst]++
		}
		from, ok := params["fromOffsets"].(map[string]any)
		if s, isText := params["fromOffsets"].(string); isText {
			// operationParameters values that are objects are stored as JSON text (Spark's form)
			ok = json.Unmarshal([]byte(s), &from) == nil
		}
		if ok {
			out.Checked++
			for tp, f := range from {
				want, _ := f.(float64)
				have, ok := cur[sink+"/"+tp]
				if !ok {
					have = -1
				}
				if int64(want) != have {
					out.Violations = append(out.Violations, fmt.Sprintf("v%d (instance %v) advanced %s from %d, the table was at %d", v, params["instance"], tp, int64(want), have))
				}
			}
		}
		for _, a := range acts {
			if a.Txn != nil {
				cur[a.Txn.AppID] = a.Txn.Version
			}
		}
	}
	return out, nil
}
