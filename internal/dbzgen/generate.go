package dbzgen

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"

	"github.com/cdcsink/cdc-sink/source"
)

func withDefaults(cfg Config) Config {
	if cfg.Prefix == "" {
		cfg.Prefix = "loja"
	}
	if cfg.DB == "" {
		cfg.DB = cfg.Prefix
	}
	if cfg.Schema == "" {
		cfg.Schema = "public"
	}
	if cfg.Table == "" {
		cfg.Table = "orders"
	}
	if cfg.Partitions <= 0 {
		cfg.Partitions = 1
	}
	if cfg.SnapshotRows < 0 {
		cfg.SnapshotRows = 0
	}
	if cfg.Events < 0 {
		cfg.Events = 0
	}
	if cfg.Keys <= 0 {
		cfg.Keys = max(100, cfg.SnapshotRows)
	}
	if cfg.Keys <= cfg.SnapshotRows {
		cfg.Keys = cfg.SnapshotRows + 1
	}
	if cfg.Mix.Insert <= 0 && cfg.Mix.Update <= 0 && cfg.Mix.Delete <= 0 {
		cfg.Mix = Mix{Insert: 0.3, Update: 0.6, Delete: 0.1}
	}
	cfg.Mix.Insert = max(cfg.Mix.Insert, 0)
	cfg.Mix.Update = max(cfg.Mix.Update, 0)
	cfg.Mix.Delete = max(cfg.Mix.Delete, 0)
	if cfg.TxSize < 0 {
		cfg.TxSize = 0
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 1
		if cfg.TxSize > 1 {
			cfg.Concurrency = 3
		}
	}
	if cfg.Duplicates < 0 || math.IsNaN(cfg.Duplicates) {
		cfg.Duplicates = 0
	}
	if cfg.Malformed < 0 {
		cfg.Malformed = 0
	}
	if cfg.Format > UnwrapPlain {
		cfg.Format = JSONSchema
	}
	return cfg
}

// Generate builds the stream described by cfg. Defaults: Prefix "loja", DB =
// Prefix, Schema "public", Table "orders", Partitions 1, Keys max(100,
// SnapshotRows), Mix {0.3, 0.6, 0.1}, Concurrency 3 if TxSize > 1 else 1.
func Generate(cfg Config) *Stream {
	cfg = withDefaults(cfg)
	if cfg.LazySnapshot && cfg.Malformed > 0 {
		panic("dbzgen: LazySnapshot with Malformed records is not supported")
	}
	g := &gen{
		cfg:      cfg,
		rng:      newRand(cfg.Seed, 1),
		wal:      initialWAL,
		clockUs:  baseClockUs,
		nextXid:  731,
		keys:     make([]keyState, cfg.Keys+1),
		live:     newIDSet(cfg.Keys),
		free:     newIDSet(cfg.Keys),
		resnapAt: -1,
	}
	g.procNs = g.clockUs * 1000
	for id := cfg.Keys; id >= 1; id-- {
		g.free.add(int64(id))
	}
	g.run()
	return g.finish()
}

func (g *gen) runID() string { return g.uuid() }

// finish encodes the events, adds redeliveries and malformed records,
// assigns partitions and offsets, and computes the reference model.
func (g *gen) finish() *Stream {
	cfg := g.cfg
	s := &Stream{Config: cfg, Topic: cfg.Prefix + "." + cfg.Schema + "." + cfg.Table}
	enc := newEncoder(cfg, g.runID())

	// LazySnapshot: the snapshot prefix stays as events (nil records here;
	// nothing below dereferences them: replays and malformed records are
	// placed after it), encoded later by EachSnapshot.
	lazy := 0
	if cfg.LazySnapshot {
		lazy = g.counts.Snapshot
		s.snapEvents, s.enc = g.events[:lazy:lazy], enc
	}
	recs := make([]*source.Record, len(g.events))
	for i := lazy; i < len(g.events); i++ {
		recs[i] = enc.record(s.Topic, &g.events[i])
	}
	g.counts.Records = len(recs)
	if cfg.TxSize > 0 {
		coll := cfg.Schema + "." + cfg.Table
		s.ends = make(map[*source.Record]txEnd, len(g.txMeta))
		for i, m := range g.txMeta {
			if g.txEnds[i] <= lazy || g.txEnds[i] == g.txStarts[i] {
				continue
			}
			last := recs[g.txEnds[i]-1]
			id := strconv.FormatInt(m.xid, 10) + ":" + strconv.FormatUint(m.commit, 10)
			s.ends[last] = txEnd{
				key: []byte(`{"id":"` + id + `"}`),
				value: fmt.Appendf(nil, `{"status":"END","id":"%s","event_count":%d,"data_collections":[{"data_collection":"%s","event_count":%d}],"ts_ms":%d}`,
					id, m.events, coll, m.events, m.tsUs/1000),
				ts: last.Timestamp,
			}
		}
	}

	// Redeliveries: whole transactions replayed after a simulated Connect
	// restart, inserted right after the last replayed transaction.
	type replay struct{ at, from, to int }
	var replays []replay
	streamed := 0
	for i := range g.txStarts {
		streamed += g.txEnds[i] - g.txStarts[i]
	}
	if want := int(math.Round(cfg.Duplicates * float64(streamed))); want > 0 && len(g.txStarts) > 0 {
		rng := newRand(cfg.Seed, 2)
		for got := 0; got < want; {
			j := rng.IntN(len(g.txStarts)) // replay ends with tx j
			r := 1 + rng.IntN(3)
			k := max(0, j-r+1)
			if g.resnapAt >= 0 && g.txStarts[k] < g.resnapAt && g.txEnds[j] > g.resnapAt {
				k = j
			}
			from, to := g.txStarts[k], g.txEnds[j]
			replays = append(replays, replay{at: to, from: from, to: to})
			got += to - from
		}
		sort.SliceStable(replays, func(a, b int) bool { return replays[a].at < replays[b].at })
	}
	out := make([]*source.Record, 0, len(recs)+len(recs)/8+cfg.Malformed)
	ri := 0
	for i := 0; i <= len(recs); i++ {
		for ri < len(replays) && replays[ri].at == i {
			rp := replays[ri]
			ts := recs[i-1].Timestamp
			for _, r := range recs[rp.from:rp.to] {
				d := *r
				d.Timestamp = ts
				out = append(out, &d)
				g.counts.Duplicates++
			}
			ri++
		}
		if i < len(recs) {
			out = append(out, recs[i])
		}
	}

	// Malformed records at deterministic positions.
	bad := map[*source.Record]bool{}
	if cfg.Malformed > 0 {
		rng := newRand(cfg.Seed, 3)
		pos := make([]int, cfg.Malformed)
		for i := range pos {
			pos[i] = rng.IntN(len(out) + 1)
		}
		slices.Sort(pos)
		mal := make([]*source.Record, cfg.Malformed)
		for i := range mal {
			mal[i] = g.malformed(enc, s.Topic, i)
			bad[mal[i]] = true
		}
		merged := make([]*source.Record, 0, len(out)+len(mal))
		mi := 0
		for i := 0; i <= len(out); i++ {
			for mi < len(pos) && pos[mi] == i {
				ts := mal[mi].Timestamp
				if i > 0 {
					ts = out[i-1].Timestamp
				} else if len(out) > 0 {
					ts = out[0].Timestamp
				}
				mal[mi].Timestamp = ts
				merged = append(merged, mal[mi])
				mi++
			}
			if i < len(out) {
				merged = append(merged, out[i])
			}
		}
		out = merged
		g.counts.Malformed = cfg.Malformed
	}

	// Partitions and offsets.
	next := make([]int64, cfg.Partitions)
	for i, r := range out {
		var p int32
		if i < lazy {
			p = partitionOf(enc.key(g.events[i].id), cfg.Partitions)
			next[p]++
			continue
		}
		p = partitionOf(r.Key, cfg.Partitions)
		r.Partition = p
		r.Offset = next[p]
		next[p]++
		if bad[r] {
			s.malformed = append(s.malformed, Coord{Topic: r.Topic, Partition: p, Offset: r.Offset})
		}
	}
	s.Records = out[lazy:]
	g.counts.Records = len(out)

	// Reference model.
	if lazy > 0 {
		s.final = g.keys
	} else {
		s.expected = make(map[string]Row)
	}
	for id := int64(1); id < int64(len(g.keys)); id++ {
		row, ok := finalRow(id, &g.keys[id])
		if !ok {
			continue
		}
		if row.Deleted {
			g.counts.DeletedKeys++
		} else {
			g.counts.LiveKeys++
		}
		if s.expected != nil {
			s.expected[KeyString(id)] = row
		}
	}
	s.counts = g.counts
	return s
}

// finalRow is the reference-model row of key id, false if the stream never
// touched it.
func finalRow(id int64, k *keyState) (Row, bool) {
	if !k.seen {
		return Row{}, false
	}
	row := Row{ID: id, Deleted: !k.exists, Snapshot: k.snap, Commit: k.commit, LSN: k.lsn}
	if k.exists {
		row.Values = k.row.values()
	}
	return row, true
}

// partitionOf is the Kafka default partitioner's choice for key.
func partitionOf(key []byte, partitions int) int32 {
	if partitions <= 1 {
		return 0
	}
	return int32((murmur2(key) & 0x7fffffff) % uint32(partitions))
}

// malformed builds corrupt record i. Kinds rotate: bad JSON, unknown op,
// garbage decimal (schema'd formats; a JSON array otherwise), missing after
// (envelope formats; a bare JSON number for the unwrap formats).
func (g *gen) malformed(enc *encoder, topic string, i int) *source.Record {
	id := int64(1 + g.rng.IntN(g.cfg.Keys))
	noteSeq := g.noteSeq
	row := g.newRow(id)
	ev := event{op: 'c', id: id, row: row, hasCommit: g.hasLastEnd, commit: g.lastEnd, lsn: g.wal + 8, xid: g.nextXid, tsUs: g.clockUs, procNs: g.procNs + 1000}
	g.noteSeq = noteSeq
	r := &source.Record{Topic: topic, Key: enc.key(id), Headers: enc.headers, TimestampType: "create"}
	switch i % 4 {
	case 0:
		v := enc.value(&ev, "", false, false)
		r.Value = v[: len(v)/2 : len(v)/2]
	case 1:
		r.Value = enc.value(&ev, "x", false, false)
	case 2:
		if g.cfg.Format.schemas() {
			r.Value = enc.value(&ev, "", false, true)
		} else {
			r.Value = []byte(`[1,2,3]`)
		}
	case 3:
		if g.cfg.Format.unwrap() {
			r.Value = []byte(`42`)
		} else {
			r.Value = enc.value(&ev, "", true, false)
		}
	}
	return r
}

// murmur2 is Kafka's murmur2 hash (org.apache.kafka.common.utils.Utils).
func murmur2(data []byte) uint32 {
	const (
		seed = 0x9747b28c
		m    = 0x5bd1e995
		r    = 24
	)
	n := len(data)
	h := uint32(seed) ^ uint32(n)
	for i := 0; i+4 <= n; i += 4 {
		k := uint32(data[i]) | uint32(data[i+1])<<8 | uint32(data[i+2])<<16 | uint32(data[i+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	t := n &^ 3
	switch n % 4 {
	case 3:
		h ^= uint32(data[t+2]) << 16
		fallthrough
	case 2:
		h ^= uint32(data[t+1]) << 8
		fallthrough
	case 1:
		h ^= uint32(data[t])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}
