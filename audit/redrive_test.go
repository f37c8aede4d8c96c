package audit

import (
	"context"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cdcsink/cdc-sink/internal/dbzgen"
	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/cdcsink/cdc-sink/source"
	"github.com/cdcsink/cdc-sink/tablerows"
)

// memWriter is a quarantine.Writer in memory.
type memWriter struct{ entries []quarantine.Entry }

func (m *memWriter) Write(_ context.Context, es []quarantine.Entry) error {
	m.entries = append(m.entries, es...)
	return nil
}
func (m *memWriter) Close() error { return nil }

func isControl(topic string) bool { return strings.HasSuffix(topic, ".transaction") }

func entriesOf(recs []*source.Record) []quarantine.Entry {
	es := make([]quarantine.Entry, len(recs))
	for i, r := range recs {
		es[i] = quarantine.Entry{Record: r, Reason: quarantine.MalformedJSON, Sink: "live"}
	}
	return es
}

// A whole stream quarantined, shuffled and partly duplicated, redriven into
// a new table: the table equals the source model (the redrive restores
// partition/offset order and drops duplicate entries), and the malformed
// records fail again into the requarantine writer.
func TestRedrive(t *testing.T) {
	s := dbzgen.Generate(dbzgen.Config{Seed: 7, Partitions: 2, Keys: 60, Events: 300, SnapshotRows: 40, Tombstones: true,
		TxSize: 3, Duplicates: 0.05, PKChangeEvery: 20, Malformed: 3})
	es := entriesOf(s.Records)
	es = append(es, es[:10]...) // at-least-once quarantine writes
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(es), func(i, j int) { es[i], es[j] = es[j], es[i] })
	dir := filepath.Join(t.TempDir(), "orders")
	req := &memWriter{}
	rep, err := Redrive(context.Background(), es, RedriveConfig{Table: dir, Sink: "redrive", Requarantine: req, Control: isControl, BatchRecords: 97})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Records != len(s.Records) || rep.Entries != len(es) || !rep.Commit {
		t.Fatalf("report %+v: want %d records of %d entries, committed", rep, len(s.Records), len(es))
	}
	if len(rep.Failed) != 3 || len(req.entries) != 3 {
		t.Fatalf("failed again: %d in the report, %d written; want the 3 malformed records", len(rep.Failed), len(req.entries))
	}
	for _, e := range rep.Failed {
		if !s.IsMalformed(dbzgen.Coord{Topic: e.Record.Topic, Partition: e.Record.Partition, Offset: e.Record.Offset}) {
			t.Errorf("%s/%d@%d failed again but is not malformed: %s", e.Record.Topic, e.Record.Partition, e.Record.Offset, e.Message)
		}
	}
	tb, err := tablerows.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tb.Count(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := s.Counts()
	if int(c.Live) != want.LiveKeys || int(c.Deleted) != want.DeletedKeys || liveDeltaRS(t, dir) != want.LiveKeys {
		t.Fatalf("rows: %d live (delta-rs %d), %d tombstones; want %d live, %d tombstones", c.Live, liveDeltaRS(t, dir), c.Deleted, want.LiveKeys, want.DeletedKeys)
	}
	// Again into the same table: it still equals a table redriven once
	// (the version guard keeps every key's final state).
	once := filepath.Join(t.TempDir(), "once")
	if _, err := Redrive(context.Background(), es, RedriveConfig{Table: once, Sink: "redrive", Requarantine: &memWriter{}, Control: isControl}); err != nil {
		t.Fatal(err)
	}
	again, err := Redrive(context.Background(), es, RedriveConfig{Table: dir, Requarantine: &memWriter{}, Control: isControl})
	if err != nil {
		t.Fatal(err)
	}
	if again.Sink != "redrive-redrive" || again.Owner != "redrive" {
		t.Fatalf("second redrive %+v: want the sink name derived from the owner", again)
	}
	d, err := Diff(context.Background(), open(t, once), open(t, dir), DiffOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !d.Equal() {
		t.Fatalf("redriven twice differs from redriven once: %+v", d)
	}
}

func TestRedriveRefuses(t *testing.T) {
	two := entriesOf([]*source.Record{
		{Topic: "a.public.x", Value: []byte("{}")},
		{Topic: "a.public.y", Value: []byte("{}")},
	})
	dir := filepath.Join(t.TempDir(), "t")
	for _, tc := range []struct {
		name string
		es   []quarantine.Entry
		cfg  RedriveConfig
		want string
	}{
		{"two tables", two, RedriveConfig{Table: dir, Sink: "r", Requarantine: &memWriter{}}, "come from 2 source topics"},
		{"new table without sink name", two[:1], RedriveConfig{Table: dir, Requarantine: &memWriter{}}, "--sink-name is required"},
		{"no requarantine", two[:1], RedriveConfig{Table: dir, Sink: "r"}, "requarantine writer is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Redrive(context.Background(), tc.es, tc.cfg)
			var re *RequestError
			if !errors.As(err, &re) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want a RequestError containing %q", err, tc.want)
			}
		})
	}
}
