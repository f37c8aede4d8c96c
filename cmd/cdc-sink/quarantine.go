package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/cdcsink/cdc-sink/audit"
	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/cdcsink/cdc-sink/source"
)

// cmdQuarantine dispatches `cdc-sink quarantine stats|list|show|export|redrive`.
func cmdQuarantine(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return dispatch(ctx, "quarantine", "<subcommand> (--file PATH | --brokers B --topic T | --config FILE) [filters]", []subcommand{
		{"stats", "count entries by reason, source topic and hour", quarStats},
		{"list", "list entries (filters: --reason --source-topic --since --until --offsets)", quarList},
		{"show", "print one entry decoded (--at ID)", quarShow},
		{"export", "write the original records as kcat -J lines (--out FILE), for replay --from-file", quarExport},
		{"redrive", "re-apply entries to a table (--table DIR --requarantine FILE)", quarRedrive},
	}, args, stdout, stderr)
}

// quarSource is where entries come from plus the filter flags.
type quarSource struct {
	file, brokers, topic  string
	config                string
	cfg                   *Config // loaded from config
	reasons, sourceTopics multiFlag
	sinks, offsets        multiFlag
	since, until          string
}

func (q *quarSource) register(fs *flag.FlagSet) {
	fs.StringVar(&q.file, "file", "", "quarantine file (kcat -J lines with an \"error\" object)")
	fs.StringVar(&q.brokers, "brokers", "", "Kafka bootstrap servers of the quarantine topic")
	fs.StringVar(&q.topic, "topic", "", "with --brokers: the quarantine topic (usually <sink>.quarantine); with --file: same as --source-topic")
	fs.StringVar(&q.config, "config", "", "a run config: its kafka.brokers, kafka.properties (TLS, SASL) and quarantine topic are the defaults of --brokers and --topic (redrive also takes its registry.*)")
	fs.Var(&q.reasons, "reason", "only these reason classes (repeatable or comma-separated)")
	fs.Var(&q.sourceTopics, "source-topic", "only records from these source topics (repeatable or comma-separated)")
	fs.Var(&q.sinks, "sink", "only records quarantined by these sink names")
	fs.Var(&q.offsets, "offsets", "only these original coordinates: topic:partition:from-to (end exclusive; partition * = any; from- = open end), or topic/partition@from-to")
	fs.StringVar(&q.since, "since", "", "only entries quarantined at or after: RFC 3339 time or a duration ago (2h)")
	fs.StringVar(&q.until, "until", "", "only entries quarantined before: RFC 3339 time or a duration ago")
}

func (q *quarSource) filter(now time.Time) (quarantine.Filter, error) {
	var f quarantine.Filter
	for _, r := range splitList(q.reasons) {
		if !validReason(quarantine.Reason(r)) {
			return f, fmt.Errorf("--reason %q: unknown class (known: %s)", r, reasonList())
		}
		f.Reasons = append(f.Reasons, quarantine.Reason(r))
	}
	f.Topics = splitList(q.sourceTopics)
	if q.file != "" && q.topic != "" {
		f.Topics = append(f.Topics, splitList([]string{q.topic})...)
	}
	f.Sinks = splitList(q.sinks)
	for _, o := range splitList(q.offsets) {
		r, err := parseOffsets(o)
		if err != nil {
			return f, err
		}
		f.Offsets = append(f.Offsets, r)
	}
	var err error
	if f.Since, err = parseWhen(q.since, now); err != nil {
		return f, fmt.Errorf("--since: %w", err)
	}
	if f.Until, err = parseWhen(q.until, now); err != nil {
		return f, fmt.Errorf("--until: %w", err)
	}
	return f, nil
}

func validReason(r quarantine.Reason) bool {
	for _, x := range quarantine.Reasons {
		if x == r {
			return true
		}
	}
	return false
}

func reasonList() string {
	s := make([]string, len(quarantine.Reasons))
	for i, r := range quarantine.Reasons {
		s[i] = string(r)
	}
	return strings.Join(s, ", ")
}

// parseOffsets accepts topic:partition:from-to (end exclusive), with
// partition "*" for any and "from-" for an open end, or the quarantine
// package's topic/partition@from-to form.
func parseOffsets(s string) (quarantine.OffsetRange, error) {
	if strings.ContainsAny(s, "@/") {
		return quarantine.ParseOffsetRange(s)
	}
	bad := func() (quarantine.OffsetRange, error) {
		return quarantine.OffsetRange{}, fmt.Errorf("--offsets %q: want topic:partition:from-to", s)
	}
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return bad()
	}
	j := strings.LastIndexByte(s[:i], ':')
	if j < 0 {
		return bad()
	}
	r := quarantine.OffsetRange{Topic: s[:j], Partition: -1}
	if p := s[j+1 : i]; p != "*" && p != "" {
		n, err := strconv.ParseInt(p, 10, 32)
		if err != nil || n < 0 {
			return bad()
		}
		r.Partition = int32(n)
	}
	from, to, dash := strings.Cut(s[i+1:], "-")
	var err error
	if r.From, err = strconv.ParseInt(from, 10, 64); err != nil || r.From < 0 {
		return bad()
	}
	switch {
	case !dash:
		r.To = r.From + 1
	case to != "":
		if r.To, err = strconv.ParseInt(to, 10, 64); err != nil || r.To <= r.From {
			return bad()
		}
	}
	return r, nil
}

func parseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse("2006-01-02", s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%q: want an RFC 3339 time, a date or a duration", s)
}

// loadConfig reads --config once and fills --brokers and --topic from it
// when they were not given.
func (q *quarSource) loadConfig() error {
	if q.config == "" || q.cfg != nil {
		return nil
	}
	cfg, err := replayConfig(q.config, os.Getenv)
	if err != nil {
		return err
	}
	q.cfg = cfg
	if q.file == "" && q.brokers == "" && cfg.Quar.File == "" {
		q.brokers = strings.Join(cfg.Kafka.Brokers, ",")
	}
	if q.file == "" && q.brokers == "" && cfg.Quar.File != "" {
		q.file = cfg.Quar.File
	}
	if q.topic == "" && q.brokers != "" {
		q.topic = cfg.Quar.Topic
		if q.topic == "" {
			q.topic = cfg.Sink + ".quarantine"
		}
	}
	return nil
}

// read returns the matching entries.
func (q *quarSource) read(ctx context.Context, stderr io.Writer) ([]quarantine.Entry, error) {
	f, err := q.filter(time.Now())
	if err != nil {
		return nil, &exitError{code: 2, msg: err.Error()}
	}
	if err := q.loadConfig(); err != nil {
		return nil, err
	}
	var props map[string]string
	if q.cfg != nil {
		props = q.cfg.Kafka.Properties
	}
	switch {
	case q.file != "" && q.brokers != "":
		return nil, &exitError{code: 2, msg: "--file and --brokers are exclusive"}
	case q.file != "":
		return quarantine.ReadFile(q.file, f)
	case q.brokers != "":
		if q.topic == "" {
			return nil, &exitError{code: 2, msg: "--brokers needs --topic (the quarantine topic, usually <sink>.quarantine)"}
		}
		logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		return quarantine.ReadKafka(ctx, quarantine.KafkaConfig{Brokers: strings.Split(q.brokers, ","), Topic: q.topic, Extra: props, Logger: logger}, f)
	}
	return nil, &exitError{code: 2, msg: "give --file PATH or --brokers B --topic T"}
}

func quarStats(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("quarantine stats", stderr)
	var q quarSource
	q.register(fs)
	if err := noPositional(fs, args); err != nil {
		return err
	}
	es, err := q.read(ctx, stderr)
	if err != nil {
		return err
	}
	s := quarantine.Stats(es)
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	fmt.Fprintf(w, "total: %d\n", s.Total)
	printCounts(w, "by reason:", stringKeys(s.ByReason))
	printCounts(w, "by source topic:", s.ByTopic)
	if len(s.ByRule) > 0 {
		printCounts(w, "by rule:", s.ByRule)
	}
	fmt.Fprintln(w, "by hour (UTC):")
	for _, h := range s.Hours() {
		fmt.Fprintf(w, "  %s  %d\n", h.UTC().Format("2006-01-02T15:04Z"), s.ByHour[h])
	}
	return w.Flush()
}

func stringKeys(m map[quarantine.Reason]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[string(k)] = v
	}
	return out
}

// printCounts prints counts sorted by count (descending), then name.
func printCounts(w io.Writer, title string, m map[string]int) {
	fmt.Fprintln(w, title)
	keys := make([]string, 0, len(m))
	width := 0
	for k := range m {
		keys = append(keys, k)
		width = max(width, len(k))
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	for _, k := range keys {
		fmt.Fprintf(w, "  %-*s  %d\n", width, k, m[k])
	}
}

func noPositional(fs *flag.FlagSet, args []string) error {
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return &exitError{code: 2, msg: fmt.Sprintf("%s: unexpected argument %q", fs.Name(), pos[0])}
	}
	return nil
}

func coords(r *source.Record) string {
	return fmt.Sprintf("%s/%d@%d", r.Topic, r.Partition, r.Offset)
}

func quarList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("quarantine list", stderr)
	var q quarSource
	q.register(fs)
	limit := fs.Int("limit", 0, "list at most N entries (0 = all)")
	if err := noPositional(fs, args); err != nil {
		return err
	}
	es, err := q.read(ctx, stderr)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	fmt.Fprintln(w, "ID\tQUARANTINED\tREASON\tORIGINAL\tSINK\tMESSAGE")
	for i := range es {
		if *limit > 0 && i >= *limit {
			fmt.Fprintf(w, "... %d more (raise --limit)\n", len(es)-i)
			break
		}
		e := &es[i]
		msg := strings.ReplaceAll(e.Message, "\n", " ")
		if utf8.RuneCountInString(msg) > 120 {
			msg = string([]rune(msg)[:117]) + "..."
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", e.At, e.Time.UTC().Format(time.RFC3339), e.Reason, coords(e.Record), e.Sink, msg)
	}
	fmt.Fprintf(w, "(%d entries)\n", len(es))
	return w.Flush()
}

// matchAt reports whether entry id (Entry.At) matches the user's --at: the
// full ID, the line number of a file entry, or partition@offset of a topic
// entry.
func matchAt(at, want string) bool {
	return at == want || strings.HasSuffix(at, ":"+want) || strings.HasSuffix(at, "/"+want)
}

func quarShow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("quarantine show", stderr)
	var q quarSource
	q.register(fs)
	at := fs.String("at", "", "entry ID as printed by list (file:line, or topic/partition@offset); a bare line number or partition@offset also works")
	if err := noPositional(fs, args); err != nil {
		return err
	}
	if *at == "" {
		return &exitError{code: 2, msg: "quarantine show: --at ID is required"}
	}
	es, err := q.read(ctx, stderr)
	if err != nil {
		return err
	}
	for i := range es {
		if matchAt(es[i].At, *at) {
			return printEntry(stdout, &es[i])
		}
	}
	return &exitError{code: 1, msg: fmt.Sprintf("quarantine show: no entry %q (see `quarantine list`)", *at)}
}

func printEntry(out io.Writer, e *quarantine.Entry) error {
	w := bufio.NewWriter(out)
	r := e.Record
	kv := func(k, format string, a ...any) { fmt.Fprintf(w, "%-12s %s\n", k+":", fmt.Sprintf(format, a...)) }
	kv("id", "%s", e.At)
	kv("reason", "%s", e.Reason)
	kv("error", "%s", e.Message)
	kv("sink", "%s", e.Sink)
	kv("batch", "%d", e.BatchID)
	kv("quarantined", "%s", e.Time.UTC().Format(time.RFC3339Nano))
	kv("original", "topic %s partition %d offset %d", r.Topic, r.Partition, r.Offset)
	if !r.Timestamp.IsZero() {
		kv("timestamp", "%s (%s)", r.Timestamp.UTC().Format(time.RFC3339Nano), orDash(r.TimestampType))
	}
	if len(r.Headers) == 0 {
		kv("headers", "none")
	} else {
		fmt.Fprintln(w, "headers:")
		for _, h := range r.Headers {
			fmt.Fprintf(w, "  %s: %s\n", h.Key, inlineBytes(h.Value))
		}
	}
	printBytes(w, "key", r.Key)
	printBytes(w, "value", r.Value)
	return w.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// isText reports whether b is UTF-8 without control characters other than
// newline, carriage return and tab.
func isText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if unicode.IsControl(r) && r != '\n' && r != '\r' && r != '\t' {
			return false
		}
	}
	return true
}

func inlineBytes(b []byte) string {
	switch {
	case b == nil:
		return "null"
	case isText(b):
		return strconv.Quote(string(b))
	}
	return "hex:" + hex.EncodeToString(b)
}

func printBytes(w io.Writer, name string, b []byte) {
	switch {
	case b == nil:
		fmt.Fprintf(w, "%-12s null\n", name+":")
	case isText(b):
		s := string(b)
		if json.Valid(b) {
			var v any
			if err := json.Unmarshal(b, &v); err == nil {
				if p, err := json.MarshalIndent(v, "  ", "  "); err == nil && len(b) > 80 {
					// Pretty-print long JSON, but say so: the bytes are in export.
					fmt.Fprintf(w, "%s (text, %d bytes, JSON shown indented):\n  %s\n", name, len(b), p)
					return
				}
			}
		}
		fmt.Fprintf(w, "%s (text, %d bytes):\n  %s\n", name, len(b), strings.ReplaceAll(s, "\n", "\n  "))
	default:
		fmt.Fprintf(w, "%s (binary, %d bytes, hex):\n", name, len(b))
		for _, l := range strings.Split(strings.TrimRight(hex.Dump(b), "\n"), "\n") {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
}

func quarExport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("quarantine export", stderr)
	var q quarSource
	q.register(fs)
	out := fs.String("out", "", "output file (kcat -J lines of the original records; must not exist)")
	if err := noPositional(fs, args); err != nil {
		return err
	}
	if *out == "" {
		return &exitError{code: 2, msg: "quarantine export: --out FILE is required"}
	}
	if q.file != "" && sameFile(q.file, *out) {
		return &exitError{code: 2, msg: "quarantine export: --out must not be the quarantine file"}
	}
	es, err := q.read(ctx, stderr)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(f)
	for i := range es {
		if err := source.WriteJSONLine(bw, es[i].Record); err != nil {
			f.Close()
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "exported %d records to %s (apply with: cdc-sink replay --from-file %s --table DIR)\n", len(es), *out, *out)
	return nil
}

func sameFile(a, b string) bool {
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	if err1 == nil && err2 == nil {
		return os.SameFile(sa, sb)
	}
	pa, _ := filepath.Abs(a)
	pb, _ := filepath.Abs(b)
	return pa == pb
}

func quarRedrive(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("quarantine redrive", stderr)
	var q quarSource
	q.register(fs)
	table := fs.String("table", "", "Delta table directory to apply the records to")
	sink := fs.String("sink-name", "", "sink name for the redrive's own progress txns (default <table owner>-redrive). Not the live sink's name: its per-partition offsets would jump past records it has not applied (docs/runbook.md)")
	requar := fs.String("requarantine", "", "file to append the records that fail again (required; never the input)")
	var keyCols multiFlag
	fs.Var(&keyCols, "key-columns", "TABLE=col1,col2 key columns for records with a null key (repeatable)")
	registry := fs.String("registry", "", "Confluent-compatible schema registry URL (Avro records)")
	batch := fs.Int("batch-records", 10000, "records per micro-batch")
	rulesFile := fs.String("rules", "", "data-quality rules to apply while redriving (YAML, as for run; without it, none)")
	if err := noPositional(fs, args); err != nil {
		return err
	}
	rs, err := loadRulesFile(*rulesFile)
	if err != nil {
		return err
	}
	if *table == "" || *requar == "" {
		return &exitError{code: 2, msg: "quarantine redrive: --table DIR and --requarantine FILE are required"}
	}
	if err := tableArg("quarantine redrive", *table); err != nil {
		return err
	}
	if q.file != "" && sameFile(q.file, *requar) {
		return &exitError{code: 2, msg: "quarantine redrive: --requarantine must be a new file, not the quarantine being redriven (originals are never rewritten)"}
	}
	kc, err := parseKeyColumns(keyCols)
	if err != nil {
		return &exitError{code: 2, msg: err.Error()}
	}
	es, err := q.read(ctx, stderr)
	if err != nil {
		return err
	}
	fw, err := quarantine.NewFileWriter(*requar)
	if err != nil {
		return err
	}
	defer fw.Close()
	var reg envelope.Registry
	if *registry != "" {
		reg = newRegistry(*registry)
	} else if q.cfg != nil && q.cfg.Reg.URL != "" {
		if reg, err = openRegistry(q.cfg.Reg); err != nil {
			return err
		}
	}
	rep, err := audit.Redrive(ctx, es, audit.RedriveConfig{
		Table: *table, Storage: storageOpts, Sink: *sink, Requarantine: fw, KeyColumns: kc, Registry: reg,
		BatchRecords: *batch, Control: isControlTopic, Rules: rs,
		Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return auditErr(err)
	}
	if rep.Owner != "" && rep.Sink == rep.Owner {
		fmt.Fprintf(stderr, "warning: redriving with the live sink's name %q: its per-partition offsets may jump past records it has not applied yet\n", rep.Owner)
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	fmt.Fprintf(w, "redrive of %d records (%d entries) into %s as sink %s:\n", rep.Records, rep.Entries, *table, rep.Sink)
	fmt.Fprintf(w, "  applied:      %d (%d inserted, %d updated, %d deleted)\n", rep.Applied(), rep.Inserted, rep.Updated, rep.Deleted)
	fmt.Fprintf(w, "  already done: %d (%d stale, %d duplicate)\n", rep.Stale+rep.Dup, rep.Stale, rep.Dup)
	if rep.Ignored > 0 {
		fmt.Fprintf(w, "  ignored:      %d (heartbeats, transaction metadata)\n", rep.Ignored)
	}
	fmt.Fprintf(w, "  failed again: %d", len(rep.Failed))
	if len(rep.Failed) > 0 {
		fmt.Fprintf(w, " (written to %s)", *requar)
	}
	fmt.Fprintln(w)
	for _, e := range rep.Failed {
		fmt.Fprintf(w, "    %s  %s: %s\n", coords(e.Record), e.Reason, e.Message)
	}
	if rep.Commit {
		fmt.Fprintf(w, "table version %d\n", rep.Version)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if len(rep.Failed) > 0 {
		return &exitError{code: 1, msg: fmt.Sprintf("%d records failed again; see %s", len(rep.Failed), *requar)}
	}
	return nil
}
