// Reading a history table back as changes: rebuilds, tests, audits.

package history

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/delta/schema"
	"github.com/cdcsink/cdc-sink/layout"
	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/versioning"
)

// Entry is one history row read back: the change as the sink received it
// (TOAST columns it did not carry are normalize.Unavailable again), what
// the current table did with it, and the batch that wrote it.
type Entry struct {
	Change  *normalize.Change
	Outcome string
	BatchID int64
}

// History is a history table opened for reading.
type History struct {
	Location string
	KeyCols  []string
	Source   string // cdcsink.historyOf
	// Redacted lists the columns privacy settings excluded or hashed: a
	// rebuild from such a history cannot reproduce the source's values.
	Excluded, Hashed []string
	snap             *delta.Snapshot
	sch              *schema.StructType
}

// OpenRead opens the history table at location for reading.
func OpenRead(ctx context.Context, location string, store delta.Storage, so delta.StorageOptions) (*History, error) {
	if store == nil {
		var err error
		if store, err = delta.OpenStorage(ctx, location, so); err != nil {
			return nil, err
		}
	}
	snap, err := delta.OpenTable(store, "").Snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("history %s: %w", location, err)
	}
	src, ok := snap.Config(layout.ConfHistoryOf)
	keys, _ := snap.Config(layout.ConfKeyColumns)
	if !ok || keys == "" {
		return nil, fmt.Errorf("history %s: no %s property: not a cdc-sink history table", location, layout.ConfHistoryOf)
	}
	sch, err := snap.Schema()
	if err != nil {
		return nil, fmt.Errorf("history %s: %w", location, err)
	}
	h := &History{Location: location, KeyCols: strings.Split(keys, ","), Source: src, snap: snap, sch: sch}
	if s, _ := snap.Config(layout.ConfHistExclude); s != "" {
		h.Excluded = strings.Split(s, ",")
	}
	if s, _ := snap.Config(layout.ConfHistHash); s != "" {
		h.Hashed = strings.Split(s, ",")
	}
	return h, nil
}

// Entries reads every history row whose source commit time is at most
// untilMicros (0: all), in the order the sink applied them: by batch, then
// topic, partition and offset.
func (h *History) Entries(ctx context.Context, untilMicros int64) ([]Entry, error) {
	lay, err := newLayout(h.sch, h.KeyCols)
	if err != nil {
		return nil, fmt.Errorf("history %s: %w", h.Location, err)
	}
	imgSchema := &normalize.Schema{}
	for _, f := range lay.image.Fields {
		nt, err := merge.NormalizeType(f.Type)
		if err != nil {
			return nil, fmt.Errorf("history %s: column %s: %w", h.Location, f.Name, err)
		}
		imgSchema.Columns = append(imgSchema.Columns, normalize.ColumnDef{Name: f.Name, Type: nt, Nullable: true})
	}
	// Deletes get their own schema object: merge keeps an in-batch image in
	// a tombstone only when the delete shares the upsert's *Schema, which
	// decoded streams do not (a delete's before image is decoded apart).
	delSchema := &normalize.Schema{Columns: imgSchema.Columns}
	id := tableID(h.Source)
	var out []Entry
	for rec, err := range h.snap.Scan(ctx, delta.ScanOptions{}) {
		if err != nil {
			return nil, fmt.Errorf("history %s: %w", h.Location, err)
		}
		e, err := entriesOf(rec, lay, imgSchema, delSchema, id)
		rec.Release()
		if err != nil {
			return nil, fmt.Errorf("history %s: %w", h.Location, err)
		}
		out = append(out, e...)
	}
	if untilMicros != 0 {
		out = until(out, untilMicros)
	}
	slices.SortStableFunc(out, func(a, b Entry) int {
		if a.BatchID != b.BatchID {
			return cmp64(a.BatchID, b.BatchID)
		}
		return byCoord(a, b)
	})
	return out, nil
}

// until keeps the entries committed at the source at or before us. A record
// without a source time (a Kafka tombstone) counts at the time of the
// record before it in its partition — the delete it follows — so a
// point-in-time rebuild does not apply the tombstone of a later delete.
func until(es []Entry, us int64) []Entry {
	slices.SortStableFunc(es, byCoord)
	out := es[:0]
	var prevTP normalize.Coord
	var prevTs int64
	for _, e := range es {
		c := e.Change.Coord
		if c.Topic != prevTP.Topic || c.Partition != prevTP.Partition {
			prevTP, prevTs = c, 0
		}
		ts := e.Change.SourceTsMicros
		if ts == 0 {
			ts = prevTs
		}
		prevTs = ts
		if ts <= us {
			out = append(out, e)
		}
	}
	return out
}

func byCoord(a, b Entry) int {
	{
		ca, cb := a.Change.Coord, b.Change.Coord
		if c := strings.Compare(ca.Topic, cb.Topic); c != 0 {
			return c
		}
		if ca.Partition != cb.Partition {
			return cmp64(int64(ca.Partition), int64(cb.Partition))
		}
		return cmp64(ca.Offset, cb.Offset)
	}
}

func cmp64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func tableID(s string) normalize.TableID {
	p := strings.Split(s, ".")
	var id normalize.TableID
	switch len(p) {
	case 1:
		id.Table = p[0]
	case 2:
		id.Schema, id.Table = p[0], p[1]
	case 3:
		id.Server, id.Schema, id.Table = p[0], p[1], p[2]
	default:
		id.Server, id.DB, id.Schema, id.Table = strings.Join(p[:len(p)-3], "."), p[len(p)-3], p[len(p)-2], p[len(p)-1]
	}
	return id
}

func entriesOf(rec arrow.RecordBatch, lay *layoutOf, img, delImg *normalize.Schema, id normalize.TableID) ([]Entry, error) {
	col := map[string]arrow.Array{}
	for i, f := range rec.Schema().Fields() {
		col[f.Name] = rec.Column(i)
	}
	get := func(name string, i int) any {
		a, ok := col[name]
		if !ok {
			return nil
		}
		return merge.ArrowValue(a, i)
	}
	out := make([]Entry, 0, rec.NumRows())
	for i := 0; i < int(rec.NumRows()); i++ {
		ts, _ := get(layout.ColSourceTs, i).(int64)
		op, _ := get(layout.ColOp, i).(string)
		ver, err := versioning.ParseVersion(fmt.Sprint(get(layout.ColVersion, i)))
		if err != nil {
			return nil, fmt.Errorf("row %d: %s: %w", i, layout.ColVersion, err)
		}
		c := &normalize.Change{Table: id, Version: ver, SourceTsMicros: ts}
		if op != "" {
			c.SourceOp = op[0]
		}
		c.Tombstone, _ = get(layout.HistTombstone, i).(bool)
		c.KeyMoved, _ = get(layout.HistKeyMoved, i).(bool)
		if c.Tombstone {
			c.SourceOp = 0
		}
		switch op {
		case "t":
			c.Op = normalize.OpTruncate
		case "d":
			c.Op = normalize.OpDelete
		default:
			c.Op = normalize.OpUpsert
		}
		if c.Op != normalize.OpTruncate {
			c.KeyNames = lay.keyCols
			c.Key = make([]any, len(lay.keyCols))
			for j, k := range lay.keyCols {
				c.Key[j] = get(k, i)
			}
		}
		image, sch := layout.HistAfter, img
		if c.Op == normalize.OpDelete {
			image, sch = layout.HistBefore, delImg
		}
		if row, ok := get(image, i).([]any); ok {
			c.Schema, c.Row = sch, row
			if un, ok := get(layout.HistUnavailable, i).([]any); ok {
				for _, n := range un {
					name, _ := n.(string)
					if j := sch.Index(name); j >= 0 {
						c.Row[j] = normalize.Unavailable
					}
				}
			}
		}
		if c.Op == normalize.OpUpsert {
			if row, ok := get(layout.HistBefore, i).([]any); ok {
				c.BeforeSchema, c.Before = img, row
			}
		}
		if ok, isKey := get(layout.HistOldKey, i).([]any); isKey {
			c.OldKey = ok
		}
		if tx, ok := get(layout.HistTxID, i).(int64); ok {
			c.TxID, c.HasTxID = tx, true
		}
		if topic, ok := get(layout.ColTopic, i).(string); ok {
			p, _ := get(layout.ColPartition, i).(int32)
			o, _ := get(layout.ColOffset, i).(int64)
			c.Coord = normalize.Coord{Topic: topic, Partition: p, Offset: o}
		}
		outcome, _ := get(layout.HistOutcome, i).(string)
		batch, _ := get(layout.ColBatchID, i).(int64)
		out = append(out, Entry{Change: c, Outcome: outcome, BatchID: batch})
	}
	return out, nil
}
