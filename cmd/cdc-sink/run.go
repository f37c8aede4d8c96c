package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cdcsink/cdc-sink/consistency"
	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/internal/redact"
	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/pipeline"
	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/cdcsink/cdc-sink/rules"
	"github.com/cdcsink/cdc-sink/source"
	"github.com/cdcsink/cdc-sink/status"
)

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := loadConfig(args, os.Getenv, stderr)
	if err != nil {
		return err
	}
	storageOpts = cfg.Storage.options()
	logger := newLogger(cfg.Log, stderr)
	logger.Info("cdc-sink starting", "version", Version, "config", cfg.Redacted())
	err = runSink(ctx, cfg, logger, runHooks{stdout: stdout})
	return explainBrokerCert(ctx, err, cfg.Kafka.Properties, time.Now())
}

func newLogger(c LogConf, w io.Writer) *slog.Logger {
	lvl := map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError}[c.Level]
	opts := &slog.HandlerOptions{Level: lvl, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		// Errors and messages may quote DSNs or URLs: never log credentials.
		if a.Value.Kind() == slog.KindString {
			a.Value = slog.StringValue(redactText(a.Value.String()))
		} else if a.Value.Kind() == slog.KindAny {
			if e, ok := a.Value.Any().(error); ok {
				a.Value = slog.StringValue(redactText(e.Error()))
			}
		}
		return a
	}}
	if c.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// runHooks lets the demo and tests observe a running sink.
type runHooks struct {
	stdout io.Writer
	// Bounded stops the sink once it has consumed up to the end offsets
	// captured at start (the demo).
	Bounded bool
	// OnListen receives the HTTP address once listening.
	OnListen func(addr string)
	// Quarantine overrides the configured quarantine writer.
	Quarantine quarantine.Writer
	// Tables receives the table set once built.
	Tables func(*tableSet)
	// Fault is merge's crash/pause hook (merge.Options.Fault): tests only.
	Fault func(merge.FaultPoint) error
	// Quiet disables the terminal progress line.
	Quiet bool
}

// runSink is the sidecar: consume, batch, apply, commit group offsets, serve
// health and metrics, and stop cleanly on ctx cancellation (SIGTERM).
func runSink(ctx context.Context, cfg *Config, logger *slog.Logger, h runHooks) error {
	m := newMetrics(cfg.Sink)
	m.pprof = cfg.HTTP.Pprof
	m.status = status.NewRecorder(cfg.Sink, status.Options{ShowValues: cfg.HTTP.StatusValues})
	if cfg.HTTP.Listen != "" {
		addr, stop, err := m.serve(cfg.HTTP.Listen)
		if err != nil {
			return fmt.Errorf("http.listen %s: %w", cfg.HTTP.Listen, err)
		}
		defer stop()
		logger.Info("http listening", "addr", addr)
		if h.OnListen != nil {
			h.OnListen(addr)
		}
	}
	if err := checkClientCert(cfg.Kafka.Properties, cfg.Kafka.Brokers, time.Now()); err != nil {
		return err
	}
	qw := h.Quarantine
	if qw == nil {
		var err error
		qw, err = openQuarantine(cfg, logger)
		if err != nil {
			return err
		}
	}
	qw = observedWriter{Writer: qw, m: m}
	defer qw.Close()
	reg, err := openRegistry(cfg.Reg)
	if err != nil {
		return err
	}
	if err := checkRegistry(ctx, reg, logger); err != nil {
		return err
	}
	tmpl := routeTemplate(cfg.Table.PathTemplate)
	rs, err := rules.Compile(cfg.Rules)
	if err != nil {
		return fmt.Errorf("config key rules: %w", err)
	}
	setup := &sinkSetup{
		Sink: cfg.Sink, InstanceID: cfg.InstanceID, PartitionAligned: cfg.partitionAligned(),
		Route: func(topic string) (string, bool) {
			if d, ok := cfg.Table.Map[topic]; ok {
				return canonLocation(d), true
			}
			if cfg.Table.PathTemplate == "" {
				return "", false
			}
			return tmpl(topic)
		},
		KeyColumns:     cfg.Table.KeyColumns,
		Registry:       reg,
		Quarantine:     qw,
		Truncate:       merge.TruncateMode(cfg.Merge.Truncate),
		RetryBudget:    cfg.Merge.RetryBudget,
		Widening:       merge.WideningMode(cfg.Schema.Widening),
		OnDropColumn:   merge.DropMode(cfg.Schema.OnDropColumn),
		ColumnMapping:  cfg.Schema.ColumnMapping,
		ChangeDataFeed: cfg.Table.ChangeDataFeed,
		Rules:          rs,
		Logger:         logger,
		Observer:       m,
		Fence:          true,
		Fault:          h.Fault,
		History:        cfg.History.route(),
		Privacy:        cfg.History.privacy(),
		SCD2:           cfg.History.scd2Route(),
	}
	var (
		gated *pipeline.Gated
		pub   *cutPublisher
	)
	if cfg.Consistency == "transaction" {
		setup.Domains = func(table string) map[string]string { return gated.Domains(table) }
		setup.Decoded = func(r *source.Record) (*envelope.Event, bool) { return gated.Decoded(r) }
	}
	p, ts, err := buildPipeline(setup)
	if err != nil {
		return err
	}
	if h.Tables != nil {
		h.Tables(ts)
	}
	runner := &pipeline.Runner{P: p, Trigger: pipeline.Trigger{MaxRecords: cfg.Batch.MaxRecords,
		MaxBytes: cfg.Batch.MaxBytes, MaxInterval: cfg.Batch.MaxInterval}, ShutdownGrace: cfg.Merge.ShutdownGrace,
		// the transaction gate reads the tables: one batch at a time
		Overlap: cfg.Batch.Overlap && cfg.Consistency != "transaction", MaxHeldBytes: cfg.Batch.MaxHeldBytes}
	handler := &seekHandler{ctxTables: ts, setup: setup, runner: runner, logger: logger, m: m}
	group := cfg.Kafka.Group
	if group == "" {
		group = cfg.Sink
	}
	cons, err := source.NewConsumer(source.ConsumerConfig{
		Brokers: cfg.Kafka.Brokers, GroupID: group, Topics: cfg.Kafka.Topics, TopicRegex: cfg.Kafka.TopicRegex,
		ClientID: "cdc-sink-" + cfg.Sink, Extra: consumerProps(cfg.Kafka.Properties), Logger: logger, AutoOffsetReset: "earliest",
	}, handler)
	if err != nil {
		return fmt.Errorf("kafka consumer: %w", err)
	}
	defer cons.Close()
	m.setBrokers(cons.Brokers, cfg.Kafka.UnreachableAfter)
	if h.Bounded {
		topics := cfg.Kafka.Topics
		end, err := cons.EndOffsets(ctx, topics)
		if err != nil {
			return fmt.Errorf("end offsets: %w", err)
		}
		cons.StopAt(end)
	}
	runner.Src = cons
	runner.Reseek = func(ctx context.Context, tps []merge.TP) error {
		return reseek(ctx, cons, ts, setup, logger, m, tps)
	}
	if cfg.Consistency == "transaction" {
		txr, err := openTxReader(ctx, cfg, logger)
		if err != nil {
			return err
		}
		defer txr.Close()
		gated = pipeline.NewGated(pipeline.GateConfig{Sink: cfg.Sink, P: p, Data: cons, Tx: txr,
			MaxHeldRecords: cfg.Tx.MaxHeldRecords, MaxHeldBytes: cfg.Tx.MaxHeldBytes, Logger: logger,
			Group: cfg.Group, Manifest: canonManifest(cfg),
			Waited: func(d time.Duration) { m.txWait.Observe(d.Seconds()) },
			Seek: func(_ context.Context, offs map[merge.TP]int64) error {
				to := make(map[source.TopicPartition]int64, len(offs))
				for tp, o := range offs {
					to[source.TopicPartition{Topic: tp.Topic, Partition: tp.Partition}] = o
				}
				gone, err := cons.Seek(to)
				if err == nil && len(gone) > 0 {
					err = fmt.Errorf("partitions %v left this instance", gone)
				}
				return err
			}})
		runner.Src = gated
		handler.gated = gated
		if cfg.Group != "" {
			if pub, err = newCutPublisher(ctx, cfg, logger); err != nil {
				return err
			}
		}
		runner.Reseek = func(ctx context.Context, tps []merge.TP) error {
			gated.Invalidate(fmt.Sprintf("a batch of %v was fenced", tps))
			return reseek(ctx, cons, ts, setup, logger, m, tps)
		}
		m.gated = gated
	}
	prog := newProgress(h.stdout, !h.Quiet)
	runner.OnError = m.batchFailed
	runner.OnIdle = func() { ts.observeIdle(m.status); m.observeGate() }
	runner.AfterBatch = func(ctx context.Context, recs []*source.Record, rep *pipeline.Report) error {
		// Group offsets are for lag tools only: the table holds the progress.
		offs := map[source.TopicPartition]int64{}
		for _, r := range recs {
			tp := source.TopicPartition{Topic: r.Topic, Partition: r.Partition}
			if r.Offset+1 > offs[tp] {
				offs[tp] = r.Offset + 1
			}
		}
		if err := cons.Commit(ctx, offs); err != nil {
			logger.Warn("commit group offsets failed (lag metrics only)", "err", err)
		}
		m.setLag(cons.Lag())
		m.observeGate()
		pub.publish(ctx, gated, m)
		ts.observe(m.status)
		ts.indexKeys(func(dir string, indexed, located int) {
			m.indexKeys.WithLabelValues(dir, "indexed").Set(float64(indexed))
			m.indexKeys.WithLabelValues(dir, "located").Set(float64(located))
		})
		prog.batch(rep)
		logger.Debug("batch applied", "records", rep.Records, "ms", rep.DurationMs)
		return nil
	}
	m.setReady(true)
	err = runner.Run(ctx)
	prog.finish()
	m.setReady(false)
	if err != nil {
		return err
	}
	logger.Info("cdc-sink stopped", "summary", prog.summary())
	return nil
}

// observedWriter reports failed quarantine writes to /readyz and /metrics
// (the pipeline retries them until they succeed, holding the batch).
type observedWriter struct {
	quarantine.Writer
	m *metrics
}

func (w observedWriter) Write(ctx context.Context, entries []quarantine.Entry) error {
	err := w.Writer.Write(ctx, entries)
	if err != nil && ctx.Err() == nil {
		w.m.quarantineFailed(err)
	}
	if err == nil {
		w.m.status.Quarantined(entries)
	}
	return err
}

// seekHandler seeks every newly assigned partition to the offset recorded in
// its table, and drops buffered records of revoked partitions.
type seekHandler struct {
	ctxTables *tableSet
	setup     *sinkSetup
	runner    *pipeline.Runner
	logger    *slog.Logger
	m         *metrics
	gated     *pipeline.Gated // consistency: transaction
}

func (s *seekHandler) OnAssign(ctx context.Context, parts []source.TopicPartition) (map[source.TopicPartition]int64, error) {
	s.runner.Quiesce() // the tables are read below
	out := map[source.TopicPartition]int64{}
	// partitions revoked and assigned again (an eager rebalance) stay in the key index
	s.byTable(parts, (*merge.Table).Keep)
	for _, tp := range parts {
		dir, ok := s.setup.Route(tp.Topic)
		if !ok {
			continue // control topics: group offset
		}
		t, err := s.openRetrying(ctx, tp, dir)
		if err != nil {
			return nil, err
		}
		if o, ok := t.NextOffset(tp.Topic, tp.Partition); ok {
			out[tp] = o
		} else {
			out[tp] = 0 // nothing applied yet: from the beginning
		}
		s.logger.Info("partition assigned", "topic", tp.Topic, "partition", tp.Partition, "seek", out[tp], "table", dir)
	}
	s.m.setReady(true)
	return out, nil
}

// assignRetryBudget bounds how long OnAssign retries a table it cannot read
// for a transient reason (an object store unreachable at start or during a
// rebalance): it blocks the consumer's rebalance, so it must stay well under
// max.poll.interval.ms (5 min by default); past it run exits and its
// supervisor restarts it.
var assignRetryBudget = 2 * time.Minute

// openRetrying opens and refreshes the table of an assigned partition,
// retrying transient failures with backoff (each one counts on /readyz).
func (s *seekHandler) openRetrying(ctx context.Context, tp source.TopicPartition, dir string) (*merge.Table, error) {
	deadline := time.Now().Add(assignRetryBudget)
	back := 100 * time.Millisecond
	for {
		t, err := s.ctxTables.open(ctx, dir)
		if err != nil {
			err = fmt.Errorf("open table for %s: %w", tp, err)
		} else if err = t.Refresh(ctx); err != nil { // another instance may have committed since
			err = fmt.Errorf("refresh table %s: %w", dir, err)
		} else {
			return t, nil
		}
		if !quarantine.IsTransient(err) || time.Now().Add(back).After(deadline) {
			return nil, err
		}
		s.m.batchFailed(err)
		s.logger.Warn("reading the table of an assigned partition failed transiently, retrying", "topic", tp.Topic, "partition", tp.Partition, "table", dir, "err", err, "backoff", back)
		select {
		case <-ctx.Done():
			return nil, errors.Join(err, ctx.Err())
		case <-time.After(back):
		}
		back = min(2*back, 5*time.Second)
	}
}

// byTable calls fn for each opened table with the partitions routed to it.
func (s *seekHandler) byTable(parts []source.TopicPartition, fn func(*merge.Table, []merge.TP)) {
	tps := map[string][]merge.TP{}
	for _, tp := range parts {
		if dir, ok := s.setup.Route(tp.Topic); ok {
			tps[dir] = append(tps[dir], merge.TP{Topic: tp.Topic, Partition: tp.Partition})
		}
	}
	for dir, l := range tps {
		if t, ok := s.ctxTables.opened(dir); ok {
			fn(t, l)
		}
	}
}

func (s *seekHandler) OnRevoke(_ context.Context, parts []source.TopicPartition) error {
	// a batch in flight may hold records of them: it ends first (committed
	// or failed), then the buffered ones are dropped
	s.runner.Quiesce()
	s.runner.Revoke(parts)
	if s.gated != nil && len(parts) > 0 {
		s.gated.Invalidate(fmt.Sprintf("partitions %v revoked", parts))
	}
	// their keys leave this instance's key index (partition-aligned tables)
	s.byTable(parts, (*merge.Table).Release)
	for _, tp := range parts {
		s.logger.Info("partition revoked", "topic", tp.Topic, "partition", tp.Partition)
	}
	return nil
}

// reseek moves fenced partitions back to the offsets in their table: the
// batch that held their records lost them to another instance (a rebalance
// while this one was paused). A partition no longer assigned is left to its
// new owner.
func reseek(ctx context.Context, cons *source.Consumer, ts *tableSet, setup *sinkSetup, logger *slog.Logger, m *metrics, tps []merge.TP) error {
	offs := map[source.TopicPartition]int64{}
	for _, tp := range tps {
		m.fenced.WithLabelValues(tp.Topic).Inc()
		dir, ok := setup.Route(tp.Topic)
		if !ok {
			continue
		}
		t, err := ts.open(ctx, dir)
		if err != nil {
			return fmt.Errorf("open table for %s/%d: %w", tp.Topic, tp.Partition, err)
		}
		if err := t.Refresh(ctx); err != nil {
			return fmt.Errorf("refresh table %s: %w", dir, err)
		}
		o, ok := t.NextOffset(tp.Topic, tp.Partition)
		if !ok {
			o = 0
		}
		offs[source.TopicPartition{Topic: tp.Topic, Partition: tp.Partition}] = o
	}
	gone, err := cons.Seek(offs)
	if err != nil {
		return err
	}
	for tp, o := range offs {
		if !slices.Contains(gone, tp) {
			logger.Warn("partition fenced: re-reading it from the table's offset", "topic", tp.Topic, "partition", tp.Partition, "seek", o)
		}
	}
	for _, tp := range gone {
		logger.Warn("partition fenced and no longer assigned: left to its new owner", "topic", tp.Topic, "partition", tp.Partition)
	}
	return nil
}

func openQuarantine(cfg *Config, logger *slog.Logger) (quarantine.Writer, error) {
	if cfg.Quar.File != "" {
		return quarantine.NewFileWriter(cfg.Quar.File)
	}
	return quarantine.NewKafkaWriter(quarantine.KafkaConfig{Brokers: cfg.Kafka.Brokers, Topic: cfg.Quar.Topic,
		Sink: cfg.Sink, Extra: cfg.Kafka.Properties, Logger: logger})
}

func openRegistry(c RegConf) (envelope.Registry, error) {
	if c.URL == "" {
		return nil, nil
	}
	var opts []envelope.SROption
	if c.Username != "" {
		opts = append(opts, envelope.WithBasicAuth(c.Username, c.Password))
	}
	if c.CAFile != "" || c.Insecure || c.CertFile != "" {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: c.Insecure} //nolint:gosec // operator's explicit choice
		if c.CertFile != "" {
			// an expired certificate is refused here, naming the file: the registry
			// would only answer with a bare TLS alert
			if err := checkCertFile(c.CertFile, "registry.cert_file", "registry "+redact.String(c.URL), time.Now()); err != nil {
				return nil, err
			}
			cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("registry.cert_file %s, registry.key_file %s: %w", c.CertFile, c.KeyFile, err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		if c.CAFile != "" {
			pem, err := os.ReadFile(c.CAFile)
			if err != nil {
				return nil, fmt.Errorf("registry.ca_file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, errors.New("registry.ca_file: no certificates found")
			}
			tc.RootCAs = pool
		}
		opts = append(opts, envelope.WithTLSConfig(tc))
	}
	opts = append(opts, envelope.WithTimeout(10*time.Second))
	return envelope.NewSRClientRegistry(c.URL, opts...), nil
}

// checkClientCert refuses a TLS client certificate (kafka.properties
// ssl.certificate.location) that is expired or not yet valid: the broker
// would only answer with a bare "certificate unknown" alert.
func checkClientCert(props map[string]string, brokers []string, now time.Time) error {
	path := props["ssl.certificate.location"]
	if path == "" {
		return nil
	}
	return checkCertFile(path, "kafka.properties ssl.certificate.location", "brokers "+strings.Join(brokers, ","), now)
}

// checkCertFile refuses the first certificate of a PEM file (setting names
// it in errors) when it is expired or not yet valid; peer is who would
// refuse it.
func checkCertFile(path, setting, peer string, now time.Time) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%s: %w", setting, err)
	}
	var blk *pem.Block
	for { // the first certificate; a key may come before it
		blk, b = pem.Decode(b)
		if blk == nil || blk.Type == "CERTIFICATE" {
			break
		}
	}
	if blk == nil {
		return fmt.Errorf("%s %s: no PEM certificate in the file", setting, path)
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return fmt.Errorf("%s %s: %w", setting, path, err)
	}
	switch {
	case now.After(cert.NotAfter):
		return fmt.Errorf("%s %s: client certificate %q expired at %s (%s would refuse it)",
			setting, path, cert.Subject.String(), cert.NotAfter.UTC().Format(time.RFC3339), peer)
	case now.Before(cert.NotBefore):
		return fmt.Errorf("%s %s: client certificate %q is not valid before %s",
			setting, path, cert.Subject.String(), cert.NotBefore.UTC().Format(time.RFC3339))
	}
	return nil
}

// checkRegistry refuses to start with registry credentials or certificates
// the registry rejects: otherwise that would surface only at the first Avro
// record, retried until the batch budget runs out. An unreachable registry is
// only logged: it may come up later, and records wait for it.
func checkRegistry(ctx context.Context, reg envelope.Registry, logger *slog.Logger) error {
	c, ok := reg.(envelope.Checker)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	err := c.Check(ctx)
	var ae *envelope.RegistryAccessError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ae):
		return err
	default:
		logger.Warn("schema registry not reachable at start (Avro records wait for it)", "err", err)
		return nil
	}
}

// consumerProps adds cdc-sink's defaults to the configured librdkafka
// properties (the configuration wins). Metadata is refreshed every 30 s
// instead of librdkafka's 5 min so that partitions whose leader was
// unavailable after a broker restart resume quickly, and new topics matching
// kafka.topic_regex are picked up sooner.
func consumerProps(p map[string]string) map[string]string {
	out := map[string]string{"topic.metadata.refresh.interval.ms": "30000"}
	for k, v := range p {
		out[k] = v
	}
	return out
}

// openTxReader connects to the transaction topic of consistency:
// transaction and refuses one with several partitions (ENDs would lose their
// commit order). A topic that does not exist yet is waited for: Debezium
// creates it with the first transaction it streams (pipeline.Gated).
func openTxReader(ctx context.Context, cfg *Config, logger *slog.Logger) (*source.PartitionReader, error) {
	topic := cfg.txTopic()
	r, err := source.NewPartitionReader(source.PartitionReaderConfig{Brokers: cfg.Kafka.Brokers, Topic: topic,
		ClientID: "cdc-sink-" + cfg.Sink + "-tx", Extra: txReaderProps(cfg.Kafka.Properties), Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("consistency: transaction: %w", err)
	}
	n, err := r.Partitions(ctx)
	switch {
	case err != nil:
		err = fmt.Errorf("consistency: transaction: transaction topic %s: %w", topic, err)
	case n > 1:
		err = fmt.Errorf("consistency: transaction: transaction topic %s has %d partitions: ENDs must be on one partition to keep their commit order", topic, n)
	case n == 0:
		logger.Info("the transaction topic does not exist yet; streamed changes will wait for it", "topic", topic)
	}
	if err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// txReaderProps are the connection properties (TLS, SASL) of the consumer
// for the transaction topic's reader, without the group ones.
func txReaderProps(p map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range consumerProps(p) {
		switch {
		case strings.HasPrefix(k, "group."), strings.HasPrefix(k, "partition.assignment"), k == "session.timeout.ms",
			k == "heartbeat.interval.ms", k == "max.poll.interval.ms", k == "group.instance.id":
		default:
			out[k] = v
		}
	}
	return out
}

// cutPublisher appends the newest consistent cut of the sink's tables to
// the consistency group's manifest after each batch.
type cutPublisher struct {
	log    *consistency.Log
	group  string
	logger *slog.Logger
	last   int64 // the newest watermark published
}

func newCutPublisher(ctx context.Context, cfg *Config, logger *slog.Logger) (*cutPublisher, error) {
	l, err := consistency.Open(ctx, canonManifest(cfg), storageOpts, cfg.Group)
	if err != nil {
		return nil, err
	}
	p := &cutPublisher{log: l, group: cfg.Group, logger: logger, last: -1}
	e, ok, err := l.Latest(ctx)
	if err != nil {
		return nil, fmt.Errorf("consistency group %s: %w", cfg.Group, err)
	}
	if ok {
		p.last = e.Watermark
	}
	return p, nil
}

// publish writes the gate's newest cut if it is newer than the last one. A
// failed write is logged and left to the next batch: the manifest only
// ever lags the tables.
func (p *cutPublisher) publish(ctx context.Context, g *pipeline.Gated, m *metrics) {
	if p == nil {
		return
	}
	w, vs, ok := g.Cut()
	if ok && w > p.last {
		p.write(ctx, w, vs, m)
	}
	if p.last >= 0 {
		b, d := g.Lag(p.last)
		m.cutLag.WithLabelValues(p.group, "bytes").Set(float64(b))
		m.cutLag.WithLabelValues(p.group, "seconds").Set(d.Seconds())
	}
}

func (p *cutPublisher) write(ctx context.Context, w int64, vs map[string]int64, m *metrics) {
	seq, err := p.log.Append(ctx, consistency.Entry{Watermark: w, Tables: vs, Time: time.Now().UTC()})
	if err != nil {
		p.logger.Warn("consistency group manifest not written (tried again after the next batch)", "err", err)
		return
	}
	p.last = w
	m.cuts.WithLabelValues(p.group).Inc()
	p.logger.Debug("consistent cut published", "seq", seq, "watermark", w, "tables", len(vs))
}

// canonManifest is transactions.manifest as the tables' watermarks name it
// ("" without a group): absolute for a local path, so that maintenance run
// from anywhere finds it.
func canonManifest(cfg *Config) string {
	if cfg.Group == "" {
		return ""
	}
	if l, err := delta.ParseLocation(cfg.Tx.Manifest); err == nil && l.IsLocal() {
		if abs, err := filepath.Abs(l.Path); err == nil {
			return abs
		}
	}
	return canonLocation(cfg.Tx.Manifest)
}
