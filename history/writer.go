// Writer: appending a batch's accepted changes to a history table, idempotently per partition.

package history

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/uuid"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/delta/parquetio"
	"github.com/cdcsink/cdc-sink/delta/schema"
	"github.com/cdcsink/cdc-sink/layout"
	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/quarantine"
)

// The steps of a history write where Options.Fault is called (crash tests),
// in order; they come before any of the current table's merge.FaultPoints.
const (
	FaultHistoryDataWritten merge.FaultPoint = "history-data-written" // data files stored, not committed
	FaultHistoryAfterCommit merge.FaultPoint = "history-after-commit" // history committed, current table not yet written
	FaultSCD2AfterCommit    merge.FaultPoint = "scd2-after-commit"    // history and SCD2 table committed, current table not yet written
)

// Options configures a Writer.
type Options struct {
	// Sink names the txn appIds (<sink>/<topic>/<partition>: next offset
	// the history holds; <sink>: the current table's batch id).
	Sink    string
	Privacy Privacy
	// Storage, when set, holds the table instead of the storage derived
	// from the location (tests).
	Storage        delta.Storage
	StorageOptions delta.StorageOptions
	Now            func() time.Time
	Logger         *slog.Logger
	// Fault is the crash-test seam (nil in production), as merge.Options.Fault.
	Fault func(merge.FaultPoint) error
	// CheckpointInterval of new history tables (0 = 10).
	CheckpointInterval int
}

// Writer appends to one history table. Not safe for concurrent use.
type Writer struct {
	loc  string
	opts Options
	tbl  *delta.Table
	snap *delta.Snapshot // nil: no table yet
	lay  *layoutOf
	priv *tablePrivacy
}

// Open opens (or prepares to create on the first write) the history table at location.
func Open(ctx context.Context, location string, opts Options) (*Writer, error) {
	if opts.Sink == "" {
		return nil, errors.New("history: sink name is required")
	}
	if err := opts.Privacy.Validate(); err != nil {
		return nil, err
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.CheckpointInterval <= 0 {
		opts.CheckpointInterval = 10
	}
	store := opts.Storage
	if store == nil {
		var err error
		if store, err = delta.OpenStorage(ctx, location, opts.StorageOptions); err != nil {
			return nil, err
		}
	}
	w := &Writer{loc: location, opts: opts, tbl: delta.OpenTable(store, "")}
	if err := w.refresh(ctx); err != nil {
		return nil, err
	}
	return w, nil
}

// Location is the history table's location.
func (w *Writer) Location() string { return w.loc }

func (w *Writer) refresh(ctx context.Context) error {
	v, err := w.tbl.LatestVersion(ctx)
	if errors.Is(err, delta.ErrNotATable) {
		w.snap, w.lay = nil, nil
		return nil
	}
	if err != nil {
		return fmt.Errorf("history %s: %w", w.loc, err)
	}
	if w.snap != nil && w.snap.Version() == v {
		return nil
	}
	snap, err := w.tbl.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("history %s: %w", w.loc, err)
	}
	return w.install(snap)
}

func (w *Writer) install(snap *delta.Snapshot) error {
	sch, err := snap.Schema()
	if err != nil {
		return fmt.Errorf("history %s: %w", w.loc, err)
	}
	keys, _ := snap.Config(layout.ConfKeyColumns)
	if _, ok := snap.Config(layout.ConfHistoryOf); !ok || keys == "" {
		return fmt.Errorf("history %s: no %s/%s property: not a cdc-sink history table", w.loc, layout.ConfHistoryOf, layout.ConfKeyColumns)
	}
	lay, err := newLayout(sch, strings.Split(keys, ","))
	if err != nil {
		return fmt.Errorf("history %s: %w", w.loc, err)
	}
	w.snap, w.lay = snap, lay
	return nil
}

// NextOffset is the first offset of a partition the history does not hold.
func (w *Writer) NextOffset(topic string, partition int32) (int64, bool) {
	if w.snap == nil {
		return 0, false
	}
	return w.snap.TxnVersion(layout.OffsetAppID(w.opts.Sink, topic, partition))
}

// Input is one batch as the current table saw it.
type Input struct {
	BatchID  int64
	Changes  []*normalize.Change
	Outcomes []merge.Outcome // aligned with Changes
	// Offsets: the next offset per partition once the batch is applied.
	Offsets map[merge.TP]int64
}

// Write appends the batch's accepted changes (every outcome but rejected)
// the history does not hold yet — by its own per-partition offsets, so a
// batch replayed after a crash between the history's commit and the
// current table's writes nothing twice — in one commit that also advances
// those offsets. Returns the number of rows written.
func (w *Writer) Write(ctx context.Context, in Input) (int, error) {
	if err := w.refresh(ctx); err != nil {
		return 0, err
	}
	for attempt := 1; ; attempt++ {
		n, err := w.writeOnce(ctx, in)
		if err == nil || attempt >= 5 || !(errors.Is(err, delta.ErrConflict) || errors.Is(err, delta.ErrFenced)) {
			return n, err
		}
		// Another writer moved the history (a second instance during a
		// rebalance): re-read its offsets and filter again.
		w.opts.Logger.Info("history commit lost a race, re-reading", "history", w.loc, "attempt", attempt, "err", err)
		w.snap = nil
		if err := w.refresh(ctx); err != nil {
			return 0, err
		}
	}
}

func (w *Writer) writeOnce(ctx context.Context, in Input) (int, error) {
	keep := make([]int, 0, len(in.Changes))
	for i, c := range in.Changes {
		o := in.Outcomes[i]
		if o == 0 || o == merge.OutcomeRejected {
			continue
		}
		if c.Coord.Topic != "" {
			if next, ok := w.NextOffset(c.Coord.Topic, c.Coord.Partition); ok && c.Coord.Offset < next {
				continue // written before a crash: the history already holds it
			}
		}
		keep = append(keep, i)
	}
	moves := map[merge.TP]int64{}
	for tp, o := range in.Offsets {
		if cur, ok := w.NextOffset(tp.Topic, tp.Partition); !ok || o > cur {
			moves[tp] = o
		}
	}
	if len(keep) == 0 && len(moves) == 0 {
		return 0, nil
	}
	if w.priv == nil && len(keep) > 0 {
		// one writer records one source table
		w.priv = w.opts.Privacy.forTable(in.Changes[keep[0]].Table)
	}
	if w.snap == nil {
		first := firstKeyed(in.Changes, keep)
		if first == nil {
			return 0, nil // nothing to shape a table from (only truncates): progress is the current table's
		}
		if err := w.create(ctx, first); err != nil {
			return 0, err
		}
	}
	sch, evolved, widened, err := w.evolve(in.Changes, keep)
	if err != nil {
		return 0, quarantine.Errorf(quarantine.SchemaMismatch, "history %s: %v", w.loc, err)
	}
	lay := w.lay
	if evolved {
		if lay, err = newLayout(sch, w.lay.keyCols); err != nil {
			return 0, err
		}
	}
	meta := rowMeta{BatchID: in.BatchID, Now: w.opts.Now()}
	byDate := map[string][][]any{}
	var dates []string
	for _, i := range keep {
		c := in.Changes[i]
		r, err := lay.row(c, in.Outcomes[i], meta, w.priv)
		if err != nil {
			return 0, quarantine.Errorf(quarantine.SchemaMismatch, "history %s: record %s/%d@%d: %v", w.loc, c.Coord.Topic, c.Coord.Partition, c.Coord.Offset, err)
		}
		d := dateString(rowDate(c, meta.Now))
		if _, ok := byDate[d]; !ok {
			dates = append(dates, d)
		}
		byDate[d] = append(byDate[d], r)
	}
	sort.Strings(dates)
	arrowSchema := schema.ToArrow(sch)
	adds := make([]delta.Add, 0, len(dates))
	partCols := w.snap.PartitionColumns()
	for _, d := range dates {
		rec, err := buildRecord(arrowSchema, byDate[d])
		if err != nil {
			return 0, fmt.Errorf("history %s: batch %d: %w", w.loc, in.BatchID, err)
		}
		var buf bytes.Buffer
		st, err := parquetio.WriteFile(ctx, &buf, sch, []arrow.RecordBatch{rec}, parquetio.WriteOptions{PartitionColumns: partCols})
		rec.Release()
		if err != nil {
			return 0, fmt.Errorf("history %s: encode batch %d: %w", w.loc, in.BatchID, err)
		}
		add, err := w.tbl.PutDataFile(ctx, buf.Bytes(), st.StatsJSON, partCols, map[string]*string{layout.HistSourceDate: &d})
		if err != nil {
			return 0, fmt.Errorf("history %s: %w", w.loc, err)
		}
		adds = append(adds, add)
	}
	if err := w.fault(FaultHistoryDataWritten); err != nil {
		return 0, err
	}
	tx := w.tbl.Begin(w.snap).Add(adds...)
	if evolved {
		m := w.snap.Metadata()
		m.SchemaString = sch.String()
		p := w.snap.Protocol()
		upgraded := false
		if widened {
			// Delta type widening: the old files keep their narrow types and
			// read as the wide ones; none is rewritten.
			m.Configuration = maps.Clone(m.Configuration)
			m.Configuration["delta.enableTypeWidening"] = "true"
			if !p.HasFeature("typeWidening") && !p.HasFeature("typeWidening-preview") {
				p, upgraded = delta.WithReaderWriterFeature(p, "typeWidening"), true
			}
		}
		if schema.HasTimestampNTZ(sch) && !p.HasFeature("timestampNtz") {
			p, upgraded = delta.WithReaderWriterFeature(p, "timestampNtz"), true
		}
		if upgraded {
			tx.SetProtocol(p)
		}
		tx.SetMetadata(m)
		if widened {
			w.opts.Logger.Info("history follows widened source column types (Delta type widening)", "history", w.loc, "batch", in.BatchID)
		}
	}
	tps := make([]merge.TP, 0, len(moves))
	for tp := range moves {
		tps = append(tps, tp)
	}
	slices.SortFunc(tps, merge.TP.Compare)
	for _, tp := range tps {
		app := layout.OffsetAppID(w.opts.Sink, tp.Topic, tp.Partition)
		cur, ok := w.snap.TxnVersion(app)
		if !ok {
			cur = -1
		}
		// fenced if another writer moved it: then our rows may be its rows
		tx.ExpectTxn(app, cur)
		tx.SetAppTransaction(app, moves[tp])
	}
	tx.SetAppTransaction(w.opts.Sink, in.BatchID)
	params := map[string]any{"mode": "Append", "batchId": in.BatchID, "sink": w.opts.Sink, "rows": len(keep)}
	res, err := tx.CommitWithResult(ctx, "WRITE", params)
	if err != nil {
		return 0, historyErr(fmt.Errorf("history %s: commit batch %d: %w", w.loc, in.BatchID, err))
	}
	if res.CheckpointErr != nil {
		w.opts.Logger.Warn("history checkpoint failed", "history", w.loc, "err", res.CheckpointErr)
	}
	snap, err := w.tbl.Snapshot(ctx)
	if err != nil {
		w.snap = nil // re-read on the next write
	} else if err := w.install(snap); err != nil {
		return 0, err
	}
	if err := w.fault(FaultHistoryAfterCommit); err != nil {
		return 0, err
	}
	return len(keep), nil
}

// historyErr keeps a transient storage failure transient for the pipeline's retry loop.
func historyErr(err error) error {
	if delta.IsTransient(err) {
		return quarantine.Transient(err)
	}
	return err
}

func (w *Writer) fault(p merge.FaultPoint) error {
	if w.opts.Fault == nil {
		return nil
	}
	return w.opts.Fault(p)
}

func firstKeyed(cs []*normalize.Change, keep []int) *normalize.Change {
	var first *normalize.Change
	for _, i := range keep {
		c := cs[i]
		if c.Op == normalize.OpTruncate || len(c.KeyNames) == 0 {
			continue
		}
		if c.Schema != nil && c.Op == normalize.OpUpsert {
			return c
		}
		if first == nil {
			first = c
		}
	}
	return first
}

// create writes version 0 of the history table, shaped by the first change.
func (w *Writer) create(ctx context.Context, first *normalize.Change) error {
	priv := w.opts.Privacy.forTable(first.Table)
	if err := priv.checkKeys(first.KeyNames); err != nil {
		return err
	}
	keyTypes := make([]schema.DataType, len(first.KeyNames))
	for i := range first.KeyNames {
		t, err := keyTypeOf(first, i)
		if err != nil {
			return fmt.Errorf("create history %s: %w", w.loc, err)
		}
		keyTypes[i] = t
	}
	img, err := imageStruct(first.Schema, priv)
	if err != nil {
		return fmt.Errorf("create history %s: %w", w.loc, err)
	}
	sch, err := historySchema(first.KeyNames, keyTypes, img)
	if err != nil {
		return fmt.Errorf("create history %s: %w", w.loc, err)
	}
	id := first.Table
	now := w.opts.Now()
	meta := delta.Metadata{
		ID:               uuid.NewString(),
		Name:             id.Table + "_history",
		Format:           delta.Format{Provider: "parquet", Options: map[string]string{}},
		SchemaString:     sch.String(),
		PartitionColumns: []string{layout.HistSourceDate},
		Configuration: map[string]string{
			"delta.checkpointInterval": strconv.Itoa(w.opts.CheckpointInterval),
			layout.ConfKeyColumns:      strings.Join(first.KeyNames, ","),
			layout.ConfSink:            w.opts.Sink,
			layout.ConfHistoryOf:       strings.Trim(strings.Join([]string{id.Server, id.DB, id.Schema, id.Table}, "."), "."),
		},
		CreatedTime: ptr(now.UnixMilli()),
	}
	if s := priv.list(priv.exclude); s != "" {
		meta.Configuration[layout.ConfHistExclude] = s
	}
	if s := priv.list(priv.hashCols); s != "" {
		meta.Configuration[layout.ConfHistHash] = s
	}
	proto := delta.Protocol{MinReaderVersion: 1, MinWriterVersion: 2}
	if schema.HasTimestampNTZ(sch) {
		proto = delta.Protocol{MinReaderVersion: 3, MinWriterVersion: 7, ReaderFeatures: []string{"timestampNtz"}, WriterFeatures: []string{"timestampNtz"}}
	}
	if _, err := delta.Create(ctx, w.tbl.Store(), "", meta, proto); err != nil && !errors.Is(err, delta.ErrTableExists) {
		return historyErr(fmt.Errorf("create history %s: %w", w.loc, err))
	}
	w.snap = nil
	return w.refresh(ctx)
}

// evolve is the history schema after the kept changes: columns the source
// added are appended to the image structs (Delta schema evolution; older
// files read them as null); a column whose type is narrower than the
// history's is written in the history's type; a column whose source type
// widened (normalize.Widen, the rule the current table follows) is widened
// in the metadata only — Delta type widening, each change recorded in
// delta.typeChanges of the image field (key column, old key field) — so no
// history file is ever rewritten (widened: the table needs the feature).
// A widening Delta cannot express that way (long→double, date→timestamp)
// is refused, naming the column and both types.
func (w *Writer) evolve(cs []*normalize.Change, keep []int) (sch *schema.StructType, evolved, widened bool, err error) {
	cur := w.lay.sch
	out := cur
	seen := map[*normalize.Schema]bool{}
	for _, i := range keep {
		for _, s := range []*normalize.Schema{cs[i].Schema, cs[i].BeforeSchema} {
			if s == nil || seen[s] {
				continue
			}
			seen[s] = true
			inc, err := w.incoming(out, s)
			if err != nil {
				return nil, false, false, err
			}
			next, err := schema.Evolve(out, inc)
			if err != nil {
				// a widening, or a type change no history can follow
				if next, err = schema.EvolveWithOptions(out, inc, schema.EvolveOptions{AllowTypeWidening: true}); err != nil {
					return nil, false, false, explainEvolve(err)
				}
				widened = true
			}
			out = imagesInPlace(next)
		}
	}
	return out, !schema.Equal(cur, out), widened, nil
}

// incoming is the history schema a change of source schema s asks for:
// out with the images of s, and each key and image column in the type
// the history needs for it (historyType).
func (w *Writer) incoming(out *schema.StructType, s *normalize.Schema) (*schema.StructType, error) {
	img, err := imageStruct(s, w.priv)
	if err != nil {
		return nil, err
	}
	var have *schema.StructType
	if f, _ := out.Field(layout.HistAfter); f != nil {
		have, _ = f.Type.(*schema.StructType)
	}
	for _, f := range img.Fields {
		var hf *schema.StructField
		if have != nil {
			hf, _ = have.Field(f.Name)
		}
		if hf == nil || w.priv.hashed(f.Name) {
			continue // a new column (appended), or a digest (string whatever the source type)
		}
		f.Type = historyType(hf.Type, s.Columns[s.Index(f.Name)].Type, f.Type)
	}
	keyType := func(name string, have schema.DataType) schema.DataType {
		k := s.Index(name)
		if k < 0 || s.Columns[k].NullOnly {
			return have
		}
		in, err := merge.DeltaType(s.Columns[k].Type)
		if err != nil {
			return have // imageStruct reported a key it cannot map with the image
		}
		return historyType(have, s.Columns[k].Type, in)
	}
	inc := out.Clone()
	for _, f := range inc.Fields {
		switch {
		case f.Name == layout.HistBefore || f.Name == layout.HistAfter:
			f.Type = img
		case f.Name == layout.HistOldKey:
			if ok, isStruct := f.Type.(*schema.StructType); isStruct {
				for _, kf := range ok.Fields {
					kf.Type = keyType(kf.Name, kf.Type)
				}
			}
		case slices.Contains(w.lay.keyCols, f.Name):
			f.Type = keyType(f.Name, f.Type)
		}
	}
	return withImages(inc, img), nil // a history started without images gains them
}

// historyType is the type a history field of type have needs for a source
// column of type src (Delta type in): the common type of the two
// (normalize.Widen) — have itself when it is the wider — or in, which
// schema evolution then refuses as incompatible, when there is none.
func historyType(have schema.DataType, src normalize.Type, in schema.DataType) schema.DataType {
	haveN, err := merge.NormalizeType(have)
	if err != nil {
		return in
	}
	wide, ok := normalize.Widen(haveN, src)
	if !ok {
		return in
	}
	if normalize.TypeEqual(wide, haveN) {
		return have
	}
	wt, err := merge.DeltaType(wide)
	if err != nil {
		return in
	}
	return wt
}

// explainEvolve names a widening Delta type widening cannot express (so
// the history cannot follow it without rewriting its files): the column,
// both types, and what to do.
func explainEvolve(err error) error {
	var ie *schema.IncompatibleError
	if !errors.As(err, &ie) || ie.Old == nil || ie.New == nil {
		return err
	}
	on, err1 := merge.NormalizeType(ie.Old)
	nn, err2 := merge.NormalizeType(ie.New)
	if err1 != nil || err2 != nil {
		return err
	}
	if _, ok := normalize.Widen(on, nn); !ok {
		return err
	}
	col := ie.Column
	for _, p := range []string{layout.HistBefore + ".", layout.HistAfter + ".", layout.HistOldKey + "."} {
		col = strings.TrimPrefix(col, p)
	}
	return fmt.Errorf("column %s (history field %s): the source type widened from %s to %s, which Delta type widening cannot express "+
		"and history files are never rewritten; the current table can follow it, the history cannot: "+
		"point the history at a new location to start a new history table with this batch (docs/history.md, \"Type changes\")",
		col, ie.Column, ie.Old.TypeName(), ie.New.TypeName())
}

func buildRecord(sc *arrow.Schema, rows [][]any) (arrow.RecordBatch, error) {
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	b.Reserve(len(rows))
	for r, row := range rows {
		for i, fb := range b.Fields() {
			if err := merge.AppendValue(fb, row[i]); err != nil {
				return nil, fmt.Errorf("row %d column %s: %w", r, sc.Field(i).Name, err)
			}
		}
	}
	return b.NewRecordBatch(), nil
}

func ptr[T any](v T) *T { return &v }
