package dbzgen

import (
	"bufio"
	"math/rand/v2"
	"os"
	"slices"

	"github.com/cdcsink/cdc-sink/source"
)

// Delivery is how DeliveryOrder hands the records to a consumer.
type Delivery uint8

const (
	// InOrder keeps Kafka's guarantee: every partition in offset order
	// (partitions interleaved at random), arbitrary batch cuts, each record
	// exactly once.
	InOrder Delivery = iota
	// AtLeastOnce is InOrder plus rewinds: now and then a partition is read
	// again from an earlier offset (as after a crash before the offset
	// commit), so a suffix of it is redelivered after later records.
	AtLeastOnce
	// Shuffled ignores partition order: the records are permuted (so the
	// changes of one key arrive in any order, across batches) and earlier
	// batches are redelivered. Only versions, not arrival, can decide: assign
	// versions in partition order first (versioning.Tracker over s.Records),
	// then fold the shuffled batches. Bare tombstones carry no position of
	// their own and must not be applied by arrival. With ToastEvery > 0 an
	// unavailable note may arrive before the change that set it, so Expected
	// is reachable only by a sink that versions TOAST columns separately.
	Shuffled
)

func (d Delivery) String() string {
	switch d {
	case InOrder:
		return "in-order"
	case AtLeastOnce:
		return "at-least-once"
	case Shuffled:
		return "shuffled"
	}
	return "delivery(?)"
}

// DeliveryOrder returns the stream's records cut into batches as mode
// delivers them, drawing every choice from rng. Batches share the Record
// pointers of s.Records (records are immutable).
func (s *Stream) DeliveryOrder(rng *rand.Rand, mode Delivery) [][]*source.Record {
	n := len(s.Records)
	if n == 0 {
		return nil
	}
	maxBatch := min(max(2, n/8), 500)
	batchSize := func() int { return 1 + rng.IntN(maxBatch) }
	if mode == Shuffled {
		perm := append([]*source.Record(nil), s.Records...)
		rng.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
		var out [][]*source.Record
		redeliveries := 0
		for i := 0; i < len(perm); {
			k := min(batchSize(), len(perm)-i)
			out = append(out, perm[i:i+k:i+k])
			i += k
			if redeliveries < len(perm)/16+2 && rng.IntN(5) == 0 {
				out = append(out, slices.Clone(out[rng.IntN(len(out))]))
				redeliveries++
			}
		}
		return out
	}
	parts := make([][]*source.Record, s.Config.Partitions)
	for _, r := range s.Records {
		parts[r.Partition] = append(parts[r.Partition], r)
	}
	cursor := make([]int, len(parts))
	remaining := n
	rewinds := 0
	var out [][]*source.Record
	for remaining > 0 {
		want := batchSize()
		batch := make([]*source.Record, 0, want)
		for len(batch) < want && remaining > 0 {
			p := rng.IntN(len(parts))
			for cursor[p] >= len(parts[p]) {
				p = (p + 1) % len(parts)
			}
			run := min(1+rng.IntN(8), len(parts[p])-cursor[p], want-len(batch))
			batch = append(batch, parts[p][cursor[p]:cursor[p]+run]...)
			cursor[p] += run
			remaining -= run
		}
		out = append(out, batch)
		if mode == AtLeastOnce && rewinds < n/16+2 && rng.IntN(6) == 0 {
			p := rng.IntN(len(parts))
			if cursor[p] > 0 {
				back := 1 + rng.IntN(min(cursor[p], 50))
				cursor[p] -= back
				remaining += back
				rewinds++
			}
		}
	}
	return out
}

// WriteKcatFile writes recs to path as kcat -J JSON lines (the file source's
// format).
func WriteKcatFile(path string, recs []*source.Record) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	for _, r := range recs {
		if err := source.WriteJSONLine(w, r); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
