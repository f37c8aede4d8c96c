package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cdcsink/cdc-sink/consistency"
	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/layout"
	"github.com/cdcsink/cdc-sink/maintain"
	"github.com/cdcsink/cdc-sink/tablerows"
)

// cmdTable dispatches `cdc-sink table show|info|optimize|purge-tombstones|vacuum|cleanup-log|alter|set-property DIR`.
func cmdTable(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return dispatch(ctx, "table", "<subcommand> DIR [flags]", []subcommand{
		{"show", "print the current rows (--format jsonl|table, --limit, --columns, --include-deleted)", tableShow},
		{"info", "version, rows, files, sink, offsets, last batch and commit", tableInfo},
		{"optimize", "compact small files and files with deletion vectors (no logical change)", tableOptimize},
		{"purge-tombstones", "remove tombstone rows older than --older-than (default 168h)", tablePurge},
		{"vacuum", "delete unreferenced files older than --retention (dry run unless --dry-run=false)", tableVacuum},
		{"cleanup-log", "delete log files older than delta.logRetentionDuration that a checkpoint covers", tableCleanupLog},
		{"purge-history", "drop history partitions whose source date is older than --older-than (90d); vacuum deletes the files", tablePurgeHistory},
		{"alter", "change a column's type, converting its values (--column C --type T; after a schema_mismatch)", tableAlter},
		{"set-property", "set a table property: DIR delta.enableChangeDataFeed=true|false (Change Data Feed from this version on)", tableSetProperty},
	}, args, stdout, stderr)
}

// parseArgs parses flags that may come before or after the positional
// arguments (`table show DIR --limit 3`) and returns the positionals.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if rest[0] == "--" {
			return append(pos, rest[1:]...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// oneDir parses flags and requires exactly one positional DIR.
func oneDir(fs *flag.FlagSet, args []string) (string, error) {
	pos, err := parseArgs(fs, args)
	if err != nil {
		return "", err
	}
	if len(pos) != 1 {
		return "", &exitError{code: 2, msg: fmt.Sprintf("%s: want exactly one table directory, got %d arguments", fs.Name(), len(pos))}
	}
	return pos[0], tableArg(fs.Name(), pos[0])
}

func tableShow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("table show", stderr)
	incl := fs.Bool("include-deleted", false, "also print tombstone rows (_cdc_deleted = true)")
	format := fs.String("format", "jsonl", "jsonl | table")
	limit := fs.Int("limit", 0, "print at most N rows (0 = all)")
	columns := fs.String("columns", "", "comma-separated columns to print (default: all)")
	dir, err := oneDir(fs, args)
	if err != nil {
		return err
	}
	if *format != "jsonl" && *format != "table" {
		return &exitError{code: 2, msg: fmt.Sprintf("--format %q: want jsonl or table", *format)}
	}
	t, err := tablerows.OpenWith(ctx, dir, storageOpts)
	if err != nil {
		return err
	}
	var cols []string
	if *columns != "" {
		cols = splitList([]string{*columns})
	} else {
		cols = t.Columns()
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	errLimit := errors.New("limit reached")
	n := 0
	var rows [][]string
	var line []byte
	err = t.Scan(ctx, tablerows.ScanOptions{Columns: cols, IncludeDeleted: *incl}, func(r tablerows.Row) error {
		if *limit > 0 && n >= *limit {
			return errLimit
		}
		n++
		if *format == "table" {
			rows = append(rows, append([]string(nil), r...))
			return nil
		}
		line = append(line[:0], '{')
		for i, c := range cols {
			if i > 0 {
				line = append(line, ',')
			}
			line = tablerows.AppendString(line, c)
			line = append(line, ':')
			line = append(line, r[i]...)
		}
		line = append(line, '}', '\n')
		_, err := w.Write(line)
		return err
	})
	if err != nil && !errors.Is(err, errLimit) {
		return err
	}
	if *format == "table" {
		writeTextTable(w, cols, rows)
		fmt.Fprintf(w, "(%d rows)\n", len(rows))
	}
	return w.Flush()
}

// writeTextTable prints an aligned text table: header, dashes, rows. Cells
// show strings unquoted (control characters escaped) and null as NULL.
func writeTextTable(w io.Writer, cols []string, rows [][]string) {
	cells := make([][]string, len(rows))
	width := make([]int, len(cols))
	for i, c := range cols {
		width[i] = utf8.RuneCountInString(c)
	}
	for r, row := range rows {
		cells[r] = make([]string, len(row))
		for i, v := range row {
			s := displayCell(v)
			cells[r][i] = s
			width[i] = max(width[i], utf8.RuneCountInString(s))
		}
	}
	line := func(vals []string) {
		var b strings.Builder
		for i, v := range vals {
			if i > 0 {
				b.WriteString("  ")
			}
			b.WriteString(v)
			if i < len(vals)-1 {
				b.WriteString(strings.Repeat(" ", width[i]-utf8.RuneCountInString(v)))
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	line(cols)
	dashes := make([]string, len(cols))
	for i := range cols {
		dashes[i] = strings.Repeat("-", width[i])
	}
	line(dashes)
	for _, r := range cells {
		line(r)
	}
}

func displayCell(v string) string {
	if v == "null" {
		return "NULL"
	}
	s := tablerows.Text(v)
	if strings.ContainsAny(s, "\n\r\t") {
		s = strings.NewReplacer("\n", `\n`, "\r", `\r`, "\t", `\t`).Replace(s)
	}
	return s
}

func tableInfo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("table info", stderr)
	dir, err := oneDir(fs, args)
	if err != nil {
		return err
	}
	t, err := tablerows.OpenWith(ctx, dir, storageOpts)
	if err != nil {
		return err
	}
	snap := t.Snap
	counts, err := t.Count(ctx)
	if err != nil {
		return err
	}
	var bytes int64
	dvFiles := 0
	var dvRows int64
	files := snap.Files()
	for i := range files {
		bytes += files[i].Size
		if d := files[i].DeletionVector; d != nil {
			dvFiles++
			dvRows += d.Cardinality
		}
	}
	sink, _ := snap.Config(layout.ConfSink)
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	kv := func(k, format string, a ...any) { fmt.Fprintf(w, "%-14s %s\n", k+":", fmt.Sprintf(format, a...)) }
	kv("table", "%s", t.Dir)
	kv("version", "%d", t.Version())
	if sink != "" {
		kv("sink", "%s", sink)
	} else {
		kv("sink", "(none: not written by cdc-sink)")
	}
	if k := t.KeyColumns(); k != nil {
		kv("key columns", "%s", strings.Join(k, ","))
	}
	if src, ok := snap.Config(layout.ConfSourceID); ok && src != "" {
		kv("source", "%s", src)
	}
	if t.HasDeletedColumn() {
		kv("rows", "%d live, %d deleted (tombstones)", counts.Live, counts.Deleted)
	} else {
		kv("rows", "%d", counts.Live)
	}
	kv("files", "%d (%d with deletion vectors hiding %d rows)", len(files), dvFiles, dvRows)
	kv("bytes", "%d (%s)", bytes, humanBytes(bytes))
	if pc := snap.PartitionColumns(); len(pc) > 0 {
		kv("partitioned", "%s", strings.Join(pc, ","))
	}
	if snap.ChangeDataFeedEnabled() {
		kv("change feed", "on (%s=true: each commit's row changes in _change_data/)", delta.ConfEnableChangeDataFeed)
	}
	op, ts := lastCommit(ctx, t)
	if !ts.IsZero() {
		kv("last commit", "%s %s (v%d)", ts.UTC().Format(time.RFC3339), op, t.Version())
	} else {
		kv("last commit", "%s (v%d)", op, t.Version())
	}
	txns := snap.Txns()
	if sink != "" {
		// the highest batch counter of any instance of the sink
		last := int64(-1)
		for app, tx := range txns {
			if _, ok := layout.ParseBatchAppID(sink, app); ok {
				last = max(last, tx.Version)
			}
		}
		if last >= 0 {
			kv("last batch", "%d", last)
		} else {
			kv("last batch", "none")
		}
	}
	// Per-partition offsets, by sink (the owner first, then others such as
	// <sink>-redrive).
	type off struct {
		sink, topic string
		part        int
		next        int64
	}
	var offs []off
	other := map[string]int64{}
	for app, tx := range txns {
		i := strings.LastIndexByte(app, '/')
		j := -1
		if i > 0 {
			j = strings.LastIndexByte(app[:i], '/')
		}
		p, perr := strconv.Atoi(app[i+1:])
		if i < 0 || j < 0 || perr != nil {
			if _, ours := layout.ParseBatchAppID(sink, app); !ours {
				other[app] = tx.Version
			}
			continue
		}
		offs = append(offs, off{app[:j], app[j+1 : i], p, tx.Version})
	}
	sort.Slice(offs, func(a, b int) bool {
		x, y := offs[a], offs[b]
		if (x.sink == sink) != (y.sink == sink) {
			return x.sink == sink
		}
		if x.sink != y.sink {
			return x.sink < y.sink
		}
		if x.topic != y.topic {
			return x.topic < y.topic
		}
		return x.part < y.part
	})
	if len(offs) > 0 {
		fmt.Fprintln(w, "offsets (next offset to read, per sink/topic/partition):")
		for _, o := range offs {
			fmt.Fprintf(w, "  %s/%s/%d  %d\n", o.sink, o.topic, o.part, o.next)
		}
	}
	if len(other) > 0 {
		fmt.Fprintln(w, "other transactions (appId version):")
		keys := make([]string, 0, len(other))
		for k := range other {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "  %s  %d\n", k, other[k])
		}
	}
	return w.Flush()
}

// lastCommit returns the operation and time of the snapshot's commit.
func lastCommit(ctx context.Context, t *tablerows.Table) (string, time.Time) {
	key := t.Delta.CommitKey(t.Version())
	name := key[strings.LastIndexByte(key, '/')+1:]
	data, err := t.Store.Get(ctx, key)
	if err != nil {
		return "(commit file gone: checkpoint only)", t.Snap.Timestamp()
	}
	acts, err := delta.ParseCommit(name, data)
	if err != nil {
		return "(unreadable commit)", t.Snap.Timestamp()
	}
	for _, a := range acts {
		if a.CommitInfo == nil {
			continue
		}
		op, _ := a.CommitInfo["operation"].(string)
		var ts time.Time
		switch v := a.CommitInfo["timestamp"].(type) {
		case float64:
			ts = time.UnixMilli(int64(v))
		case int64:
			ts = time.UnixMilli(v)
		case interface{ Int64() (int64, error) }:
			if n, err := v.Int64(); err == nil {
				ts = time.UnixMilli(n)
			}
		}
		if ts.IsZero() {
			ts = t.Snap.Timestamp()
		}
		if op == "" {
			op = "(unknown operation)"
		}
		return op, ts
	}
	return "(no commitInfo)", t.Snap.Timestamp()
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func tableOptimize(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("table optimize", stderr)
	small := fs.Int64("small-file-bytes", 32<<20, "files smaller than this are compacted (files with deletion vectors always are)")
	target := fs.Int64("target-file-bytes", 256<<20, "input bytes packed into one output file")
	dry := fs.Bool("dry-run", false, "plan only: write and commit nothing")
	dir, err := oneDir(fs, args)
	if err != nil {
		return err
	}
	res, err := maintain.Optimize(ctx, dir, maintain.OptimizeOptions{Storage: storageOpts, SmallFileBytes: *small, TargetFileBytes: *target, DryRun: *dry})
	if err != nil {
		return err
	}
	switch {
	case res.FilesRemoved == 0:
		fmt.Fprintf(stdout, "table %s v%d: nothing to compact\n", dir, res.ReadVersion)
	case *dry:
		fmt.Fprintf(stdout, "dry run: would rewrite %d files (%d with deletion vectors, %s) into %d files: %d rows\n",
			res.FilesRemoved, res.DVFilesRemoved, humanBytes(res.BytesRemoved), res.FilesAdded, res.RowsWritten)
	default:
		fmt.Fprintf(stdout, "table %s v%d: rewrote %d files (%d with deletion vectors, %s) into %d files (%s), %d rows; logical content unchanged\n",
			dir, res.Version, res.FilesRemoved, res.DVFilesRemoved, humanBytes(res.BytesRemoved), res.FilesAdded, humanBytes(res.BytesAdded), res.RowsWritten)
		fmt.Fprintln(stdout, "the replaced files stay on disk until `cdc-sink table vacuum` removes them after the retention period")
	}
	return nil
}

func tablePurge(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("table purge-tombstones", stderr)
	older := fs.Duration("older-than", 168*time.Hour, "purge tombstones whose _cdc_ingest_ts is older than this")
	dry := fs.Bool("dry-run", false, "count only: change nothing")
	dir, err := oneDir(fs, args)
	if err != nil {
		return err
	}
	res, err := maintain.PurgeTombstones(ctx, dir, maintain.PurgeOptions{Storage: storageOpts, OlderThan: *older, DryRun: *dry})
	if err != nil {
		return err
	}
	cut := res.Cutoff.UTC().Format(time.RFC3339)
	switch {
	case res.Purged == 0:
		fmt.Fprintf(stdout, "table %s v%d: no tombstones ingested before %s (%d younger kept)\n", dir, res.ReadVersion, cut, res.Kept)
	case *dry:
		fmt.Fprintf(stdout, "dry run: would purge %d tombstones ingested before %s in %d files (%d younger kept)\n", res.Purged, cut, res.Files, res.Kept)
	default:
		fmt.Fprintf(stdout, "table %s v%d: purged %d tombstones ingested before %s in %d files (%d younger kept)\n",
			dir, res.Version, res.Purged, cut, res.Files, res.Kept)
		fmt.Fprintln(stdout, "note: a late change older than a purged delete can now recreate its row (docs/runbook.md, tombstone purge)")
	}
	return nil
}

func tableVacuum(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("table vacuum", stderr)
	retention := fs.Duration("retention", 168*time.Hour, "keep unreferenced files younger than this (time travel and slow readers need them)")
	dry := fs.Bool("dry-run", true, "only list what would be deleted; --dry-run=false deletes")
	dir, err := oneDir(fs, args)
	if err != nil {
		return err
	}
	if *retention < 168*time.Hour && !*dry {
		fmt.Fprintf(stderr, "warning: retention %s is below the default 168h: readers of older versions (and concurrent writers) may fail\n", *retention)
	}
	t, err := tablerows.OpenWith(ctx, dir, storageOpts)
	if err != nil {
		return err
	}
	// delta.Vacuum keeps every file of a tombstone younger than the table's
	// delta.deletedFileRetentionDuration whatever Retention says; to honour a
	// shorter --retention exactly, shift its clock so that both cutoffs
	// (tombstone age and file age) fall at now - retention.
	opts := delta.VacuumOptions{Retention: *retention, Execute: !*dry}
	if tr := t.Snap.DeletedFileRetention(); *retention < tr {
		opts.Retention = tr
		opts.Now = time.Now().Add(tr - *retention)
	}
	keep, err := protectedVersions(ctx, t, time.Now().Add(-*retention))
	if err != nil {
		return err
	}
	opts.KeepVersions = keep
	res, err := delta.Vacuum(ctx, t.Delta, opts)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	if len(keep) > 0 {
		fmt.Fprintf(w, "kept readable: versions %v (named by consistency group cuts, docs/consistency.md)\n", keep)
	}
	for _, f := range res.Files {
		fmt.Fprintln(w, f)
	}
	if res.DryRun {
		fmt.Fprintf(w, "dry run: %d files would be deleted (v%d, retention %s); run with --dry-run=false to delete\n", len(res.Files), res.Version, *retention)
	} else {
		fmt.Fprintf(w, "deleted %d files (v%d, retention %s)\n", len(res.Files), res.Version, *retention)
	}
	return w.Flush()
}

func tableCleanupLog(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("table cleanup-log", stderr)
	dir, err := oneDir(fs, args)
	if err != nil {
		return err
	}
	t, err := tablerows.OpenWith(ctx, dir, storageOpts)
	if err != nil {
		return err
	}
	keep, err := protectedVersions(ctx, t, time.Now().Add(-t.Snap.LogRetention()))
	if err != nil {
		return err
	}
	if len(keep) > 0 {
		fmt.Fprintf(stdout, "kept readable: versions %v (named by consistency group cuts, docs/consistency.md)\n", keep)
	}
	deleted, err := delta.CleanupLogKeeping(ctx, t.Delta, time.Now(), keep)
	for _, k := range deleted {
		fmt.Fprintln(stdout, k)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "deleted %d log files older than %s (delta.logRetentionDuration) covered by a checkpoint\n", len(deleted), t.Snap.LogRetention())
	return nil
}

// protectedVersions are the versions of t that consistency group cuts name
// (the newest, and those written since since): vacuum and log cleanup keep
// them readable.
func protectedVersions(ctx context.Context, t *tablerows.Table, since time.Time) ([]int64, error) {
	domains := map[string]string{}
	for _, d := range t.Snap.Domains() {
		if cfg, ok := t.Snap.DomainMetadata(d); ok {
			domains[d] = cfg
		}
	}
	keep, err := consistency.Protected(ctx, domains, storageOpts, since)
	if err != nil {
		return nil, fmt.Errorf("versions named by consistency group cuts: %w", err)
	}
	return keep, nil
}
