// Tests of Apply: ordering, idempotency, concurrent writers, schema evolution, read back through delta-rs.

package merge

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cdcsink/cdc-sink/internal/deltacheck"
	"github.com/cdcsink/cdc-sink/layout"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/versioning"
)

func noReject(t *testing.T) func(context.Context, int64, []Reject) error {
	return func(_ context.Context, _ int64, rs []Reject) error {
		if len(rs) > 0 {
			t.Fatalf("unexpected rejects: %+v", rs)
		}
		return nil
	}
}

func batchOf(topic string, next int64, cs ...*normalize.Change) *Batch {
	for i, c := range cs {
		c.Coord = normalize.Coord{Topic: topic, Partition: 0, Offset: next - int64(len(cs)) + int64(i)}
		c.Table = normalize.TableID{Server: "dbz", Schema: "public", Table: "pedidos"}
	}
	return &Batch{Changes: cs, Offsets: map[TP]int64{{topic, 0}: next}}
}

func openT(t *testing.T, dir string) *Table {
	t.Helper()
	tb, err := Open(context.Background(), dir, Options{Sink: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// The article's lab, split over three batches and delivered out of order,
// then checked through delta-rs.
func TestTableArticleLabAcrossBatches(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tb := openT(t, dir)
	b1 := batchOf("dbz.public.pedidos", 3,
		ch(101, 'c', "CRIADO", "150.00", v(1)),
		ch(101, 'u', "ENVIADO", "150.00", v(3)),
		ch(102, 'c', "CRIADO", "230.00", v(1)),
	)
	if _, err := tb.Apply(ctx, b1, noReject(t)); err != nil {
		t.Fatal(err)
	}
	// The older PAGO arrives after ENVIADO: stale. 102 is deleted, 103 created.
	b2 := batchOf("dbz.public.pedidos", 6,
		ch(101, 'u', "PAGO", "150.00", v(2)),
		ch(102, 'd', "", "", v(2)),
		ch(103, 'c', "CRIADO", "99.90", v(1)),
	)
	res, err := tb.Apply(ctx, b2, noReject(t))
	if err != nil {
		t.Fatal(err)
	}
	if res.Stale != 1 || res.Deleted != 1 || res.Inserted != 1 {
		t.Fatalf("batch 2 result %+v", res)
	}
	// An old update of the deleted 102 must not resurrect it.
	b3 := batchOf("dbz.public.pedidos", 7, ch(102, 'u', "ZUMBI", "1.00", v(1)))
	res, err = tb.Apply(ctx, b3, noReject(t))
	if err != nil {
		t.Fatal(err)
	}
	if res.Stale != 1 || !res.Committed {
		t.Fatalf("batch 3 result %+v (offsets must still advance)", res)
	}

	check := func(tb *Table) {
		live, deleted := tb.LiveRows()
		if live != 2 || deleted != 1 {
			t.Fatalf("live=%d deleted=%d", live, deleted)
		}
		rs := deltacheck.ReadDeltaRS(t, dir, "")
		rows := deltacheck.ByKey(deltacheck.Decode(t, rs.Rows), "pedido_id")
		if len(rs.Rows) != 3 {
			t.Fatalf("delta-rs sees %d rows: %v", len(rs.Rows), rs.Rows)
		}
		if r := rows["101"]; r["status"] != "ENVIADO" || r["_cdc_deleted"] != false || r["valor"] != "150.00" {
			t.Errorf("101: %v", r)
		}
		if r := rows["103"]; r["status"] != "CRIADO" || r["valor"] != "99.90" {
			t.Errorf("103: %v", r)
		}
		if r := rows["102"]; r["_cdc_deleted"] != true || r["_cdc_op"] != "d" {
			t.Errorf("102: %v", r)
		}
		if rs.Version != tb.Version() {
			t.Errorf("delta-rs version %d, ours %d", rs.Version, tb.Version())
		}
	}
	check(tb)
	// Reopen: the index, offsets and batch id come back from the table.
	tb2 := openT(t, dir)
	check(tb2)
	if o, ok := tb2.NextOffset("dbz.public.pedidos", 0); !ok || o != 7 {
		t.Errorf("next offset = %d,%v", o, ok)
	}
	if tb2.LastBatchID() != 3 {
		t.Errorf("batch id = %d", tb2.LastBatchID())
	}
	// Re-applying an applied batch changes nothing and writes no version.
	before := tb2.Version()
	res, err = tb2.Apply(ctx, batchOf("dbz.public.pedidos", 7, ch(102, 'u', "ZUMBI", "1.00", v(1))), noReject(t))
	if err != nil {
		t.Fatal(err)
	}
	if res.Committed || tb2.Version() != before {
		t.Errorf("re-apply committed v%d (was v%d)", tb2.Version(), before)
	}
}

func TestTableToastFromStoredRow(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tb := openT(t, dir)
	a := ch(1, 'c', "A", "1.00", v(1))
	a.Row[3] = "a very large toasted text"
	if _, err := tb.Apply(ctx, batchOf("t", 1, a), noReject(t)); err != nil {
		t.Fatal(err)
	}
	b := ch(1, 'u', "B", "2.00", v(2))
	b.Row[3] = normalize.Unavailable
	if _, err := tb.Apply(ctx, batchOf("t", 2, b), noReject(t)); err != nil {
		t.Fatal(err)
	}
	rows := deltacheck.Decode(t, deltacheck.ReadDeltaRS(t, dir, "").Rows)
	if len(rows) != 1 || rows[0]["notes"] != "a very large toasted text" || rows[0]["status"] != "B" {
		t.Fatalf("rows = %v", rows)
	}
}

func TestTableSchemaEvolutionAndMismatch(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tb := openT(t, dir)
	if _, err := tb.Apply(ctx, batchOf("t", 1, ch(1, 'c', "A", "1.00", v(1))), noReject(t)); err != nil {
		t.Fatal(err)
	}
	wider := &normalize.Schema{Columns: append(append([]normalize.ColumnDef(nil), labSchema.Columns...),
		normalize.ColumnDef{Name: "extra", Type: normalize.Type{Kind: normalize.Long}, Nullable: true})}
	c := ch(2, 'c', "B", "2.00", v(2))
	c.Schema = wider
	c.Row = append(c.Row, int64(42))
	bad := &normalize.Schema{Columns: []normalize.ColumnDef{
		{Name: "pedido_id", Type: normalize.Type{Kind: normalize.Long}},
		{Name: "status", Type: normalize.Type{Kind: normalize.Long}, Nullable: true}}}
	d := &normalize.Change{Op: normalize.OpUpsert, SourceOp: 'u', KeyNames: []string{"pedido_id"}, Key: []any{int64(3)},
		Schema: bad, Row: []any{int64(3), int64(7)}, Version: v(3)}
	var rejected []Reject
	_, err := tb.Apply(ctx, batchOf("t", 3, c, d), func(_ context.Context, _ int64, rs []Reject) error {
		rejected = rs
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rejected) != 1 || rejected[0].Index != 1 || rejected[0].Reason != "schema_mismatch" {
		t.Fatalf("rejects = %+v", rejected)
	}
	rows := deltacheck.ByKey(deltacheck.Decode(t, deltacheck.ReadDeltaRS(t, dir, "").Rows), "pedido_id")
	if fmt.Sprint(rows["2"]["extra"]) != "42" || rows["1"]["extra"] != nil || len(rows) != 2 {
		t.Fatalf("rows = %v", rows)
	}
}

func TestTableTruncate(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tb := openT(t, dir)
	if _, err := tb.Apply(ctx, batchOf("t", 2, ch(1, 'c', "A", "1.00", v(1)), ch(2, 'c', "B", "1.00", v(2))), noReject(t)); err != nil {
		t.Fatal(err)
	}
	tr := &normalize.Change{Op: normalize.OpTruncate, SourceOp: 't', Version: v(5)}
	if _, err := tb.Apply(ctx, batchOf("t", 4, tr, ch(3, 'c', "C", "1.00", v(6))), noReject(t)); err != nil {
		t.Fatal(err)
	}
	rows := deltacheck.ByKey(deltacheck.Decode(t, deltacheck.ReadDeltaRS(t, dir, "").Rows), "pedido_id")
	if rows["1"]["_cdc_deleted"] != true || rows["2"]["_cdc_deleted"] != true || rows["3"]["_cdc_deleted"] != false {
		t.Fatalf("rows = %v", rows)
	}
	if rows["1"]["_cdc_op"] != "t" || rows["1"]["status"] != "A" {
		t.Errorf("truncated row keeps its last image: %v", rows["1"])
	}
	_ = versioning.Version{}
}

// Two Table instances (two sink processes in one group) alternate commits
// on one table: each must see the other's rows and never resurrect or lose
// a row.
func TestTableTwoWritersInterleaved(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a, b := openT(t, dir), openT(t, dir)
	apply := func(tb *Table, part int32, next int64, cs ...*normalize.Change) {
		bt := batchOf("t", next, cs...)
		bt.Offsets = map[TP]int64{{"t", part}: next}
		if _, err := tb.Apply(ctx, bt, noReject(t)); err != nil {
			t.Fatal(err)
		}
	}
	apply(a, 0, 1, ch(1, 'c', "A1", "1.00", v(10)))
	apply(b, 1, 1, ch(2, 'c', "B1", "1.00", v(11)))
	apply(a, 0, 2, ch(2, 'u', "A-old", "1.00", v(5))) // older than b's insert: stale
	apply(b, 1, 2, ch(1, 'u', "B2", "1.00", v(12)))   // newer update of a's key
	apply(a, 0, 3, ch(1, 'd', "", "", v(13)))
	rows := deltacheck.ByKey(deltacheck.Decode(t, deltacheck.ReadDeltaRS(t, dir, "").Rows), "pedido_id")
	if len(rows) != 2 || rows["1"]["_cdc_deleted"] != true || rows["2"]["status"] != "B1" {
		t.Fatalf("rows = %v", rows)
	}
	c := openT(t, dir)
	if o, _ := c.NextOffset("t", 0); o != 3 {
		t.Errorf("partition 0 offset %d", o)
	}
	if o, _ := c.NextOffset("t", 1); o != 2 {
		t.Errorf("partition 1 offset %d", o)
	}
}

// Regression (found by the Spark check of the e2e suite): NOT NULL columns
// are invariants to Delta; a writer-v7 table must list the invariants
// feature or Spark refuses to open it (DELTA_FEATURES_PROTOCOL_METADATA_MISMATCH).
func TestCreatedProtocolListsInvariants(t *testing.T) {
	dir := t.TempDir()
	tb := openT(t, dir)
	if _, err := tb.Apply(context.Background(), batchOf("t", 1, ch(1, 'c', "A", "1.00", v(1))), noReject(t)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "_delta_log", "00000000000000000000.json"))
	if err != nil {
		t.Fatal(err)
	}
	var proto struct {
		Protocol struct{ WriterFeatures []string } `json:"protocol"`
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, `{"protocol"`) {
			if err := json.Unmarshal([]byte(line), &proto); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !slices.Contains(proto.Protocol.WriterFeatures, "invariants") {
		t.Fatalf("writerFeatures %v lack invariants", proto.Protocol.WriterFeatures)
	}
}

// Regression: a commit persists the versioning state of its own partitions
// only; another instance's partitions keep their (newer) state.
func TestTrackerStateOfOtherPartitionsKept(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a, b := openT(t, dir), openT(t, dir)
	stA := []versioning.PartitionState{{Topic: "t", Partition: 0, Epoch: 1, LastLSN: 50}}
	btA := batchOf("t", 1, ch(1, 'c', "A", "1.00", v(1)))
	btA.Tracker = stA
	if _, err := a.Apply(ctx, btA, noReject(t)); err != nil {
		t.Fatal(err)
	}
	// b's view of partition 0 is stale (epoch 0); it commits partition 1.
	stB := []versioning.PartitionState{{Topic: "t", Partition: 0, Epoch: 0}, {Topic: "t", Partition: 1, Epoch: 0, LastLSN: 7}}
	btB := batchOf("t", 1, ch(2, 'c', "B", "1.00", v(2)))
	btB.Offsets = map[TP]int64{{"t", 1}: 1}
	btB.Tracker = stB
	if _, err := b.Apply(ctx, btB, noReject(t)); err != nil {
		t.Fatal(err)
	}
	got := openT(t, dir).TrackerState()
	want := []versioning.PartitionState{{Topic: "t", Partition: 0, Epoch: 1, LastLSN: 50}, {Topic: "t", Partition: 1, LastLSN: 7}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("tracker state %+v, want %+v", got, want)
	}
}

// Regression (found by the benchmark's schemaless stream): a schemaless
// column seen only as null has no type yet; it must neither fix the table's
// type at creation nor be rejected as schema_mismatch later.
func TestSchemalessNullOnlyColumns(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tb := openT(t, dir)
	nullOnly := &normalize.Schema{Columns: append(append([]normalize.ColumnDef(nil), labSchema.Columns...),
		normalize.ColumnDef{Name: "ship_date", Type: normalize.Type{Kind: normalize.String}, Nullable: true, NullOnly: true})}
	typed := &normalize.Schema{Columns: append(append([]normalize.ColumnDef(nil), labSchema.Columns...),
		normalize.ColumnDef{Name: "ship_date", Type: normalize.Type{Kind: normalize.Long}, Nullable: true})}
	a := ch(1, 'c', "A", "1.00", v(1))
	a.Schema, a.Row = nullOnly, append(a.Row, nil)
	if _, err := tb.Apply(ctx, batchOf("t", 1, a), noReject(t)); err != nil {
		t.Fatal(err)
	}
	b := ch(2, 'c', "B", "1.00", v(2))
	b.Schema, b.Row = typed, append(b.Row, int64(19000))
	c := ch(3, 'c', "C", "1.00", v(3))
	c.Schema, c.Row = nullOnly, append(c.Row, nil)
	if _, err := tb.Apply(ctx, batchOf("t", 3, b, c), noReject(t)); err != nil {
		t.Fatal(err)
	}
	rows := deltacheck.ByKey(deltacheck.Decode(t, deltacheck.ReadDeltaRS(t, dir, "").Rows), "pedido_id")
	if len(rows) != 3 || fmt.Sprint(rows["2"]["ship_date"]) != "19000" || rows["3"]["ship_date"] != nil {
		t.Fatalf("rows %v", rows)
	}
}

// A data file that is not valid Parquet makes Open fail with an error that
// names the file, never a panic, and the table is left untouched.
func TestOpenCorruptDataFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tb := openT(t, dir)
	if _, err := tb.Apply(ctx, batchOf("t", 2, ch(1, 'c', "A", "1.00", v(1)), ch(2, 'c', "B", "2.00", v(2))), noReject(t)); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.parquet"))
	if err != nil || len(files) != 1 {
		t.Fatalf("data files = %v (%v)", files, err)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	// keep the footer magic, scramble the middle: a plausible but corrupt file
	for i := 4; i < len(b)-8; i++ {
		b[i] ^= 0x5a
	}
	if err := os.WriteFile(files[0], b, 0o640); err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, dir, Options{Sink: "test"})
	if err == nil || !strings.Contains(err.Error(), filepath.Base(files[0])) {
		t.Fatalf("Open on a corrupt data file: err = %v, want an error naming %s", err, filepath.Base(files[0]))
	}
}

// A writer that loses the commit race to a commit of other keys is rebased
// over it (committed at the next version without re-planning, the winner's
// files, keys and offsets applied to its in-memory state: it equals a fresh
// open); one that loses to a commit of one of its own keys re-plans against
// it (Attempts 2, Conflicts 1: cdcsink_commit_conflicts_total,
// cdcsink_commit_attempts). Both writers' rows are in the table.
func TestTableConflictReplannedAndCounted(t *testing.T) {
	for _, tc := range []struct {
		name                         string
		id                           string // a's instance id (b has none)
		winnerKey                    int64
		attempts, conflicts, rebases int
		want                         map[string]string
	}{
		{"other key: rebased", "a", 2, 1, 0, 1, map[string]string{"1": "A1", "2": "B1", "9": "B0"}},
		// both write the batch counter <sink>: a label, no conflict
		{"other key, no instance ids: rebased", "", 2, 1, 0, 1, map[string]string{"1": "A1", "2": "B1", "9": "B0"}},
		{"other key, hidden by a DV on a file we know: rebased", "a", 9, 1, 0, 1, map[string]string{"1": "A1", "9": "B1"}},
		{"same key: re-planned", "a", 1, 2, 1, 0, map[string]string{"1": "A1", "9": "B0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			b := openT(t, dir)
			if _, err := b.Apply(ctx, batchOf("t", 1, ch(9, 'c', "B0", "1.00", v(1))), noReject(t)); err != nil {
				t.Fatal(err)
			}
			once := false
			a, err := Open(ctx, dir, Options{Sink: "test", InstanceID: tc.id, Fault: func(point FaultPoint) error {
				if point == FaultBeforeCommit && !once {
					once = true // the other writer commits between our plan and our commit
					bt := batchOf("t", 2, ch(tc.winnerKey, 'u', "B1", "1.00", v(5)))
					bt.Offsets = map[TP]int64{{"t", 1}: 1}
					bt.Tracker = []versioning.PartitionState{{Topic: "t", Partition: 1, LastLSN: 5}}
					if _, err := b.Apply(ctx, bt, noReject(t)); err != nil {
						t.Fatal(err)
					}
				}
				return nil
			}})
			if err != nil {
				t.Fatal(err)
			}
			res, err := a.Apply(ctx, batchOf("t", 2, ch(1, 'c', "A1", "1.00", v(10))), noReject(t))
			if err != nil {
				t.Fatal(err)
			}
			if res.Attempts != tc.attempts || res.Conflicts != tc.conflicts || res.Rebases != tc.rebases || !res.Committed {
				t.Fatalf("result %+v, want %d attempts, %d conflicts, %d rebases, committed", res, tc.attempts, tc.conflicts, tc.rebases)
			}
			rows := deltacheck.ByKey(deltacheck.Decode(t, deltacheck.ReadDeltaRS(t, dir, "").Rows), "pedido_id")
			if len(rows) != len(tc.want) {
				t.Fatalf("rows = %v, want %v", rows, tc.want)
			}
			for k, st := range tc.want {
				if rows[k]["status"] != st {
					t.Fatalf("rows = %v, want %v", rows, tc.want)
				}
			}
			fresh := openT(t, dir)
			got, err := a.Rows(ctx)
			if err != nil {
				t.Fatal(err)
			}
			want, err := fresh.Rows(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) || a.Version() != fresh.Version() ||
				fmt.Sprint(a.Offsets()) != fmt.Sprint(fresh.Offsets()) || fmt.Sprint(a.TrackerState()) != fmt.Sprint(fresh.TrackerState()) {
				t.Fatalf("writer's state after the commit differs from a fresh open:\n rows %v\n want %v\n v%d/v%d offsets %v/%v tracker %v/%v",
					got, want, a.Version(), fresh.Version(), a.Offsets(), fresh.Offsets(), a.TrackerState(), fresh.TrackerState())
			}
			// and it goes on from there: a later batch sees the winner's rows
			res, err = a.Apply(ctx, batchOf("t", 3, ch(tc.winnerKey, 'u', "A2", "1.00", v(20))), noReject(t))
			if err != nil || res.Updated != 1 {
				t.Fatalf("next batch: %+v, %v", res, err)
			}
		})
	}
}

// Batch.Domains land in the batch's commit: read back by Table.Domain, by a
// table opened afresh and in the Delta log; the sink's own versioning
// domains are refused.
func TestTableBatchDomains(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tb := openT(t, dir)
	if _, ok := tb.Domain("cdcsink.consistency.test"); ok {
		t.Fatal("a table that does not exist has a domain")
	}
	b := batchOf("dbz.public.pedidos", 1, ch(101, 'c', "CRIADO", "150.00", v(1)))
	b.Domains = map[string]string{"cdcsink.consistency.test": `{"through":7}`}
	res, err := tb.Apply(ctx, b, noReject(t))
	if err != nil {
		t.Fatal(err)
	}
	b = batchOf("dbz.public.pedidos", 2, ch(102, 'c', "CRIADO", "1.00", v(1)))
	b.Domains = map[string]string{"cdcsink.consistency.test": `{"through":9}`}
	if _, err := tb.Apply(ctx, b, noReject(t)); err != nil {
		t.Fatal(err)
	}
	for name, x := range map[string]*Table{"writer": tb, "reopened": openT(t, dir)} {
		if cfg, ok := x.Domain("cdcsink.consistency.test"); !ok || cfg != `{"through":9}` {
			t.Fatalf("%s: domain = %q %v", name, cfg, ok)
		}
	}
	log, err := os.ReadFile(filepath.Join(dir, "_delta_log", fmt.Sprintf("%020d.json", res.Version)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), `"domain":"cdcsink.consistency.test"`) {
		t.Fatalf("commit %d lacks the domain: %s", res.Version, log)
	}
	b = batchOf("dbz.public.pedidos", 3, ch(103, 'c', "CRIADO", "1.00", v(1)))
	b.Domains = map[string]string{layout.TrackerPartitionDomain("test", "dbz.public.pedidos", 0): "[]"}
	if _, err := tb.Apply(ctx, b, noReject(t)); err == nil || !strings.Contains(err.Error(), "versioning state") {
		t.Fatalf("a tracker domain in Batch.Domains: err = %v", err)
	}
}
