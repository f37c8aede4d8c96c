// The transaction watermark a table commit records under consistency:
// transaction.

package consistency

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cdcsink/cdc-sink/delta"
)

// Domain is the domain metadata in which a sink's table commits record the
// table's transaction watermark (Watermark, JSON).
func Domain(sink string) string { return "cdcsink.consistency." + sink }

// Watermark is where a table stands in source commit order, written with
// each of its commits under consistency: transaction.
type Watermark struct {
	// Collection is the source table ("schema.table") the table follows.
	Collection string `json:"collection"`
	// Through: every transaction with a commit LSN up to it is in the table
	// whole (-1: none yet).
	Through int64 `json:"through"`
	// Last: the highest commit LSN of a transaction the table holds.
	Last int64 `json:"last"`
	// Resume: the transaction-topic offset to read ENDs from after a restart
	// (-1: from the earliest).
	Resume int64 `json:"resume"`
	// Forced: transactions too large for the gate's bounds, being applied
	// in parts.
	Forced []string `json:"forced,omitempty"`
	// Group, Manifest and Table: the consistency group the table is in, its
	// manifest's location and the table's location as the manifest names it
	// (empty without a group): vacuum and log cleanup keep the versions the
	// manifest's cuts name (Protected).
	Group    string `json:"group,omitempty"`
	Manifest string `json:"manifest,omitempty"`
	Table    string `json:"table,omitempty"`
}

// ReadWatermark reads a table's watermark from its domain metadata
// configuration; ok is false when the table has none.
func ReadWatermark(domain func(string) (string, bool), sink string) (w Watermark, ok bool, err error) {
	cfg, ok := domain(Domain(sink))
	if !ok || cfg == "" {
		return Watermark{}, false, nil
	}
	if err := json.Unmarshal([]byte(cfg), &w); err != nil {
		return Watermark{}, false, fmt.Errorf("transaction watermark (domain %s): %w", Domain(sink), err)
	}
	return w, true, nil
}

// Protected are the versions of a table that the cuts of its consistency
// groups name, so that vacuum and log cleanup keep them readable: for each
// watermark among the table's domain metadata (every sink writing it) that
// names a manifest, the version of the table in the newest cut and in every
// cut written after since (those a reader may still be using).
func Protected(ctx context.Context, domains map[string]string, so delta.StorageOptions, since time.Time) ([]int64, error) {
	var out []int64
	for d, cfg := range domains {
		sink, ok := strings.CutPrefix(d, Domain(""))
		if !ok || cfg == "" {
			continue
		}
		w, _, err := ReadWatermark(func(string) (string, bool) { return cfg, true }, sink)
		if err != nil {
			return nil, err
		}
		if w.Manifest == "" {
			continue
		}
		l, err := Open(ctx, w.Manifest, so, w.Group)
		if err != nil {
			return nil, err
		}
		seqs, err := l.Entries(ctx)
		if err != nil {
			return nil, err
		}
		found := false
		for i := len(seqs) - 1; i >= 0; i-- {
			e, err := l.Get(ctx, seqs[i])
			if err != nil {
				return nil, err
			}
			if v, ok := e.Tables[w.Table]; ok {
				out = append(out, v)
				found = true
			}
			if found && e.Time.Before(since) {
				break // the newest cut naming the table, and those since, are kept
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}
