package merge

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/internal/deltacheck"
	"github.com/cdcsink/cdc-sink/normalize"
)

// cdfRows reads the table's change data feed with delta-rs as
// "version type key status valor notes deleted op" lines, sorted.
func cdfRows(t *testing.T, dir string) []string {
	t.Helper()
	tb := deltacheck.ReadCDF(t, "deltars", 0, dir)[dir]
	var out []string
	for _, r := range deltacheck.Decode(t, tb.Rows) {
		out = append(out, fmt.Sprintf("v%v %v %v %v %v %v %v %v", r["_commit_version"], r["_change_type"], r["pedido_id"],
			r["status"], r["valor"], r["notes"], r["_cdc_deleted"], r["_cdc_op"]))
	}
	slices.Sort(out)
	return out
}

// TestChangeDataFeed: every commit of a stream with inserts, updates,
// deletes, re-inserts, duplicates, late events, a TOAST update, a
// primary-key change, a truncate and no-op batches reads back through
// delta-rs load_cdf as exactly the logical row changes (docs/history.md,
// "Change Data Feed"); the table itself still reads back as its current
// state.
func TestChangeDataFeed(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tb, err := Open(ctx, dir, Options{Sink: "test", ChangeDataFeed: true, CheckpointInterval: 3})
	if err != nil {
		t.Fatal(err)
	}
	toast := func(c *normalize.Change) *normalize.Change { c.Row[3] = normalize.Unavailable; return c }
	withNotes := func(c *normalize.Change, n string) *normalize.Change { c.Row[3] = n; return c }
	d1, c5 := pkMove(1, 5, 30)
	batches := []*Batch{
		// v1: three inserts; a delete of a key never seen (a tombstone, no change)
		batchOf("t", 4, ch(1, 'c', "A", "1.00", v(1)), ch(2, 'c', "B", "2.00", v(2)), withNotes(ch(3, 'c', "C", "3.00", v(3)), "big"), ch(4, 'd', "", "", v(4))),
		// v2: two updates of 1 fold into one update; 2 deleted; a stale
		// update and a duplicate of 3 change nothing
		batchOf("t", 9, ch(1, 'u', "A2", "1.10", v(10)), ch(1, 'u', "A3", "1.20", v(11)), ch(2, 'd', "", "", v(12)),
			ch(3, 'u', "OLD", "0.00", v(2)), withNotes(ch(3, 'c', "C", "3.00", v(3)), "big")),
		// v3: 2 re-inserted; 4's tombstone replaced by a newer tombstone
		// (nothing); a late event of 1 (stale); a TOAST update of 3
		batchOf("t", 13, ch(2, 'c', "B2", "2.20", v(20)), ch(4, 'd', "", "", v(21)), ch(1, 'u', "LATE", "9.00", v(5)),
			toast(ch(3, 'u', "C2", "3.30", v(22)))),
		// v4: primary key 1 → 5 (TOASTed notes come from key 1's row)
		batchOf("t", 15, d1, c5),
		// v5: a truncate deletes every live row older than it; 6 inserted after it
		batchOf("t", 17, &normalize.Change{Op: normalize.OpTruncate, SourceOp: 't', Version: v(40)}, ch(6, 'c', "F", "6.00", v(41))),
		// v6: only stale changes: the commit moves offsets only
		batchOf("t", 18, ch(6, 'u', "STALE", "0.00", v(39))),
		// v7: a tombstone replaced by a tombstone only: an empty change data file
		batchOf("t", 19, ch(4, 'd', "", "", v(50))),
	}
	for i, b := range batches {
		res, err := tb.Apply(ctx, b, noReject(t))
		if err != nil {
			t.Fatalf("batch %d: %v", i+1, err)
		}
		if !res.Committed || res.Version != int64(i+1) {
			t.Fatalf("batch %d: committed %v at v%d", i+1, res.Committed, res.Version)
		}
	}
	want := []string{
		"v1 insert 1 A 1.00 n false c",
		"v1 insert 2 B 2.00 n false c",
		"v1 insert 3 C 3.00 big false c",
		"v2 update_preimage 1 A 1.00 n false c",
		"v2 update_postimage 1 A3 1.20 n false u",
		"v2 delete 2 B 2.00 n false c", // the row's last image
		"v3 insert 2 B2 2.20 n false c",
		"v3 update_preimage 3 C 3.00 big false c",
		"v3 update_postimage 3 C2 3.30 big false u", // TOAST filled from the stored row
		"v4 delete 1 A3 1.20 n false u",
		"v4 insert 5 MOVED 9.99 n false u", // notes of key 1
		"v5 delete 2 B2 2.20 n false c",
		"v5 delete 3 C2 3.30 big false u",
		"v5 delete 5 MOVED 9.99 n false u",
		"v5 insert 6 F 6.00 n false c",
	}
	slices.Sort(want)
	if got := cdfRows(t, dir); !slices.Equal(got, want) {
		t.Fatalf("change data feed:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	live := deltacheck.ReadDeltaRS(t, dir, "NOT _cdc_deleted").Rows
	if len(live) != 1 || !strings.Contains(live[0], `"pedido_id":6`) {
		t.Fatalf("live rows %v", live)
	}

	// Reopened (index rebuilt from the table, through its checkpoint), the
	// sink keeps writing the feed.
	tb2, err := Open(ctx, dir, Options{Sink: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tb2.Apply(ctx, batchOf("t", 20, ch(6, 'u', "G", "6.60", v(60))), noReject(t)); err != nil {
		t.Fatal(err)
	}
	got := cdfRows(t, dir)
	if tail := got[len(got)-2:]; tail[0] != "v8 update_postimage 6 G 6.60 n false u" || tail[1] != "v8 update_preimage 6 F 6.00 n false c" {
		t.Fatalf("after reopen: %v", tail)
	}
}

// TestChangeDataFeedProtocol: a table created with the feed has the
// property and the writer feature; one created without it is refused by a
// sink that asks for it, and is written without change data otherwise.
func TestChangeDataFeedProtocol(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tb, err := Open(ctx, dir, Options{Sink: "test", ChangeDataFeed: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Apply(ctx, batchOf("t", 1, ch(1, 'c', "A", "1.00", v(1))), noReject(t)); err != nil {
		t.Fatal(err)
	}
	snap, err := delta.OpenTable(delta.NewLocalStorage(dir), "").Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, m := snap.Protocol(), snap.Metadata()
	if !snap.ChangeDataFeedEnabled() || m.Configuration[delta.ConfEnableChangeDataFeed] != "true" || !slices.Contains(p.WriterFeatures, delta.FeatureChangeDataFeed) {
		t.Fatalf("protocol %+v, configuration %v", p, m.Configuration)
	}

	plain := t.TempDir()
	tp := openT(t, plain)
	if _, err := tp.Apply(ctx, batchOf("t", 1, ch(1, 'c', "A", "1.00", v(1))), noReject(t)); err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, plain, Options{Sink: "test", ChangeDataFeed: true})
	if !errors.Is(err, ErrChangeDataFeedOff) || !strings.Contains(err.Error(), "table set-property") {
		t.Fatalf("open a table without the feed asking for it: %v", err)
	}
	if _, err := tp.Apply(ctx, batchOf("t", 2, ch(1, 'u', "B", "1.00", v(2))), noReject(t)); err != nil {
		t.Fatal(err)
	}
	keys, err := delta.NewLocalStorage(plain).List(ctx, delta.ChangeDataDir, "")
	if err == nil && len(keys) > 0 {
		t.Fatalf("a table without the feed got change data files: %v", keys)
	}
}

// TestChangeDataFeedEvolution: a batch that adds a column has the column in
// its changes; delta-rs reads the older changes with it null. (delta-rs
// 1.6 refuses change feed reads of column-mapped tables: those are read by
// Spark in cmd/cdc-sink's TestChangeDataFeedSparkAndDeltaRS.)
func TestChangeDataFeedEvolution(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tb, err := Open(ctx, dir, Options{Sink: "test", ChangeDataFeed: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Apply(ctx, batchOf("t", 1, ch(1, 'c', "A", "1.00", v(1))), noReject(t)); err != nil {
		t.Fatal(err)
	}
	wide := &normalize.Schema{Columns: append(slices.Clone(labSchema.Columns),
		normalize.ColumnDef{Name: "extra", Type: normalize.Type{Kind: normalize.String}, Nullable: true})}
	u := ch(1, 'u', "B", "2.00", v(2))
	u.Schema, u.Row = wide, append(u.Row, "x")
	res, err := tb.Apply(ctx, batchOf("t", 2, u), noReject(t))
	if err != nil || res.Version != 2 {
		t.Fatalf("evolving batch: %+v %v", res, err)
	}
	feed := deltacheck.ReadCDF(t, "deltars", 0, dir)[dir]
	var got []string
	for _, r := range deltacheck.Decode(t, feed.Rows) {
		got = append(got, fmt.Sprintf("v%v %v %v %v %v", r["_commit_version"], r["_change_type"], r["pedido_id"], r["status"], r["extra"]))
	}
	slices.Sort(got)
	want := []string{"v1 insert 1 A <nil>", "v2 update_postimage 1 B x", "v2 update_preimage 1 A <nil>"}
	if !slices.Equal(got, want) {
		t.Fatalf("feed %v, want %v (columns %v)", got, want, feed.Columns)
	}
}

// TestChangeDataFeedWideningRewriteOnly: a batch whose only effect is a
// widening by file rewrite (its change is stale) commits the rewritten files
// as dataChange=false: the feed gets no change for it (the CDF table would
// refuse a data-removing commit without change data).
func TestChangeDataFeedWideningRewriteOnly(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tb, err := Open(ctx, dir, Options{Sink: "test", ChangeDataFeed: true})
	if err != nil {
		t.Fatal(err)
	}
	schemaOf := func(k normalize.Kind) *normalize.Schema {
		return &normalize.Schema{Columns: []normalize.ColumnDef{
			{Name: "pedido_id", Type: normalize.Type{Kind: normalize.Long}},
			{Name: "n", Type: normalize.Type{Kind: k}, Nullable: true}}}
	}
	mk := func(op byte, n any, k normalize.Kind, ver uint64) *normalize.Change {
		return &normalize.Change{Op: normalize.OpUpsert, SourceOp: op, KeyNames: []string{"pedido_id"}, Key: []any{int64(1)},
			Schema: schemaOf(k), Row: []any{int64(1), n}, Version: v(ver)}
	}
	if _, err := tb.Apply(ctx, batchOf("t", 1, mk('c', int32(5), normalize.Integer, 10)), noReject(t)); err != nil {
		t.Fatal(err)
	}
	res, err := tb.Apply(ctx, batchOf("t", 2, mk('u', int64(7), normalize.Long, 5)), noReject(t))
	if err != nil || !res.Committed || res.Stale != 1 || res.Version != 2 {
		t.Fatalf("stale widening batch: %+v %v", res, err)
	}
	if ty := tb.ColumnTypes()["n"]; ty.Kind != normalize.Long {
		t.Fatalf("n is %v, want long", ty)
	}
	var got []string
	for _, r := range deltacheck.Decode(t, deltacheck.ReadCDF(t, "deltars", 0, dir)[dir].Rows) {
		got = append(got, fmt.Sprintf("v%v %v %v", r["_commit_version"], r["_change_type"], r["n"]))
	}
	if want := []string{"v1 insert 5"}; !slices.Equal(got, want) {
		t.Fatalf("feed %v, want %v", got, want)
	}
	if rows := deltacheck.ReadDeltaRS(t, dir, "").Rows; len(rows) != 1 || !strings.Contains(rows[0], `"n":5`) {
		t.Fatalf("table %v", rows)
	}
}

// TestChangeDataFeedCrashAtEveryStep: a crash at each commit step (change
// data file written or not, commit landed or not), then a restart that
// re-applies the batches the table lacks, leaves the same feed as an
// uninterrupted run: no change lost, none twice.
func TestChangeDataFeedCrashAtEveryStep(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewSource(7))
	evs := genStream(rng, 12, 90)
	var batches [][]event
	for rest := evs; len(rest) > 0; {
		n := 1 + rng.Intn(min(len(rest), 15))
		batches = append(batches, rest[:n])
		rest = rest[n:]
	}
	opts := Options{Sink: "crash", ChangeDataFeed: true}
	run := func(dir string, crashBatch int, point FaultPoint) {
		off := int64(0)
		for i, b := range batches {
			off += int64(len(b))
			tb, err := Open(ctx, dir, opts) // a fresh process per batch: the table is the only state
			if err != nil {
				t.Fatal(err)
			}
			if next, ok := tb.NextOffset("t", 0); ok && next >= off {
				continue
			}
			changes := func() []*normalize.Change {
				cs := make([]*normalize.Change, len(b))
				for j, e := range b {
					cs[j] = e.change()
				}
				return cs
			}
			if i == crashBatch {
				co := opts
				co.Fault = func(p FaultPoint) error {
					if p == point {
						return errCrash
					}
					return nil
				}
				crashing, err := Open(ctx, dir, co)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := crashing.Apply(ctx, batchOf("t", off, changes()...), noReject(t)); !errors.Is(err, errCrash) {
					t.Fatalf("%s@%d: %v", point, i, err)
				}
				if tb, err = Open(ctx, dir, opts); err != nil {
					t.Fatal(err)
				}
				if next, ok := tb.NextOffset("t", 0); ok && next >= off {
					continue // the commit landed before the crash
				}
			}
			if _, err := tb.Apply(ctx, batchOf("t", off, changes()...), noReject(t)); err != nil {
				t.Fatal(err)
			}
		}
	}
	feed := func(dir string) []string {
		rows := deltacheck.Decode(t, deltacheck.ReadCDF(t, "deltars", 0, dir)[dir].Rows)
		out := make([]string, len(rows))
		for i, r := range rows {
			delete(r, "_cdc_ingest_ts") // wall clock of the writing run
			out[i] = fmt.Sprint(r)
		}
		slices.Sort(out)
		return out
	}
	ref := t.TempDir()
	run(ref, -1, "")
	want := feed(ref)
	if len(want) < 20 {
		t.Fatalf("only %d change rows", len(want))
	}
	for _, point := range []FaultPoint{FaultDataWritten, FaultDVWritten, FaultBeforeCommit, FaultAfterCommit} {
		for _, b := range []int{1, len(batches) / 2} {
			dir := t.TempDir()
			run(dir, b, point)
			if got := feed(dir); !slices.Equal(got, want) {
				t.Fatalf("crash %s at batch %d: feed differs (%d rows, want %d)", point, b, len(got), len(want))
			}
		}
	}
}
