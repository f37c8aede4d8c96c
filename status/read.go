package status

// Reading a status back: from a running sink's /status.json, or from
// tables on storage (no sink running).

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/cdcsink/cdc-sink/internal/redact"
	"github.com/cdcsink/cdc-sink/layout"
	"github.com/cdcsink/cdc-sink/tablerows"
)

// Fetch reads /status.json from a running sink's listener (base is
// http://host:port, with or without a trailing slash).
func Fetch(ctx context.Context, hc *http.Client, base string) (*Status, error) {
	url := strings.TrimSuffix(base, "/") + "/status.json"
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return nil, fmt.Errorf("status from %s: %w", redact.String(base), err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("status from %s: %s", redact.String(base), redact.String(err.Error()))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("status from %s: %w", redact.String(url), err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status from %s: HTTP %d (is this a cdc-sink listener, http.listen?)", redact.String(url), resp.StatusCode)
	}
	var s Status
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("status from %s: not a status document: %w", redact.String(url), err)
	}
	return &s, nil
}

// FromTables builds a status from tables alone: per table its version,
// last batch, live and deleted rows and last commit time; per partition
// the next offset its owning sink recorded (lag unknown, -1). Health,
// totals and charts need a running sink and stay empty.
func FromTables(ctx context.Context, tables []*tablerows.Table) (*Status, error) {
	s := &Status{Now: time.Now().UTC(), Tables: []Table{}, Partitions: []Partition{}, Series: []Point{},
		Quarantine: Quarantine{ByReason: map[string]int64{}, ByRule: map[string]int64{}, Newest: []Entry{}}}
	sinks := map[string]bool{}
	for _, t := range tables {
		c, err := t.Count(ctx)
		if err != nil {
			return nil, fmt.Errorf("table %s: count rows: %w", t.Dir, err)
		}
		sink, _ := t.Snap.Config(layout.ConfSink)
		tb := Table{Name: t.Dir, Version: t.Version(), BatchID: -1, Live: c.Live, Deleted: c.Deleted, LastCommit: t.Snap.Timestamp().UTC(), Sink: sink}
		txns := t.Snap.Txns()
		if sink != "" {
			sinks[sink] = true
			for app, tx := range txns {
				// the highest batch counter of any instance of the sink
				if _, ok := layout.ParseBatchAppID(sink, app); ok && tx.Version > tb.BatchID {
					tb.BatchID = tx.Version
				}
			}
			// Offsets are txns with appId <sink>/<topic>/<partition>.
			for app, tx := range txns {
				if topic, p, ok := layout.ParseOffsetAppID(sink, app); ok {
					s.Partitions = append(s.Partitions, Partition{Topic: topic, Partition: p, Offset: tx.Version, Lag: -1, Table: t.Dir})
				}
			}
		}
		s.Tables = append(s.Tables, tb)
	}
	if len(sinks) == 1 {
		for k := range sinks {
			s.Sink = k
		}
	}
	sortPartitions(s.Partitions)
	return s, nil
}
