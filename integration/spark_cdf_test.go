//go:build e2e

package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cdcsink/cdc-sink/internal/deltacheck"
	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/versioning"
)

// TestSparkReadsChangeDataFeed: a Change Data Feed table with every type
// cdc-sink writes, 14 batches of updates (deletion vectors), deletes
// (tombstones), re-inserts, a schema evolution and checkpoints; Spark
// readChangeFeed returns the same change rows as delta-rs load_cdf, and per
// commit as many inserts and update pairs as the merge applied, deletes only
// of live rows.
func TestSparkReadsChangeDataFeed(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "alltypes-cdf")
	tb, err := merge.Open(ctx, dir, merge.Options{Sink: "spark-cdf", ChangeDataFeed: true})
	if err != nil {
		t.Fatal(err)
	}
	wider := &normalize.Schema{Columns: append(append([]normalize.ColumnDef(nil), allTypes.Columns...),
		normalize.ColumnDef{Name: "added_later", Type: typ(normalize.String), Nullable: true})}
	type counts struct{ inserted, updated, deleted int }
	applied := map[int64]counts{}
	lsn := uint64(100)
	off := int64(0)
	for batch := 0; batch < 14; batch++ {
		var cs []*normalize.Change
		for id := int64(1); id <= 40; id++ {
			if batch > 0 && (id+int64(batch))%3 != 0 {
				continue
			}
			lsn += 10
			c := &normalize.Change{Op: normalize.OpUpsert, SourceOp: 'u', KeyNames: []string{"id"}, Key: []any{id},
				Schema: allTypes, Row: allTypesRow(id, batch), SourceTsMicros: time.Now().UnixMicro(),
				Version: versioning.Version{Phase: versioning.PhaseStream, Commit: lsn, LSN: lsn}}
			if batch >= 8 {
				c.Schema = wider
				c.Row = append(c.Row, fmt.Sprintf("new %d", batch))
			}
			if batch%5 == 4 && id%4 == 0 {
				c.Op, c.SourceOp, c.Row = normalize.OpDelete, 'd', nil
			}
			cs = append(cs, c)
		}
		off += int64(len(cs))
		res, err := tb.Apply(ctx, &merge.Batch{Changes: cs, Offsets: map[merge.TP]int64{{Topic: "t", Partition: 0}: off}},
			func(_ context.Context, _ int64, rs []merge.Reject) error {
				if len(rs) > 0 {
					t.Fatalf("rejects: %+v", rs)
				}
				return nil
			})
		if err != nil {
			t.Fatal(err)
		}
		applied[res.Version] = counts{res.Inserted, res.Updated, res.Deleted}
	}
	if tb.Version() < 10 {
		t.Fatalf("only %d versions: no checkpoint exercised", tb.Version())
	}
	rs := deltacheck.ReadCDF(t, "deltars", 0, dir)[dir]
	start := time.Now()
	sp := deltacheck.ReadCDF(t, "spark", 0, dir)[dir]
	t.Logf("spark readChangeFeed in %s: %d change rows; delta-rs load_cdf %d", time.Since(start).Round(time.Millisecond), len(sp.Rows), len(rs.Rows))
	if !slices.Equal(sp.Rows, rs.Rows) {
		for i := range min(len(sp.Rows), len(rs.Rows)) {
			if sp.Rows[i] != rs.Rows[i] {
				t.Fatalf("change row %d differs:\ndelta-rs %s\nspark    %s", i, rs.Rows[i], sp.Rows[i])
			}
		}
		t.Fatalf("spark %d change rows, delta-rs %d", len(sp.Rows), len(rs.Rows))
	}
	got := map[int64]map[string]int{}
	for _, r := range deltacheck.Decode(t, sp.Rows) {
		var v int64
		fmt.Sscan(fmt.Sprint(r["_commit_version"]), &v)
		if got[v] == nil {
			got[v] = map[string]int{}
		}
		got[v][fmt.Sprint(r["_change_type"])]++
	}
	deletes := 0
	for v, c := range applied {
		g := got[v]
		if g["insert"] != c.inserted || g["update_preimage"] != c.updated || g["update_postimage"] != c.updated || g["delete"] > c.deleted {
			t.Errorf("v%d: feed %v, merge applied %+v", v, g, c)
		}
		deletes += g["delete"]
	}
	if deletes == 0 {
		t.Error("no delete in the feed")
	}
}
