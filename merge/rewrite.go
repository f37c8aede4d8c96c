// Following a widened source column type: rewriting data files, or Delta type widening.

package merge

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/delta/schema"
)

// WideningMode says how a table follows a source column whose type widened
// (normalize.Widen; docs/types.md, "Type changes").
type WideningMode string

const (
	// WidenRewrite rewrites the table's data files with the wide type, in the
	// same commit as the batch: O(table) once per type change, and every
	// reader (delta-rs, DuckDB, Spark 3.x) keeps reading the table.
	WidenRewrite WideningMode = "rewrite"
	// WidenTypeWidening changes the column's type in the metadata only
	// (Delta table feature typeWidening, delta.typeChanges): O(1), but only
	// readers that support the feature can read the table afterwards (Spark
	// with Delta 4.0+; not delta-rs 1.6). Changes Delta does not allow as
	// metadata-only widening (long→double) are rewritten.
	WidenTypeWidening WideningMode = "type_widening"
	// WidenOff never changes a column's type: such changes are quarantined
	// as schema_mismatch (recovery: cdc-sink table alter, then redrive).
	WidenOff WideningMode = "off"
)

// ParseWideningMode validates a configured mode ("" = rewrite).
func ParseWideningMode(s string) (WideningMode, error) {
	switch m := WideningMode(s); m {
	case "":
		return WidenRewrite, nil
	case WidenRewrite, WidenTypeWidening, WidenOff:
		return m, nil
	}
	return "", fmt.Errorf("unknown widening mode %q (want rewrite, type_widening or off)", s)
}

// rewriteFiles rewrites every data file of the table with the (already
// installed, widened) table schema: all physical rows in the same order, so
// deletion vectors and the key index stay valid; each new file keeps its
// predecessor's deletion vector. The old adds are returned (for removal, or
// for revertSchema) and st.files point at the new ones.
func (t *Table) rewriteFiles(ctx context.Context, oldSchema *schema.StructType, p *plan, res *Result) (map[int32]*delta.Add, error) {
	st := t.st
	// Files are read with the schema they were written under (a Delta reader
	// rightly refuses long as double), then each column is converted to the
	// new type: exactly where normalize.Widen's rule is exact, long→double
	// rounding beyond 2^53 as documented.
	var names []string
	for _, f := range st.schema.Fields {
		if fieldIndex(oldSchema, f.Name) >= 0 {
			names = append(names, f.Name)
		}
	}
	now := t.opts.Now()
	old := make(map[int32]*delta.Add, len(st.files))
	for id, fs := range st.files {
		read, rows, err := t.ops.readColumnsAs(ctx, oldSchema, fs, names)
		if err != nil {
			return old, fmt.Errorf("rewrite %s with the new schema: %w", fs.add.Path, err)
		}
		cols := make([]arrow.Array, len(st.schema.Fields))
		for i, f := range st.schema.Fields {
			want := st.arrow.Field(i).Type
			j := slices.Index(names, f.Name)
			switch {
			case j < 0: // a column added with this schema change
				cols[i] = array.MakeArrayOfNull(memory.DefaultAllocator, want, int(rows))
			case arrow.TypeEqual(read[j].DataType(), want):
				cols[i] = read[j]
				cols[i].Retain()
			default:
				c, err := compute.CastArray(ctx, read[j], compute.UnsafeCastOptions(want))
				if err != nil {
					releaseAll(read)
					releaseAll(cols)
					return old, fmt.Errorf("rewrite %s: convert column %s from %s to %s: %w", fs.add.Path, f.Name, read[j].DataType(), want, err)
				}
				cols[i] = c
			}
		}
		releaseAll(read)
		rec := array.NewRecordBatch(st.arrow, cols, rows)
		releaseAll(cols)
		add, n, err := t.ops.writeData(ctx, st.schema, rec, now)
		rec.Release()
		if err != nil {
			return old, fmt.Errorf("rewrite %s with the widened schema: %w", fs.add.Path, err)
		}
		res.BytesWritten += n
		add.Tags = fs.add.Tags // same rows: same partition
		add.DeletionVector = fs.add.DeletionVector
		if add.DeletionVector != nil {
			add.Stats = tightBoundsFalse(add.Stats)
		}
		rm := delta.RemoveFile(*fs.add, now)
		if st.cdf {
			// Same rows, wider type: no row changed, so nothing for change
			// readers (the batch's own changes are in its change data file).
			rm.DataChange, add.DataChange = false, false
		}
		p.removes = append(p.removes, &rm)
		p.adds = append(p.adds, add)
		old[int32(id)] = fs.add
		delete(st.byPath, fs.add.Path)
		st.byPath[add.Path] = int32(id)
		fs.add = add
	}
	return old, nil
}

// dropRewrittenDVSwaps keeps one add per path: a file rewritten by this
// commit whose deletion vector the batch also changed is added once, with the
// new vector, and never removed (it did not exist before the commit).
func dropRewrittenDVSwaps(p *plan, rewritten map[int32]*delta.Add, st *state) {
	fresh := map[string]bool{}
	for id := range rewritten {
		fresh[st.files[id].add.Path] = true
	}
	last := map[string]int{}
	for i, a := range p.adds {
		last[a.Path] = i
	}
	adds := p.adds[:0]
	for i, a := range p.adds {
		if last[a.Path] == i {
			adds = append(adds, a)
		}
	}
	p.adds = adds
	rms := p.removes[:0]
	for _, r := range p.removes {
		if !fresh[r.Path] {
			rms = append(rms, r)
		}
	}
	p.removes = rms
}

// tightBoundsFalse marks a file's stats as not tight: with rows hidden, its
// min/max still bound the live rows but may not be reached (as Spark marks them).
func tightBoundsFalse(stats string) string {
	return strings.Replace(stats, `"tightBounds":true`, `"tightBounds":false`, 1)
}
