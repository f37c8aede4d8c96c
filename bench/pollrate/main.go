// Command pollrate measures how fast source.Consumer hands records to the
// sink (no decoding, no merge): records/s and CPU per record, for tuning the
// consumer's fetch settings against a real broker.
//
//	go run ./bench/pollrate -brokers 127.0.0.1:9092 -topic T -n 1000000 [-extra k=v,k=v]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/cdcsink/cdc-sink/source"
)

// fromStart starts every partition at its first offset.
type fromStart struct{}

func (fromStart) OnAssign(_ context.Context, parts []source.TopicPartition) (map[source.TopicPartition]int64, error) {
	m := map[source.TopicPartition]int64{}
	for _, p := range parts {
		m[p] = 0
	}
	return m, nil
}

func (fromStart) OnRevoke(context.Context, []source.TopicPartition) error { return nil }

func cpu() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "bootstrap servers")
	topic := flag.String("topic", "", "topic to read from the beginning")
	n := flag.Int("n", 1_000_000, "records to read")
	batch := flag.Int("batch", 10000, "records per Poll")
	extra := flag.String("extra", "", "librdkafka properties k=v,k=v")
	flag.Parse()
	ex := map[string]string{}
	for _, kv := range strings.Split(*extra, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			ex[k] = v
		}
	}
	c, err := source.NewConsumer(source.ConsumerConfig{Brokers: []string{*brokers}, GroupID: fmt.Sprintf("pollrate-%d", time.Now().UnixNano()),
		Topics: []string{*topic}, Extra: ex}, fromStart{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer c.Close()
	ctx := context.Background()
	got, bytes := 0, 0
	var t0 time.Time
	var c0 time.Duration
	for got < *n {
		recs, err := c.Poll(ctx, *batch, 250*time.Millisecond)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if len(recs) > 0 && t0.IsZero() {
			t0, c0 = time.Now(), cpu()
		}
		got += len(recs)
		for _, r := range recs {
			bytes += len(r.Value)
		}
	}
	el := time.Since(t0)
	out, _ := json.Marshal(map[string]any{"records": got, "seconds": el.Seconds(), "records_per_s": float64(got) / el.Seconds(),
		"cpu_us_per_record": float64((cpu() - c0).Microseconds()) / float64(got), "mb_per_s": float64(bytes) / el.Seconds() / 1e6, "extra": ex})
	fmt.Println(string(out))
}
