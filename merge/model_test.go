// Model-based tests: random per-key histories applied in random batches equal a reference model.

package merge

import (
	"context"
	"fmt"
	"math/rand"
	"testing"

	"github.com/cdcsink/cdc-sink/internal/deltacheck"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/versioning"
)

// modelRow is the reference state of one key: the change with the highest
// version wins; a delete leaves a tombstone with its version.
type modelRow struct {
	ver     versioning.Version
	deleted bool
	status  string
}

type event struct {
	id     int64
	op     byte
	status string
	ver    versioning.Version
}

// genStream makes a random per-key history: snapshot reads, creates, updates,
// deletes and re-creates, with versions increasing per key in source order.
func genStream(rng *rand.Rand, keys, n int) []event {
	var out []event
	lsn := uint64(1000)
	alive := map[int64]bool{}
	// snapshot rows (phase 0) for some keys
	for k := 0; k < keys; k++ {
		if rng.Intn(2) == 0 {
			out = append(out, event{id: int64(k), op: 'r', status: fmt.Sprintf("snap-%d", k),
				ver: versioning.Version{Phase: versioning.PhaseSnapshot, LSN: 500}})
			alive[int64(k)] = true
		}
	}
	commit := uint64(0)
	for i := 0; i < n; i++ {
		if rng.Intn(3) == 0 {
			commit = lsn // a new transaction
		}
		lsn += uint64(1 + rng.Intn(20))
		id := int64(rng.Intn(keys))
		e := event{id: id, ver: versioning.Version{Phase: versioning.PhaseStream, Commit: commit, LSN: lsn}}
		switch {
		case !alive[id]:
			e.op, e.status = 'c', fmt.Sprintf("c%d", i)
			alive[id] = true
		case rng.Intn(4) == 0:
			e.op = 'd'
			alive[id] = false
		default:
			e.op, e.status = 'u', fmt.Sprintf("u%d", i)
		}
		out = append(out, e)
	}
	return out
}

func (e event) change() *normalize.Change {
	if e.op == 'd' {
		return ch(e.id, 'd', "", "", e.ver)
	}
	return ch(e.id, e.op, e.status, "1.00", e.ver)
}

func model(evs []event) map[int64]modelRow {
	m := map[int64]modelRow{}
	for _, e := range evs {
		cur, ok := m[e.id]
		if ok && !cur.ver.Less(e.ver) {
			continue
		}
		m[e.id] = modelRow{ver: e.ver, deleted: e.op == 'd', status: e.status}
	}
	return m
}

// TestModelRandomDeliveries applies random streams in random batch cuts,
// with per-key order scrambled across batches and earlier batches redelivered,
// and checks the table against the model after every run (and through
// delta-rs for a sample of cases).
func TestModelRandomDeliveries(t *testing.T) {
	cases := 400
	if testing.Short() {
		cases = 50
	}
	ctx := context.Background()
	for c := 0; c < cases; c++ {
		rng := rand.New(rand.NewSource(int64(c)))
		evs := genStream(rng, 1+rng.Intn(12), rng.Intn(60))
		want := model(evs)
		// Delivery: shuffle everything (versions, not arrival, must decide),
		// then redeliver a random suffix of the shuffled stream.
		deliv := append([]event(nil), evs...)
		rng.Shuffle(len(deliv), func(i, j int) { deliv[i], deliv[j] = deliv[j], deliv[i] })
		if len(deliv) > 0 {
			from := rng.Intn(len(deliv))
			deliv = append(deliv, deliv[from:]...)
		}
		dir := t.TempDir()
		tb, err := Open(ctx, dir, Options{Sink: "model"})
		if err != nil {
			t.Fatal(err)
		}
		off := int64(0)
		for len(deliv) > 0 {
			n := 1 + rng.Intn(len(deliv))
			var cs []*normalize.Change
			for _, e := range deliv[:n] {
				cs = append(cs, e.change())
			}
			deliv = deliv[n:]
			off += int64(n)
			if _, err := tb.Apply(ctx, batchOf("t", off, cs...), noReject(t)); err != nil {
				t.Fatalf("case %d: %v", c, err)
			}
			if rng.Intn(4) == 0 { // crash/restart: reopen from the table
				if tb, err = Open(ctx, dir, Options{Sink: "model"}); err != nil {
					t.Fatal(err)
				}
			}
		}
		got := tableState(t, dir)
		if len(got) != len(want) {
			t.Fatalf("case %d: %d keys in table, model has %d\n got=%v\nwant=%v", c, len(got), len(want), got, want)
		}
		for id, w := range want {
			g, ok := got[id]
			if !ok || g.deleted != w.deleted || g.ver != w.ver || (!w.deleted && g.status != w.status) {
				t.Fatalf("case %d key %d: got %+v want %+v", c, id, g, w)
			}
		}
		if c%100 == 7 && len(want) > 0 {
			rs := deltacheck.ByKey(deltacheck.Decode(t, deltacheck.ReadDeltaRS(t, dir, "").Rows), "pedido_id")
			if len(rs) != len(want) {
				t.Fatalf("case %d: delta-rs sees %d keys, model %d", c, len(rs), len(want))
			}
			for id, w := range want {
				r := rs[fmt.Sprint(id)]
				if r["_cdc_deleted"] != w.deleted || r["_cdc_source_version"] != w.ver.String() {
					t.Fatalf("case %d key %d via delta-rs: %v want %+v", c, id, r, w)
				}
			}
		}
	}
}

// tableState reads the table from disk through a fresh Open (index rebuilt
// from files and deletion vectors) and the stored rows.
func tableState(t *testing.T, dir string) map[int64]modelRow {
	t.Helper()
	ctx := context.Background()
	tb, err := Open(ctx, dir, Options{Sink: "model", AllowForeignSink: true})
	if err != nil {
		t.Fatal(err)
	}
	return stateOf(t, tb)
}

// stateOf is tableState for an opened table.
func stateOf(t *testing.T, tb *Table) map[int64]modelRow {
	t.Helper()
	ctx := context.Background()
	out := map[int64]modelRow{}
	if tb.st == nil {
		return out
	}
	if err := tb.adoptAll(ctx); err != nil { // a scoped index: every key
		t.Fatal(err)
	}
	statusIdx := fieldIndex(tb.st.schema, "status")
	idIdx := fieldIndex(tb.st.schema, "pedido_id")
	for l := range tb.st.index.Locs() {
		rows, err := tb.ops.readRows(ctx, tb.st, l.file, []int64{int64(l.row)})
		if err != nil {
			t.Fatal(err)
		}
		r := rows[0]
		id := r[idIdx].(int64)
		s, _ := r[statusIdx].(string)
		if _, dup := out[id]; dup {
			t.Fatalf("key %d live twice", id)
		}
		out[id] = modelRow{ver: l.ver, deleted: l.deleted, status: s}
	}
	return out
}

// TestModelFoldThousands runs the same model check on the fold logic alone,
// with an in-memory store standing in for the table: 5,000 cases.
func TestModelFoldThousands(t *testing.T) {
	for c := 0; c < 5000; c++ {
		rng := rand.New(rand.NewSource(int64(1_000_000 + c)))
		evs := genStream(rng, 1+rng.Intn(8), rng.Intn(40))
		want := model(evs)
		deliv := append([]event(nil), evs...)
		rng.Shuffle(len(deliv), func(i, j int) { deliv[i], deliv[j] = deliv[j], deliv[i] })
		if len(deliv) > 0 {
			deliv = append(deliv, deliv[rng.Intn(len(deliv)):]...)
		}
		store := map[string]modelRow{}
		for len(deliv) > 0 {
			n := 1 + rng.Intn(len(deliv))
			var cs []*normalize.Change
			for _, e := range deliv[:n] {
				cs = append(cs, e.change())
			}
			deliv = deliv[n:]
			f := foldBatch(cs, perKey(func(k string) storedKey {
				r, ok := store[k]
				return storedKey{Exists: ok, Deleted: r.deleted, Version: r.ver}
			}))
			if len(f.Conflicts) > 0 {
				t.Fatalf("case %d: conflicts %v", c, f.Conflicts)
			}
			for _, fin := range f.Finals {
				s := ""
				if fin.Row != nil {
					s, _ = fin.Row[1].(string)
				}
				store[fin.Key] = modelRow{ver: fin.Change.Version, deleted: fin.Deleted, status: s}
			}
		}
		if len(store) != len(want) {
			t.Fatalf("case %d: %d keys, want %d", c, len(store), len(want))
		}
		for id, w := range want {
			g := store[keyOf(id)]
			if g.deleted != w.deleted || g.ver != w.ver || (!w.deleted && g.status != w.status) {
				t.Fatalf("case %d key %d: got %+v want %+v", c, id, g, w)
			}
		}
	}
}
