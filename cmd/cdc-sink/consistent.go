package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/cdcsink/cdc-sink/consistency"
)

// cmdConsistentVersions prints the newest cut of a consistency group: the
// source commit point W and each table's version at W, with the queries
// that read the tables there.
func cmdConsistentVersions(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("consistent-versions", stderr)
	manifest := fs.String("manifest", "", "the group's manifest location (config transactions.manifest)")
	config := fs.String("config", "", "a run config: its consistency_group and transactions.manifest")
	asJSON := fs.Bool("json", false, "print the entry as JSON")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: cdc-sink consistent-versions GROUP --manifest LOCATION | --config FILE [--json]")
		fs.PrintDefaults()
	}
	var group string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		group, args = args[0], args[1:]
	}
	if err := noPositional(fs, args); err != nil {
		return err
	}
	if *config != "" {
		cfg, err := loadConfig([]string{"--config", *config}, os.Getenv, stderr)
		if err != nil {
			return err
		}
		if cfg.Group == "" {
			return &exitError{code: 2, msg: fmt.Sprintf("consistent-versions: %s has no consistency_group", *config)}
		}
		if group != "" && group != cfg.Group {
			return &exitError{code: 2, msg: fmt.Sprintf("consistent-versions: %s is the config of group %s, not %s", *config, cfg.Group, group)}
		}
		group, *manifest = cfg.Group, cfg.Tx.Manifest
	}
	if group == "" || *manifest == "" {
		fs.Usage()
		return &exitError{code: 2}
	}
	if _, err := checkLocation(*manifest); err != nil {
		return fmt.Errorf("--manifest: %w", err)
	}
	l, err := consistency.Open(ctx, *manifest, storageOpts, group)
	if err != nil {
		return err
	}
	e, ok, err := l.Latest(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return &exitError{code: 1, msg: fmt.Sprintf("consistency group %s: no cut published yet in %s", group, *manifest)}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(e)
	}
	tables := make([]string, 0, len(e.Tables))
	for t := range e.Tables {
		tables = append(tables, t)
	}
	slices.Sort(tables)
	fmt.Fprintf(stdout, "group %s: cut %d at source commit LSN %d (%s)\n", group, e.Seq, e.Watermark, e.Time.Format("2006-01-02T15:04:05Z"))
	for _, t := range tables {
		fmt.Fprintf(stdout, "  %s  version %d\n", t, e.Tables[t])
	}
	fmt.Fprintln(stdout, "read every table at its version (docs/consistency.md):")
	for _, t := range tables {
		fmt.Fprintf(stdout, "  Spark:   SELECT * FROM delta.`%s` VERSION AS OF %d\n", t, e.Tables[t])
		fmt.Fprintf(stdout, "  delta-rs: DeltaTable(%q, version=%d)\n", t, e.Tables[t])
		fmt.Fprintf(stdout, "  DuckDB:  SELECT * FROM delta_scan('%s', version => %d)\n", t, e.Tables[t])
	}
	return nil
}
