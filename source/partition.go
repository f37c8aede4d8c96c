// A reader of one topic partition outside any consumer group: the
// transaction-metadata topic that every instance of a
// `consistency: transaction` sink reads whole.

package source

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// PartitionReaderConfig configures a PartitionReader.
type PartitionReaderConfig struct {
	Brokers   []string
	Topic     string
	Partition int32
	ClientID  string            // default "cdc-sink"
	Extra     map[string]string // librdkafka properties (TLS, SASL): as ConsumerConfig.Extra
	Logger    *slog.Logger
}

// PartitionReader reads one partition from an offset it is told (SeekTo),
// with no group membership and no committed offsets: the caller keeps its
// position (the table does). Poll and SeekTo must be called from one
// goroutine.
type PartitionReader struct {
	c   *kafka.Consumer
	tp  kafka.TopicPartition
	log *slog.Logger
}

// NewPartitionReader creates the client; it reads nothing until SeekTo
// (Partitions tells whether the topic exists).
func NewPartitionReader(cfg PartitionReaderConfig) (*PartitionReader, error) {
	if len(cfg.Brokers) == 0 || cfg.Topic == "" {
		return nil, errors.New("source: PartitionReaderConfig needs Brokers and Topic")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	cm := kafka.ConfigMap{
		"bootstrap.servers":    strings.Join(cfg.Brokers, ","),
		"group.id":             "cdc-sink-unused", // librdkafka wants one; nothing joins or commits
		"client.id":            orDefault(cfg.ClientID, "cdc-sink"),
		"enable.auto.commit":   false,
		"enable.partition.eof": false,
		"auto.offset.reset":    "earliest",
	}
	for k, v := range cfg.Extra {
		cm[k] = v
	}
	kc, err := kafka.NewConsumer(&cm)
	if err != nil {
		return nil, fmt.Errorf("source: creating reader of %s: %w", cfg.Topic, err)
	}
	topic := cfg.Topic
	return &PartitionReader{c: kc, tp: kafka.TopicPartition{Topic: &topic, Partition: cfg.Partition}, log: log}, nil
}

// Partitions is the number of partitions of the reader's topic; 0 when the
// topic does not exist.
func (r *PartitionReader) Partitions(ctx context.Context) (int, error) {
	md, err := r.c.GetMetadata(r.tp.Topic, false, timeoutMs(ctx, 10*time.Second))
	if err != nil {
		return 0, transient(fmt.Errorf("metadata of %s: %w", *r.tp.Topic, err))
	}
	t, ok := md.Topics[*r.tp.Topic]
	if !ok || t.Error.Code() == kafka.ErrUnknownTopicOrPart || t.Error.Code() == kafka.ErrUnknownTopic {
		return 0, nil
	}
	if t.Error.Code() != kafka.ErrNoError {
		return 0, transient(fmt.Errorf("metadata of %s: %w", *r.tp.Topic, t.Error))
	}
	return len(t.Partitions), nil
}

// ErrTopicMissing: the reader's topic does not exist (yet).
var ErrTopicMissing = errors.New("topic does not exist")

// SeekTo makes the next Poll start at offset (-1: the partition's
// earliest). It fails with ErrTopicMissing while the topic does not exist
// and refuses a topic with more partitions than the one read.
func (r *PartitionReader) SeekTo(ctx context.Context, offset int64) error {
	n, err := r.Partitions(ctx)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%s: %w", *r.tp.Topic, ErrTopicMissing)
	}
	if n > 1 {
		return fmt.Errorf("%s has %d partitions: ENDs must be on one partition to keep their commit order", *r.tp.Topic, n)
	}
	tp := r.tp
	tp.Offset = kafka.OffsetBeginning
	if offset >= 0 {
		tp.Offset = kafka.Offset(offset)
	}
	if err := r.c.Assign([]kafka.TopicPartition{tp}); err != nil {
		return fmt.Errorf("source: assign %s/%d at %d: %w", *tp.Topic, tp.Partition, offset, err)
	}
	return nil
}

// Poll returns up to max records, waiting at most maxWait for the first.
func (r *PartitionReader) Poll(ctx context.Context, max int, maxWait time.Duration) ([]*Record, error) {
	var out []*Record
	deadline := time.Now().Add(maxWait)
	for len(out) < max {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		wait := time.Until(deadline)
		if len(out) > 0 || wait < 0 {
			wait = 0
		}
		switch e := r.c.Poll(int(min(wait, 100*time.Millisecond).Milliseconds())).(type) {
		case *kafka.Message:
			if e.TopicPartition.Error != nil {
				r.log.Warn("partition error", "partition", e.TopicPartition.String(), "err", e.TopicPartition.Error)
				continue
			}
			out = append(out, toRecord(e))
			continue
		case kafka.Error:
			if e.IsFatal() {
				return out, fmt.Errorf("source: fatal error reading %s: %w", *r.tp.Topic, e)
			}
			r.log.Warn("kafka client error reading the transaction topic (retrying)", "err", e)
		case nil:
			if wait == 0 {
				return out, nil
			}
		}
	}
	return out, nil
}

// Close releases the client.
func (r *PartitionReader) Close() error { return r.c.Close() }
