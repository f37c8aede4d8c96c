package txgate

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/source"
)

// The real stack's captures (envelope/testdata/real: Debezium 3.6.1,
// provide.transaction.metadata=true, a multi-table workload): the data
// records wait for the ENDs, then all go out, each collection through the
// last transaction, with as many whole transactions as the ENDs name.
func TestRealCaptures(t *testing.T) {
	dir := filepath.Join("..", "envelope", "testdata", "real")
	colls := []string{"public.customers", "public.orders", "public.order_items", "public.products"}
	g := New[*source.Record](Config{Collections: colls})
	dec := envelope.NewDecoder(envelope.Options{})
	ctx := context.Background()
	snapshot, streamed, added := 0, 0, 0
	for _, c := range colls {
		recs, err := source.ReadFile(filepath.Join(dir, "loja."+c+".jsonl"), source.FileOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			ev, err := dec.Decode(ctx, r)
			if err != nil {
				t.Fatalf("%s@%d: %v", r.Topic, r.Offset, err)
			}
			gr, err := RecordOf(r, r.Topic, r.Partition, ev, int64(len(r.Value)))
			if err != nil {
				t.Fatalf("%s@%d: %v", r.Topic, r.Offset, err)
			}
			if gr.HasTx {
				streamed++
				if gr.Collection != c || gr.Prev < 0 && gr.TxID != "740" {
					t.Fatalf("%s@%d: collection %q, prev %d", r.Topic, r.Offset, gr.Collection, gr.Prev)
				}
			} else if ev.Kind == envelope.KindChange {
				snapshot++
			}
			if err := g.Add(gr); err != nil {
				t.Fatal(err)
			}
			added++
		}
	}
	// before any END only the snapshot rows (and nothing streamed) go out
	out := g.Release()
	for _, r := range out {
		if r.HasTx {
			t.Fatalf("%s@%d released before its END", r.Item.Topic, r.Item.Offset)
		}
	}
	if len(out) < snapshot || snapshot == 0 {
		t.Fatalf("released %d before the ENDs, %d snapshot rows", len(out), snapshot)
	}
	recs, err := source.ReadFile(filepath.Join(dir, "loja.transaction.jsonl"), source.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var last int64
	wantTx := 0
	for _, r := range recs {
		ev, err := dec.Decode(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		e, ok, err := EndOf(ev, r.Offset)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			continue
		}
		for _, c := range colls {
			if e.Counts[c] > 0 {
				wantTx++
			}
		}
		g.End(e)
		last = e.CommitLSN
	}
	out = append(out, g.Release()...)
	if n, _ := g.Held(); n != 0 || len(out) != added {
		t.Fatalf("%d records held after every END, %d of %d released", n, len(out), added)
	}
	st := g.Stats()
	if int(st.Transactions) != wantTx || st.Forced != 0 || st.Redelivered != 0 || streamed == 0 {
		t.Fatalf("stats %+v, want %d whole transactions (%d streamed records)", st, wantTx, streamed)
	}
	for _, c := range colls {
		if g.Through(c) != last {
			t.Errorf("%s through %d, want the last commit LSN %d", c, g.Through(c), last)
		}
	}
}
