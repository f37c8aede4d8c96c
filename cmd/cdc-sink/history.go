package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/cdcsink/cdc-sink/history"
	"github.com/cdcsink/cdc-sink/merge"
)

// HistoryConf turns on history tables (docs/history.md).
type HistoryConf struct {
	PathTemplate   string            `yaml:"path_template" doc:"history table path for a topic ({topic} {prefix} {db} {schema} {table}); empty: no history tables"`
	Map            map[string]string `yaml:"map" doc:"explicit topic → history table path (wins over the template)"`
	ExcludeColumns []string          `yaml:"exclude_columns" doc:"columns left out of history images: COLUMN, TABLE.COLUMN or SCHEMA.TABLE.COLUMN"`
	HashColumns    []string          `yaml:"hash_columns" doc:"columns stored in history images as hex SHA-256 of salt + value (same forms as exclude_columns)"`
	HashSalt       string            `yaml:"hash_salt" doc:"secret salt of hash_columns; prefer CDC_SINK_HISTORY_HASH_SALT"`
	SCD2           bool              `yaml:"scd2" doc:"also materialize an SCD type 2 table per history table (docs/history.md)"`
	SCD2Template   string            `yaml:"scd2_path_template" doc:"SCD2 table path for a topic (placeholders as path_template); empty: the history path + _scd2"`
	SCD2Map        map[string]string `yaml:"scd2_map" doc:"explicit topic → SCD2 table path (wins over the template)"`
}

// scd2Route is the SCD2 location of a topic with history table hdir (nil: no SCD2 tables).
func (h HistoryConf) scd2Route() func(topic, hdir string) string {
	if !h.SCD2 {
		return nil
	}
	tmpl := routeTemplate(h.SCD2Template)
	return func(topic, hdir string) string {
		if d, ok := h.SCD2Map[topic]; ok {
			return canonLocation(d)
		}
		if h.SCD2Template != "" {
			if d, ok := tmpl(topic); ok {
				return d
			}
		}
		return strings.TrimRight(hdir, "/") + "_scd2"
	}
}

func (h HistoryConf) privacy() history.Privacy {
	return history.Privacy{ExcludeColumns: h.ExcludeColumns, HashColumns: h.HashColumns, Salt: h.HashSalt}
}

// route is the history location of a topic (ok=false: none).
func (h HistoryConf) route() func(topic string) (string, bool) {
	if h.PathTemplate == "" && len(h.Map) == 0 {
		return nil
	}
	tmpl := routeTemplate(h.PathTemplate)
	return func(topic string) (string, bool) {
		if d, ok := h.Map[topic]; ok {
			return canonLocation(d), true
		}
		if h.PathTemplate == "" {
			return "", false
		}
		return tmpl(topic)
	}
}

func (h HistoryConf) validate(bad func(key, format string, a ...any) error) error {
	if h.PathTemplate != "" {
		sample, _ := routeTemplate(h.PathTemplate)("prefix.schema.table")
		if _, err := checkLocation(sample); err != nil {
			return bad("history.path_template", "%q: %v", h.PathTemplate, err)
		}
	}
	for topic, loc := range h.Map {
		if _, err := checkLocation(loc); err != nil {
			return bad("history.map", "topic %s: %v", topic, err)
		}
	}
	if err := h.privacy().Validate(); err != nil {
		return bad("history", "%v", err)
	}
	if !h.SCD2 && (h.SCD2Template != "" || len(h.SCD2Map) > 0) {
		return bad("history.scd2", "scd2_path_template / scd2_map are set but history.scd2 is false")
	}
	if h.SCD2 {
		if h.PathTemplate == "" && len(h.Map) == 0 {
			return bad("history.scd2", "SCD2 tables are built beside history tables: set history.path_template or history.map")
		}
		if len(h.ExcludeColumns) > 0 || len(h.HashColumns) > 0 {
			return bad("history.scd2", "cannot be combined with history.exclude_columns / hash_columns: the SCD2 table would hold those values in clear")
		}
		if h.SCD2Template != "" {
			sample, _ := routeTemplate(h.SCD2Template)("prefix.schema.table")
			if _, err := checkLocation(sample); err != nil {
				return bad("history.scd2_path_template", "%q: %v", h.SCD2Template, err)
			}
		}
		for topic, loc := range h.SCD2Map {
			if _, err := checkLocation(loc); err != nil {
				return bad("history.scd2_map", "topic %s: %v", topic, err)
			}
		}
	}
	return nil
}

// parseAge parses a retention age: a Go duration (36h) or whole days (90d).
func parseAge(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		d, err := strconv.ParseUint(n, 10, 16)
		if err != nil || n == "" {
			return 0, fmt.Errorf("age %q: want N days (90d) or a duration (36h)", s)
		}
		return time.Duration(d) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("age %q: want N days (90d) or a duration (36h)", s)
	}
	return d, nil
}

type ageFlag struct{ d time.Duration }

func (a *ageFlag) String() string { return a.d.String() }
func (a *ageFlag) Set(s string) error {
	d, err := parseAge(s)
	a.d = d
	return err
}

var _ flag.Value = (*ageFlag)(nil)

// tablePurgeHistory: `cdc-sink table purge-history URL --older-than 90d`.
func tablePurgeHistory(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("table purge-history", stderr)
	older := &ageFlag{}
	fs.Var(older, "older-than", "drop history partitions whose source date is older than this (90d, 36h); required")
	dir, err := oneDir(fs, args)
	if err != nil {
		return err
	}
	if older.d <= 0 {
		return errors.New("--older-than is required (e.g. 90d)")
	}
	now := time.Now()
	cutoff := now.Add(-older.d)
	st, err := history.Purge(ctx, dir, nil, storageOpts, cutoff, now)
	if err != nil {
		return err
	}
	if st.Version < 0 {
		fmt.Fprintf(stdout, "history %s: no partition before %s\n", dir, cutoff.UTC().Format(time.DateOnly))
		return nil
	}
	fmt.Fprintf(stdout, "history %s v%d: dropped %d files, %d rows, of %d source dates before %s (%s … %s)\n",
		dir, st.Version, st.Files, st.Rows, len(st.Dates), cutoff.UTC().Format(time.DateOnly), st.Dates[0], st.Dates[len(st.Dates)-1])
	fmt.Fprintln(stdout, "the files stay on disk (time travel) until `cdc-sink table vacuum` removes them after the retention period")
	return nil
}

// replayFromHistory: `cdc-sink replay --from-history URL --table NEW [--scd2 NEW] [--until T]`.
func replayFromHistory(ctx context.Context, from, table, scd2, sink, until string, foreign bool, stdout io.Writer) error {
	if err := tableArg("replay", from); err != nil {
		return err
	}
	var untilUs int64
	if until != "" {
		ts, err := time.Parse(time.RFC3339Nano, until)
		if err != nil {
			return fmt.Errorf("--until %q: want an RFC 3339 time", until)
		}
		untilUs = ts.UnixMicro()
	}
	h, err := history.OpenRead(ctx, from, nil, storageOpts)
	if err != nil {
		return err
	}
	t, err := merge.Open(ctx, table, merge.Options{Sink: sink, StorageOptions: storageOpts, AllowForeignSink: foreign})
	if err != nil {
		return err
	}
	if t.Version() >= 0 && !foreign {
		return fmt.Errorf("--table %s exists: a rebuild writes a new table", table)
	}
	opts := history.RebuildOptions{UntilMicros: untilUs}
	if scd2 != "" {
		if opts.SCD2, err = history.OpenSCD2(ctx, scd2, history.SCD2Options{Sink: sink, StorageOptions: storageOpts}); err != nil {
			return err
		}
		if opts.SCD2.Table().Version() >= 0 {
			return fmt.Errorf("--scd2 %s exists: a rebuild writes a new SCD2 table", scd2)
		}
	}
	st, err := history.RebuildWith(ctx, h, t, opts)
	if err != nil {
		return err
	}
	live, deleted := t.LiveRows()
	fmt.Fprintf(stdout, "table %s version %d rebuilt from %s: %d history rows in %d batches; %d live rows, %d tombstones\n",
		table, t.Version(), from, st.Entries, st.Batches, live, deleted)
	if opts.SCD2 != nil {
		fmt.Fprintf(stdout, "scd2 table %s version %d built in the same batches\n", scd2, opts.SCD2.Table().Version())
	}
	return nil
}
