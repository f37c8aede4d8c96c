package history_test

import (
	"context"
	"fmt"
	"sort"
	"testing"

	"github.com/cdcsink/cdc-sink/history"
	"github.com/cdcsink/cdc-sink/internal/deltacheck"
	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/normalize"
)

// lineage is each row's (partition, offset, outcome, after.status) as text.
func lineage(t *testing.T, rows []string) []string {
	var out []string
	for _, r := range deltacheck.Decode(t, rows) {
		st := any(nil)
		if a, ok := r["after"].(map[string]any); ok {
			st = a["status"]
			if st == nil {
				st = a["city"]
			}
		}
		out = append(out, fmt.Sprintf("%v/%v %v %v", r["_cdc_partition"], r["_cdc_offset"], r["_cdc_outcome"], st))
	}
	sort.Strings(out)
	return out
}

// TestHistoryReadersAgree: Spark (delta-spark) and delta-rs read the same
// history rows — a generated stream's, and one whose source added a column
// midway (the new field appended to the before/after structs, older files
// reading it as null).
func TestHistoryReadersAgree(t *testing.T) {
	ctx := context.Background()
	s := stream()
	cur, hist := t.TempDir(), t.TempDir()
	run(t, batches(s, 200), cur, hist, -1, "")

	evolved := t.TempDir()
	w, err := history.Open(ctx, evolved, history.Options{Sink: "s"})
	if err != nil {
		t.Fatal(err)
	}
	wide := &normalize.Schema{Columns: append(append([]normalize.ColumnDef(nil), custSchema.Columns...),
		normalize.ColumnDef{Name: "tier", Type: normalize.Type{Kind: normalize.Integer}, Nullable: true})}
	for i := 0; i < 4; i++ {
		c := custChange(i, 1, "e", i)
		if i >= 2 {
			c.Schema, c.Row = wide, append(append([]any(nil), c.Row...), int32(10+i))
		}
		if _, err := w.Write(ctx, history.Input{BatchID: int64(i + 1), Changes: []*normalize.Change{c},
			Outcomes: []merge.Outcome{merge.OutcomeApplied}, Offsets: map[merge.TP]int64{{Topic: c.Coord.Topic}: int64(i + 1)}}); err != nil {
			t.Fatal(err)
		}
	}

	spark := deltacheck.ReadSpark(t, hist, evolved)
	for _, dir := range []string{hist, evolved} {
		rs := deltacheck.ReadDeltaRS(t, dir, "")
		a, b := lineage(t, rs.Rows), lineage(t, spark[dir].Rows)
		if len(a) != len(b) || len(a) == 0 {
			t.Fatalf("%s: delta-rs %d rows, Spark %d", dir, len(a), len(b))
		}
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("%s row %d: delta-rs %s, Spark %s", dir, i, a[i], b[i])
			}
		}
	}
	tiers := map[string]any{}
	for _, r := range deltacheck.Decode(t, spark[evolved].Rows) {
		tiers[fmt.Sprint(r["_cdc_offset"])] = r["after"].(map[string]any)["tier"]
	}
	for _, r := range deltacheck.Decode(t, deltacheck.ReadDeltaRS(t, evolved, "").Rows) {
		off := fmt.Sprint(r["_cdc_offset"])
		got := r["after"].(map[string]any)["tier"]
		if fmt.Sprint(got) != fmt.Sprint(tiers[off]) {
			t.Fatalf("offset %s: tier delta-rs %v, Spark %v", off, got, tiers[off])
		}
		if (off == "0" || off == "1") != (got == nil) {
			t.Fatalf("offset %s: tier %v (null only before the column was added)", off, got)
		}
	}
}
