// Package status is what an operator looks at: the state of a running sink
// (tables, partitions, recent throughput and latency, quarantine, retry and
// readiness) collected in process by a Recorder, served as JSON
// (/status.json) and as a self-contained page (/, assets embedded), and
// read back from a running sink or from tables for `cdc-sink status`.
//
// The Recorder is fed by the pipeline's reports and by cmd's wiring
// (lag, readiness, failures, quarantine writes); it decides nothing.
package status

import (
	"sort"
	"sync"
	"time"

	"github.com/cdcsink/cdc-sink/internal/redact"
	"github.com/cdcsink/cdc-sink/pipeline"
	"github.com/cdcsink/cdc-sink/quarantine"
)

// Status is the JSON document of /status.json and `cdc-sink status --json`.
type Status struct {
	Sink       string      `json:"sink"`
	Now        time.Time   `json:"now"`
	Started    time.Time   `json:"started,omitzero"`
	Health     Health      `json:"health"`
	Totals     Totals      `json:"totals"`
	LastBatch  *LastBatch  `json:"lastBatch,omitempty"`
	Tables     []Table     `json:"tables"`
	Partitions []Partition `json:"partitions"`
	Quarantine Quarantine  `json:"quarantine"`
	// Series has one point per Step over the last hour, oldest first;
	// steps without batches are omitted.
	Series []Point `json:"series"`
	Step   string  `json:"step"`
}

// Health is the readiness and retry state.
type Health struct {
	Ready               bool      `json:"ready"`
	ConsecutiveFailures int       `json:"consecutiveFailures"`
	LastError           string    `json:"lastError,omitempty"`
	LastErrorAt         time.Time `json:"lastErrorAt,omitzero"`
	LastBatchAt         time.Time `json:"lastBatchAt,omitzero"`
}

// Totals count since the process started.
type Totals struct {
	Records     int64 `json:"records"`
	Batches     int64 `json:"batches"`
	Inserted    int64 `json:"inserted"`
	Updated     int64 `json:"updated"`
	Deleted     int64 `json:"deleted"`
	Quarantined int64 `json:"quarantined"`
}

// LastBatch is the newest applied micro-batch.
type LastBatch struct {
	BatchID    int64     `json:"batchId"`
	Records    int       `json:"records"`
	DurationMs int64     `json:"durationMs"`
	At         time.Time `json:"at"`
}

// Table is one Delta table's state.
type Table struct {
	Name       string    `json:"name"`
	Version    int64     `json:"version"`
	BatchID    int64     `json:"batchId"`
	Live       int64     `json:"live"`
	Deleted    int64     `json:"deleted"`
	LastCommit time.Time `json:"lastCommit,omitzero"`
	Sink       string    `json:"sink,omitempty"`
}

// Partition is one source partition: the next offset the table holds and
// the consumer lag behind the high watermark (-1: unknown).
type Partition struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Lag       int64  `json:"lag"`
	Table     string `json:"table,omitempty"`
}

// Quarantine is the count by reason since start, the count of rule
// violations (reason rule_violation) by rule, and the newest entries.
type Quarantine struct {
	ByReason map[string]int64 `json:"byReason"`
	ByRule   map[string]int64 `json:"byRule"`
	Newest   []Entry          `json:"newest"`
}

// Entry is a quarantined record without its bytes unless the Recorder was
// told to show them (Options.ShowValues): rows can hold personal data.
type Entry struct {
	Time      time.Time `json:"time"`
	Reason    string    `json:"reason"`
	Rule      string    `json:"rule,omitempty"` // the rule, for reason rule_violation
	Message   string    `json:"message"`
	Topic     string    `json:"topic"`
	Partition int32     `json:"partition"`
	Offset    int64     `json:"offset"`
	Key       *string   `json:"key,omitempty"`
	Value     *string   `json:"value,omitempty"`
}

// Point is one step of the charts.
type Point struct {
	T             time.Time `json:"t"`
	Batches       int       `json:"batches"`
	RecordsPerSec float64   `json:"recordsPerSec"`
	BatchMsP50    float64   `json:"batchMsP50"`
	BatchMsP95    float64   `json:"batchMsP95"`
	// End-to-end latency (source commit to Delta commit), seconds; 0 when
	// no batch of the step carried a source time.
	LatencyP50 float64 `json:"latencyP50"`
	LatencyP95 float64 `json:"latencyP95"`
	LatencyP99 float64 `json:"latencyP99"`
}

// Options configure a Recorder.
type Options struct {
	// ShowValues includes quarantined records' key and value in Newest.
	ShowValues bool
	// Step is the chart resolution (default 10s); the ring holds one hour.
	Step time.Duration
	// Newest is how many quarantine entries to keep (default 20).
	Newest int
	Now    func() time.Time
}

const window = time.Hour

// bucket is one Step of the ring: batch durations and latencies kept
// whole up to a cap, then reservoir-sampled (percentiles stay unbiased).
type bucket struct {
	start   time.Time
	batches int
	records int64
	durMs   []float64
	lat     []float64
	seen    int // latencies offered (reservoir)
}

const sampleCap = 512

// Recorder collects the status of one sink. Safe for concurrent use.
type Recorder struct {
	mu      sync.Mutex
	opts    Options
	sink    string
	started time.Time
	ring    []bucket
	health  Health
	totals  Totals
	last    *LastBatch
	tables  map[string]*Table
	parts   map[partKey]*Partition
	reasons map[string]int64
	rules   map[string]int64
	newest  []Entry
	rnd     uint64
}

type partKey struct {
	topic string
	part  int32
}

// NewRecorder returns a Recorder for sink.
func NewRecorder(sink string, opts Options) *Recorder {
	if opts.Step <= 0 {
		opts.Step = 10 * time.Second
	}
	if opts.Newest <= 0 {
		opts.Newest = 20
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Recorder{opts: opts, sink: sink, started: opts.Now(), ring: make([]bucket, int(window/opts.Step)),
		tables: map[string]*Table{}, parts: map[partKey]*Partition{}, reasons: map[string]int64{}, rules: map[string]int64{}, rnd: 0x9e3779b97f4a7c15}
}

func (r *Recorder) bucketAt(t time.Time) *bucket {
	start := t.Truncate(r.opts.Step)
	b := &r.ring[int(start.UnixNano()/int64(r.opts.Step))%len(r.ring)]
	if !b.start.Equal(start) {
		*b = bucket{start: start}
	}
	return b
}

func (r *Recorder) next() uint64 { // xorshift: reservoir picks, no global rand
	r.rnd ^= r.rnd << 13
	r.rnd ^= r.rnd >> 7
	r.rnd ^= r.rnd << 17
	return r.rnd
}

func (r *Recorder) sample(xs []float64, seen int, v float64) []float64 {
	if len(xs) < sampleCap {
		return append(xs, v)
	}
	if i := r.next() % uint64(seen); i < sampleCap {
		xs[i] = v
	}
	return xs
}

// BatchDone records an applied micro-batch (pipeline.Observer).
func (r *Recorder) BatchDone(rep *pipeline.Report) {
	now := r.opts.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.bucketAt(now)
	b.batches++
	b.records += int64(rep.Records)
	b.durMs = r.sample(b.durMs, b.batches, float64(rep.DurationMs))
	if rep.MaxSourceTsUs > 0 {
		if lat := now.Sub(time.UnixMicro(rep.MaxSourceTsUs)).Seconds(); lat >= 0 {
			b.seen++
			b.lat = r.sample(b.lat, b.seen, lat)
		}
	}
	r.totals.Records += int64(rep.Records)
	r.totals.Batches++
	lb := &LastBatch{BatchID: -1, Records: rep.Records, DurationMs: rep.DurationMs, At: now}
	for _, tr := range rep.Tables {
		res := tr.Result
		r.totals.Inserted += int64(res.Inserted)
		r.totals.Updated += int64(res.Updated)
		r.totals.Deleted += int64(res.Deleted)
		lb.BatchID = max(lb.BatchID, res.BatchID)
		t := r.table(tr.Table)
		t.Version, t.BatchID = res.Version, res.BatchID
		if res.Committed {
			t.LastCommit = now
		}
	}
	for _, n := range rep.Quarantined {
		r.totals.Quarantined += int64(n)
	}
	r.last = lb
	r.health.LastBatchAt = now
	r.health.ConsecutiveFailures = 0
	r.health.LastError = ""
}

func (r *Recorder) table(name string) *Table {
	t, ok := r.tables[name]
	if !ok {
		t = &Table{Name: name, Sink: r.sink}
		r.tables[name] = t
	}
	return t
}

// SetRows records a table's current row counts.
func (r *Recorder) SetRows(table string, live, deleted int64) {
	r.mu.Lock()
	t := r.table(table)
	t.Live, t.Deleted = live, deleted
	r.mu.Unlock()
}

// SetOffset records the next offset a table holds for a partition.
func (r *Recorder) SetOffset(table, topic string, partition int32, next int64) {
	r.mu.Lock()
	p := r.part(topic, partition)
	p.Offset, p.Table = next, table
	r.mu.Unlock()
}

// SetLag records the consumer lag of a partition.
func (r *Recorder) SetLag(topic string, partition int32, lag int64) {
	r.mu.Lock()
	r.part(topic, partition).Lag = lag
	r.mu.Unlock()
}

func (r *Recorder) part(topic string, partition int32) *Partition {
	k := partKey{topic, partition}
	p, ok := r.parts[k]
	if !ok {
		p = &Partition{Topic: topic, Partition: partition, Offset: -1, Lag: -1}
		r.parts[k] = p
	}
	return p
}

// SetReady records readiness (consuming, partitions assigned).
func (r *Recorder) SetReady(ok bool) {
	r.mu.Lock()
	r.health.Ready = ok
	r.mu.Unlock()
}

// Failed records a failed batch or quarantine write (being retried).
func (r *Recorder) Failed(err error) {
	r.mu.Lock()
	r.health.ConsecutiveFailures++
	r.health.LastError = redact.String(err.Error())
	r.health.LastErrorAt = r.opts.Now()
	r.mu.Unlock()
}

// Quarantined records entries durably written to quarantine.
func (r *Recorder) Quarantined(es []quarantine.Entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range es {
		e := &es[i]
		r.reasons[string(e.Reason)]++
		if e.Rule != "" {
			r.rules[e.Rule]++
		}
		out := Entry{Time: e.Time, Reason: string(e.Reason), Rule: e.Rule, Message: redact.String(e.Message)}
		if out.Time.IsZero() {
			out.Time = r.opts.Now()
		}
		if rec := e.Record; rec != nil {
			out.Topic, out.Partition, out.Offset = rec.Topic, rec.Partition, rec.Offset
			if r.opts.ShowValues {
				k, v := string(rec.Key), string(rec.Value)
				out.Key, out.Value = &k, &v
			}
		}
		r.newest = append(r.newest, out)
	}
	if n := len(r.newest) - r.opts.Newest; n > 0 {
		r.newest = append(r.newest[:0], r.newest[n:]...)
	}
}

// Snapshot returns the current status.
func (r *Recorder) Snapshot() *Status {
	now := r.opts.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	s := &Status{Sink: r.sink, Now: now, Started: r.started, Health: r.health, Totals: r.totals,
		Tables: []Table{}, Partitions: []Partition{}, Step: r.opts.Step.String(),
		Quarantine: Quarantine{ByReason: map[string]int64{}, ByRule: map[string]int64{}, Newest: []Entry{}}, Series: []Point{}}
	if r.last != nil {
		lb := *r.last
		s.LastBatch = &lb
	}
	for _, t := range r.tables {
		s.Tables = append(s.Tables, *t)
	}
	sort.Slice(s.Tables, func(i, j int) bool { return s.Tables[i].Name < s.Tables[j].Name })
	for _, p := range r.parts {
		s.Partitions = append(s.Partitions, *p)
	}
	sortPartitions(s.Partitions)
	for k, v := range r.reasons {
		s.Quarantine.ByReason[k] = v
	}
	for k, v := range r.rules {
		s.Quarantine.ByRule[k] = v
	}
	for i := len(r.newest) - 1; i >= 0; i-- { // newest first
		s.Quarantine.Newest = append(s.Quarantine.Newest, r.newest[i])
	}
	from := now.Add(-window)
	for i := range r.ring {
		b := &r.ring[i]
		if b.batches == 0 || !b.start.After(from) || b.start.After(now) {
			continue
		}
		p := Point{T: b.start, Batches: b.batches, RecordsPerSec: float64(b.records) / r.opts.Step.Seconds(),
			BatchMsP50: quantile(b.durMs, 0.5), BatchMsP95: quantile(b.durMs, 0.95),
			LatencyP50: quantile(b.lat, 0.5), LatencyP95: quantile(b.lat, 0.95), LatencyP99: quantile(b.lat, 0.99)}
		s.Series = append(s.Series, p)
	}
	sort.Slice(s.Series, func(i, j int) bool { return s.Series[i].T.Before(s.Series[j].T) })
	return s
}

func sortPartitions(ps []Partition) {
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].Topic != ps[j].Topic {
			return ps[i].Topic < ps[j].Topic
		}
		return ps[i].Partition < ps[j].Partition
	})
}

// quantile is the nearest-rank q-quantile of xs (0 for none).
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(q*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}
