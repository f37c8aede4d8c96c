// Planning and writing one commit: the new data file and the deletion vectors hiding replaced rows.

package merge

import (
	"context"
	"fmt"
	"sort"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/layout"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/versioning"
)

// plan is everything one commit writes.
type plan struct {
	adds      []*delta.Add
	removes   []*delta.Remove
	txns      []delta.Txn
	domains   []delta.DomainMetadata
	metadata  *delta.Metadata
	protocol  *delta.Protocol // nil: unchanged
	dvUpdates []dvUpdate
	newFiles  []newFile
	expect    []fence     // txn preconditions (Batch.From)
	cdcs      []delta.CDC // change data files (tables with Change Data Feed on)
	// winners judges concurrent commits by key (rebase.go); nil: the
	// commit reads the whole table (any concurrent data change conflicts).
	winners delta.WinnerCheck
	// blindTxn is a txn appId written without a read dependency (the
	// batch counter shared by instances without an instance id).
	blindTxn string
}

type dvUpdate struct {
	file   int32
	add    *delta.Add
	bitmap *roaring64.Bitmap
}

type newFile struct {
	add      *delta.Add
	rows     int64
	keys     []string
	ents     []uint32 // each key's index entry when the batch was folded (0: none; keyIndex.SetAt)
	versions []versioning.Version
	deleted  []bool
}

// write fills the stored values finals need, writes the new rows as one data
// file and the deletion vectors hiding the rows they replace.
func (t *Table) write(ctx context.Context, finals []*finalState, batchID int64, res *Result) (*plan, error) {
	st := t.st
	p := &plan{}
	if len(finals) == 0 {
		return p, nil
	}
	if err := t.fillFromStored(ctx, finals); err != nil {
		return nil, err
	}
	// Deterministic file content: rows ordered by key.
	sort.Slice(finals, func(i, j int) bool { return finals[i].Key < finals[j].Key })
	var before map[int][]any
	if st.cdf {
		// read before the index moves: the live images this batch replaces
		var err error
		if before, err = t.liveImages(ctx, finals); err != nil {
			return nil, err
		}
	}
	hide := map[int32][]uint64{}
	rows := make([][]any, len(finals))
	now := t.opts.Now()
	rc := t.rowConsts(batchID, now)
	// the rows' cells in one allocation: a slice per row was a million
	// small scanned objects per 1M-row bootstrap
	width := len(st.schema.Fields)
	cells := make([]any, len(finals)*width)
	for i, f := range finals {
		old, had := f.Stored.Loc, f.Stored.Exists
		if !f.Looked {
			old, had = st.index.Get(f.Key)
		}
		switch {
		case f.Deleted:
			res.Deleted++
		case had && !old.deleted:
			res.Updated++
		default:
			res.Inserted++
		}
		if had {
			hide[old.file] = append(hide[old.file], uint64(old.row))
		}
		row := cells[i*width : (i+1)*width : (i+1)*width]
		if err := t.tableRow(f, row, rc); err != nil {
			return nil, err
		}
		rows[i] = row
	}
	for _, g := range t.fileGroups(finals) {
		nf := newFile{rows: int64(len(g.rows))}
		grows := rows
		if len(g.rows) != len(finals) {
			grows = make([][]any, len(g.rows))
			for j, i := range g.rows {
				grows[j] = rows[i]
			}
		}
		nf.keys = make([]string, 0, len(g.rows))
		nf.versions = make([]versioning.Version, 0, len(g.rows))
		nf.deleted = make([]bool, 0, len(g.rows))
		nf.ents = make([]uint32, 0, len(g.rows))
		for _, i := range g.rows {
			f := finals[i]
			nf.keys = append(nf.keys, f.Key)
			nf.ents = append(nf.ents, f.Stored.Ent)
			nf.versions = append(nf.versions, f.Change.Version)
			nf.deleted = append(nf.deleted, f.Deleted)
		}
		rec, err := buildRecord(st.arrow, grows)
		if err != nil {
			return nil, err
		}
		add, n, err := t.ops.writeData(ctx, st.schema, rec, now)
		rec.Release()
		if err != nil {
			return nil, err // says "write data file …" already
		}
		if g.part != "" {
			add.Tags = map[string]string{layout.TagPartition: g.part}
		}
		res.BytesWritten += n
		nf.add = add
		p.adds = append(p.adds, add)
		p.newFiles = append(p.newFiles, nf)
	}
	if err := t.fault(FaultDataWritten); err != nil {
		return nil, err
	}
	if st.cdf {
		c, n, err := t.writeChangeData(ctx, finals, before, rows)
		if err != nil {
			return nil, err
		}
		res.BytesWritten += n
		p.cdcs = append(p.cdcs, c)
	}

	fileIDs := make([]int32, 0, len(hide))
	for id := range hide {
		fileIDs = append(fileIDs, id)
	}
	sort.Slice(fileIDs, func(i, j int) bool { return fileIDs[i] < fileIDs[j] })
	if len(fileIDs) == 0 {
		return p, nil
	}
	adds := make([]*delta.Add, len(fileIDs))
	bms := make([]*roaring64.Bitmap, len(fileIDs))
	for i, id := range fileIDs {
		fs := st.files[id]
		bm := roaring64.New()
		if fs.dv != nil {
			bm.Or(fs.dv)
		}
		bm.AddMany(hide[id])
		adds[i], bms[i] = fs.add, bm
	}
	newAdds, rms, n, err := t.ops.withDVs(ctx, adds, bms, now)
	if err != nil {
		return nil, fmt.Errorf("deletion vectors for %d files: %w", len(adds), err)
	}
	res.BytesWritten += n
	for i, id := range fileIDs {
		p.adds = append(p.adds, newAdds[i])
		p.removes = append(p.removes, rms[i])
		p.dvUpdates = append(p.dvUpdates, dvUpdate{file: id, add: newAdds[i], bitmap: bms[i]})
	}
	return p, nil
}

// fileGroup is the rows (indexes into the batch's finals) of one new data
// file, and the partition tag it carries ("" for none).
type fileGroup struct {
	part string
	rows []int
}

// fileGroups splits a batch's rows into its data files: one per partition
// with Options.PartitionAligned (rows without a partition go to one
// untagged file), else one file, tagged when all its rows come from one
// partition. Groups are in tag order, rows in key order: deterministic.
func (t *Table) fileGroups(finals []*finalState) []fileGroup {
	tags := partitionTags{}
	partOf := func(f *finalState) string {
		if f.Part != "" || f.Truncated {
			return f.Part
		}
		return tags.of(f.Change.Coord)
	}
	if !t.opts.PartitionAligned {
		g := fileGroup{part: partOf(finals[0]), rows: make([]int, len(finals))}
		for i, f := range finals {
			g.rows[i] = i
			if g.part != "" && partOf(f) != g.part {
				g.part = "" // rows of several partitions
			}
		}
		return []fileGroup{g}
	}
	byPart := map[string][]int{}
	for i, f := range finals {
		p := partOf(f)
		byPart[p] = append(byPart[p], i)
	}
	out := make([]fileGroup, 0, len(byPart))
	for p, rows := range byPart {
		out = append(out, fileGroup{part: p, rows: rows})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].part < out[j].part })
	return out
}

// rowConsts are what every row of one batch shares, boxed once: boxing
// them per row was an allocation per value.
type rowConsts struct {
	batchID, now any
	keyIdx       []int // table position of each key column, -1 if absent
	topic        string
	topicBox     any // topic boxed, for the last topic seen
}

func (t *Table) rowConsts(batchID int64, now interface{ UnixMicro() int64 }) *rowConsts {
	rc := &rowConsts{batchID: batchID, now: now.UnixMicro(), keyIdx: make([]int, len(t.st.keyCols))}
	for i, name := range t.st.keyCols {
		rc.keyIdx[i] = fieldIndex(t.st.schema, name)
	}
	return rc
}

// opBox holds each op letter boxed (a one-byte string).
var opBox = func() (b [256]any) {
	for i := range b {
		b[i] = string([]byte{byte(i)})
	}
	return b
}()

// tableRow lays one final state out in table column order, into row (of
// the table's width, all nil).
func (t *Table) tableRow(f *finalState, row []any, rc *rowConsts) error {
	st := t.st
	c := f.Change
	if f.Row != nil && c.Schema != nil {
		m := t.mapping(c.Schema)
		if m.err != nil {
			return m.err
		}
		for i, v := range f.Row {
			if normalize.IsUnavailable(v) {
				// Neither the batch nor the table had the value: store null
				// rather than the placeholder (docs/types.md, TOAST).
				v = nil
			}
			if m.idx[i] < 0 {
				continue
			}
			if cs := m.castAt(i); cs != nil {
				cv, err := normalize.Cast(v, cs.from, cs.to)
				if err != nil {
					return fmt.Errorf("key %v column %s: %w", c.Key, c.Schema.Columns[i].Name, err)
				}
				v = cv
			}
			row[m.idx[i]] = v
		}
	}
	for i, j := range rc.keyIdx {
		if j >= 0 && i < len(c.Key) {
			row[j] = c.Key[i]
		}
	}
	mi := &st.metaIdx
	row[mi[0]] = f.Deleted
	row[mi[1]] = c.Version.String()
	row[mi[2]] = opBox[f.Op]
	if c.SourceTsMicros != 0 {
		row[mi[3]] = c.SourceTsMicros
	}
	row[mi[4]] = rc.batchID
	row[mi[5]] = rc.now
	if c.Coord.Topic != "" {
		if rc.topicBox == nil || c.Coord.Topic != rc.topic {
			rc.topic, rc.topicBox = c.Coord.Topic, c.Coord.Topic
		}
		row[mi[6]] = rc.topicBox
		row[mi[7]] = c.Coord.Partition
		row[mi[8]] = c.Coord.Offset
	}
	return nil
}

func buildRecord(sc *arrow.Schema, rows [][]any) (arrow.RecordBatch, error) {
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	b.Reserve(len(rows))
	reserveData(b.Fields(), rows)
	for r, row := range rows {
		for i, fb := range b.Fields() {
			if err := appendValue(fb, row[i]); err != nil {
				return nil, fmt.Errorf("row %d column %s: %w", r, sc.Field(i).Name, err)
			}
		}
	}
	return b.NewRecordBatch(), nil
}

// reserveData sizes the value buffers of the string and binary columns
// for the rows about to be appended: grown by doubling instead, copying and
// zeroing the old buffers was a third of building a large batch's record
// (bench/README.md, bootstrap). One pass over the rows, row by row as they
// lie in memory (a pass per column missed the cache on every row).
func reserveData(fbs []array.Builder, rows [][]any) {
	type col struct {
		i int
		b interface{ ReserveData(int) }
		n int
	}
	var cols []col
	for i, fb := range fbs {
		switch bb := fb.(type) {
		case *array.StringBuilder:
			cols = append(cols, col{i: i, b: bb})
		case *array.BinaryBuilder:
			cols = append(cols, col{i: i, b: bb})
		}
	}
	if len(cols) == 0 {
		return
	}
	for _, row := range rows {
		for c := range cols {
			switch x := row[cols[c].i].(type) {
			case string:
				cols[c].n += len(x)
			case []byte:
				cols[c].n += len(x)
			}
		}
	}
	for _, c := range cols {
		if c.n > 0 {
			c.b.ReserveData(c.n)
		}
	}
}

// fillFromStored replaces Unavailable markers with the stored row's values.
func (t *Table) fillFromStored(ctx context.Context, finals []*finalState) error {
	need := map[int32][]*finalState{}
	from := map[*finalState]int64{} // row of the stored row that fills f, in its file
	for _, f := range finals {
		if !f.NeedStored {
			continue
		}
		key := f.Key
		if f.FillKey != "" {
			// A primary-key change: the old key's row holds the values.
			key = f.FillKey
		}
		l, ok := t.st.index.Get(key)
		switch {
		case !ok:
			continue // nothing stored: written as null
		case f.FillKey != "" && l.deleted:
			// The old key's tombstone from the delete half of this very change
			// (an earlier batch) kept the row's values.
			if l.ver.Compare(f.FillBefore) != 0 {
				continue
			}
		case l.deleted || (f.FillKey != "" && !l.ver.Less(f.FillBefore)):
			continue
		}
		need[l.file] = append(need[l.file], f)
		from[f] = int64(l.row)
	}
	for file, fs := range need {
		rowIdx := make([]int64, len(fs))
		for i, f := range fs {
			rowIdx[i] = from[f]
		}
		vals, err := t.ops.readRows(ctx, t.st, file, rowIdx)
		if err != nil {
			return fmt.Errorf("read stored rows of %s: %w", t.st.files[file].add.Path, err)
		}
		for i, f := range fs {
			stored := vals[i]
			row := append([]any(nil), f.Row...)
			for j, v := range row {
				if !normalize.IsUnavailable(v) {
					continue
				}
				k := fieldIndex(t.st.schema, f.Change.Schema.Columns[j].Name)
				if k >= 0 && stored != nil {
					row[j] = stored[k]
				}
			}
			f.Row = row
			f.NeedStored = false
		}
	}
	return nil
}

// truncateFinals turns every live stored row older than the truncate into a
// tombstone (unless the batch already decided that key).
func (t *Table) truncateFinals(ctx context.Context, f *foldResult) ([]*finalState, error) {
	tr := f.Truncate
	st := t.st
	decided := map[string]bool{}
	for _, fin := range f.Finals {
		decided[fin.Key] = true
	}
	byFile := map[int32][]string{}
	rowOf := map[string]int32{}
	for k, l := range t.st.index.All() {
		if l.deleted || decided[k] || !l.ver.Less(tr.Version) {
			continue
		}
		byFile[l.file] = append(byFile[l.file], k)
		rowOf[k] = l.row
	}
	var out []*finalState
	for file, keys := range byFile {
		sort.Strings(keys)
		rowIdx := make([]int64, len(keys))
		for i, k := range keys {
			rowIdx[i] = int64(rowOf[k])
		}
		vals, err := t.ops.readRows(ctx, t.st, file, rowIdx)
		if err != nil {
			return nil, err
		}
		for i, k := range keys {
			stored := vals[i]
			key := make([]any, len(t.st.keyCols))
			for j, name := range t.st.keyCols {
				key[j] = stored[fieldIndex(t.st.schema, name)]
			}
			ch := &normalize.Change{Table: tr.Table, Op: normalize.OpDelete, SourceOp: 't', KeyNames: t.st.keyCols,
				Key: key, Version: tr.Version, SourceTsMicros: tr.SourceTsMicros, Coord: tr.Coord,
				Schema: t.storedSchema()}
			// Keep the last image: business columns of the stored row.
			m := st.colMaps[ch.Schema]
			row := make([]any, len(ch.Schema.Columns))
			for j := range row {
				row[j] = stored[m.idx[j]]
			}
			out = append(out, &finalState{Key: k, Change: ch, Deleted: true, Row: row, Op: 't', Truncated: true, Part: st.files[file].part})
		}
	}
	return out, nil
}

// storedSchema is the table's business columns as a normalize.Schema (cached),
// so stored images can travel through the same row layout code.
func (t *Table) storedSchema() *normalize.Schema {
	st := t.st
	for s := range st.colMaps {
		if s.Fingerprint == ^uint64(0) {
			return s
		}
	}
	s := &normalize.Schema{Fingerprint: ^uint64(0)}
	m := &colMap{}
	for i, f := range st.schema.Fields {
		if layout.IsMetaColumn(f.Name) {
			continue
		}
		s.Columns = append(s.Columns, normalize.ColumnDef{Name: f.Name, Nullable: true})
		m.idx = append(m.idx, i)
	}
	st.colMaps[s] = m
	return s
}
