package quarantine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/cdcsink/cdc-sink/source"
)

// KafkaConfig configures NewKafkaWriter and the Kafka readers.
type KafkaConfig struct {
	// Brokers are the bootstrap servers, "host:port".
	Brokers []string
	// Topic is the quarantine topic; default Sink + ".quarantine". It must use
	// cleanup.policy=delete: a quarantined tombstone (nil value) would be compacted away.
	Topic string
	// Sink is the sink name, used for the default Topic.
	Sink string
	// DeliveryTimeout bounds how long Write waits for one entry to be acknowledged
	// (message.timeout.ms) before failing; default 60 s.
	DeliveryTimeout time.Duration
	// Extra is passed to librdkafka verbatim (TLS, SASL, ...). It cannot turn off
	// enable.idempotence or acks=all.
	Extra map[string]string
	// Logger receives librdkafka logs and client errors (default slog.Default()).
	Logger *slog.Logger
}

func (c *KafkaConfig) topic() (string, error) {
	switch {
	case c.Topic != "":
		return c.Topic, nil
	case c.Sink != "":
		return c.Sink + ".quarantine", nil
	}
	return "", errors.New("quarantine: KafkaConfig needs Topic or Sink")
}

func (c *KafkaConfig) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.Default()
}

// KafkaWriter writes entries to the quarantine topic with an idempotent producer
// (enable.idempotence=true, acks=all, librdkafka retries). Safe for concurrent use.
//
// The quarantine record has the original key, value and headers byte for byte, the
// quarantine headers (HeaderNames) appended, and Entry.Time as its Kafka timestamp (not the
// original timestamp, which is kept in a header: an old timestamp would make the broker's
// time-based retention delete the record at once).
type KafkaWriter struct {
	p     *kafka.Producer
	topic string
	log   *slog.Logger
	done  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once

	mu    sync.Mutex
	fatal error
	// lastErr is the last client error event (librdkafka's text names the broker, e.g.
	// "sasl_ssl://host:port/bootstrap: SASL authentication error: ..."): a delivery that
	// timed out says why through it.
	lastErr string
}

// NewKafkaWriter creates the producer. It does not contact the broker; the first Write does.
func NewKafkaWriter(cfg KafkaConfig) (*KafkaWriter, error) {
	topic, err := cfg.topic()
	if err != nil {
		return nil, err
	}
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("quarantine: KafkaConfig needs Brokers")
	}
	dt := cfg.DeliveryTimeout
	if dt <= 0 {
		dt = 60 * time.Second
	}
	logCh := make(chan kafka.LogEvent, 1000)
	cm := kafka.ConfigMap{
		"bootstrap.servers":         strings.Join(cfg.Brokers, ","),
		"client.id":                 "cdc-sink-quarantine",
		"message.timeout.ms":        int(dt.Milliseconds()),
		"go.delivery.reports":       false, // reports go to the per-call channel only
		"go.delivery.report.fields": "none",
		"go.logs.channel.enable":    true,
		"go.logs.channel":           logCh,
		"linger.ms":                 5,
		"compression.type":          "lz4",
	}
	for k, v := range cfg.Extra {
		cm[k] = v
	}
	cm["enable.idempotence"] = true
	cm["acks"] = "all"
	p, err := kafka.NewProducer(&cm)
	if err != nil {
		return nil, fmt.Errorf("quarantine: creating producer: %w", err)
	}
	w := &KafkaWriter{p: p, topic: topic, log: cfg.logger(), done: make(chan struct{})}
	w.wg.Add(1)
	go w.drain(logCh)
	return w, nil
}

// Topic returns the quarantine topic written to.
func (w *KafkaWriter) Topic() string { return w.topic }

// drain consumes the producer's Events() (errors) and logs until Close.
func (w *KafkaWriter) drain(logCh chan kafka.LogEvent) {
	defer w.wg.Done()
	for {
		select {
		case ev := <-w.p.Events():
			if e, ok := ev.(kafka.Error); ok {
				if e.IsFatal() {
					w.mu.Lock()
					if w.fatal == nil {
						w.fatal = e
					}
					w.mu.Unlock()
					w.log.Error("quarantine producer fatal error", "err", e)
				} else {
					w.log.Warn("quarantine producer error (retrying)", "err", e)
				}
				w.mu.Lock()
				w.lastErr = e.String()
				w.mu.Unlock()
			}
		case l := <-logCh:
			w.log.Debug(l.Message, "librdkafka", l.Tag)
		case <-w.done:
			return
		}
	}
}

// brokerHint is " (last broker error: ...)" when the producer saw one.
func (w *KafkaWriter) brokerHint() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.lastErr == "" {
		return ""
	}
	return " (last broker error: " + w.lastErr + ")"
}

func (w *KafkaWriter) fatalErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fatal
}

// Write produces every entry and waits for all acknowledgements (or ctx). It returns nil only
// if every entry was acknowledged by all in-sync replicas. Delivery failures (broker down,
// unknown topic, timeout) and ctx ending are transient; after a fatal producer error (e.g. the
// idempotent producer was fenced) every Write fails permanently and the writer must be
// replaced.
func (w *KafkaWriter) Write(ctx context.Context, entries []Entry) error {
	if len(entries) == 0 {
		return nil
	}
	if err := w.fatalErr(); err != nil {
		return fmt.Errorf("quarantine: producer unusable: %w", err)
	}
	// Buffered for every report, so late reports after an early return never block librdkafka.
	dr := make(chan kafka.Event, len(entries))
	now := time.Now()
	for i := range entries {
		e := entries[i] // a copy: the caller's slice is not modified
		if e.Record == nil {
			return fmt.Errorf("quarantine: entry %d has no record", i)
		}
		if e.Time.IsZero() {
			e.Time = now
		}
		msg := &kafka.Message{
			TopicPartition: kafka.TopicPartition{Topic: &w.topic, Partition: kafka.PartitionAny},
			Key:            e.Record.Key,
			Value:          e.Record.Value,
			Timestamp:      e.Time,
		}
		for _, h := range e.appendHeaders() {
			msg.Headers = append(msg.Headers, kafka.Header{Key: h.Key, Value: h.Value})
		}
		for {
			err := w.p.Produce(msg, dr)
			if err == nil {
				break
			}
			var ke kafka.Error
			if errors.As(err, &ke) && ke.Code() == kafka.ErrQueueFull {
				select {
				case <-ctx.Done():
					return Transient(fmt.Errorf("quarantine: waiting for producer queue: %w", ctx.Err()))
				case <-time.After(20 * time.Millisecond):
					continue
				}
			}
			if errors.As(err, &ke) && ke.IsFatal() {
				return fmt.Errorf("quarantine: produce: %w", err)
			}
			return Transient(fmt.Errorf("quarantine: produce: %w", err))
		}
	}
	var first error
	for pending := len(entries); pending > 0; pending-- {
		select {
		case ev := <-dr:
			m, ok := ev.(*kafka.Message)
			if !ok {
				continue
			}
			if m.TopicPartition.Error != nil && first == nil {
				first = m.TopicPartition.Error
			}
		case <-ctx.Done():
			return Transient(fmt.Errorf("quarantine: waiting for acknowledgements from %s%s: %w", w.topic, w.brokerHint(), ctx.Err()))
		}
	}
	if first != nil {
		var ke kafka.Error
		if errors.As(first, &ke) && ke.IsFatal() {
			return fmt.Errorf("quarantine: delivery to %s failed%s: %w", w.topic, w.brokerHint(), first)
		}
		return Transient(fmt.Errorf("quarantine: delivery to %s failed%s: %w", w.topic, w.brokerHint(), first))
	}
	w.mu.Lock()
	w.lastErr = "" // delivered: an earlier error says nothing about a later failure
	w.mu.Unlock()
	return nil
}

// Close flushes outstanding messages (up to 10 s) and closes the producer.
func (w *KafkaWriter) Close() error {
	w.once.Do(func() {
		w.p.Flush(10000)
		close(w.done)
		w.wg.Wait()
		w.p.Close()
	})
	return nil
}

// ScanKafka reads the quarantine topic from the beginning up to the end offsets captured when
// it starts, calling fn for each entry in partition order with Entry.At set to
// "topic/partition@offset". It uses no consumer group and commits nothing. A record that is
// not a quarantine record stops the scan with an error naming its coordinates.
func ScanKafka(ctx context.Context, cfg KafkaConfig, fn func(Entry) error) error {
	topic, err := cfg.topic()
	if err != nil {
		return err
	}
	suffix := make([]byte, 8)
	_, _ = rand.Read(suffix)
	cm := kafka.ConfigMap{
		"bootstrap.servers":        strings.Join(cfg.Brokers, ","),
		"group.id":                 "cdc-sink-quarantine-reader-" + hex.EncodeToString(suffix), // never joined
		"client.id":                "cdc-sink-quarantine-reader",
		"enable.auto.commit":       false,
		"enable.auto.offset.store": false,
		"enable.partition.eof":     true,
		"auto.offset.reset":        "earliest",
		"go.logs.channel.enable":   true,
	}
	for k, v := range cfg.Extra {
		cm[k] = v
	}
	c, err := kafka.NewConsumer(&cm)
	if err != nil {
		return fmt.Errorf("quarantine: creating consumer: %w", err)
	}
	logDone := make(chan struct{})
	go func() {
		for {
			select {
			case l, ok := <-c.Logs():
				if !ok {
					return
				}
				cfg.logger().Debug(l.Message, "librdkafka", l.Tag)
			case <-logDone:
				return
			}
		}
	}()
	defer func() { close(logDone); c.Close() }()

	tmo := 10000
	if dl, ok := ctx.Deadline(); ok {
		tmo = max(1, int(time.Until(dl).Milliseconds()))
	}
	md, err := c.GetMetadata(&topic, false, tmo)
	if err != nil {
		return Transient(fmt.Errorf("quarantine: metadata %s: %w", topic, err))
	}
	tm, ok := md.Topics[topic]
	if !ok || tm.Error.Code() != kafka.ErrNoError {
		return Transient(fmt.Errorf("quarantine: metadata %s: %v", topic, tm.Error))
	}
	end := map[int32]int64{}
	var assign []kafka.TopicPartition
	for _, p := range tm.Partitions {
		low, high, err := c.QueryWatermarkOffsets(topic, p.ID, tmo)
		if err != nil {
			return Transient(fmt.Errorf("quarantine: watermarks %s/%d: %w", topic, p.ID, err))
		}
		if high > low {
			end[p.ID] = high
			assign = append(assign, kafka.TopicPartition{Topic: &topic, Partition: p.ID, Offset: kafka.OffsetBeginning})
		}
	}
	if len(assign) == 0 {
		return nil
	}
	if err := c.Assign(assign); err != nil {
		return fmt.Errorf("quarantine: assign: %w", err)
	}
	for len(end) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		switch ev := c.Poll(100).(type) {
		case *kafka.Message:
			p := ev.TopicPartition.Partition
			if ev.TopicPartition.Error != nil {
				return Transient(fmt.Errorf("quarantine: reading %s/%d: %w", topic, p, ev.TopicPartition.Error))
			}
			hi, ok := end[p]
			off := int64(ev.TopicPartition.Offset)
			if !ok || off >= hi {
				continue
			}
			at := fmt.Sprintf("%s/%d@%d", topic, p, off)
			hs := make([]source.Header, len(ev.Headers))
			for i, h := range ev.Headers {
				hs[i] = source.Header{Key: h.Key, Value: h.Value}
			}
			e, err := entryFromHeaders(ev.Key, ev.Value, hs)
			if err != nil {
				return fmt.Errorf("quarantine: %s: %w", at, err)
			}
			e.At = at
			if err := fn(e); err != nil {
				return err
			}
			if off+1 >= hi {
				delete(end, p)
			}
		case kafka.PartitionEOF:
			if hi, ok := end[ev.Partition]; ok && int64(ev.Offset) >= hi {
				delete(end, ev.Partition)
			}
		case kafka.Error:
			if ev.IsFatal() {
				return fmt.Errorf("quarantine: reading %s: %w", topic, ev)
			}
			cfg.logger().Warn("quarantine reader error (retrying)", "err", ev)
		}
	}
	return nil
}

// ReadKafka returns the entries of the quarantine topic (up to its end at start) that match f.
func ReadKafka(ctx context.Context, cfg KafkaConfig, f Filter) ([]Entry, error) {
	var out []Entry
	err := ScanKafka(ctx, cfg, func(e Entry) error {
		if f.Match(&e) {
			out = append(out, e)
		}
		return nil
	})
	return out, err
}
