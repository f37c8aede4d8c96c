package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/history"
	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/pipeline"
	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/cdcsink/cdc-sink/rules"
	"github.com/cdcsink/cdc-sink/source"
	"github.com/cdcsink/cdc-sink/status"
)

// sinkSetup is everything needed to build a pipeline, from flags or config.
type sinkSetup struct {
	Sink string
	// InstanceID: merge.Options.InstanceID (run: config instance_id).
	InstanceID string
	// PartitionAligned: merge.Options.PartitionAligned (run: tables.layout).
	PartitionAligned bool
	// RetryBudget: pipeline.Config.RetryBudget (run: merge.retry_budget).
	RetryBudget time.Duration
	// Route maps a topic to a table directory; ok=false for topics that route
	// nowhere (heartbeats, transaction metadata).
	Route            func(topic string) (dir string, ok bool)
	KeyColumns       map[string][]string // per topic or per source table (schema.table)
	Registry         envelope.Registry
	Quarantine       quarantine.Writer
	Truncate         merge.TruncateMode
	Widening         merge.WideningMode
	OnDropColumn     merge.DropMode
	ColumnMapping    string
	ChangeDataFeed   bool // tables created with Change Data Feed; existing ones must have it
	AllowForeignSink bool
	Rules            *rules.Set // nil or empty: no rules
	Logger           *slog.Logger
	Observer         pipeline.Observer
	// Fence: consumer-group sinks (run) fence every batch on the table
	// offsets it was read from (pipeline.Config.Fence).
	Fence bool
	// Fault is handed to merge.Options.Fault (tests only: runHooks).
	Fault func(merge.FaultPoint) error
	// History (may be nil) maps a topic to its history table (docs/history.md).
	History func(topic string) (dir string, ok bool)
	Privacy history.Privacy
	// SCD2 (may be nil) maps a topic and its history table to its SCD2 table.
	SCD2 func(topic, historyDir string) string
	// Domains (may be nil): pipeline.Config.Domains (consistency: transaction).
	Domains func(table string) map[string]string
	// Decoded (may be nil): pipeline.Config.Decoded (consistency: transaction).
	Decoded func(r *source.Record) (*envelope.Event, bool)
}

// tableSet opens each table once and hands it to the pipeline's router.
type tableSet struct {
	mu     sync.Mutex
	setup  *sinkSetup
	tables map[string]*merge.Table
	// tracked: tables with a history, by table location
	tracked map[string]*history.Tracked
	// rowsNext: when each table's rows are counted again (observe); stale:
	// a batch committed since the last count
	rowsNext map[string]time.Time
	stale    map[string]bool
}

// route is the pipeline's table for a topic: the current table, wrapped
// with its history table when the topic has one.
func (ts *tableSet) route(ctx context.Context, topic, dir string) (pipeline.Table, error) {
	t, err := ts.open(ctx, dir)
	if err != nil {
		return nil, err
	}
	if ts.setup.History == nil {
		return t, nil
	}
	hdir, ok := ts.setup.History(topic)
	if !ok {
		return t, nil
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if tr, ok := ts.tracked[dir]; ok {
		if tr.History.Location() != hdir {
			return nil, fmt.Errorf("topics routed to table %s route to two history tables (%s, %s)", dir, tr.History.Location(), hdir)
		}
		return tr, nil
	}
	hw, err := history.Open(ctx, hdir, history.Options{Sink: ts.setup.Sink, Privacy: ts.setup.Privacy, StorageOptions: storageOpts,
		Logger: ts.setup.Logger, Fault: ts.setup.Fault})
	if err != nil {
		return nil, fmt.Errorf("history of %s: %w", dir, err)
	}
	if ts.tracked == nil {
		ts.tracked = map[string]*history.Tracked{}
	}
	tr := &history.Tracked{Table: t, History: hw}
	if ts.setup.SCD2 != nil {
		sdir := ts.setup.SCD2(topic, hdir)
		sw, err := history.OpenSCD2(ctx, sdir, history.SCD2Options{Sink: ts.setup.Sink, StorageOptions: storageOpts, Logger: ts.setup.Logger, Fault: ts.setup.Fault,
			Widening: ts.setup.Widening, ColumnMapping: ts.setup.ColumnMapping})
		if err != nil {
			return nil, fmt.Errorf("SCD2 table of %s: %w", dir, err)
		}
		if err := sw.CheckStart(t); err != nil {
			return nil, err
		}
		tr.SCD2 = sw
	}
	ts.tracked[dir] = tr
	return tr, nil
}

func (ts *tableSet) open(ctx context.Context, dir string) (*merge.Table, error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if t, ok := ts.tables[dir]; ok {
		return t, nil
	}
	t, err := merge.Open(ctx, dir, merge.Options{
		Sink: ts.setup.Sink, InstanceID: ts.setup.InstanceID, PartitionAligned: ts.setup.PartitionAligned, Truncate: ts.setup.Truncate, Widening: ts.setup.Widening, OnDropColumn: ts.setup.OnDropColumn, ColumnMapping: ts.setup.ColumnMapping, ChangeDataFeed: ts.setup.ChangeDataFeed, StorageOptions: storageOpts, AllowForeignSink: ts.setup.AllowForeignSink,
		Logger: ts.setup.Logger, Fault: ts.setup.Fault,
	})
	if err != nil {
		return nil, err
	}
	ts.tables[dir] = t
	return t, nil
}

// opened is the table at dir if it is open.
func (ts *tableSet) opened(dir string) (*merge.Table, bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t, ok := ts.tables[dir]
	return t, ok
}

// dirs lists the opened tables' locations, sorted.
func (ts *tableSet) dirs() []string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	out := make([]string, 0, len(ts.tables))
	for d := range ts.tables {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

// indexKeys reports each opened table's key index size (merge.Table.IndexKeys).
func (ts *tableSet) indexKeys(fn func(dir string, indexed, located int)) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for dir, t := range ts.tables {
		n, located := t.IndexKeys()
		fn(dir, n, located)
	}
}

// observe hands the tables' row counts and per-partition offsets to the
// status page (after a batch, on the runner's goroutine: no Apply runs).
// Counting rows walks the whole key index (at 10M rows, most of a second
// with a partition-scoped index), so a table's rows are counted again only
// after 50 times what the last count took (at least a second): at most 2%
// of the time, where counting after every batch doubled the CPU per event
// of two instances on a 10M-row table (bench/results, scale-out).
func (ts *tableSet) observe(rec *status.Recorder) { ts.observeRows(rec, false) }

// observeIdle counts the rows a throttled observe skipped once no batch
// runs (pipeline.Runner.OnIdle), so the page ends exact at rest.
func (ts *tableSet) observeIdle(rec *status.Recorder) { ts.observeRows(rec, true) }

func (ts *tableSet) observeRows(rec *status.Recorder, idle bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	now := time.Now()
	if ts.rowsNext == nil {
		ts.rowsNext = map[string]time.Time{}
	}
	if ts.stale == nil {
		ts.stale = map[string]bool{}
	}
	for dir, t := range ts.tables {
		next, counted := ts.rowsNext[dir]
		switch {
		case idle && !ts.stale[dir]:
			continue // nothing changed since the last count
		case !counted || !now.Before(next):
			t0 := time.Now()
			live, deleted := t.LiveRows()
			ts.rowsNext[dir] = now.Add(max(time.Second, 50*time.Since(t0)))
			ts.stale[dir] = false
			rec.SetRows(dir, int64(live), int64(deleted))
		default:
			ts.stale[dir] = true
		}
		if idle {
			continue
		}
		for tp, next := range t.Offsets() {
			rec.SetOffset(dir, tp.Topic, tp.Partition, next)
		}
	}
}

func buildPipeline(s *sinkSetup) (*pipeline.Pipeline, *tableSet, error) {
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
	ts := &tableSet{setup: s, tables: map[string]*merge.Table{}}
	dec := envelope.NewDecoder(envelope.Options{Registry: s.Registry})
	// history tables store before images of updates
	norm, err := normalize.New(normalize.Options{KeyColumns: s.KeyColumns, KeepBefore: s.Rules.UsesBefore() || s.History != nil})
	if err != nil {
		return nil, nil, err
	}
	var rs pipeline.Rules
	if s.Rules.Len() > 0 {
		rs = s.Rules // no per-change cost without rules
	}
	p := pipeline.New(pipeline.Config{
		Sink:        s.Sink,
		Decoder:     dec,
		Normalizer:  norm,
		Quarantine:  s.Quarantine,
		Rules:       rs,
		Logger:      s.Logger,
		Observer:    s.Observer,
		Fence:       s.Fence,
		RetryBudget: s.RetryBudget,
		Domains:     s.Domains,
		Decoded:     s.Decoded,
		Route: func(ctx context.Context, topic string) (pipeline.Table, string, bool, error) {
			dir, ok := s.Route(topic)
			if !ok {
				return nil, "", false, nil
			}
			t, err := ts.route(ctx, topic, dir)
			if err != nil {
				return nil, "", false, err
			}
			return t, dir, true, nil
		},
	})
	return p, ts, nil
}

// routeTemplate expands a table path template with the parts of a Debezium
// topic name <prefix>.<schema>.<table>: {topic}, {prefix} (also {db}),
// {schema}, {table}.
func routeTemplate(tmpl string) func(topic string) (string, bool) {
	return func(topic string) (string, bool) {
		if isControlTopic(topic) {
			return "", false
		}
		parts := strings.Split(topic, ".")
		var prefix, sch, tbl string
		switch len(parts) {
		case 1:
			tbl = parts[0]
		case 2:
			prefix, tbl = parts[0], parts[1]
		default:
			prefix, sch, tbl = strings.Join(parts[:len(parts)-2], "."), parts[len(parts)-2], parts[len(parts)-1]
		}
		r := strings.NewReplacer("{topic}", topic, "{prefix}", prefix, "{db}", prefix, "{schema}", sch, "{table}", tbl)
		return canonLocation(r.Replace(tmpl)), true
	}
}

// isControlTopic recognises Debezium's heartbeat and transaction topics by name.
func isControlTopic(topic string) bool {
	return strings.HasPrefix(topic, "__debezium-heartbeat") || strings.HasSuffix(topic, ".transaction") ||
		strings.HasSuffix(topic, ".heartbeat")
}

func parseKeyColumns(specs []string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, s := range specs {
		name, cols, ok := strings.Cut(s, "=")
		if !ok || name == "" || cols == "" {
			return nil, fmt.Errorf("key columns %q: want TABLE_OR_TOPIC=col1,col2", s)
		}
		out[name] = strings.Split(cols, ",")
	}
	return out, nil
}

// loadRulesFile reads and compiles the rules of a YAML file (a rules: list
// or a run config holding one); "" is no rules.
func loadRulesFile(path string) (*rules.Set, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--rules: %w", err)
	}
	rs, err := rules.Parse(b, path)
	if err != nil {
		return nil, err
	}
	set, err := rules.Compile(rs)
	if err != nil {
		return nil, fmt.Errorf("rules %s: %w", path, err)
	}
	return set, nil
}
