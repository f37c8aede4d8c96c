package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/pipeline"
	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/cdcsink/cdc-sink/rules"
	"github.com/cdcsink/cdc-sink/source"
)

// cmdReplay applies a bounded set of records to one table and stops:
// from kcat -J files (--from-file), or from Kafka topics up to the end
// offsets captured at start (--topics, Spark's availableNow).
func cmdReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("replay", stderr)
	var files, keyCols, topics multiFlag
	fs.Var(&files, "from-file", "kcat -J JSON-lines file to apply (repeatable; applied in order)")
	table := fs.String("table", "", "Delta table directory (created if needed)")
	batch := fs.Int("batch-records", 10000, "records per micro-batch")
	batchBytes := fs.String("batch-bytes", "64MiB", "key+value bytes per micro-batch at most (a bootstrap of a large snapshot writes bigger files with more); memory holds about 2× this")
	qfile := fs.String("quarantine-file", "", "append rejected records here (kcat -J line + \"error\")")
	sink := fs.String("sink-name", "cdc-sink-replay", "sink name: txn appId and table owner")
	topic := fs.String("topic", "", "topic for file lines without one")
	fs.Var(&keyCols, "key-columns", "TABLE=col1,col2 key columns for records with a null key (repeatable)")
	fs.Var(&topics, "topics", "Kafka topics to replay (repeatable or comma-separated)")
	brokers := fs.String("brokers", "127.0.0.1:9092", "Kafka bootstrap servers (with --topics)")
	starting := fs.String("starting", "earliest", "with --topics: earliest | RFC 3339 timestamp | topic:partition=offset,...")
	registry := fs.String("registry", "", "Confluent-compatible schema registry URL (Avro records)")
	foreign := fs.Bool("allow-foreign-sink", false, "write even if the table belongs to another sink name")
	quiet := fs.Bool("quiet", false, "no progress line")
	colMap := fs.String("column-mapping", merge.ColumnMappingNone, "none | name: Delta column mapping of a table this replay creates")
	cdf := fs.Bool("change-data-feed", false, "create the table with Delta Change Data Feed (an existing table must have it: table set-property)")
	onDrop := fs.String("on-drop-column", string(merge.DropKeep), "keep | drop: what happens to a table column the source dropped")
	widening := fs.String("widening", string(merge.WidenRewrite), "rewrite | type_widening | off: how a column whose source type widened is followed (docs/types.md)")
	rulesFile := fs.String("rules", "", "YAML file with data-quality rules (a rules: list, e.g. the run config; docs/rules.md)")
	configFile := fs.String("config", "", "a run config file: replay routes topics to tables and history tables (tables.*, history.*), and takes its rules:, storage.*, schema.*, merge.truncate, kafka.brokers, kafka.properties (TLS, SASL) and registry.*, as run does; --table, when given, still takes every topic")
	histTable := fs.String("history-table", "", "also append every accepted change to this history table (docs/history.md)")
	fromHistory := fs.String("from-history", "", "rebuild --table from this history table instead of reading records")
	until := fs.String("until", "", "with --from-history: only changes committed at the source at or before this RFC 3339 time")
	scd2 := fs.String("scd2", "", "with --from-history: also build this new SCD type 2 table from the history (an existing history's SCD2 table; docs/history.md)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	maxBytes, err := parseSize(*batchBytes)
	if err != nil || maxBytes <= 0 {
		return fmt.Errorf("--batch-bytes %q: want a size such as 64MiB", *batchBytes)
	}
	if *fromHistory != "" {
		if *table == "" {
			return errors.New("--table is required")
		}
		if err := tableArg("replay", *table); err != nil {
			return err
		}
		if len(files) > 0 || len(topics) > 0 || *histTable != "" {
			return errors.New("--from-history reads no records: --from-file, --topics and --history-table do not apply")
		}
		if *scd2 != "" {
			if err := tableArg("replay", *scd2); err != nil {
				return err
			}
			if canonLocation(*scd2) == canonLocation(*table) {
				return errors.New("--scd2 and --table name the same table")
			}
		}
		return replayFromHistory(ctx, *fromHistory, *table, *scd2, *sink, *until, *foreign, stdout)
	}
	if *until != "" || *scd2 != "" {
		return errors.New("--until and --scd2 apply to --from-history only")
	}
	if *histTable != "" {
		if err := tableArg("replay", *histTable); err != nil {
			return err
		}
	}
	if *configFile != "" && *rulesFile != "" {
		return errors.New("--config and --rules both name rules: give one")
	}
	rs, err := loadRulesFile(*rulesFile)
	if err != nil {
		return err
	}
	var cfg *Config
	if *configFile != "" {
		// a run config without rules: is fine here
		if rs, err = loadRulesFile(*configFile); errors.Is(err, rules.ErrNoRules) {
			rs, err = nil, nil
		}
		if err != nil {
			return err
		}
		if cfg, err = replayConfig(*configFile, os.Getenv); err != nil {
			return err
		}
		storageOpts = cfg.Storage.options()
	}
	if *table == "" && cfg == nil {
		return errors.New("--table is required (or --config routing topics to tables)")
	}
	if *table != "" {
		if err := tableArg("replay", *table); err != nil {
			return err
		}
	}
	if len(files) == 0 && len(topics) == 0 {
		return errors.New("give --from-file PATH or --topics T")
	}
	if len(files) > 0 && len(topics) > 0 {
		return errors.New("--from-file and --topics are exclusive")
	}
	kc, err := parseKeyColumns(keyCols)
	if err != nil {
		return err
	}
	wmode, err := merge.ParseWideningMode(*widening)
	if err != nil {
		return fmt.Errorf("--widening: %w", err)
	}
	dmode, err := merge.ParseDropMode(*onDrop)
	if err != nil {
		return fmt.Errorf("--on-drop-column: %w", err)
	}
	cmode, err := merge.ParseColumnMapping(*colMap)
	if err != nil {
		return fmt.Errorf("--column-mapping: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	qw, closeQ, err := replayQuarantine(*qfile)
	if err != nil {
		return err
	}
	defer closeQ()
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	setup := &sinkSetup{
		Sink:             *sink,
		Widening:         wmode,
		OnDropColumn:     dmode,
		ColumnMapping:    cmode,
		ChangeDataFeed:   *cdf,
		Route:            func(topic string) (string, bool) { return *table, !isControlTopic(topic) },
		KeyColumns:       kc,
		Quarantine:       qw,
		AllowForeignSink: *foreign,
		Rules:            rs,
		Logger:           logger,
	}
	if cfg != nil {
		applyReplayConfig(setup, cfg, *table, set)
	}
	if *histTable != "" {
		h := *histTable
		setup.History = func(topic string) (string, bool) { return h, !isControlTopic(topic) }
	}
	// A run config brings its secure connection settings (TLS, SASL, registry
	// credentials) for --topics and the registry; flags still win.
	var kafkaProps map[string]string
	if cfg != nil {
		kafkaProps = cfg.Kafka.Properties
		if !set["brokers"] && len(cfg.Kafka.Brokers) > 0 {
			*brokers = strings.Join(cfg.Kafka.Brokers, ",")
		}
		if *registry == "" && cfg.Reg.URL != "" {
			if setup.Registry, err = openRegistry(cfg.Reg); err != nil {
				return err
			}
		}
	}
	if *registry != "" {
		setup.Registry = newRegistry(*registry)
	}
	p, ts, err := buildPipeline(setup)
	if err != nil {
		return err
	}
	// Open (or refuse) the table before reading anything.
	if *table != "" {
		if _, err := ts.open(ctx, *table); err != nil {
			return err
		}
	}
	prog := newProgress(stderr, !*quiet)
	r := &pipeline.Runner{P: p, Trigger: pipeline.Trigger{MaxRecords: *batch, MaxBytes: maxBytes, MaxInterval: time.Hour}, Overlap: true}
	r.AfterBatch = func(_ context.Context, recs []*source.Record, rep *pipeline.Report) error {
		prog.batch(rep)
		return nil
	}
	if len(files) > 0 {
		for _, f := range files {
			fr, err := source.OpenFile(f, source.FileOptions{DefaultTopic: *topic})
			if err != nil {
				return err
			}
			r.Src = fr
			err = r.Run(ctx)
			fr.Close()
			if err != nil {
				return fmt.Errorf("replay %s: %w", f, err)
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	} else {
		if err := replayKafka(ctx, r, prog, ts, logger, setup.Route, *sink, *brokers, kafkaProps, splitList(topics), *starting); err != nil {
			return err
		}
	}
	prog.finish()
	dirs := ts.dirs()
	if *table != "" && len(dirs) == 0 {
		dirs = []string{*table}
	}
	for i, dir := range dirs {
		t, err := ts.open(ctx, dir)
		if err != nil {
			return err
		}
		live, deleted := t.LiveRows()
		fmt.Fprintf(stdout, "table %s version %d: %d live rows, %d tombstones", dir, t.Version(), live, deleted)
		if i == len(dirs)-1 {
			fmt.Fprintf(stdout, "; %s", prog.summary())
		}
		fmt.Fprintln(stdout)
	}
	return nil
}

func splitList(vals []string) []string {
	var out []string
	for _, v := range vals {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// replayQuarantine returns the quarantine writer of a bounded replay: the
// given file, or one that refuses (so bad records fail the replay loudly
// rather than vanish).
func replayQuarantine(path string) (quarantine.Writer, func(), error) {
	if path == "" {
		return refuseWriter{}, func() {}, nil
	}
	w, err := quarantine.NewFileWriter(path)
	if err != nil {
		return nil, nil, err
	}
	return w, func() { w.Close() }, nil
}

type refuseWriter struct{}

func (refuseWriter) Write(_ context.Context, es []quarantine.Entry) error {
	if len(es) == 0 {
		return nil
	}
	e := es[0]
	return fmt.Errorf("%w: record %s/%d@%d rejected (%s: %s) and no --quarantine-file was given",
		errNoQuarantine, e.Record.Topic, e.Record.Partition, e.Record.Offset, e.Reason, e.Message)
}

var errNoQuarantine = errors.New("no quarantine destination")

// replayKafka consumes topics from the starting point up to the end offsets
// captured now, with a group of its own, then stops.
func replayKafka(ctx context.Context, r *pipeline.Runner, prog *progress, ts *tableSet, logger *slog.Logger, route func(string) (string, bool), sink, brokers string, props map[string]string, topics []string, starting string) error {
	if len(topics) == 0 {
		return errors.New("--topics is empty")
	}
	// the progress of a partition is in the table its topic routes to
	next := func(topic string, p int32) (int64, bool) {
		dir, ok := route(topic)
		if !ok {
			return 0, false
		}
		t, err := ts.open(ctx, dir)
		if err != nil {
			return 0, false // the pipeline's Route reports it
		}
		return t.NextOffset(topic, p)
	}
	var start map[source.TopicPartition]int64
	startAt := func(c *source.Consumer) error {
		switch {
		case starting == "earliest" || starting == "":
			return nil
		case strings.Contains(starting, "="):
			start = map[source.TopicPartition]int64{}
			for _, part := range strings.Split(starting, ",") {
				tpS, offS, _ := strings.Cut(part, "=")
				i := strings.LastIndexByte(tpS, ':')
				if i < 0 {
					return fmt.Errorf("--starting %q: want topic:partition=offset", part)
				}
				p, err1 := strconv.Atoi(tpS[i+1:])
				o, err2 := strconv.ParseInt(offS, 10, 64)
				if err1 != nil || err2 != nil {
					return fmt.Errorf("--starting %q: want topic:partition=offset", part)
				}
				start[source.TopicPartition{Topic: tpS[:i], Partition: int32(p)}] = o
			}
			return nil
		default:
			ts, err := time.Parse(time.RFC3339, starting)
			if err != nil {
				return fmt.Errorf("--starting %q: want earliest, an RFC 3339 time or offsets", starting)
			}
			start, err = c.OffsetsForTimes(ctx, topics, ts)
			return err
		}
	}
	h := &replayHandler{next: next, start: &start, quiesce: r.Quiesce}
	c, err := source.NewConsumer(source.ConsumerConfig{
		Brokers: strings.Split(brokers, ","), GroupID: sink + ".replay." + strconv.FormatInt(time.Now().UnixNano(), 36),
		Topics: topics, AutoOffsetReset: "earliest", Logger: logger, Extra: props,
	}, h)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := startAt(c); err != nil {
		return err
	}
	end, err := c.EndOffsets(ctx, topics)
	if err != nil {
		return fmt.Errorf("end offsets: %w", err)
	}
	c.StopAt(end)
	var total int64
	for tp, e := range end {
		s := start[tp]
		if o, ok := next(tp.Topic, tp.Partition); ok && o > s {
			s = o
		}
		if e > s {
			total += e - s
		}
	}
	prog.setTotal(total)
	r.Src = c
	return r.Run(ctx)
}

// replayHandler seeks each assigned partition to the table's progress, or
// to the requested start.
type replayHandler struct {
	next    func(topic string, partition int32) (int64, bool)
	start   *map[source.TopicPartition]int64
	quiesce func() // the batch in flight ends before the tables are read
}

func (h *replayHandler) OnAssign(_ context.Context, parts []source.TopicPartition) (map[source.TopicPartition]int64, error) {
	h.quiesce()
	out := map[source.TopicPartition]int64{}
	for _, tp := range parts {
		off := int64(0)
		if s, ok := (*h.start)[tp]; ok {
			off = s
		}
		if o, ok := h.next(tp.Topic, tp.Partition); ok && o > off {
			off = o
		}
		out[tp] = off
	}
	return out, nil
}

func (h *replayHandler) OnRevoke(context.Context, []source.TopicPartition) error { return nil }

// progress prints a one-line progress report (rate, ETA) to a terminal.
type progress struct {
	w       io.Writer
	on      bool
	start   time.Time
	total   int64
	done    int64
	applied map[string]int
	quar    int
}

func newProgress(w io.Writer, on bool) *progress {
	if f, ok := w.(*os.File); ok && on {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice == 0 {
			on = false // not a terminal
		}
	}
	return &progress{w: w, on: on, start: time.Now(), applied: map[string]int{}}
}

func (p *progress) setTotal(n int64) { p.total = n }

func (p *progress) batch(rep *pipeline.Report) {
	p.done += int64(rep.Records)
	for _, n := range rep.Quarantined {
		p.quar += n
	}
	for _, tr := range rep.Tables {
		p.applied["inserted"] += tr.Result.Inserted
		p.applied["updated"] += tr.Result.Updated
		p.applied["deleted"] += tr.Result.Deleted
		p.applied["stale"] += tr.Result.Stale
		p.applied["duplicate"] += tr.Result.Duplicate
	}
	if !p.on {
		return
	}
	el := time.Since(p.start).Seconds()
	rate := float64(p.done) / max(el, 1e-3)
	line := fmt.Sprintf("\r%d records  %.0f rec/s", p.done, rate)
	if p.total > 0 {
		pct := 100 * float64(p.done) / float64(p.total)
		eta := time.Duration(float64(p.total-p.done)/max(rate, 1e-9)) * time.Second
		line += fmt.Sprintf("  %5.1f%%  ETA %s", min(pct, 100), eta.Round(time.Second))
	}
	fmt.Fprint(p.w, line+"   ")
}

func (p *progress) finish() {
	if p.on {
		fmt.Fprintln(p.w)
	}
}

func (p *progress) summary() string {
	return fmt.Sprintf("%d records: %d inserted, %d updated, %d deleted, %d stale, %d duplicate, %d quarantined",
		p.done, p.applied["inserted"], p.applied["updated"], p.applied["deleted"], p.applied["stale"], p.applied["duplicate"], p.quar)
}

func (refuseWriter) Close() error { return nil }

// replayConfig reads the parts of a run config a replay uses: the file over
// the defaults, then CDC_SINK_* (history.hash_salt and storage secrets
// usually come from there). Kafka and HTTP settings are run's and not
// checked; the routing, history and storage keys are, before anything is
// written.
func replayConfig(file string, getenv func(string) string) (*Config, error) {
	cfg := defaultConfig()
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	if err := applyYAML(&cfg, file, b); err != nil {
		return nil, err
	}
	for _, l := range leaves(&cfg) {
		if v := getenv(envName(l.path)); v != "" {
			if err := setLeaf(l, v); err != nil {
				return nil, fmt.Errorf("config key %s (from %s): %w", l.path, envName(l.path), err)
			}
		}
	}
	bad := func(key, format string, a ...any) error {
		return fmt.Errorf("config %s: key %s: %s", file, key, fmt.Sprintf(format, a...))
	}
	if cfg.Table.PathTemplate != "" {
		sample, _ := routeTemplate(cfg.Table.PathTemplate)("prefix.schema.table")
		if _, err := checkLocation(sample); err != nil {
			return nil, bad("tables.path_template", "%q: %v", cfg.Table.PathTemplate, err)
		}
	}
	for topic, loc := range cfg.Table.Map {
		if _, err := checkLocation(loc); err != nil {
			return nil, bad("tables.map", "topic %s: %v", topic, err)
		}
	}
	if err := cfg.History.validate(bad); err != nil {
		return nil, err
	}
	if _, err := merge.ParseWideningMode(cfg.Schema.Widening); err != nil {
		return nil, bad("schema.widening", "%v", err)
	}
	if _, err := merge.ParseDropMode(cfg.Schema.OnDropColumn); err != nil {
		return nil, bad("schema.on_drop_column", "%v", err)
	}
	if _, err := merge.ParseColumnMapping(cfg.Schema.ColumnMapping); err != nil {
		return nil, bad("schema.column_mapping", "%v", err)
	}
	return &cfg, nil
}

// applyReplayConfig routes like run (tables.map, then tables.path_template,
// unless --table takes every topic), with run's history tables and
// privacy, key columns and merge/schema settings (flags given explicitly win).
func applyReplayConfig(s *sinkSetup, cfg *Config, table string, set map[string]bool) {
	if table == "" {
		tmpl := routeTemplate(cfg.Table.PathTemplate)
		s.Route = func(topic string) (string, bool) {
			if d, ok := cfg.Table.Map[topic]; ok {
				return canonLocation(d), true
			}
			if cfg.Table.PathTemplate == "" {
				return "", false
			}
			return tmpl(topic)
		}
	}
	// the files a replay writes keep the table's layout for its instances
	s.PartitionAligned = cfg.partitionAligned()
	s.History = cfg.History.route()
	s.Privacy = cfg.History.privacy()
	s.SCD2 = cfg.History.scd2Route()
	if !set["key-columns"] && len(cfg.Table.KeyColumns) > 0 {
		s.KeyColumns = cfg.Table.KeyColumns
	}
	if cfg.Merge.Truncate != "" {
		s.Truncate = merge.TruncateMode(cfg.Merge.Truncate)
	}
	if !set["widening"] && cfg.Schema.Widening != "" {
		s.Widening = merge.WideningMode(cfg.Schema.Widening)
	}
	if !set["on-drop-column"] && cfg.Schema.OnDropColumn != "" {
		s.OnDropColumn = merge.DropMode(cfg.Schema.OnDropColumn)
	}
	if !set["column-mapping"] && cfg.Schema.ColumnMapping != "" {
		s.ColumnMapping = cfg.Schema.ColumnMapping
	}
}
