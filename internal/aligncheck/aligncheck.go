// Package aligncheck asserts the partition-aligned layout of a table in
// tests (docs/table-layout.md): every data file carries one partition's
// tag (layout.TagPartition) and holds rows of that partition only.
package aligncheck

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/layout"
)

// Tags returns the sorted partition tags of the data files of the local
// table at dir, failing t for a file without a valid tag or with rows of
// another partition (its _cdc_partition stats).
func Tags(t testing.TB, dir string) []string {
	t.Helper()
	snap, err := delta.OpenTable(delta.NewLocalStorage(dir), "").Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var tags []string
	for _, a := range snap.Files() {
		tag := a.Tags[layout.TagPartition]
		_, p, ok := layout.ParsePartitionTag(tag)
		if !ok {
			t.Errorf("%s: partition tag %q", a.Path, tag)
			continue
		}
		tags = append(tags, tag)
		st, err := a.ParsedStats()
		if err != nil {
			t.Fatal(err)
		}
		lo, hi := fmt.Sprint(st.MinValues[layout.ColPartition]), fmt.Sprint(st.MaxValues[layout.ColPartition])
		if want := strconv.Itoa(int(p)); lo != want || hi != want {
			t.Errorf("%s tagged %s holds partitions %s..%s", a.Path, tag, lo, hi)
		}
	}
	slices.Sort(tags)
	return tags
}
