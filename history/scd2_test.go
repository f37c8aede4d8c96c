package history_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/cdcsink/cdc-sink/history"
	"github.com/cdcsink/cdc-sink/internal/deltacheck"
	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/versioning"
)

func newSCD2Sink(t *testing.T, cur, hist, scd string, fault func(merge.FaultPoint) error) *sink {
	t.Helper()
	s := newSink(t, cur, hist, history.Privacy{}, fault)
	w, err := history.OpenSCD2(context.Background(), scd, history.SCD2Options{Sink: "s", Fault: fault})
	if err != nil {
		t.Fatal(err)
	}
	s.tr.SCD2 = w
	return s
}

// scd2Model is the SCD2 table the documented semantics give for a
// history, computed in Go: per key, the applied changes in version order;
// an upsert opens a version, the next change (or the first truncate of a
// batch at or after its own newer than it, before that next change) closes
// it. Rows as "key|source_version|valid_from|valid_to|is_current|status".
func scd2Model(es []history.Entry) []string {
	byKey := map[string][]history.Entry{}
	var truncs []history.Entry
	for _, e := range es {
		if e.Outcome != "applied" {
			continue
		}
		if e.Change.Op == normalize.OpTruncate {
			truncs = append(truncs, e)
			continue
		}
		k := fmt.Sprint(e.Change.Key...)
		byKey[k] = append(byKey[k], e)
	}
	sort.Slice(truncs, func(i, j int) bool { return truncs[i].Change.Version.Less(truncs[j].Change.Version) })
	ts := func(c *normalize.Change) string {
		if c.SourceTsMicros == 0 {
			return "null"
		}
		return fmt.Sprint(c.SourceTsMicros)
	}
	var out []string
	for k, cs := range byKey {
		sort.SliceStable(cs, func(i, j int) bool { return cs[i].Change.Version.Less(cs[j].Change.Version) })
		for i, e := range cs {
			c := e.Change
			if c.Op != normalize.OpUpsert {
				continue
			}
			to, current := "null", true
			var next *normalize.Change
			if i+1 < len(cs) {
				next = cs[i+1].Change
				to, current = ts(next), false
			}
			for _, tr := range truncs {
				if c.Version.Less(tr.Change.Version) && tr.BatchID >= e.BatchID && (next == nil || tr.Change.Version.Less(next.Version)) {
					to, current = ts(tr.Change), false
					break
				}
			}
			var status any
			for _, col := range []string{"status", "email"} {
				if j := c.Schema.Index(col); j >= 0 {
					status = c.Row[j]
					break
				}
			}
			out = append(out, fmt.Sprintf("%s|%s|%s|%s|%v|%v", k, c.Version, ts(c), to, current, status))
		}
	}
	sort.Strings(out)
	return out
}

// scd2Rows is the materialized SCD2 table in scd2Model's form.
func scd2Rows(t *testing.T, scd string) []string {
	t.Helper()
	tb, err := merge.Open(context.Background(), scd, merge.Options{Sink: "s"})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := tb.Rows(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ks := tb.KeyColumns()
	out := make([]string, 0, len(rows))
	for _, r := range rows {
		if r["_cdc_deleted"] == true {
			t.Fatalf("SCD2 table has a tombstone: %v", r)
		}
		key := make([]any, 0, len(ks)-1)
		for _, k := range ks[:len(ks)-1] {
			key = append(key, r[k])
		}
		ts := func(v any) string {
			if v == nil {
				return "null"
			}
			return fmt.Sprint(v)
		}
		label, ok := r["status"]
		if !ok {
			label = r["email"]
		}
		out = append(out, fmt.Sprintf("%s|%s|%s|%s|%v|%v", fmt.Sprint(key...), r["source_version"], ts(r["valid_from"]), ts(r["valid_to"]), r["is_current"], label))
	}
	sort.Strings(out)
	return out
}

// scd2Query runs the documented DuckDB SCD2 query over the history and
// returns its rows, and the SCD2 table's rows as delta-rs reads them
// projected on the query's columns, both as canonical JSON.
func scd2Query(t *testing.T, hist, scd string) (query, deltars []string) {
	t.Helper()
	qs := docQueries(t)
	lines := duckdbLines(t, qs[1], hist)
	var head struct{ Columns []string }
	if err := json.Unmarshal([]byte(lines[0]), &head); err != nil {
		t.Fatal(err)
	}
	canon := func(l string, project bool) string {
		d := json.NewDecoder(strings.NewReader(l))
		d.UseNumber()
		var m map[string]any
		if err := d.Decode(&m); err != nil {
			t.Fatal(err)
		}
		if project {
			for k := range m {
				if !slices.Contains(head.Columns, k) {
					delete(m, k)
				}
			}
		}
		var b bytes.Buffer
		e := json.NewEncoder(&b)
		if err := e.Encode(m); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	for _, l := range lines[1:] {
		query = append(query, canon(l, false))
	}
	for _, l := range deltacheck.ReadDeltaRS(t, scd, "").Rows {
		deltars = append(deltars, canon(l, true))
	}
	sort.Strings(query)
	sort.Strings(deltars)
	return query, deltars
}

func sameRows(t *testing.T, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") == strings.Join(want, "\n") {
		return
	}
	for i := range max(len(got), len(want)) {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			t.Fatalf("%s: %d rows, want %d; first difference at %d:\n got %s\nwant %s", what, len(got), len(want), i, g, w)
		}
	}
}

// assertSCD2: the materialized table equals the Go model of the history
// and, through delta-rs, the documented DuckDB query run on the history.
func assertSCD2(t *testing.T, hist, scd string) []string {
	t.Helper()
	got := scd2Rows(t, scd)
	sameRows(t, "SCD2 table vs Go model", got, scd2Model(entries(t, hist)))
	q, rs := scd2Query(t, hist, scd)
	sameRows(t, "SCD2 table (delta-rs) vs documented query (DuckDB)", rs, q)
	return got
}

// TestSCD2Materialized: a generated stream with duplicates, late events,
// primary-key changes, deletes and re-inserts, TOAST and tombstones, through
// a real pipeline with history.scd2: the SCD2 table equals the Go model and
// the documented query; every key live in the current table has exactly one
// current row, with its version.
func TestSCD2Materialized(t *testing.T) {
	s := stream()
	cur, hist, scd := t.TempDir(), t.TempDir(), t.TempDir()
	runWith(t, batches(s, 37), func(fault func(merge.FaultPoint) error) *sink { return newSCD2Sink(t, cur, hist, scd, fault) }, -1, "")
	rows := assertSCD2(t, hist, scd)
	es := entries(t, hist)
	outcomes := map[string]int{}
	pk := 0
	for _, e := range es {
		outcomes[e.Outcome]++
		if e.Change.KeyMoved && e.Outcome == "applied" {
			pk++
		}
	}
	if outcomes["stale"]+outcomes["duplicate"] == 0 || pk == 0 {
		t.Fatalf("stream has outcomes %v and %d applied primary-key changes: want skipped changes and key changes", outcomes, pk)
	}
	live := map[string]string{}
	tb, err := merge.Open(context.Background(), cur, merge.Options{Sink: "s"})
	if err != nil {
		t.Fatal(err)
	}
	crs, err := tb.Rows(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range crs {
		if r["_cdc_deleted"] != true {
			live[fmt.Sprint(r["id"])] = fmt.Sprint(r["_cdc_source_version"])
		}
	}
	current := map[string]string{}
	for _, r := range rows {
		f := strings.Split(r, "|")
		if f[4] == "true" {
			if _, dup := current[f[0]]; dup {
				t.Fatalf("key %s has two current rows", f[0])
			}
			current[f[0]] = f[1]
		}
	}
	if fmt.Sprint(current) != fmt.Sprint(live) {
		t.Fatalf("current SCD2 rows %v\nlive keys of the current table %v", current, live)
	}
	t.Logf("%d SCD2 rows (%d current) from %d history rows, outcomes %v", len(rows), len(current), len(es), outcomes)
}

// TestSCD2CrashBetweenCommits: a crash at every step — while the history
// is written, after it committed, while the SCD2 table is written (its
// data, before its commit), after the SCD2 commit but before the current
// table's — then a restart: the SCD2 table equals an uncrashed run's, row
// for row (none missing, none twice).
func TestSCD2CrashBetweenCommits(t *testing.T) {
	s := stream()
	bs := batches(s, 53)
	mk := func(cur, hist, scd string) func(func(merge.FaultPoint) error) *sink {
		return func(fault func(merge.FaultPoint) error) *sink { return newSCD2Sink(t, cur, hist, scd, fault) }
	}
	refCur, refHist, refSCD := t.TempDir(), t.TempDir(), t.TempDir()
	runWith(t, bs, mk(refCur, refHist, refSCD), -1, "")
	want := scd2Rows(t, refSCD)
	// merge's points fire first in the SCD2 table (it commits before the current table)
	points := []merge.FaultPoint{history.FaultHistoryAfterCommit, merge.FaultDataWritten, merge.FaultBeforeCommit,
		merge.FaultAfterCommit, history.FaultSCD2AfterCommit}
	for _, point := range points {
		for _, b := range []int{0, len(bs) / 2, len(bs) - 1} {
			t.Run(fmt.Sprintf("%s@%d", point, b), func(t *testing.T) {
				cur, hist, scd := t.TempDir(), t.TempDir(), t.TempDir()
				runWith(t, bs, mk(cur, hist, scd), b, point)
				sameRows(t, "SCD2 after a crash vs uncrashed", scd2Rows(t, scd), want)
				if point == history.FaultSCD2AfterCommit && b == len(bs)/2 {
					assertSCD2(t, hist, scd)
				}
			})
		}
	}
}

// TestSCD2Truncate: truncates close every version open when the current
// table applied them, at the truncate's time (the first truncate newer than
// the version, in a batch); a change older than a truncate arriving in a
// later batch for a key the truncate did not wipe stays open; stale and
// duplicate changes are no versions; a delete closes and opens nothing.
// truncateStream writes a hand-made stream with truncates, late, stale and
// duplicate changes, deletes and re-inserts through a current table with
// history and SCD2 (TestSCD2Truncate says what each batch holds).
func truncateStream(t *testing.T) (hist, scd string) {
	t.Helper()
	ctx := context.Background()
	cur, hist, scd := t.TempDir(), t.TempDir(), t.TempDir()
	tr := tracked(t, cur, hist, merge.Options{}, history.Options{})
	w, err := history.OpenSCD2(ctx, scd, history.SCD2Options{Sink: "s"})
	if err != nil {
		t.Fatal(err)
	}
	tr.SCD2 = w
	off := 0
	mk := func(id int64, ver uint64, email string) *normalize.Change {
		c := custChange(off, id, email, 0)
		off++
		c.Version = versioning.Version{Commit: ver, LSN: ver}
		c.SourceTsMicros = 1_767_000_000_000_000 + int64(ver)*1_000_000
		return c
	}
	del := func(id int64, ver uint64) *normalize.Change {
		c := mk(id, ver, "")
		c.Op, c.SourceOp, c.Row, c.Schema = normalize.OpDelete, 'd', nil, nil
		return c
	}
	trunc := func(ver uint64) *normalize.Change {
		c := mk(0, ver, "")
		c.Op, c.SourceOp, c.KeyNames, c.Key, c.Row, c.Schema = normalize.OpTruncate, 't', nil, nil, nil, nil
		return c
	}
	batches := [][]*normalize.Change{
		{mk(1, 1, "a1"), mk(2, 2, "b1"), mk(3, 3, "c1"), mk(1, 4, "a2")},
		{mk(1, 6, "a-stale"), trunc(7), mk(2, 8, "b2")},             // 1, 3 closed by the truncate; a change before it in the batch is stale
		{mk(9, 5, "late-new-key"), mk(3, 10, "c2"), mk(2, 8, "b2")}, // older than the truncate, key not wiped: applied, open; a duplicate
		{del(2, 11), mk(3, 9, "c-stale"), // the delete is older than the batch's newest truncate: stale
			trunc(12), trunc(14), mk(4, 13, "d-stale"), mk(5, 15, "e1")},
		{mk(2, 16, "b3"), mk(5, 17, "e2")}, // a re-insert after the delete and truncate
	}
	for i, cs := range batches {
		next := cs[len(cs)-1].Coord.Offset + 1
		if _, err := tr.Apply(ctx, &merge.Batch{Changes: cs, Offsets: map[merge.TP]int64{{Topic: "shop.public.customers"}: next}},
			func(context.Context, int64, []merge.Reject) error { return nil }); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	return hist, scd
}

func TestSCD2Truncate(t *testing.T) {
	hist, scd := truncateStream(t)
	got := scd2Rows(t, scd)
	vts := func(v uint64) string { return fmt.Sprint(1_767_000_000_000_000 + int64(v)*1_000_000) }
	ver := func(v uint64) string { return versioning.Version{Commit: v, LSN: v}.String() }
	row := func(id int64, v uint64, to uint64, email string) string {
		toS, cur := "null", true
		if to > 0 {
			toS, cur = vts(to), false
		}
		return fmt.Sprintf("%d|%s|%s|%s|%v|%v", id, ver(v), vts(v), toS, cur, email)
	}
	want := []string{
		row(1, 1, 4, "a1"), row(1, 4, 7, "a2"),
		row(2, 2, 7, "b1"), row(2, 8, 12, "b2"), row(2, 16, 0, "b3"),
		row(3, 3, 7, "c1"), row(3, 10, 12, "c2"),
		row(5, 15, 17, "e1"), row(5, 17, 0, "e2"),
		row(9, 5, 12, "late-new-key"),
	}
	sort.Strings(want)
	sameRows(t, "SCD2 table vs expected", got, want)
	assertSCD2(t, hist, scd)
}

// TestSCD2Refusals: an SCD2 table does not start beside a current table
// with live rows (their open versions would be missing), and a source
// column named like an SCD2 column stops the batch naming the record and
// the column; nothing is written to the SCD2 table.
func TestSCD2Refusals(t *testing.T) {
	ctx := context.Background()
	apply := func(tr *history.Tracked, cs ...*normalize.Change) error {
		next := cs[len(cs)-1].Coord.Offset + 1
		_, err := tr.Apply(ctx, &merge.Batch{Changes: cs, Offsets: map[merge.TP]int64{{Topic: "shop.public.customers"}: next}},
			func(context.Context, int64, []merge.Reject) error { return nil })
		return err
	}
	clash := custChange(0, 1, "a", 0)
	clash.Schema = &normalize.Schema{Columns: append(slices.Clone(custSchema.Columns), normalize.ColumnDef{Name: "valid_to", Type: normalize.Type{Kind: normalize.String}, Nullable: true})}
	clash.Row = append(slices.Clone(clash.Row), "x")
	for _, tc := range []struct {
		name  string
		late  bool // the SCD2 table is added after the first batch
		first []*normalize.Change
		want  string
	}{
		{"started late", true, []*normalize.Change{custChange(0, 1, "a", 0)}, "does not exist but the current table"},
		{"started after tombstones only", true, func() []*normalize.Change {
			c := custChange(1, 1, "", 0)
			c.Op, c.SourceOp, c.Row, c.Schema = normalize.OpDelete, 'd', nil, nil
			return []*normalize.Change{custChange(0, 1, "a", 0), c}
		}(), ""},
		{"column clash", false, []*normalize.Change{clash}, "source column valid_to is also an SCD2 column"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cur, hist, scd := t.TempDir(), t.TempDir(), t.TempDir()
			tr := tracked(t, cur, hist, merge.Options{}, history.Options{})
			open := func() {
				w, err := history.OpenSCD2(ctx, scd, history.SCD2Options{Sink: "s"})
				if err != nil {
					t.Fatal(err)
				}
				tr.SCD2 = w
			}
			if !tc.late {
				open()
			}
			err := apply(tr, tc.first...)
			if tc.late {
				if err != nil {
					t.Fatal(err)
				}
				open()
				err = apply(tr, custChange(2, 2, "b", 0))
			}
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got := scd2Rows(t, scd); len(got) != 1 {
					t.Fatalf("SCD2 rows %v, want the one version", got)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
			if v := tr.SCD2.Table().Version(); v >= 0 {
				t.Fatalf("SCD2 table written (version %d) by a refused batch", v)
			}
		})
	}
}
