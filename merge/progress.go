// Offsets of a table that has no commit yet (every record quarantined), kept in a side file.

package merge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"

	"github.com/cdcsink/cdc-sink/layout"
)

// Progress of a table that does not exist yet. When every record of a
// partition so far was quarantined (undecodable, wrong types…) there is no
// change to shape the table with, so no Delta commit can carry the offsets;
// without them each restart would quarantine the same records again. The
// sink then records its offsets in a small file beside where the log will
// be, <table>/_cdc_sink/progress.<sink>.json, written only after the
// quarantine write succeeded. The first table commit takes them over into
// its txn actions and removes the file. Readers and vacuum ignore
// directories starting with "_".
type pendingProgress struct {
	BatchID int64            `json:"batchId"`
	Offsets map[string]int64 `json:"offsets"` // "topic/partition" → next offset
	tps     map[TP]int64     // Offsets parsed
}

func progressKey(sink string) string { return layout.ProgressFile(sink) }

func tpString(tp TP) string { return tp.Topic + "/" + strconv.Itoa(int(tp.Partition)) }

func parseTP(s string) (TP, bool) {
	i := strings.LastIndexByte(s, '/')
	if i < 0 {
		return TP{}, false
	}
	p, err := strconv.ParseInt(s[i+1:], 10, 32)
	if err != nil {
		return TP{}, false
	}
	return TP{Topic: s[:i], Partition: int32(p)}, true
}

// loadPending reads the progress file (nil, nil: none).
func (t *Table) loadPending(ctx context.Context) (*pendingProgress, error) {
	b, err := t.ops.store.Get(ctx, progressKey(t.opts.Sink))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read progress of table-less %s: %w", t.dir, err)
	}
	var p pendingProgress
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("progress file %s of %s: %w", progressKey(t.opts.Sink), t.dir, err)
	}
	return &p, nil
}

// offsets is the pending progress by partition (read-only; nil-safe).
func (p *pendingProgress) offsets() map[TP]int64 {
	if p == nil {
		return nil
	}
	if p.tps == nil {
		p.tps = map[TP]int64{}
		for k, v := range p.Offsets {
			if tp, ok := parseTP(k); ok {
				p.tps[tp] = v
			}
		}
	}
	return p.tps
}

// savePending records offsets of a batch that created no table.
func (t *Table) savePending(ctx context.Context, batchID int64, offsets map[TP]int64) error {
	p := &pendingProgress{BatchID: batchID, Offsets: map[string]int64{}}
	if t.pending != nil {
		for k, v := range t.pending.Offsets {
			p.Offsets[k] = v
		}
	}
	for tp, o := range offsets {
		if cur, ok := p.Offsets[tpString(tp)]; !ok || o > cur {
			p.Offsets[tpString(tp)] = o
		}
	}
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	if err := t.ops.store.Put(ctx, progressKey(t.opts.Sink), b); err != nil {
		return fmt.Errorf("record progress of table-less %s: %w", t.dir, err)
	}
	t.pending = p
	return nil
}
