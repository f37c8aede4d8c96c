// Change Data Feed: the row-level changes of a batch commit, as the change data file Delta readers expect.

package merge

import (
	"context"
	"fmt"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/delta/schema"
)

// The feed follows the table's logical content (tombstones are deletes),
// not its physical rows, so Spark readChangeFeed / delta-rs load_cdf return
// what happened to the source's rows, batch by batch:
//
//	stored row        new row      change rows
//	none              live         insert (new image)
//	live              live         update_preimage (old image) + update_postimage (new image)
//	live              tombstone    delete (the row's last live image, as Spark's DELETE writes it)
//	tombstone         live         insert (a re-insert)
//	none / tombstone  tombstone    nothing (no live row appeared or went)
//
// Stale and duplicate changes never reach the finals, so they change
// nothing. Every column of the table is in the feed, _cdc_* included. A
// commit with finals always carries a change data file, even an empty one:
// with a cdc action in a version, readers take its changes from the cdc
// files only, never from the add/remove actions (deletion-vector swaps,
// tombstone rows) that would otherwise read as whole-file deletes and
// inserts.

// liveImages reads the stored live rows the finals replace (whole rows, table
// column order), by index into finals.
func (t *Table) liveImages(ctx context.Context, finals []*finalState) (map[int][]any, error) {
	st := t.st
	byFile := map[int32][]int{}
	locs := make([]loc, len(finals))
	for i, f := range finals {
		l, ok := f.Stored.Loc, f.Stored.Exists
		if !f.Looked {
			l, ok = st.index.Get(f.Key)
		}
		if ok && !l.deleted {
			locs[i] = l
			byFile[l.file] = append(byFile[l.file], i)
		}
	}
	out := make(map[int][]any, len(finals))
	for file, idx := range byFile {
		rows := make([]int64, len(idx))
		for j, i := range idx {
			rows[j] = int64(locs[i].row)
		}
		vals, err := t.ops.readRows(ctx, st, file, rows)
		if err != nil {
			return nil, fmt.Errorf("change data feed: read replaced rows of %s: %w", st.files[file].add.Path, err)
		}
		for j, i := range idx {
			out[i] = vals[j]
		}
	}
	return out, nil
}

// writeChangeData writes the change rows of finals (new images in rows,
// replaced live images in before) as one change data file.
func (t *Table) writeChangeData(ctx context.Context, finals []*finalState, before map[int][]any, rows [][]any) (delta.CDC, int64, error) {
	st := t.st
	n := len(st.schema.Fields)
	var change [][]any
	emit := func(img []any, kind string) {
		r := make([]any, n+1)
		copy(r, img)
		r[n] = kind
		change = append(change, r)
	}
	for i, f := range finals {
		old, live := before[i]
		switch {
		case f.Deleted && live:
			emit(old, delta.ChangeDelete)
		case f.Deleted:
		case live:
			emit(old, delta.ChangeUpdatePreimage)
			emit(rows[i], delta.ChangeUpdatePostimage)
		default:
			emit(rows[i], delta.ChangeInsert)
		}
	}
	sc := changeDataSchema(st.schema)
	rec, err := buildRecord(schema.ToArrow(sc), change)
	if err != nil {
		return delta.CDC{}, 0, fmt.Errorf("change data feed: %w", err)
	}
	defer rec.Release()
	return t.ops.writeChangeData(ctx, sc, rec)
}

// changeDataSchema is the table schema plus _change_type (unmapped: change
// readers find it by name in column-mapped tables too).
func changeDataSchema(s *schema.StructType) *schema.StructType {
	fields := append(append([]*schema.StructField(nil), s.Fields...), schema.NewField(delta.ChangeTypeColumn, schema.String, true))
	return &schema.StructType{Fields: fields}
}
