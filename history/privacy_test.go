package history_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/history"
	"github.com/cdcsink/cdc-sink/internal/deltacheck"
	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/versioning"
)

var custSchema = &normalize.Schema{Columns: []normalize.ColumnDef{
	{Name: "id", Type: normalize.Type{Kind: normalize.Long}},
	{Name: "email", Type: normalize.Type{Kind: normalize.String}, Nullable: true},
	{Name: "ssn", Type: normalize.Type{Kind: normalize.String}, Nullable: true},
	{Name: "city", Type: normalize.Type{Kind: normalize.String}, Nullable: true},
}}

// change i of customer id at day (days since 2026-01-01).
func custChange(i int, id int64, email string, day int) *normalize.Change {
	ts := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC).AddDate(0, 0, day).UnixMicro()
	return &normalize.Change{Table: normalize.TableID{Server: "shop", Schema: "public", Table: "customers"},
		Op: normalize.OpUpsert, SourceOp: 'u', KeyNames: []string{"id"}, Key: []any{id},
		Schema: custSchema, Row: []any{id, email, "123-45-6789", "Lisboa"},
		Version: versioning.Version{Commit: uint64(i + 1), LSN: uint64(i + 1)}, SourceTsMicros: ts,
		Coord: normalize.Coord{Topic: "shop.public.customers", Partition: 0, Offset: int64(i)}}
}

func writeDays(t *testing.T, hist string, priv history.Privacy, days []int) {
	t.Helper()
	ctx := context.Background()
	w, err := history.Open(ctx, hist, history.Options{Sink: "s", Privacy: priv})
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range days {
		c := custChange(i, int64(100+i%3), "user"+string(rune('a'+i%3))+"@example.com", d)
		if _, err := w.Write(ctx, history.Input{BatchID: int64(i + 1), Changes: []*normalize.Change{c},
			Outcomes: []merge.Outcome{merge.OutcomeApplied}, Offsets: map[merge.TP]int64{{Topic: c.Coord.Topic}: int64(i + 1)}}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHistoryPrivacy: excluded columns are not in the history's schema or
// files, hashed ones hold hex(SHA-256(salt, 0, value)) (equal values equal
// digests, readable by delta-rs), settings on key columns and hashing
// without a salt are refused before anything is written, and a rebuild
// from a redacted history is refused.
func TestHistoryPrivacy(t *testing.T) {
	ctx := context.Background()
	hist := t.TempDir()
	priv := history.Privacy{ExcludeColumns: []string{"ssn"}, HashColumns: []string{"customers.email", "other.city"}, Salt: "pepper"}
	writeDays(t, hist, priv, []int{0, 0, 1, 2})
	rs := deltacheck.ReadDeltaRS(t, hist, "")
	if len(rs.Rows) != 4 {
		t.Fatalf("%d rows", len(rs.Rows))
	}
	for _, r := range deltacheck.Decode(t, rs.Rows) {
		after := r["after"].(map[string]any)
		if _, ok := after["ssn"]; ok {
			t.Fatalf("excluded column in history: %v", after)
		}
		email := after["email"].(string)
		ok := false
		for _, u := range []string{"usera@example.com", "userb@example.com", "userc@example.com"} {
			if email == history.HashValue("pepper", u) {
				ok = true
			}
		}
		if !ok || len(email) != 64 {
			t.Fatalf("email %q is not a salted digest of a source value", email)
		}
		if after["city"] != "Lisboa" {
			t.Fatalf("city (hashed only in table other) = %v", after["city"])
		}
	}
	if history.HashValue("pepper", "x") == history.HashValue("salt", "x") {
		t.Fatal("salt does not change the digest")
	}
	h, err := history.OpenRead(ctx, hist, nil, delta.StorageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tb, err := merge.Open(ctx, t.TempDir(), merge.Options{Sink: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := history.Rebuild(ctx, h, tb, 0); !errors.Is(err, history.ErrRedacted) {
		t.Fatalf("rebuild from a redacted history: %v", err)
	}

	for _, tc := range []struct {
		name string
		priv history.Privacy
		want string
	}{
		{"hash key", history.Privacy{HashColumns: []string{"id"}, Salt: "s"}, "key column"},
		{"exclude key", history.Privacy{ExcludeColumns: []string{"customers.id"}}, "key column"},
		{"no salt", history.Privacy{HashColumns: []string{"email"}}, "salt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			w, err := history.Open(ctx, dir, history.Options{Sink: "s", Privacy: tc.priv})
			if err == nil {
				c := custChange(0, 1, "a@b", 0)
				_, err = w.Write(ctx, history.Input{BatchID: 1, Changes: []*normalize.Change{c}, Outcomes: []merge.Outcome{merge.OutcomeApplied}})
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one naming %q", err, tc.want)
			}
			if ok, _ := delta.OpenTable(mustStore(t, dir), "").Exists(ctx); ok {
				t.Fatal("a refused setting wrote a table")
			}
		})
	}
}

func mustStore(t *testing.T, dir string) delta.Storage {
	s, err := delta.OpenStorage(context.Background(), dir, delta.StorageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestPurgeHistory: purge drops exactly the date partitions before the
// cutoff in one remove-only commit; newer rows stay (delta-rs agrees), a
// second purge finds nothing, and a current-state table is refused.
func TestPurgeHistory(t *testing.T) {
	ctx := context.Background()
	hist := t.TempDir()
	writeDays(t, hist, history.Privacy{}, []int{0, 0, 1, 3, 5, 5, 9})
	cutoff := time.Date(2026, 1, 4, 0, 0, 0, 0, time.UTC) // keeps days 3 (Jan 4) and later
	st, err := history.Purge(ctx, hist, nil, delta.StorageOptions{}, cutoff, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows != 3 || strings.Join(st.Dates, ",") != "2026-01-01,2026-01-02" {
		t.Fatalf("purged %+v, want 3 rows of 2026-01-01 and 2026-01-02", st)
	}
	rows := deltacheck.Decode(t, deltacheck.ReadDeltaRS(t, hist, "").Rows)
	if len(rows) != 4 {
		t.Fatalf("%d rows left, want 4", len(rows))
	}
	for _, r := range rows {
		if d := r["_cdc_source_date"].(string); d < "2026-01-04" {
			t.Fatalf("row of %s survived the purge", d)
		}
	}
	again, err := history.Purge(ctx, hist, nil, delta.StorageOptions{}, cutoff, time.Now())
	if err != nil || again.Version != -1 {
		t.Fatalf("second purge: %+v %v", again, err)
	}
	s := stream()
	cur, h2 := t.TempDir(), t.TempDir()
	run(t, batches(s, 200)[:1], cur, h2, -1, "")
	if _, err := history.Purge(ctx, cur, nil, delta.StorageOptions{}, cutoff, time.Now()); err == nil || !strings.Contains(err.Error(), "not a cdc-sink history table") {
		t.Fatalf("purge of a current table: %v", err)
	}
}
