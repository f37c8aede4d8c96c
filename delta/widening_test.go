package delta

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/cdcsink/cdc-sink/delta/parquetio"
)

// Data skipping on a widened table: stats of files written before the change
// are used where they are still exact bounds in the wide type, and ignored
// for float -> double (Spark wrote "3.4" for the float 3.4000000953674316).
func TestTypeWideningDataSkipping(t *testing.T) {
	ctx := context.Background()
	s, err := loadNoPanic(ctx, filepath.Join(goldenRoot, "type-widening"), -1)
	if err != nil {
		t.Fatal(err)
	}
	count := func(p parquetio.Predicate) int {
		n := 0
		for rec, err := range s.Scan(ctx, ScanOptions{Filter: p}) {
			if err != nil {
				t.Fatal(err)
			}
			n += int(rec.NumRows())
			rec.Release()
		}
		return n
	}
	oldFloat := float64(float32(3.4))
	// The raw float stats would prune both files, also the one holding the value.
	if raw := parquetio.Eq("float_double", oldFloat); raw.MayMatch(s.Files()[0].Stats, nil) || raw.MayMatch(s.Files()[1].Stats, nil) {
		t.Fatal("expected the raw float stats to exclude the matching file (test premise)")
	}
	cases := []struct {
		p    parquetio.Predicate
		rows int
	}{
		{parquetio.Eq("float_double", oldFloat), 2},               // float stats ignored: neither file pruned
		{parquetio.Eq("byte_long", 1), 1},                         // integer stats still prune the new file
		{parquetio.Eq("byte_long", 2), 0},                         // ... and both
		{parquetio.Eq("int_decimal", 3), 1},                       // integer stats as decimal
		{parquetio.Eq("decimal_decimal_greater_scale", 67.89), 1}, // decimal rescaled
		{parquetio.Eq("date_timestamp_ntz", time.Date(2024, 9, 9, 0, 0, 0, 0, time.UTC)), 1},
		{parquetio.Eq("date_timestamp_ntz", time.Date(2024, 9, 10, 0, 0, 0, 0, time.UTC)), 0},
	}
	for _, c := range cases {
		if got := count(c.p); got != c.rows {
			t.Errorf("%s: %d rows scanned, want %d", c.p, got, c.rows)
		}
	}
}
