// Package consistency keeps the manifest of a consistency group: a small
// log, beside the tables, of cuts across them. Each entry names a source
// commit point W (a Postgres commit LSN) and, for each table of the group,
// the Delta version that holds exactly the source transactions committed up
// to W. Reading every table at its version gives a state of the source
// database that existed (docs/consistency.md).
//
// Entries are objects 00000000000000000001.json, 00000000000000000002.json…
// written put-if-absent, so a second writer can never overwrite one; the
// newest is the one with the highest number.
package consistency

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cdcsink/cdc-sink/delta"
)

// Entry is one cut.
type Entry struct {
	Seq   int64  `json:"seq"` // its number in the log
	Group string `json:"group"`
	// Watermark W: every table at its version holds exactly the source
	// transactions with a commit LSN up to W.
	Watermark int64 `json:"watermark"`
	// Tables: table location → Delta version.
	Tables map[string]int64 `json:"tables"`
	Time   time.Time        `json:"time"`
}

// Log is a group's manifest.
type Log struct {
	store delta.Storage
	group string
	next  int64 // the number the next Append tries first (0: not read yet)
}

// Open opens (lazily creating) the manifest at location.
func Open(ctx context.Context, location string, so delta.StorageOptions, group string) (*Log, error) {
	if group == "" {
		return nil, errors.New("consistency: a group name is required")
	}
	st, err := delta.OpenStorage(ctx, location, so)
	if err != nil {
		return nil, fmt.Errorf("consistency group %s: manifest %s: %w", group, location, err)
	}
	return OpenStorage(st, group), nil
}

// OpenStorage is Open on a store rooted at the manifest.
func OpenStorage(st delta.Storage, group string) *Log { return &Log{store: st, group: group} }

func key(seq int64) string { return fmt.Sprintf("%020d.json", seq) }

// Latest returns the newest entry; ok is false when the log is empty.
func (l *Log) Latest(ctx context.Context) (e Entry, ok bool, err error) {
	seq, err := l.newest(ctx)
	if err != nil || seq == 0 {
		return Entry{}, false, err
	}
	e, err = l.Get(ctx, seq)
	return e, err == nil, err
}

// Get reads entry seq.
func (l *Log) Get(ctx context.Context, seq int64) (Entry, error) {
	b, err := l.store.Get(ctx, key(seq))
	if err != nil {
		return Entry{}, fmt.Errorf("manifest entry %d: %w", seq, err)
	}
	var e Entry
	if err := json.Unmarshal(b, &e); err != nil {
		return Entry{}, fmt.Errorf("manifest entry %d: %w", seq, err)
	}
	if e.Seq != seq || e.Group != l.group {
		return Entry{}, fmt.Errorf("manifest entry %d: holds seq %d of group %q, want group %q", seq, e.Seq, e.Group, l.group)
	}
	return e, nil
}

// Entries lists the entry numbers, ascending.
func (l *Log) Entries(ctx context.Context) ([]int64, error) {
	fis, err := l.store.List(ctx, "", "")
	if err != nil {
		return nil, fmt.Errorf("list manifest of group %s: %w", l.group, err)
	}
	var out []int64
	for _, fi := range fis {
		n, ok := strings.CutSuffix(fi.Name, ".json")
		if !ok || len(n) != 20 {
			continue
		}
		if seq, err := strconv.ParseInt(n, 10, 64); err == nil && seq > 0 {
			out = append(out, seq)
		}
	}
	slices.Sort(out)
	return out, nil
}

func (l *Log) newest(ctx context.Context) (int64, error) {
	seqs, err := l.Entries(ctx)
	if err != nil || len(seqs) == 0 {
		return 0, err
	}
	return seqs[len(seqs)-1], nil
}

// Append writes e as the next entry and returns its number. A number taken
// meanwhile (another writer) moves it to the next one; an entry found equal
// to ours is ours (a write whose answer was lost, retried).
func (l *Log) Append(ctx context.Context, e Entry) (int64, error) {
	if l.next == 0 {
		n, err := l.newest(ctx)
		if err != nil {
			return 0, err
		}
		l.next = n + 1
	}
	e.Group = l.group
	e.Tables = maps.Clone(e.Tables)
	for range 100 {
		e.Seq = l.next
		b, err := json.Marshal(e)
		if err != nil {
			return 0, err
		}
		err = l.store.PutIfAbsent(ctx, key(e.Seq), b)
		if err == nil {
			l.next++
			return e.Seq, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return 0, fmt.Errorf("write manifest entry %d of group %s: %w", e.Seq, l.group, err)
		}
		if got, gerr := l.store.Get(ctx, key(e.Seq)); gerr == nil && bytes.Equal(got, b) {
			l.next++
			return e.Seq, nil
		}
		l.next++
	}
	return 0, fmt.Errorf("write manifest entry of group %s: 100 numbers taken in a row", l.group)
}
