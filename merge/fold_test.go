// Tests of folding: version order, duplicates, conflicts, truncates, primary-key changes, TOAST.

package merge

import (
	"testing"

	"github.com/shopspring/decimal"

	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/versioning"
)

var labSchema = &normalize.Schema{Columns: []normalize.ColumnDef{
	{Name: "pedido_id", Type: normalize.Type{Kind: normalize.Long}},
	{Name: "status", Type: normalize.Type{Kind: normalize.String}, Nullable: true},
	{Name: "valor", Type: normalize.Type{Kind: normalize.Decimal, Precision: 12, Scale: 2}, Nullable: true},
	{Name: "notes", Type: normalize.Type{Kind: normalize.String}, Nullable: true},
}}

func v(lsn uint64) versioning.Version {
	return versioning.Version{Phase: versioning.PhaseStream, Commit: lsn, LSN: lsn}
}

func ch(id int64, op byte, status string, valor string, ver versioning.Version) *normalize.Change {
	c := &normalize.Change{SourceOp: op, KeyNames: []string{"pedido_id"}, Key: []any{id}, Schema: labSchema, Version: ver}
	switch op {
	case 'd':
		c.Op = normalize.OpDelete
		c.Row = []any{id, nil, nil, nil}
	default:
		c.Op = normalize.OpUpsert
		c.Row = []any{id, status, decimal.RequireFromString(valor), "n"}
	}
	return c
}

func keyOf(id int64) string { return string(AppendKey(nil, []any{id})) }

func finalsByKey(f *foldResult) map[string]*finalState {
	m := map[string]*finalState{}
	for _, fin := range f.Finals {
		m[fin.Key] = fin
	}
	return m
}

func noneStored(keys []string) []storedKey { return make([]storedKey, len(keys)) }

// perKey is foldBatch's stored from a function of one key.
func perKey(fn func(string) storedKey) func([]string) []storedKey {
	return func(keys []string) []storedKey {
		out := make([]storedKey, len(keys))
		for i, k := range keys {
			out[i] = fn(k)
		}
		return out
	}
}

// The background article's lab (section 31): 101 ENVIADO, 103 CRIADO, 102 deleted,
// and the redelivered old event of 101 is a duplicate of version 2, below version 3.
func TestFoldArticleLab(t *testing.T) {
	in := []*normalize.Change{
		ch(101, 'c', "CRIADO", "150.00", v(1)),
		ch(101, 'u', "PAGO", "150.00", v(2)),
		ch(102, 'c', "CRIADO", "230.00", v(1)),
		ch(101, 'u', "ENVIADO", "150.00", v(3)),
		ch(102, 'd', "", "", v(2)),
		ch(103, 'c', "CRIADO", "99.90", v(1)),
		ch(101, 'u', "PAGO", "150.00", v(2)),
	}
	f := foldBatch(in, noneStored)
	m := finalsByKey(f)
	if len(m) != 3 {
		t.Fatalf("finals = %d, want 3", len(m))
	}
	if got := m[keyOf(101)]; got.Deleted || got.Row[1] != "ENVIADO" {
		t.Errorf("101 = %+v, want ENVIADO", got.Row)
	}
	if got := m[keyOf(102)]; !got.Deleted {
		t.Errorf("102 not deleted")
	}
	if got := m[keyOf(103)]; got.Deleted || got.Row[1] != "CRIADO" {
		t.Errorf("103 = %+v", got.Row)
	}
	// The redelivered PAGO (v2) sorts before ENVIADO (v3) and equals the first PAGO: duplicate.
	if f.Duplicate != 1 || f.Stale != 0 || len(f.Conflicts) != 0 {
		t.Errorf("dup=%d stale=%d conflicts=%v", f.Duplicate, f.Stale, f.Conflicts)
	}
}

func TestFoldAgainstStored(t *testing.T) {
	cases := []struct {
		name      string
		stored    storedKey
		in        []*normalize.Change
		wantFinal bool
		deleted   bool
		status    string
		stale     int
		dup       int
		conflicts int
	}{
		{name: "older update after stored delete is stale",
			stored: storedKey{Exists: true, Deleted: true, Version: v(10)},
			in:     []*normalize.Change{ch(1, 'u', "OLD", "1.00", v(5))}, stale: 1},
		{name: "newer insert after stored delete resurrects",
			stored: storedKey{Exists: true, Deleted: true, Version: v(10)},
			in:     []*normalize.Change{ch(1, 'c', "NEW", "1.00", v(11))}, wantFinal: true, status: "NEW"},
		{name: "equal to stored is duplicate",
			stored: storedKey{Exists: true, Version: v(10)},
			in:     []*normalize.Change{ch(1, 'u', "X", "1.00", v(10))}, dup: 1},
		{name: "delete of unseen key writes tombstone",
			in: []*normalize.Change{ch(1, 'd', "", "", v(3))}, wantFinal: true, deleted: true},
		{name: "same version different content conflicts, first kept",
			in:        []*normalize.Change{ch(1, 'u', "A", "1.00", v(4)), ch(1, 'u', "B", "1.00", v(4))},
			wantFinal: true, status: "A", conflicts: 1},
		{name: "out of order within batch: last version wins",
			in:        []*normalize.Change{ch(1, 'u', "C", "1.00", v(9)), ch(1, 'u', "A", "1.00", v(3)), ch(1, 'u', "B", "1.00", v(6))},
			wantFinal: true, status: "C"},
		{name: "delete then newer insert in one batch",
			in:        []*normalize.Change{ch(1, 'c', "A", "1.00", v(1)), ch(1, 'd', "", "", v(2)), ch(1, 'c', "B", "2.00", v(3))},
			wantFinal: true, status: "B"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := foldBatch(tc.in, perKey(func(string) storedKey { return tc.stored }))
			if (len(f.Finals) == 1) != tc.wantFinal {
				t.Fatalf("finals=%d want final=%v", len(f.Finals), tc.wantFinal)
			}
			if tc.wantFinal {
				fin := f.Finals[0]
				if fin.Deleted != tc.deleted {
					t.Errorf("deleted=%v", fin.Deleted)
				}
				if tc.status != "" && fin.Row[1] != tc.status {
					t.Errorf("status=%v want %v", fin.Row[1], tc.status)
				}
			}
			if f.Stale != tc.stale || f.Duplicate != tc.dup || len(f.Conflicts) != tc.conflicts {
				t.Errorf("stale=%d dup=%d conflicts=%d", f.Stale, f.Duplicate, len(f.Conflicts))
			}
		})
	}
}

func TestFoldToastFilledFromEarlierInBatch(t *testing.T) {
	a := ch(7, 'c', "A", "1.00", v(1))
	a.Row[3] = "big toasted text"
	b := ch(7, 'u', "B", "1.00", v(2))
	b.Row[3] = normalize.Unavailable
	f := foldBatch([]*normalize.Change{b, a}, noneStored)
	fin := f.Finals[0]
	if fin.Row[3] != "big toasted text" || fin.NeedStored {
		t.Fatalf("row=%v needStored=%v", fin.Row, fin.NeedStored)
	}
	if !normalize.IsUnavailable(b.Row[3]) {
		t.Fatal("input change was modified")
	}
	// Without an earlier image the stored row must supply it.
	f = foldBatch([]*normalize.Change{b}, perKey(func(string) storedKey { return storedKey{Exists: true, Version: v(1)} }))
	if !f.Finals[0].NeedStored {
		t.Fatal("NeedStored not set")
	}
}

func TestFoldTruncate(t *testing.T) {
	tr := &normalize.Change{Op: normalize.OpTruncate, SourceOp: 't', Version: v(50)}
	in := []*normalize.Change{ch(1, 'u', "before", "1.00", v(40)), tr, ch(2, 'u', "after", "1.00", v(60))}
	f := foldBatch(in, perKey(func(k string) storedKey { return storedKey{Exists: true, Version: v(30)} }))
	if f.Truncate != tr {
		t.Fatal("truncate not recorded")
	}
	m := finalsByKey(f)
	if _, ok := m[keyOf(1)]; ok {
		t.Error("change older than truncate survived")
	}
	if m[keyOf(2)] == nil || m[keyOf(2)].Row[1] != "after" {
		t.Error("change newer than truncate lost")
	}
}

func TestAppendKeyInjective(t *testing.T) {
	keys := [][]any{
		{int64(1)}, {int64(2)}, {"1"}, {"a", "bc"}, {"ab", "c"}, {nil}, {[]byte("1")},
		{decimal.RequireFromString("1.0")}, {true}, {false}, {int64(1), int64(2)},
	}
	seen := map[string]int{}
	for i, k := range keys {
		s := string(AppendKey(nil, k))
		if j, dup := seen[s]; dup {
			t.Fatalf("keys %v and %v encode equally", keys[j], k)
		}
		seen[s] = i
	}
	if string(AppendKey(nil, []any{int32(5)})) != string(AppendKey(nil, []any{int64(5)})) {
		t.Error("integer width must not change the key")
	}
}

func TestFoldTombstoneAfterDeleteIsDuplicate(t *testing.T) {
	d := ch(9, 'd', "", "", v(5))
	tomb := &normalize.Change{Op: normalize.OpDelete, Tombstone: true, KeyNames: []string{"pedido_id"}, Key: []any{int64(9)}, Version: v(5)}
	f := foldBatch([]*normalize.Change{d, tomb}, noneStored)
	if len(f.Conflicts) != 0 || f.Duplicate != 1 || !f.Finals[0].Deleted {
		t.Fatalf("conflicts=%v dup=%d finals=%+v", f.Conflicts, f.Duplicate, f.Finals)
	}
}

// TestFoldAllocationsPerKey: a batch's groups, change indexes and finals
// come from one allocation each, so folding allocates about one object per
// key (its encoded string), not four; the keys batchKeys needs are the
// fold's, in first-seen order, with every change's key once.
func TestFoldAllocationsPerKey(t *testing.T) {
	const keys = 2000
	var changes []*normalize.Change
	for i := range 2 * keys { // every key twice, interleaved
		id := int64(i % keys)
		changes = append(changes, ch(id, 'u', "s", "1.00", v(uint64(i+1))))
	}
	f := foldBatch(changes, noneStored)
	if len(f.Finals) != keys || len(f.Keys) != keys {
		t.Fatalf("finals %d, keys %d; want %d each", len(f.Finals), len(f.Keys), keys)
	}
	for i, k := range f.Keys {
		if k != keyOf(int64(i)) {
			t.Fatalf("Keys[%d] = %q, want the key of %d (first seen first)", i, k, i)
		}
		if fin := f.Finals[i]; fin.Key != k || fin.Change != changes[keys+i] {
			t.Fatalf("final %d: key %q change %p, want %q and the key's second change", i, fin.Key, fin.Change, k)
		}
	}
	allocs := testing.AllocsPerRun(5, func() { foldBatch(changes, noneStored) })
	t.Logf("foldBatch of %d keys, %d changes: %.0f allocations", keys, len(changes), allocs)
	if allocs > keys+keys/4 {
		t.Errorf("foldBatch of %d keys: %.0f allocations, want at most %d (about one per key)", keys, allocs, keys+keys/4)
	}
}
