package history_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/cdcsink/cdc-sink/audit"
	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/history"
	"github.com/cdcsink/cdc-sink/internal/deltacheck"
	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/tablerows"
)

// tableRows is a current table's rows (tombstones included) as text,
// without what differs between two writers of the same changes.
func tableRows(t *testing.T, dir string) []string {
	t.Helper()
	tb, err := merge.Open(context.Background(), dir, merge.Options{Sink: "s"})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := tb.Rows(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(rows))
	for i, r := range rows {
		delete(r, "_cdc_ingest_ts")
		delete(r, "_cdc_batch_id")
		keys := make([]string, 0, len(r))
		for k := range r {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		s := ""
		for _, k := range keys {
			s += fmt.Sprintf("%s=%v;", k, r[k])
		}
		out[i] = s
	}
	sort.Strings(out)
	return out
}

func rebuild(t *testing.T, hist, dst string, until int64) history.RebuildStats {
	t.Helper()
	ctx := context.Background()
	h, err := history.OpenRead(ctx, hist, nil, delta.StorageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tb, err := merge.Open(ctx, dst, merge.Options{Sink: "s"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := history.Rebuild(ctx, h, tb, until)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestRebuildFromHistoryEqualsLive: a table rebuilt from the history alone
// equals the live table — every row, tombstones, versions and ops included
// (audit.Diff, as cdc-sink diff, and row by row), and reads back through
// delta-rs; a rebuild up to a source time holds, per key, the newest
// applied change at or before it.
func TestRebuildFromHistoryEqualsLive(t *testing.T) {
	ctx := context.Background()
	s := stream()
	cur, hist := t.TempDir(), t.TempDir()
	run(t, batches(s, 41), cur, hist, -1, "")
	dst := t.TempDir()
	st := rebuild(t, hist, dst, 0)
	if st.Entries != len(s.Records) {
		t.Fatalf("rebuild read %d entries, stream has %d records", st.Entries, len(s.Records))
	}
	assertRebuilt(t, cur, dst)

	// point in time: the median source time
	es := entries(t, hist)
	tss := make([]int64, 0, len(es))
	for _, e := range es {
		tss = append(tss, e.Change.SourceTsMicros)
	}
	sort.Slice(tss, func(i, j int) bool { return tss[i] < tss[j] })
	until := tss[len(tss)/2]
	// a tombstone (no source time) counts at its partition predecessor's time
	ts := map[normalize.Coord]int64{}
	last := map[int32]int64{}
	byOffset := append([]history.Entry(nil), es...)
	sort.Slice(byOffset, func(i, j int) bool {
		a, b := byOffset[i].Change.Coord, byOffset[j].Change.Coord
		return a.Partition < b.Partition || a.Partition == b.Partition && a.Offset < b.Offset
	})
	for _, e := range byOffset {
		c := e.Change
		if c.SourceTsMicros != 0 {
			last[c.Coord.Partition] = c.SourceTsMicros
		}
		ts[c.Coord] = last[c.Coord.Partition]
	}
	want := map[string]*normalize.Change{}
	for _, e := range es {
		c := e.Change
		if e.Outcome != "applied" || ts[c.Coord] > until {
			continue
		}
		k := fmt.Sprint(c.Key...)
		if w := want[k]; w == nil || w.Version.Less(c.Version) {
			want[k] = c
		}
	}
	pit := t.TempDir()
	rebuild(t, hist, pit, until)
	ptb, err := merge.Open(ctx, pit, merge.Options{Sink: "s"})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := ptb.Rows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(want) {
		t.Fatalf("point-in-time rebuild has %d keys, want %d", len(rows), len(want))
	}
	for _, r := range rows {
		w := want[fmt.Sprint(r["id"])]
		if w == nil {
			t.Fatalf("key %v should not exist at %d", r["id"], until)
		}
		if r["_cdc_source_version"] != w.Version.String() || r["_cdc_deleted"] != (w.Op == normalize.OpDelete) {
			t.Fatalf("key %v: version %v deleted %v, want %s %v", r["id"], r["_cdc_source_version"], r["_cdc_deleted"], w.Version, w.Op == normalize.OpDelete)
		}
	}
}

// tracked opens a current table at cur and its history at hist (both with
// sink "s" unless the options say otherwise).
func tracked(t *testing.T, cur, hist string, mo merge.Options, ho history.Options) *history.Tracked {
	t.Helper()
	ctx := context.Background()
	if mo.Sink == "" {
		mo.Sink = "s"
	}
	if ho.Sink == "" {
		ho.Sink = "s"
	}
	tb, err := merge.Open(ctx, cur, mo)
	if err != nil {
		t.Fatal(err)
	}
	hw, err := history.Open(ctx, hist, ho)
	if err != nil {
		t.Fatal(err)
	}
	return &history.Tracked{Table: tb, History: hw}
}

// assertRebuilt: the rebuilt table dst equals the live table cur row for
// row and by audit.Diff, and delta-rs reads all its rows.
func assertRebuilt(t *testing.T, cur, dst string) {
	t.Helper()
	ctx := context.Background()
	a, b := tableRows(t, cur), tableRows(t, dst)
	if len(a) != len(b) {
		t.Fatalf("live has %d rows, rebuilt %d:\nlive:\n%s\nrebuilt:\n%s", len(a), len(b), strings.Join(a, "\n"), strings.Join(b, "\n"))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("row %d:\n live    %s\n rebuilt %s", i, a[i], b[i])
		}
	}
	ta, err := tablerows.Open(ctx, cur)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := tablerows.Open(ctx, dst)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := audit.Diff(ctx, ta, tb, audit.DiffOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Equal() {
		t.Fatalf("diff live rebuilt: %+v", rep)
	}
	if n := len(deltacheck.ReadDeltaRS(t, dst, "").Rows); n != len(b) {
		t.Fatalf("delta-rs reads %d rows of the rebuilt table, want %d", n, len(b))
	}
}
