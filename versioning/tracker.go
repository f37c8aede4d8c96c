package versioning

import (
	"bytes"
	"slices"
	"sync"
)

// PhaseOf maps source.snapshot to a Phase: the initial/blocking snapshot
// markers (true, first, first_in_data_collection, last_in_data_collection,
// last) are PhaseSnapshot; everything else ("false", "", "incremental", any
// unknown value) is PhaseStream.
func PhaseOf(snapshot string) Phase {
	switch snapshot {
	case "true", "first", "first_in_data_collection", "last_in_data_collection", "last":
		return PhaseSnapshot
	}
	return PhaseStream
}

// PartitionState is the Tracker's memory of one (topic, partition). It is
// JSON-serializable; merge persists it in the same Delta commit as the
// partition's offset and restores it on start (Tracker.Restore), so versions
// assigned after a restart equal the ones an uninterrupted run would assign.
type PartitionState struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Epoch is bumped when a snapshot-phase row follows a stream-phase record.
	Epoch uint32 `json:"epoch"`
	// LastPhase, LastCommit, LastLSN: of the last record that carried an LSN
	// (LastPhase: of the last record of any kind).
	LastPhase  Phase  `json:"last_phase"`
	LastCommit uint64 `json:"last_commit"`
	LastLSN    uint64 `json:"last_lsn"`
	// LastDelete is set while the last record of the partition was a delete, so
	// the bare tombstone that follows it gets the same Version.
	LastDelete *DeleteState `json:"last_delete,omitempty"`
}

// DeleteState identifies the delete a following tombstone belongs to.
type DeleteState struct {
	Key     []byte  `json:"key"` // opaque key identity (normalize.KeyID)
	Version Version `json:"version"`
}

type tp struct {
	topic     string
	partition int32
}

// Tracker assigns Versions to changes. Call it for every change record of a
// partition in offset order (records of different partitions may interleave).
// Heartbeats, transaction metadata and message events need not be passed.
// A Tracker is safe for concurrent use.
type Tracker struct {
	mu    sync.Mutex
	parts map[tp]*PartitionState
}

// NewTracker returns an empty Tracker (every partition at epoch 0).
func NewTracker() *Tracker { return &Tracker{parts: make(map[tp]*PartitionState)} }

func (t *Tracker) part(topic string, partition int32) *PartitionState {
	k := tp{topic, partition}
	p := t.parts[k]
	if p == nil {
		p = &PartitionState{Topic: topic, Partition: partition}
		t.parts[k] = p
	}
	return p
}

// Assign returns the Version of the change at (topic, partition, offset) whose
// source position is pos, and advances the partition state.
//
//	Phase  = PhaseOf(pos.Snapshot)
//	Epoch  = partition epoch, +1 first if a snapshot-phase record follows a
//	         stream-phase one
//	Commit = pos.Commit (null → 0), LSN = pos.LSN, Seq = 0      if pos.HasLSN
//	Commit, LSN = the partition's last ones, Seq = offset+1    otherwise
func (t *Tracker) Assign(topic string, partition int32, offset int64, pos Position) Version {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.part(topic, partition)
	p.LastDelete = nil
	return p.assign(offset, pos)
}

// AssignDelete is Assign for a delete change; key is the key's identity
// (any stable byte string, e.g. normalize.KeyID). A bare tombstone with the
// same key that comes next in the partition gets the same Version.
func (t *Tracker) AssignDelete(topic string, partition int32, offset int64, pos Position, key []byte) Version {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.part(topic, partition)
	v := p.assign(offset, pos)
	p.LastDelete = &DeleteState{Key: slices.Clone(key), Version: v}
	return v
}

// AssignTombstone returns the Version of a bare Kafka tombstone (null value)
// with the given key identity. Right after a delete of the same key it is that
// delete's Version (so it compares equal: a duplicate); otherwise it ranks just
// after the last record of the partition (Commit/LSN of that record, Seq =
// offset+1), as in the unwrap "tombstone" delete mode.
func (t *Tracker) AssignTombstone(topic string, partition int32, offset int64, key []byte) Version {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.part(topic, partition)
	if d := p.LastDelete; d != nil && bytes.Equal(d.Key, key) {
		return d.Version
	}
	p.LastDelete = nil
	return p.assign(offset, Position{})
}

func (p *PartitionState) assign(offset int64, pos Position) Version {
	ph := PhaseOf(pos.Snapshot)
	if ph == PhaseSnapshot && p.LastPhase == PhaseStream {
		p.Epoch++
	}
	p.LastPhase = ph
	v := Version{Epoch: p.Epoch, Phase: ph}
	if pos.HasLSN {
		if pos.HasCommit {
			v.Commit = pos.Commit
		}
		v.LSN = pos.LSN
		p.LastCommit, p.LastLSN = v.Commit, v.LSN
		return v
	}
	v.Commit, v.LSN = p.LastCommit, p.LastLSN
	if offset >= 0 {
		v.Seq = uint64(offset) + 1
	}
	return v
}

// State returns a copy of every partition's state, sorted by topic and
// partition.
func (t *Tracker) State() []PartitionState {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]PartitionState, 0, len(t.parts))
	for _, p := range t.parts {
		s := *p
		if p.LastDelete != nil {
			d := *p.LastDelete
			d.Key = slices.Clone(d.Key)
			s.LastDelete = &d
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b PartitionState) int {
		if a.Topic != b.Topic {
			if a.Topic < b.Topic {
				return -1
			}
			return 1
		}
		return int(a.Partition) - int(b.Partition)
	})
	return out
}

// Restore replaces the state of the given partitions (others are kept).
func (t *Tracker) Restore(states []PartitionState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range states {
		c := s
		if s.LastDelete != nil {
			d := *s.LastDelete
			d.Key = slices.Clone(d.Key)
			c.LastDelete = &d
		}
		t.parts[tp{s.Topic, s.Partition}] = &c
	}
}

// Forget drops the state of one partition (e.g. on revocation).
func (t *Tracker) Forget(topic string, partition int32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.parts, tp{topic, partition})
}
