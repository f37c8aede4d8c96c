package audit

// Redrive: quarantined records re-applied to a table through the pipeline.

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/layout"
	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/pipeline"
	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/cdcsink/cdc-sink/rules"
	"github.com/cdcsink/cdc-sink/source"
	"github.com/cdcsink/cdc-sink/tablerows"
	"github.com/cdcsink/cdc-sink/versioning"
)

// RedriveConfig configures Redrive.
type RedriveConfig struct {
	Table   string // table location
	Storage delta.StorageOptions
	// Sink names the redrive's own progress txns; "" means
	// "<table owner>-redrive". Not the live sink's name: its per-partition
	// offsets would jump past records it has not applied.
	Sink string
	// Requarantine receives the records that fail again (never the input).
	Requarantine quarantine.Writer
	KeyColumns   map[string][]string // normalize.Options.KeyColumns
	Registry     envelope.Registry   // nil: no Avro
	BatchRecords int                 // records per micro-batch (default 10000)
	// Control reports topics whose records are not table changes
	// (heartbeats, transaction metadata): never routed to the table.
	Control func(topic string) bool
	// Rules (nil: none) are applied while redriving, as the live sink
	// would: after relaxing a rule, what now passes is applied.
	Rules  *rules.Set
	Logger *slog.Logger
}

// RedriveReport is the result of Redrive.
type RedriveReport struct {
	Sink     string // the sink name used
	Owner    string // the table's owning sink ("" for a new table)
	Entries  int    // entries given
	Records  int    // distinct records redriven (duplicates dropped)
	Inserted int
	Updated  int
	Deleted  int
	Stale    int
	Dup      int
	Ignored  int                // heartbeats, transaction metadata
	Failed   []quarantine.Entry // written to Requarantine
	Version  int64              // table version after the last commit
	Commit   bool               // something was committed
}

// Applied is the number of rows the redrive changed.
func (r *RedriveReport) Applied() int { return r.Inserted + r.Updated + r.Deleted }

// Redrive re-applies the records of entries to one table, in original
// partition/offset order, with the owning sink's versioning state. A batch
// that fails commits nothing and leaves the originals untouched, so a rerun
// is safe; the merge's version guard makes re-applied records no-ops.
func Redrive(ctx context.Context, entries []quarantine.Entry, cfg RedriveConfig) (*RedriveReport, error) {
	if cfg.Requarantine == nil {
		return nil, requestErr("redrive: a requarantine writer is required")
	}
	control := cfg.Control
	if control == nil {
		control = func(string) bool { return false }
	}
	if cfg.BatchRecords <= 0 {
		cfg.BatchRecords = 10000
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	// One table per redrive: refuse records of several source tables.
	topics := map[string]bool{}
	for i := range entries {
		if !control(entries[i].Record.Topic) {
			topics[entries[i].Record.Topic] = true
		}
	}
	if len(topics) > 1 {
		names := make([]string, 0, len(topics))
		for t := range topics {
			names = append(names, t)
		}
		sort.Strings(names)
		return nil, requestErr("quarantine redrive: the selected entries come from %d source topics (%s): select one table's records with --source-topic",
			len(names), strings.Join(names, ", "))
	}
	rep := &RedriveReport{Entries: len(entries), Sink: cfg.Sink}
	// Owner and tracker state of an existing table.
	var tracker []versioning.PartitionState
	if t, err := tablerows.OpenWith(ctx, cfg.Table, cfg.Storage); err == nil {
		rep.Owner, _ = t.Snap.Config(layout.ConfSink)
		if rep.Owner != "" {
			domains := map[string]string{}
			for _, d := range t.Snap.Domains() {
				domains[d], _ = t.Snap.DomainMetadata(d)
			}
			if tracker, err = merge.ReadTracker(rep.Owner, domains); err != nil {
				return nil, fmt.Errorf("table %s: sink %s: %w", cfg.Table, rep.Owner, err)
			}
		}
	} else if exists, xerr := tableExists(ctx, cfg.Table, cfg.Storage); xerr != nil {
		return nil, xerr
	} else if exists {
		return nil, err // a table that is there but unreadable is not "no table yet"
	}
	if rep.Sink == "" {
		if rep.Owner == "" {
			return nil, requestErr("quarantine redrive: --sink-name is required when the table does not exist yet")
		}
		rep.Sink = rep.Owner + "-redrive"
	}
	// Sort by original coordinates (each partition in offset order) and drop
	// duplicate entries (quarantine writes are at-least-once).
	recs := make([]*source.Record, 0, len(entries))
	// Entries that carry the version their change was first given (rule
	// violations) are applied with it: the version guard then judges them
	// as the original changes (a redriven snapshot row must not pass for a
	// re-snapshot and win over newer stream rows).
	versions := map[coord]versioning.Version{}
	seen := map[coord]bool{}
	for i := range entries {
		r := entries[i].Record
		k := coordOf(r)
		if seen[k] {
			continue
		}
		seen[k] = true
		if entries[i].Version != "" {
			v, err := versioning.ParseVersion(entries[i].Version)
			if err != nil {
				return nil, requestErr("quarantine entry %s: version %q: %v", entries[i].At, entries[i].Version, err)
			}
			versions[k] = v
		}
		recs = append(recs, r)
	}
	sort.SliceStable(recs, func(i, j int) bool {
		a, b := recs[i], recs[j]
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		if a.Partition != b.Partition {
			return a.Partition < b.Partition
		}
		return a.Offset < b.Offset
	})
	rep.Records = len(recs)
	cw := &collectWriter{w: cfg.Requarantine}
	norm, err := normalize.New(normalize.Options{KeyColumns: cfg.KeyColumns, KeepBefore: cfg.Rules.UsesBefore()})
	if err != nil {
		return nil, err
	}
	var prs pipeline.Rules
	if cfg.Rules.Len() > 0 {
		prs = cfg.Rules
	}
	var mt *merge.Table
	p := pipeline.New(pipeline.Config{
		Rules: prs,
		VersionOf: func(r *source.Record) (versioning.Version, bool) {
			v, ok := versions[coordOf(r)]
			return v, ok
		},
		Sink:       rep.Sink,
		Decoder:    envelope.NewDecoder(envelope.Options{Registry: cfg.Registry}),
		Normalizer: norm,
		Quarantine: cw,
		Logger:     logger,
		Route: func(ctx context.Context, topic string) (pipeline.Table, string, bool, error) {
			if control(topic) {
				return nil, "", false, nil
			}
			if mt == nil {
				t, err := merge.Open(ctx, cfg.Table, merge.Options{Sink: rep.Sink, AllowForeignSink: true, StorageOptions: cfg.Storage, Logger: logger})
				if err != nil {
					return nil, "", false, err
				}
				mt = t
			}
			return &redriveTable{Table: mt, tracker: tracker}, cfg.Table, true, nil
		},
	})
	for start := 0; start < len(recs); start += cfg.BatchRecords {
		end := min(start+cfg.BatchRecords, len(recs))
		br, err := p.Process(ctx, recs[start:end])
		if err != nil {
			return nil, fmt.Errorf("redrive: %w (nothing of this batch was committed; the originals are untouched, rerun is safe)", err)
		}
		rep.Ignored += br.Ignored
		for _, tr := range br.Tables {
			r := tr.Result
			rep.Inserted += r.Inserted
			rep.Updated += r.Updated
			rep.Deleted += r.Deleted
			rep.Stale += r.Stale
			rep.Dup += r.Duplicate
			if r.Committed {
				rep.Version = r.Version
				rep.Commit = true
			}
		}
	}
	rep.Failed = cw.entries
	return rep, nil
}

func tableExists(ctx context.Context, location string, so delta.StorageOptions) (bool, error) {
	t, err := delta.OpenLocation(ctx, location, so)
	if err != nil {
		return false, err
	}
	return t.Exists(ctx)
}

// collectWriter passes entries to the requarantine writer and remembers
// them for the report.
type collectWriter struct {
	w       quarantine.Writer
	entries []quarantine.Entry
}

func (c *collectWriter) Write(ctx context.Context, es []quarantine.Entry) error {
	if err := c.w.Write(ctx, es); err != nil {
		return err
	}
	c.entries = append(c.entries, es...)
	return nil
}

func (c *collectWriter) Close() error { return nil } // the caller owns the writer

// redriveTable is the table as the redrive pipeline sees it: it never skips
// a record by offset (redriven records are sparse and may lie below the
// redrive sink's own progress from an earlier run; the merge's version guard
// makes re-application a no-op instead), and it versions records with the
// owning sink's tracker state (its snapshot epoch), not a fresh one.
type redriveTable struct {
	*merge.Table
	tracker []versioning.PartitionState
}

func (r *redriveTable) NextOffset(string, int32) (int64, bool) { return 0, false }

func (r *redriveTable) TrackerState() []versioning.PartitionState {
	if r.tracker != nil {
		return r.tracker
	}
	return r.Table.TrackerState()
}

// coord identifies an original record.
type coord struct {
	topic     string
	partition int32
	offset    int64
}

func coordOf(r *source.Record) coord { return coord{r.Topic, r.Partition, r.Offset} }
