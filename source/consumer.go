package source

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// TopicPartition names one partition of one topic.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// String returns "topic/partition".
func (tp TopicPartition) String() string { return fmt.Sprintf("%s/%d", tp.Topic, tp.Partition) }

// UseCommitted, as an offset returned by RebalanceHandler.OnAssign (or any negative value, or a
// partition left out of the map), starts the partition at the group's committed offset, or per
// ConsumerConfig.AutoOffsetReset (default earliest) when there is none.
const UseCommitted int64 = -1

// RebalanceHandler is told about partition assignment changes. Its methods run synchronously
// inside Consumer.Poll (and Consumer.Close), on the polling goroutine, with Poll's context.
// They may call Consumer.Commit, Lag and Positions, but not Poll or Close.
//
// With the cooperative-sticky protocol the partition lists are increments: OnAssign receives
// only the newly added partitions and OnRevoke only those being taken away; partitions not
// listed keep being consumed across the rebalance.
type RebalanceHandler interface {
	// OnAssign is called before consumption of newly assigned partitions starts. It returns the
	// offset to start each partition at (the next offset recorded in the Delta table); missing
	// or negative entries mean UseCommitted. An error is fatal for the Consumer: the partitions
	// stay assigned but paused, Poll returns the error, and the caller should Close.
	OnAssign(ctx context.Context, parts []TopicPartition) (map[TopicPartition]int64, error)
	// OnRevoke is called before partitions are taken away; the caller must finish or abandon
	// in-flight work for them. Records of these partitions that Poll had collected but not yet
	// returned are dropped (the next owner reads them again). An error is returned by Poll
	// after the partitions are released, and is fatal for the Consumer.
	OnRevoke(ctx context.Context, parts []TopicPartition) error
}

// LostHandler may be implemented by a RebalanceHandler. When partitions are lost rather than
// revoked (session timeout, fenced member: another member may already own them, and committing
// group offsets for them fails), OnLost is called instead of OnRevoke.
type LostHandler interface {
	OnLost(ctx context.Context, parts []TopicPartition) error
}

// ConsumerConfig configures a Consumer. Brokers, GroupID and Topics or TopicRegex are required.
type ConsumerConfig struct {
	// Brokers are the bootstrap servers, "host:port".
	Brokers []string
	// GroupID is the Kafka consumer group. Group offsets are only for lag tools: the Delta table
	// holds the real progress (see RebalanceHandler.OnAssign).
	GroupID string
	// Topics to subscribe to.
	Topics []string
	// TopicRegex subscribes to every topic matching this regular expression (librdkafka POSIX
	// syntax; "^" is prepended if missing). New matching topics are picked up at the next
	// metadata refresh (topic.metadata.refresh.interval.ms, default 5 minutes).
	TopicRegex string
	// ClientID is Kafka's client.id (default "cdc-sink").
	ClientID string
	// SessionTimeout is session.timeout.ms (0 = librdkafka default, 45 s).
	SessionTimeout time.Duration
	// HeartbeatInterval is heartbeat.interval.ms (0 = librdkafka default, 3 s). Rebalances are
	// noticed at the next heartbeat, so this bounds how fast a rebalance starts.
	HeartbeatInterval time.Duration
	// MaxPollInterval is max.poll.interval.ms (0 = librdkafka default, 5 min): the longest time
	// between two Poll calls before the consumer leaves the group and loses its partitions.
	MaxPollInterval time.Duration
	// AutoOffsetReset is auto.offset.reset for partitions without a usable start offset
	// (default "earliest").
	AutoOffsetReset string
	// Extra is passed to librdkafka verbatim and overrides the defaults above: TLS
	// (security.protocol, ssl.ca.location, ...), SASL (sasl.mechanisms, sasl.username, ...),
	// fetch sizes, etc. It cannot change the four fixed properties (see NewConsumer).
	Extra map[string]string
	// Logger receives librdkafka logs and non-fatal client errors (default slog.Default()).
	Logger *slog.Logger
}

// fixedConsumerProps are always set and cannot be overridden through Extra.
var fixedConsumerProps = map[string]kafka.ConfigValue{
	"partition.assignment.strategy":   "cooperative-sticky",
	"enable.auto.commit":              "false",
	"enable.auto.offset.store":        "false",
	"go.application.rebalance.enable": true,
}

// Consumer reads records from Kafka through a consumer group (confluent-kafka-go, librdkafka).
// Poll and Close must be called from one goroutine at a time; Commit, Lag, Positions,
// EndOffsets and OffsetsForTimes may be called from any goroutine.
//
// Errors are never panics. Broker/network errors that librdkafka retries by itself are logged
// and Poll carries on; errors returned by Commit, EndOffsets and OffsetsForTimes for such
// conditions satisfy quarantine.IsTransient. A fatal client error is returned as is.
type Consumer struct {
	c      *kafka.Consumer
	h      RebalanceHandler
	log    *slog.Logger
	logCh  chan kafka.LogEvent
	logEnd chan struct{}
	topics []string
	re     *regexp.Regexp

	pollMu  sync.Mutex // serialises Poll and Close
	pollCtx context.Context
	batch   *[]*Record // records collected by the running Poll, for revoke filtering
	cbErr   error      // error raised inside a rebalance callback, returned by Poll

	life   sync.RWMutex // write-locked once, when the client is being destroyed
	closed bool

	mu   sync.Mutex
	pos  map[TopicPartition]int64 // assigned partitions → next offset to read (-1 unknown)
	stop map[TopicPartition]int64 // StopAt offsets, nil if unbounded

	brokers brokerState
}

// BrokerStatus says whether the consumer can reach its cluster: Up while at
// least one broker connection is up, and since when that has been so.
type BrokerStatus struct {
	Up    bool
	Since time.Time
	// AuthErr is the last authentication or TLS failure while down (AuthError's text, naming
	// the endpoint); empty when up or down for another reason.
	AuthErr string
}

// brokerState follows broker connectivity. librdkafka reconnects on its own
// and tells the application nothing while it does, so a sink cut off from
// its brokers would look healthy; three signals tell: the all-brokers-down
// error (at once), the statistics event (every statsInterval: which
// connections are up) and any message received.
type brokerState struct {
	mu sync.Mutex
	BrokerStatus
	everUp bool
}

func (b *brokerState) set(up bool, now time.Time) {
	b.mu.Lock()
	if b.Since.IsZero() || b.Up != up {
		b.Up, b.Since = up, now
	}
	if up {
		b.AuthErr = ""
	}
	b.mu.Unlock()
}

// connected records a real connection (not the optimistic start value).
func (b *brokerState) connected(now time.Time) {
	b.set(true, now)
	b.mu.Lock()
	b.everUp = true
	b.mu.Unlock()
}

// authFailed records an authentication or TLS failure and reports whether
// any broker connection was ever up.
func (b *brokerState) authFailed(err *AuthError, now time.Time) (everUp bool) {
	b.set(false, now)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.AuthErr = err.Error()
	return b.everUp
}

// statsInterval is librdkafka's statistics.interval.ms unless the
// configuration sets it.
const statsInterval = time.Second

// Brokers reports whether the consumer has a broker connection, as of the
// last Poll (Up with the creation time until the first signal).
func (c *Consumer) Brokers() BrokerStatus {
	c.brokers.mu.Lock()
	defer c.brokers.mu.Unlock()
	return c.brokers.BrokerStatus
}

// brokerStats is the part of librdkafka's statistics JSON read here.
type brokerStats struct {
	Brokers map[string]struct {
		State string `json:"state"`
	} `json:"brokers"`
}

// onStats updates the broker state from a statistics event.
func (c *Consumer) onStats(js string, now time.Time) {
	var st brokerStats
	if err := json.Unmarshal([]byte(js), &st); err != nil {
		c.log.Debug("unreadable librdkafka statistics", "err", err)
		return
	}
	up := false
	for _, b := range st.Brokers {
		up = up || b.State == "UP"
	}
	if up {
		c.brokers.connected(now)
	} else {
		c.brokers.set(false, now)
	}
}

// NewConsumer creates the consumer and subscribes it. h may be nil (every partition then starts
// at its committed offset). Besides cfg it always sets partition.assignment.strategy =
// cooperative-sticky, enable.auto.commit = false, enable.auto.offset.store = false and
// go.application.rebalance.enable = true.
func NewConsumer(cfg ConsumerConfig, h RebalanceHandler) (*Consumer, error) {
	if len(cfg.Brokers) == 0 || cfg.GroupID == "" || (len(cfg.Topics) == 0 && cfg.TopicRegex == "") {
		return nil, errors.New("source: ConsumerConfig needs Brokers, GroupID and Topics or TopicRegex")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	logCh := make(chan kafka.LogEvent, 1000)
	cm := kafka.ConfigMap{
		"bootstrap.servers":                  strings.Join(cfg.Brokers, ","),
		"group.id":                           cfg.GroupID,
		"client.id":                          orDefault(cfg.ClientID, "cdc-sink"),
		"auto.offset.reset":                  orDefault(cfg.AutoOffsetReset, "earliest"),
		"go.logs.channel.enable":             true,
		"go.logs.channel":                    logCh,
		"enable.partition.eof":               false,
		"topic.metadata.refresh.interval.ms": 300000,
		// librdkafka pauses a partition's fetching for fetch.queue.backoff.ms
		// (1 s) whenever its prefetch queue is over queued.min.messages, which
		// a sink that polls a batch and then merges it hits every batch:
		// draining a backlog ran at 75k records/s against a local broker,
		// 320k with 10 ms (bench/pollrate). Memory stays bounded by
		// queued.max.messages.kbytes.
		"fetch.queue.backoff.ms":    10,
		"max.partition.fetch.bytes": 4 << 20,
		// the statistics event is how broker connectivity is followed (Brokers)
		"statistics.interval.ms": int(statsInterval.Milliseconds()),
	}
	if cfg.SessionTimeout > 0 {
		cm["session.timeout.ms"] = int(cfg.SessionTimeout.Milliseconds())
	}
	if cfg.HeartbeatInterval > 0 {
		cm["heartbeat.interval.ms"] = int(cfg.HeartbeatInterval.Milliseconds())
	}
	if cfg.MaxPollInterval > 0 {
		cm["max.poll.interval.ms"] = int(cfg.MaxPollInterval.Milliseconds())
	}
	for k, v := range cfg.Extra {
		if _, fixed := fixedConsumerProps[k]; fixed {
			return nil, fmt.Errorf("source: %s cannot be overridden", k)
		}
		if k == "statistics.interval.ms" && fmt.Sprint(v) == "0" {
			return nil, errors.New("source: statistics.interval.ms cannot be 0: the statistics event is how the sink sees that it lost its brokers")
		}
		cm[k] = v
	}
	for k, v := range fixedConsumerProps {
		cm[k] = v
	}
	kc, err := kafka.NewConsumer(&cm)
	if err != nil {
		return nil, fmt.Errorf("source: creating consumer: %w", err)
	}
	c := &Consumer{c: kc, h: h, log: log, logCh: logCh, logEnd: make(chan struct{}),
		topics: append([]string(nil), cfg.Topics...), pos: map[TopicPartition]int64{},
		pollCtx: context.Background()}
	c.brokers.set(true, time.Now()) // until a signal says otherwise
	go c.forwardLogs()
	subs := append([]string(nil), cfg.Topics...)
	if cfg.TopicRegex != "" {
		rx := cfg.TopicRegex
		if !strings.HasPrefix(rx, "^") {
			rx = "^" + rx
		}
		if c.re, err = regexp.Compile(rx); err != nil {
			c.Close()
			return nil, fmt.Errorf("source: TopicRegex: %w", err)
		}
		subs = append(subs, rx)
	}
	if err := kc.SubscribeTopics(subs, c.rebalance); err != nil {
		c.Close()
		return nil, fmt.Errorf("source: subscribe: %w", err)
	}
	return c, nil
}

// librdkafka's local error codes isAuthFailure looks at.
const (
	codeAuthentication = int(kafka.ErrAuthentication)
	codeSSL            = int(kafka.ErrSsl)
	codeTransport      = int(kafka.ErrTransport)
)

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func (c *Consumer) forwardLogs() {
	for {
		select {
		case ev := <-c.logCh:
			lvl := slog.LevelDebug
			switch {
			case ev.Level <= 3:
				lvl = slog.LevelError
			case ev.Level == 4:
				lvl = slog.LevelWarn
			case ev.Level <= 6:
				lvl = slog.LevelInfo
			}
			c.log.Log(context.Background(), lvl, ev.Message, "librdkafka", ev.Tag, "client", ev.Name)
		case <-c.logEnd:
			return
		}
	}
}

func toTPs(in []kafka.TopicPartition) []TopicPartition {
	out := make([]TopicPartition, 0, len(in))
	for _, p := range in {
		if p.Topic != nil {
			out = append(out, TopicPartition{Topic: *p.Topic, Partition: p.Partition})
		}
	}
	return out
}

// rebalance is the librdkafka rebalance callback. It runs inside kafka.Consumer.Poll (or
// Close/Unsubscribe draining) on the polling goroutine.
func (c *Consumer) rebalance(kc *kafka.Consumer, ev kafka.Event) error {
	coop := kc.GetRebalanceProtocol() == "COOPERATIVE"
	ctx := c.pollCtx
	switch e := ev.(type) {
	case kafka.AssignedPartitions:
		parts := toTPs(e.Partitions)
		var offs map[TopicPartition]int64
		var herr error
		if c.h != nil && len(parts) > 0 && !c.isClosed() {
			offs, herr = c.h.OnAssign(ctx, parts)
		}
		tps := make([]kafka.TopicPartition, len(e.Partitions))
		stored := []kafka.TopicPartition{}
		c.mu.Lock()
		for i, p := range e.Partitions {
			tps[i] = p
			tps[i].Offset = kafka.OffsetStored
			tp := TopicPartition{Topic: *p.Topic, Partition: p.Partition}
			c.pos[tp] = -1
			if off, ok := offs[tp]; ok && off >= 0 && herr == nil {
				tps[i].Offset = kafka.Offset(off)
				c.pos[tp] = off
			} else {
				stored = append(stored, tps[i])
			}
		}
		c.mu.Unlock()
		var aerr error
		if coop {
			aerr = kc.IncrementalAssign(tps)
		} else {
			aerr = kc.Assign(tps)
		}
		if aerr != nil {
			c.setCbErr(fmt.Errorf("source: assign %v: %w", parts, aerr))
			return nil
		}
		if herr != nil {
			if err := kc.Pause(tps); err != nil {
				c.log.Error("pausing partitions after OnAssign failed", "err", err)
			}
			c.setCbErr(fmt.Errorf("source: OnAssign %v: %w", parts, herr))
			return nil
		}
		c.resolveCommitted(kc, stored)
		c.log.Info("partitions assigned", "partitions", fmt.Sprint(parts), "protocol", kc.GetRebalanceProtocol())
	case kafka.RevokedPartitions:
		parts := toTPs(e.Partitions)
		var herr error
		if c.h != nil && len(parts) > 0 && !c.isClosed() {
			if lh, ok := c.h.(LostHandler); ok && kc.AssignmentLost() {
				herr = lh.OnLost(ctx, parts)
			} else {
				herr = c.h.OnRevoke(ctx, parts)
			}
		}
		var uerr error
		if coop {
			uerr = kc.IncrementalUnassign(e.Partitions)
		} else {
			uerr = kc.Unassign()
		}
		gone := map[TopicPartition]bool{}
		c.mu.Lock()
		for _, tp := range parts {
			delete(c.pos, tp)
			gone[tp] = true
		}
		if !coop {
			clear(c.pos)
		}
		c.mu.Unlock()
		if c.batch != nil {
			kept := (*c.batch)[:0]
			for _, r := range *c.batch {
				if coop && !gone[TopicPartition{Topic: r.Topic, Partition: r.Partition}] {
					kept = append(kept, r)
				}
			}
			clear((*c.batch)[len(kept):])
			*c.batch = kept
		}
		if uerr != nil {
			c.setCbErr(fmt.Errorf("source: unassign %v: %w", parts, uerr))
		} else if herr != nil {
			c.setCbErr(fmt.Errorf("source: OnRevoke %v: %w", parts, herr))
		}
		c.log.Info("partitions revoked", "partitions", fmt.Sprint(parts), "lost", kc.AssignmentLost())
	}
	return nil
}

// resolveCommitted learns the start position of partitions assigned at their committed offset,
// so that Positions, Lag and StopAt know it before the first record arrives.
func (c *Consumer) resolveCommitted(kc *kafka.Consumer, tps []kafka.TopicPartition) {
	if len(tps) == 0 {
		return
	}
	got, err := kc.Committed(tps, 5000)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range got {
		tp := TopicPartition{Topic: *p.Topic, Partition: p.Partition}
		if cur, ok := c.pos[tp]; ok && cur < 0 && p.Error == nil && p.Offset >= 0 {
			c.pos[tp] = int64(p.Offset)
		}
	}
}

func (c *Consumer) setCbErr(err error) {
	c.log.Error("rebalance failed", "err", err)
	if c.cbErr == nil {
		c.cbErr = err
	}
}

func (c *Consumer) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Poll returns the next batch: it collects records until it has maxRecords of them, maxWait has
// passed, or ctx is done, whichever comes first (so it lingers up to maxWait to fill a batch).
// Rebalance callbacks run inside Poll. Records are in partition order within each partition.
//
// It returns (nil, nil) when nothing arrived, (records, nil) when ctx ends after some records
// arrived, (nil, ctx.Err()) when ctx ends with none, and (nil, err) for a fatal client error
// or a RebalanceHandler error (close the Consumer then). With StopAt set, it returns
// (nil, io.EOF) once every stop offset is reached.
func (c *Consumer) Poll(ctx context.Context, maxRecords int, maxWait time.Duration) ([]*Record, error) {
	c.pollMu.Lock()
	defer c.pollMu.Unlock()
	if c.isClosed() {
		return nil, ErrClosed
	}
	if maxRecords <= 0 {
		maxRecords = 1
	}
	out := make([]*Record, 0, min(maxRecords, 1024))
	c.pollCtx, c.batch = ctx, &out
	defer func() { c.pollCtx, c.batch = context.Background(), nil }()
	deadline := time.Now().Add(maxWait)
	for len(out) < maxRecords {
		if c.cbErr != nil {
			err := c.cbErr
			c.cbErr = nil
			return nil, err
		}
		if c.stopReached() {
			if len(out) > 0 {
				return out, nil
			}
			return nil, io.EOF
		}
		if err := ctx.Err(); err != nil {
			if len(out) > 0 {
				return out, nil
			}
			return nil, err
		}
		wait := max(0, time.Until(deadline))
		ev := c.c.Poll(int(min(wait, 100*time.Millisecond).Milliseconds()))
		switch e := ev.(type) {
		case *kafka.Message:
			if e.TopicPartition.Error != nil {
				c.log.Warn("partition error", "partition", e.TopicPartition.String(), "err", e.TopicPartition.Error)
				continue
			}
			rec := toRecord(e)
			if c.accept(rec) {
				out = append(out, rec)
			}
			c.brokers.connected(time.Now())
		case *kafka.Stats:
			c.onStats(e.String(), time.Now())
		case kafka.Error:
			if e.IsFatal() {
				return nil, fmt.Errorf("source: fatal consumer error: %w", e)
			}
			if isAuthFailure(int(e.Code()), e.String()) {
				ae := &AuthError{Detail: e.String()}
				if !c.brokers.authFailed(ae, time.Now()) {
					// never connected: a configuration error, not an outage
					return nil, ae
				}
				// connected before: credentials or certificates may be rotating; /readyz
				// fails after kafka.unreachable_after with this error
				c.log.Error("kafka authentication or TLS failure (retrying)", "err", ae.Error())
			} else {
				if e.Code() == kafka.ErrAllBrokersDown {
					c.brokers.set(false, time.Now())
				}
				c.log.Warn("kafka client error (retrying)", "err", e, "code", e.Code().String())
			}
		}
		if wait == 0 {
			break
		}
	}
	if c.cbErr != nil {
		err := c.cbErr
		c.cbErr = nil
		return nil, err
	}
	return out, nil
}

// accept updates the position for rec and reports whether Poll should return it (false for a
// record at or beyond its StopAt offset: the partition is then paused).
func (c *Consumer) accept(rec *Record) bool {
	tp := TopicPartition{Topic: rec.Topic, Partition: rec.Partition}
	c.mu.Lock()
	drop := false
	if c.stop != nil {
		end, ok := c.stop[tp]
		drop = !ok || rec.Offset >= end
	}
	if _, ok := c.pos[tp]; ok && !drop {
		c.pos[tp] = rec.Offset + 1
	}
	c.mu.Unlock()
	if drop {
		topic := rec.Topic
		if err := c.c.Pause([]kafka.TopicPartition{{Topic: &topic, Partition: rec.Partition}}); err != nil {
			c.log.Warn("pausing partition at its stop offset failed", "partition", tp.String(), "err", err)
		}
	}
	return !drop
}

func toRecord(m *kafka.Message) *Record {
	r := &Record{
		Topic:     *m.TopicPartition.Topic,
		Partition: m.TopicPartition.Partition,
		Offset:    int64(m.TopicPartition.Offset),
		Key:       m.Key,
		Value:     m.Value,
	}
	switch m.TimestampType {
	case kafka.TimestampCreateTime:
		r.TimestampType, r.Timestamp = "create", m.Timestamp.UTC()
	case kafka.TimestampLogAppendTime:
		r.TimestampType, r.Timestamp = "logappend", m.Timestamp.UTC()
	}
	if len(m.Headers) > 0 {
		r.Headers = make([]Header, len(m.Headers))
		for i, h := range m.Headers {
			r.Headers[i] = Header{Key: h.Key, Value: h.Value}
		}
	}
	return r
}

// StopAt bounds consumption for a replay: from now on Poll drops records at or beyond
// end[tp] (pausing that partition) and records of partitions not in end, and returns io.EOF
// once every partition in end is assigned to this consumer with a position ≥ its end offset.
// Use a group of its own for a bounded replay so that this consumer owns every partition.
// Pass the result of EndOffsets captured at start. nil removes the bound (paused partitions
// stay paused).
func (c *Consumer) StopAt(end map[TopicPartition]int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if end == nil {
		c.stop = nil
		return
	}
	c.stop = make(map[TopicPartition]int64, len(end))
	for tp, o := range end {
		c.stop[tp] = o
	}
}

func (c *Consumer) stopReached() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stop == nil {
		return false
	}
	for tp, end := range c.stop {
		if p, ok := c.pos[tp]; !ok || p < end {
			return false
		}
	}
	return true
}

// Positions returns, for every partition currently assigned, the next offset Poll will return
// (the start offset right after assignment); partitions whose position is not yet known
// (committed offset unknown and no record read yet) are left out.
func (c *Consumer) Positions() map[TopicPartition]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[TopicPartition]int64, len(c.pos))
	for tp, p := range c.pos {
		if p >= 0 {
			out[tp] = p
		}
	}
	return out
}

// Seek moves assigned partitions to the given next offsets (records fetched
// beyond them are discarded by librdkafka) and returns the partitions it
// left alone because they are not assigned to this consumer any more. Call
// it from the goroutine that calls Poll, between Polls.
func (c *Consumer) Seek(offsets map[TopicPartition]int64) (notAssigned []TopicPartition, err error) {
	c.life.RLock()
	defer c.life.RUnlock()
	if c.closed {
		return nil, ErrClosed
	}
	for tp, off := range offsets {
		c.mu.Lock()
		_, assigned := c.pos[tp]
		c.mu.Unlock()
		if !assigned {
			notAssigned = append(notAssigned, tp)
			continue
		}
		topic := tp.Topic
		if err := c.c.Seek(kafka.TopicPartition{Topic: &topic, Partition: tp.Partition, Offset: kafka.Offset(off)}, 0); err != nil {
			return notAssigned, wrapKafkaErr(fmt.Sprintf("seek %s to %d", tp, off), err)
		}
		c.mu.Lock()
		if _, ok := c.pos[tp]; ok {
			c.pos[tp] = off
		}
		c.mu.Unlock()
	}
	sortTPs(notAssigned)
	return notAssigned, nil
}

// Assignment returns the partitions currently assigned to this consumer, sorted.
func (c *Consumer) Assignment() []TopicPartition {
	c.mu.Lock()
	out := make([]TopicPartition, 0, len(c.pos))
	for tp := range c.pos {
		out = append(out, tp)
	}
	c.mu.Unlock()
	sortTPs(out)
	return out
}

func sortTPs(s []TopicPartition) {
	sort.Slice(s, func(i, j int) bool {
		if s[i].Topic != s[j].Topic {
			return s[i].Topic < s[j].Topic
		}
		return s[i].Partition < s[j].Partition
	})
}

// Lag returns, per assigned partition with a known position, the high watermark minus the
// position (never negative). The high watermark is librdkafka's cached value, refreshed by
// every fetch response, so this makes no network call and suits a metrics scrape.
func (c *Consumer) Lag() map[TopicPartition]int64 {
	c.life.RLock()
	defer c.life.RUnlock()
	if c.closed {
		return nil
	}
	pos := c.Positions()
	out := make(map[TopicPartition]int64, len(pos))
	for tp, p := range pos {
		_, high, err := c.c.GetWatermarkOffsets(tp.Topic, tp.Partition)
		if err != nil || high < 0 {
			continue
		}
		out[tp] = max(0, high-p)
	}
	return out
}

// Commit commits group offsets synchronously: offsets[tp] is the next offset to read (last
// applied offset + 1), as stored in the Delta table. Call it after the Delta commit; it only
// feeds lag tools. Partitions not currently assigned are skipped. Errors are transient
// (quarantine.IsTransient) unless the client is in a fatal state.
func (c *Consumer) Commit(ctx context.Context, offsets map[TopicPartition]int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.life.RLock()
	defer c.life.RUnlock()
	if c.closed {
		return ErrClosed
	}
	c.mu.Lock()
	tps := make([]kafka.TopicPartition, 0, len(offsets))
	for tp, off := range offsets {
		if _, ok := c.pos[tp]; !ok || off < 0 {
			continue
		}
		topic := tp.Topic
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: tp.Partition, Offset: kafka.Offset(off)})
	}
	c.mu.Unlock()
	if len(tps) == 0 {
		return nil
	}
	res, err := c.c.CommitOffsets(tps)
	if err != nil {
		return wrapKafkaErr("commit", err)
	}
	for _, p := range res {
		if p.Error != nil {
			return wrapKafkaErr("commit "+p.String(), p.Error)
		}
	}
	return nil
}

func wrapKafkaErr(op string, err error) error {
	var ke kafka.Error
	if errors.As(err, &ke) && ke.IsFatal() {
		return fmt.Errorf("source: %s: %w", op, err)
	}
	return transient(fmt.Errorf("source: %s: %w", op, err))
}

func timeoutMs(ctx context.Context, def time.Duration) int {
	if dl, ok := ctx.Deadline(); ok {
		return max(1, int(time.Until(dl).Milliseconds()))
	}
	return int(def.Milliseconds())
}

// Topics returns the subscribed topics: the configured Topics plus, with TopicRegex, every
// existing topic that matches it (from fresh broker metadata), sorted.
func (c *Consumer) Topics(ctx context.Context) ([]string, error) {
	c.life.RLock()
	defer c.life.RUnlock()
	if c.closed {
		return nil, ErrClosed
	}
	return c.topicsLocked(ctx)
}

func (c *Consumer) topicsLocked(ctx context.Context) ([]string, error) {
	set := map[string]bool{}
	for _, t := range c.topics {
		set[t] = true
	}
	if c.re != nil {
		md, err := c.c.GetMetadata(nil, true, timeoutMs(ctx, 10*time.Second))
		if err != nil {
			return nil, wrapKafkaErr("metadata", err)
		}
		for t := range md.Topics {
			if c.re.MatchString(t) && !strings.HasPrefix(t, "__") {
				set[t] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for t := range set {
		out = append(out, t)
	}
	sort.Strings(out)
	return out, nil
}

func (c *Consumer) partitions(ctx context.Context, topics []string) ([]TopicPartition, error) {
	if topics == nil {
		var err error
		if topics, err = c.topicsLocked(ctx); err != nil {
			return nil, err
		}
	}
	var out []TopicPartition
	for _, t := range topics {
		topic := t
		md, err := c.c.GetMetadata(&topic, false, timeoutMs(ctx, 10*time.Second))
		if err != nil {
			return nil, wrapKafkaErr("metadata "+t, err)
		}
		tm, ok := md.Topics[t]
		if !ok || tm.Error.Code() != kafka.ErrNoError {
			return nil, transient(fmt.Errorf("source: metadata %s: %v", t, tm.Error))
		}
		for _, p := range tm.Partitions {
			out = append(out, TopicPartition{Topic: t, Partition: p.ID})
		}
	}
	sortTPs(out)
	return out, nil
}

// EndOffsets captures the current end (high watermark: the offset the next produced record
// will get) of every partition of topics (nil = Topics(ctx)) for a bounded replay: consume
// until each partition's position reaches it, then stop (see StopAt). Partitions that are empty
// (low watermark = high watermark) are left out, since nothing is to be read there. With
// librdkafka's default isolation.level=read_committed the end is the last stable offset.
func (c *Consumer) EndOffsets(ctx context.Context, topics []string) (map[TopicPartition]int64, error) {
	c.life.RLock()
	defer c.life.RUnlock()
	if c.closed {
		return nil, ErrClosed
	}
	parts, err := c.partitions(ctx, topics)
	if err != nil {
		return nil, err
	}
	out := make(map[TopicPartition]int64, len(parts))
	for _, tp := range parts {
		low, high, err := c.c.QueryWatermarkOffsets(tp.Topic, tp.Partition, timeoutMs(ctx, 10*time.Second))
		if err != nil {
			return nil, wrapKafkaErr("watermarks "+tp.String(), err)
		}
		if high > low {
			out[tp] = high
		}
	}
	return out, nil
}

// OffsetsForTimes returns, for every partition of topics (nil = Topics(ctx)), the offset of
// the first record with a timestamp ≥ t, or the partition's end offset when there is none, to
// start a replay at a point in time.
func (c *Consumer) OffsetsForTimes(ctx context.Context, topics []string, t time.Time) (map[TopicPartition]int64, error) {
	c.life.RLock()
	defer c.life.RUnlock()
	if c.closed {
		return nil, ErrClosed
	}
	parts, err := c.partitions(ctx, topics)
	if err != nil {
		return nil, err
	}
	q := make([]kafka.TopicPartition, len(parts))
	for i, tp := range parts {
		topic := tp.Topic
		q[i] = kafka.TopicPartition{Topic: &topic, Partition: tp.Partition, Offset: kafka.Offset(t.UnixMilli())}
	}
	res, err := c.c.OffsetsForTimes(q, timeoutMs(ctx, 10*time.Second))
	if err != nil {
		return nil, wrapKafkaErr("offsets for times", err)
	}
	out := make(map[TopicPartition]int64, len(res))
	for _, p := range res {
		if p.Error != nil {
			return nil, wrapKafkaErr("offsets for times "+p.String(), p.Error)
		}
		tp := TopicPartition{Topic: *p.Topic, Partition: p.Partition}
		off := int64(p.Offset)
		if off < 0 {
			_, high, err := c.c.QueryWatermarkOffsets(tp.Topic, tp.Partition, timeoutMs(ctx, 10*time.Second))
			if err != nil {
				return nil, wrapKafkaErr("watermarks "+tp.String(), err)
			}
			off = high
		}
		out[tp] = off
	}
	return out, nil
}

// Close leaves the group and releases the client. It first unsubscribes and serves the
// resulting revocation (RebalanceHandler.OnRevoke is called for the remaining assignment, with
// a background context), then closes librdkafka. Calling it twice is harmless.
func (c *Consumer) Close() error {
	c.pollMu.Lock()
	defer c.pollMu.Unlock()
	if c.isClosed() {
		return nil
	}
	c.pollCtx = context.Background()
	if err := c.c.Unsubscribe(); err == nil {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			a, err := c.c.Assignment()
			if err != nil || len(a) == 0 {
				break
			}
			c.c.Poll(100)
		}
	}
	c.life.Lock()
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.life.Unlock()
	err := c.c.Close()
	close(c.logEnd)
	return err
}
