// Regression tests for primary-key changes of rows with unchanged TOASTed columns.

package merge

import (
	"context"
	"testing"

	"github.com/cdcsink/cdc-sink/internal/deltacheck"
	"github.com/cdcsink/cdc-sink/normalize"
)

// Regression (found by integration/ e2e, TestPipeline/streaming-dml): a primary-key change of a
// row whose TOASTed column is not rewritten (UPDATE t SET id = ... under REPLICA IDENTITY
// DEFAULT) arrives as delete(old key) + create(new key, header __debezium.oldkey) where the
// create carries __debezium_unavailable_value for that column. The value must come from the old
// key's row, not become null (nor come from an earlier, deleted incarnation of the new key).

func pkMove(from, to int64, ver uint64) (*normalize.Change, *normalize.Change) {
	d := ch(from, 'd', "", "", v(ver))
	c := ch(to, 'u', "MOVED", "9.99", v(ver))
	c.Row[3] = normalize.Unavailable
	c.OldKey = []any{from}
	return d, c
}

func notesByKey(t *testing.T, dir string) map[string]map[string]any {
	t.Helper()
	return deltacheck.ByKey(deltacheck.Decode(t, deltacheck.ReadDeltaRS(t, dir, "").Rows), "pedido_id")
}

func TestPKChangeToastFromStoredOldKey(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tb := openT(t, dir)
	a := ch(1, 'c', "A", "1.00", v(1))
	a.Row[3] = "big toasted text of key 1"
	if _, err := tb.Apply(ctx, batchOf("t", 1, a), noReject(t)); err != nil {
		t.Fatal(err)
	}
	d, c := pkMove(1, 2, 5)
	if _, err := tb.Apply(ctx, batchOf("t", 3, d, c), noReject(t)); err != nil {
		t.Fatal(err)
	}
	rows := notesByKey(t, dir)
	if r := rows["2"]; r["notes"] != "big toasted text of key 1" || r["status"] != "MOVED" || r["_cdc_deleted"] != false {
		t.Fatalf("new key 2 = %v", r)
	}
	if r := rows["1"]; r["_cdc_deleted"] != true {
		t.Fatalf("old key 1 = %v", r)
	}
}

func TestPKChangeToastFromOldKeyInBatch(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tb := openT(t, dir)
	a := ch(1, 'c', "A", "1.00", v(1))
	a.Row[3] = "big toasted text of key 1"
	u := ch(1, 'u', "B", "2.00", v(2))
	u.Row[3] = normalize.Unavailable
	// Key 2 existed before and was deleted: its old notes must not leak into the moved row.
	old2 := ch(2, 'c', "OLD", "3.00", v(1))
	old2.Row[3] = "notes of the old key 2"
	del2 := ch(2, 'd', "", "", v(3))
	d, c := pkMove(1, 2, 5)
	if _, err := tb.Apply(ctx, batchOf("t", 6, a, old2, u, del2, d, c), noReject(t)); err != nil {
		t.Fatal(err)
	}
	if r := notesByKey(t, dir)["2"]; r["notes"] != "big toasted text of key 1" || r["status"] != "MOVED" {
		t.Fatalf("new key 2 = %v", r)
	}
}

func TestPKChangeToastNotFromDeletedNewKey(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tb := openT(t, dir)
	a := ch(1, 'c', "A", "1.00", v(1))
	a.Row[3] = "big toasted text of key 1"
	old2 := ch(2, 'c', "OLD", "3.00", v(1))
	old2.Row[3] = "notes of the old key 2"
	if _, err := tb.Apply(ctx, batchOf("t", 2, a, old2), noReject(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Apply(ctx, batchOf("t", 3, ch(2, 'd', "", "", v(3))), noReject(t)); err != nil {
		t.Fatal(err)
	}
	d, c := pkMove(1, 2, 5)
	// An update of the new key in the same batch, after the move, also leaves notes alone.
	u := ch(2, 'u', "AFTER", "4.00", v(6))
	u.Row[3] = normalize.Unavailable
	if _, err := tb.Apply(ctx, batchOf("t", 6, d, c, u), noReject(t)); err != nil {
		t.Fatal(err)
	}
	if r := notesByKey(t, dir)["2"]; r["notes"] != "big toasted text of key 1" || r["status"] != "AFTER" {
		t.Fatalf("new key 2 = %v", r)
	}
}

// The delete half and the create half in different batches (a batch boundary between them),
// with the table reopened in between: the old key's tombstone keeps the row's values.
func TestPKChangeToastAcrossBatches(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tb := openT(t, dir)
	a := ch(1, 'c', "A", "1.00", v(1))
	a.Row[3] = "big toasted text of key 1"
	if _, err := tb.Apply(ctx, batchOf("t", 1, a), noReject(t)); err != nil {
		t.Fatal(err)
	}
	d, c := pkMove(1, 2, 5)
	d.KeyMoved = true
	if _, err := tb.Apply(ctx, batchOf("t", 2, d), noReject(t)); err != nil {
		t.Fatal(err)
	}
	if live, deleted := tb.LiveRows(); live != 0 || deleted != 1 {
		t.Fatalf("after the delete half: live=%d deleted=%d", live, deleted)
	}
	tb = openT(t, dir)
	if _, err := tb.Apply(ctx, batchOf("t", 3, c), noReject(t)); err != nil {
		t.Fatal(err)
	}
	rows := notesByKey(t, dir)
	if r := rows["2"]; r["notes"] != "big toasted text of key 1" || r["status"] != "MOVED" || r["_cdc_deleted"] != false {
		t.Fatalf("new key 2 = %v", r)
	}
	if r := rows["1"]; r["_cdc_deleted"] != true {
		t.Fatalf("old key 1 = %v", r)
	}
}
