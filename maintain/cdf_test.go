package maintain

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/internal/deltacheck"
)

// TestChangeDataFeedMaintenance: Change Data Feed enabled on an existing
// table with SetProperty; from that version on the sink's batches are in the
// feed, while optimize, purge-tombstones and alter (no row changes its
// value) add nothing to it.
func TestChangeDataFeedMaintenance(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	apply(t, dir, 3, person(1, int64(30), "ann", "1.5", 10), person(2, int64(40), "bob", "2.5", 11), person(3, int64(50), "cid", "3.5", 12)) // v1
	apply(t, dir, 4, personDelete(3, 13))                                                                                                    // v2, no feed yet

	if _, err := SetProperty(ctx, dir, "delta.appendOnly", "true", delta.StorageOptions{}); err == nil || !strings.Contains(err.Error(), "cannot be set") {
		t.Fatalf("unsupported property: %v", err)
	}
	if _, err := SetProperty(ctx, dir, delta.ConfEnableChangeDataFeed, "yes", delta.StorageOptions{}); err == nil {
		t.Fatal("value yes accepted")
	}
	res, err := SetProperty(ctx, dir, delta.ConfEnableChangeDataFeed, "true", delta.StorageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Committed || res.Version != 3 || !res.Protocol.HasFeature(delta.FeatureChangeDataFeed) {
		t.Fatalf("set property: %+v", res)
	}
	if again, err := SetProperty(ctx, dir, delta.ConfEnableChangeDataFeed, "true", delta.StorageOptions{}); err != nil || again.Committed {
		t.Fatalf("setting it again: %+v %v", again, err)
	}

	apply(t, dir, 6, person(1, int64(31), "ann", "1.5", 20), personDelete(2, 21)) // v4
	if _, err := Optimize(ctx, dir, OptimizeOptions{}); err != nil {              // v5
		t.Fatal(err)
	}
	pr, err := PurgeTombstones(ctx, dir, PurgeOptions{OlderThan: time.Hour, Now: func() time.Time { return time.Now().Add(2 * time.Hour) }}) // v6
	if err != nil || pr.Purged != 2 || pr.Version != 6 {
		t.Fatalf("purge: %+v %v", pr, err)
	}
	ar, err := AlterColumn(ctx, dir, "age", "string", AlterOptions{}) // v7
	if err != nil || ar.Version != 7 {
		t.Fatalf("alter: %+v %v", ar, err)
	}

	feed := deltacheck.ReadCDF(t, "deltars", 3, dir)[dir]
	var got []string
	for _, r := range deltacheck.Decode(t, feed.Rows) {
		got = append(got, fmt.Sprintf("v%v %v %v %v %v", r["_commit_version"], r["_change_type"], r["id"], r["age"], r["name"]))
	}
	slices.Sort(got)
	want := []string{
		// read with the newest schema: age is a string now
		"v4 delete 2 40 bob",
		"v4 update_postimage 1 31 ann",
		"v4 update_preimage 1 30 ann",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("feed from v3:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if live := deltacheck.ReadDeltaRS(t, dir, "NOT _cdc_deleted").Rows; len(live) != 1 {
		t.Fatalf("live rows %v", live)
	}
}
