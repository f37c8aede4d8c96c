package main

import (
	"encoding/json"
	"maps"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cdcsink/cdc-sink/pipeline"
	"github.com/cdcsink/cdc-sink/source"
	"github.com/cdcsink/cdc-sink/status"
	"github.com/cdcsink/cdc-sink/txgate"
)

// metrics is the Prometheus side of the sidecar plus the /progress state.
type metrics struct {
	pprof       bool // serve /debug/pprof/
	status      *status.Recorder
	reg         *prometheus.Registry
	recordsIn   prometheus.Counter
	bytesIn     prometheus.Counter
	rows        *prometheus.CounterVec
	skipped     *prometheus.CounterVec
	quarantined *prometheus.CounterVec
	batchDur    prometheus.Histogram
	commitDur   prometheus.Histogram
	attempts    prometheus.Histogram
	conflicts   *prometheus.CounterVec
	rebases     *prometheus.CounterVec
	ruleViol    *prometheus.CounterVec
	fenced      *prometheus.CounterVec
	e2e         prometheus.Histogram
	lag         *prometheus.GaugeVec
	tableVer    *prometheus.GaugeVec
	indexKeys   *prometheus.GaugeVec
	batchErrors prometheus.Counter
	quarErrors  prometheus.Counter
	batches     prometheus.Counter
	// consistency: transaction (nil otherwise); gateSeen: the gate's
	// counters as last published
	gated    *pipeline.Gated
	txHeld   *prometheus.GaugeVec
	txCount  *prometheus.CounterVec
	txWait   prometheus.Histogram
	cutLag   *prometheus.GaugeVec
	cuts     *prometheus.CounterVec
	gateSeen txgate.Stats

	mu       sync.Mutex
	last     *progressJSON
	lastErr  string
	lastOK   time.Time
	started  time.Time
	ready    bool
	sink     string
	failures int // consecutive failed batches
	// brokers reports the consumer's broker connectivity (nil until the
	// consumer exists); /readyz fails once it has been down unreachable long.
	brokers     func() source.BrokerStatus
	unreachable time.Duration
	now         func() time.Time
}

func newMetrics(sink string) *metrics {
	m := &metrics{reg: prometheus.NewRegistry(), sink: sink, started: time.Now(), now: time.Now, status: status.NewRecorder(sink, status.Options{})}
	f := promauto{m.reg}
	m.recordsIn = f.counter("cdcsink_records_in_total", "Kafka records read into batches.")
	m.bytesIn = f.counter("cdcsink_bytes_in_total", "Key and value bytes read into batches.")
	m.rows = f.counterVec("cdcsink_rows_total", "Rows written, by table and action (inserted, updated, deleted).", "table", "action")
	m.skipped = f.counterVec("cdcsink_skipped_total", "Records or changes skipped, by reason (stale, duplicate, already_applied, ignored).", "reason")
	m.quarantined = f.counterVec("cdcsink_quarantined_total", "Records sent to quarantine, by reason class.", "reason")
	m.batchDur = f.histogram("cdcsink_batch_duration_seconds", "Wall time of one micro-batch.", prometheus.ExponentialBuckets(0.005, 2, 14))
	m.commitDur = f.histogram("cdcsink_commit_duration_seconds", "Delta commit latency per table commit.", prometheus.ExponentialBuckets(0.001, 2, 14))
	m.attempts = f.histogram("cdcsink_commit_attempts", "Commit attempts (plans) per table commit: 1 unless a concurrent writer won.", []float64{1, 2, 3, 5, 10})
	m.ruleViol = f.counterVec("cdcsink_rule_violations_total", "Changes that broke a data-quality rule, by table, rule and the rule's action (quarantine, drop, fail, warn).", "table", "rule", "action")
	m.fenced = f.counterVec("cdcsink_fenced_partitions_total", "Partitions whose batch was fenced: another instance had advanced them in the table (their records were dropped and re-read from the table's offset if still assigned), by topic.", "topic")
	m.conflicts = f.counterVec("cdcsink_commit_conflicts_total", "Commit attempts lost to a concurrent writer that changed the batch's keys or files (the batch was re-planned), by table.", "table")
	m.rebases = f.counterVec("cdcsink_commit_rebases_total", "Concurrent commits of other keys a table commit was retried on top of without re-planning, by table.", "table")
	m.e2e = f.histogram("cdcsink_end_to_end_latency_seconds", "Source commit time to Delta commit, for the newest change of a batch.", prometheus.ExponentialBuckets(0.01, 2, 16))
	m.lag = f.gaugeVec("cdcsink_consumer_lag", "Records between the consumer position and the high watermark.", "topic", "partition")
	m.tableVer = f.gaugeVec("cdcsink_table_version", "Delta table version after the last commit.", "table")
	m.indexKeys = f.gaugeVec("cdcsink_index_keys", "Keys this instance holds in a table's key index (kind=indexed, ~100 B each) and, with tables.layout=partition, keys of other instances' partitions it only locates by hash (kind=located, ~20 B each).", "table", "kind")
	m.batchErrors = f.counter("cdcsink_batch_errors_total", "Batches that failed (and were retried or stopped the sink).")
	m.quarErrors = f.counter("cdcsink_quarantine_write_errors_total", "Failed quarantine writes (retried; the batch waits).")
	m.batches = f.counter("cdcsink_batches_total", "Micro-batches applied.")
	f.gaugeFunc("cdcsink_kafka_connected", "1 while the consumer has a broker connection (librdkafka statistics), 0 while it has none.",
		func() float64 {
			if up, _ := m.brokerDown(); up {
				return 1
			}
			return 0
		})
	m.txHeld = f.gaugeVec("cdcsink_tx_held", "consistency: transaction: records, bytes and transactions (unit) held back until their source transactions are complete.", "unit")
	m.txCount = f.counterVec("cdcsink_tx_transactions_total", "consistency: transaction: source transactions per table released whole (kind=whole), released in parts because they outgrew transactions.max_held_* (kind=forced), and records recognised as re-sent copies (kind=redelivered_records).", "kind")
	m.txWait = f.histogram("cdcsink_tx_wait_seconds", "consistency: transaction: how long a record was held back before its transaction was released (its END and all its records read).", prometheus.ExponentialBuckets(0.001, 2, 16))
	m.cutLag = f.gaugeVec("cdcsink_consistency_watermark_lag", "consistency_group: how far the newest published cut trails the transaction topic as read, in source WAL bytes (unit=bytes) and source commit time (unit=seconds).", "group", "unit")
	m.cuts = f.counterVec("cdcsink_consistency_cuts_total", "consistency_group: cuts published to the group's manifest.", "group")
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// observeGate publishes the transaction gate's state; call it from the
// runner's goroutine (the gate is not safe for concurrent use).
func (m *metrics) observeGate() {
	if m.gated == nil {
		return
	}
	n, b := m.gated.Held()
	m.txHeld.WithLabelValues("records").Set(float64(n))
	m.txHeld.WithLabelValues("bytes").Set(float64(b))
	m.txHeld.WithLabelValues("transactions").Set(float64(m.gated.Waiting()))
	st := m.gated.Stats()
	m.txCount.WithLabelValues("whole").Add(float64(st.Transactions - m.gateSeen.Transactions))
	m.txCount.WithLabelValues("forced").Add(float64(st.Forced - m.gateSeen.Forced))
	m.txCount.WithLabelValues("redelivered_records").Add(float64(st.Redelivered - m.gateSeen.Redelivered))
	m.gateSeen = st
}

// setBrokers wires the consumer's broker status into /readyz and /metrics.
func (m *metrics) setBrokers(f func() source.BrokerStatus, unreachableAfter time.Duration) {
	m.mu.Lock()
	m.brokers, m.unreachable = f, unreachableAfter
	m.mu.Unlock()
}

// brokerAuthErr is the consumer's last authentication or TLS failure while
// no broker connection is up ("" otherwise).
func (m *metrics) brokerAuthErr() string {
	m.mu.Lock()
	f := m.brokers
	m.mu.Unlock()
	if f == nil {
		return ""
	}
	return f().AuthErr
}

// brokerDown returns whether a broker connection is up and, when none has
// been for at least the unreachable-after window, since when.
func (m *metrics) brokerDown() (up bool, downSince time.Time) {
	m.mu.Lock()
	f, after := m.brokers, m.unreachable
	m.mu.Unlock()
	if f == nil {
		return true, time.Time{}
	}
	st := f()
	if st.Up {
		return true, time.Time{}
	}
	if m.now().Sub(st.Since) >= after {
		return false, st.Since
	}
	return false, time.Time{}
}

type promauto struct{ r *prometheus.Registry }

func (p promauto) gaugeFunc(name, help string, f func() float64) {
	p.r.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
}

func (p promauto) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	p.r.MustRegister(c)
	return c
}
func (p promauto) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	p.r.MustRegister(c)
	return c
}
func (p promauto) gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	c := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	p.r.MustRegister(c)
	return c
}
func (p promauto) histogram(name, help string, b []float64) prometheus.Histogram {
	c := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: b})
	p.r.MustRegister(c)
	return c
}

// progressJSON mirrors Spark's StreamingQueryProgress (lastProgress).
type progressJSON struct {
	Sink                   string                   `json:"sink"`
	BatchID                int64                    `json:"batchId"`
	Timestamp              string                   `json:"timestamp"`
	NumInputRows           int                      `json:"numInputRows"`
	InputRowsPerSecond     float64                  `json:"inputRowsPerSecond"`
	ProcessedRowsPerSecond float64                  `json:"processedRowsPerSecond"`
	DurationMs             map[string]int64         `json:"durationMs"`
	Quarantined            map[string]int           `json:"quarantined"`
	Skipped                map[string]int           `json:"skipped"`
	Tables                 map[string]tableProgJSON `json:"tables"`
	Totals                 map[string]int64         `json:"totals"`
	// Rules: violations since start, per rule and action ({"positive_amount":{"quarantine":3}}).
	Rules map[string]map[string]int64 `json:"rules,omitempty"`
}

type tableProgJSON struct {
	Version   int64 `json:"version"`
	BatchID   int64 `json:"batchId"`
	Inserted  int   `json:"inserted"`
	Updated   int   `json:"updated"`
	Deleted   int   `json:"deleted"`
	Stale     int   `json:"stale"`
	Duplicate int   `json:"duplicate"`
}

// ApplyRetried implements pipeline.RetryObserver: a transient apply failure
// retried inside the batch counts as a failed attempt (readiness, the
// StuckRetrying alert) like a failed batch does.
func (m *metrics) ApplyRetried(_ string, err error) { m.batchFailed(err) }

// BatchDone implements pipeline.Observer.
func (m *metrics) BatchDone(r *pipeline.Report) {
	now := m.now()
	m.status.BatchDone(r)
	m.batches.Inc()
	m.recordsIn.Add(float64(r.Records))
	m.bytesIn.Add(float64(r.Bytes))
	m.batchDur.Observe(float64(r.DurationMs) / 1000)
	if r.AlreadyDone > 0 {
		m.skipped.WithLabelValues("already_applied").Add(float64(r.AlreadyDone))
	}
	if r.Ignored > 0 {
		m.skipped.WithLabelValues("ignored").Add(float64(r.Ignored))
	}
	p := &progressJSON{Sink: m.sink, Timestamp: now.UTC().Format(time.RFC3339Nano), NumInputRows: r.Records,
		DurationMs:  map[string]int64{"decode": r.DecodeMs, "total": r.DurationMs},
		Quarantined: map[string]int{}, Skipped: map[string]int{"already_applied": r.AlreadyDone, "ignored": r.Ignored},
		Tables: map[string]tableProgJSON{}}
	for reason, n := range r.Quarantined {
		m.quarantined.WithLabelValues(string(reason)).Add(float64(n))
		p.Quarantined[string(reason)] = n
	}
	for _, tr := range r.Tables {
		res := tr.Result
		m.rows.WithLabelValues(tr.Table, "inserted").Add(float64(res.Inserted))
		m.rows.WithLabelValues(tr.Table, "updated").Add(float64(res.Updated))
		m.rows.WithLabelValues(tr.Table, "deleted").Add(float64(res.Deleted))
		m.skipped.WithLabelValues("stale").Add(float64(res.Stale))
		m.skipped.WithLabelValues("duplicate").Add(float64(res.Duplicate))
		p.Skipped["stale"] += res.Stale
		p.Skipped["duplicate"] += res.Duplicate
		if res.Conflicts > 0 {
			m.conflicts.WithLabelValues(tr.Table).Add(float64(res.Conflicts))
		}
		if res.Rebases > 0 {
			m.rebases.WithLabelValues(tr.Table).Add(float64(res.Rebases))
		}
		if res.Committed {
			m.attempts.Observe(float64(max(res.Attempts, 1)))
			m.commitDur.Observe(float64(res.CommitMs) / 1000)
			m.tableVer.WithLabelValues(tr.Table).Set(float64(res.Version))
		}
		p.DurationMs["fold"] += res.FoldMs
		p.DurationMs["write"] += res.WriteMs
		p.DurationMs["commit"] += res.CommitMs
		if res.BatchID > p.BatchID {
			p.BatchID = res.BatchID
		}
		p.Tables[tr.Table] = tableProgJSON{Version: res.Version, BatchID: res.BatchID, Inserted: res.Inserted,
			Updated: res.Updated, Deleted: res.Deleted, Stale: res.Stale, Duplicate: res.Duplicate}
	}
	if r.MaxSourceTsUs > 0 {
		lat := now.Sub(time.UnixMicro(r.MaxSourceTsUs)).Seconds()
		if lat >= 0 {
			m.e2e.Observe(lat)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.last != nil {
		if el := now.Sub(parseTS(m.last.Timestamp)).Seconds(); el > 0 {
			p.InputRowsPerSecond = float64(r.Records) / el
		}
	}
	if r.DurationMs > 0 {
		p.ProcessedRowsPerSecond = float64(r.Records) / (float64(r.DurationMs) / 1000)
	}
	p.Totals = map[string]int64{}
	if m.last != nil {
		for k, v := range m.last.Totals {
			p.Totals[k] = v
		}
	}
	p.Totals["records"] += int64(r.Records)
	p.Totals["batches"]++
	for _, tr := range r.Tables {
		p.Totals["inserted"] += int64(tr.Result.Inserted)
		p.Totals["updated"] += int64(tr.Result.Updated)
		p.Totals["deleted"] += int64(tr.Result.Deleted)
		p.Totals["stale"] += int64(tr.Result.Stale)
		p.Totals["duplicate"] += int64(tr.Result.Duplicate)
	}
	for _, n := range r.Quarantined {
		p.Totals["quarantined"] += int64(n)
	}
	if m.last != nil && len(m.last.Rules) > 0 {
		p.Rules = map[string]map[string]int64{}
		for rule, byAct := range m.last.Rules {
			p.Rules[rule] = maps.Clone(byAct)
		}
	}
	for rc, n := range r.RuleViolations {
		m.ruleViol.WithLabelValues(rc.Table, rc.Rule, string(rc.Action)).Add(float64(n))
		if p.Rules == nil {
			p.Rules = map[string]map[string]int64{}
		}
		if p.Rules[rc.Rule] == nil {
			p.Rules[rc.Rule] = map[string]int64{}
		}
		p.Rules[rc.Rule][string(rc.Action)] += int64(n)
	}
	m.last = p
	m.lastOK = now
	m.lastErr = ""
	m.failures = 0
}

func parseTS(s string) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t
}

func (m *metrics) batchFailed(err error) {
	m.batchErrors.Inc()
	m.status.Failed(err)
	m.mu.Lock()
	m.lastErr = redactText(err.Error())
	m.failures++
	m.mu.Unlock()
}

// quarantineFailed records a failed quarantine write. The pipeline retries it
// inside the batch, so the batch itself has not failed (yet): without this,
// a sink stuck on an unavailable quarantine topic would look ready.
func (m *metrics) quarantineFailed(err error) {
	m.quarErrors.Inc()
	m.status.Failed(err)
	m.mu.Lock()
	m.lastErr = redactText(err.Error())
	m.failures++
	m.mu.Unlock()
}

func (m *metrics) setReady(ok bool) {
	m.mu.Lock()
	m.ready = ok
	m.mu.Unlock()
	m.status.SetReady(ok)
}

func (m *metrics) setLag(lag map[source.TopicPartition]int64) {
	for tp, v := range lag {
		m.lag.WithLabelValues(tp.Topic, strconv.Itoa(int(tp.Partition))).Set(float64(v))
		m.status.SetLag(tp.Topic, tp.Partition, v)
	}
}

// handler serves the status page (/, /status.json, /assets/), /healthz,
// /readyz, /metrics and /progress, and /debug/pprof/ when http.pprof is set.
func (m *metrics) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", m.status.Handler())
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		m.mu.Lock()
		ready, failures, lastErr := m.ready, m.failures, m.lastErr
		m.mu.Unlock()
		_, downSince := m.brokerDown()
		w.Header().Set("Content-Type", "application/json")
		status := http.StatusOK
		body := map[string]any{"ready": ready, "consecutiveFailures": failures}
		if lastErr != "" {
			body["lastError"] = lastErr
		}
		if !downSince.IsZero() {
			body["kafkaUnreachableSince"] = downSince.UTC().Format(time.RFC3339Nano)
			if e := m.brokerAuthErr(); e != "" {
				body["kafkaError"] = e
			}
		}
		// Ready once consuming; a sink stuck retrying a failing batch, or cut
		// off from every broker for kafka.unreachable_after, is not ready (it
		// is alive: healthz stays ok while it retries and librdkafka
		// reconnects).
		if !ready || failures >= 3 || !downSince.IsZero() {
			status = http.StatusServiceUnavailable
		}
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(body)
	})
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	if m.pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.HandleFunc("/progress", func(w http.ResponseWriter, _ *http.Request) {
		m.mu.Lock()
		p := m.last
		m.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if p == nil {
			p = &progressJSON{Sink: m.sink, BatchID: -1, DurationMs: map[string]int64{}, Tables: map[string]tableProgJSON{}}
		}
		_ = json.NewEncoder(w).Encode(p)
	})
	return mux
}

// serve starts the HTTP listener; the returned function stops it.
func (m *metrics) serve(addr string) (string, func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: m.handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return ln.Addr().String(), func() { _ = srv.Close() }, nil
}
