// SCD2: materializing the history's SCD type 2 view as its own Delta table, in the same batch.

package history

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/layout"
	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/cdcsink/cdc-sink/versioning"
)

// Columns the SCD2 table adds to the after image (docs/history.md, "SCD type 2").
const (
	SCD2Version   = "source_version" // the change's _cdc_source_version: with the key, the row's key
	SCD2ValidFrom = "valid_from"     // source commit time of the change
	SCD2ValidTo   = "valid_to"       // source commit time of the change (or truncate) that closed it; null while open
	SCD2IsCurrent = "is_current"
)

var scd2Cols = []normalize.ColumnDef{
	{Name: SCD2Version, Type: normalize.Type{Kind: normalize.String}},
	{Name: SCD2ValidFrom, Type: normalize.Type{Kind: normalize.Timestamp}, Nullable: true},
	{Name: SCD2ValidTo, Type: normalize.Type{Kind: normalize.Timestamp}, Nullable: true},
	{Name: SCD2IsCurrent, Type: normalize.Type{Kind: normalize.Boolean}},
}

// SCD2Options configures an SCD2 writer.
type SCD2Options struct {
	Sink           string
	Storage        delta.Storage
	StorageOptions delta.StorageOptions
	Logger         *slog.Logger
	Fault          func(merge.FaultPoint) error
	// Widening and ColumnMapping as the current table's (merge.Options);
	// a dropped source column is kept (older versions keep their values).
	Widening      merge.WideningMode
	ColumnMapping string
}

// SCD2 keeps the SCD type 2 table of one source table: one row per applied
// change that left a row (upserts), keyed by (source key, source_version),
// with valid_from / valid_to / is_current. It is a cdc-sink table written
// by the merge engine: a change opens its row (valid_to null, is_current
// true) and closes the key's previous open row — an upsert of that row with
// every image column unavailable, so the merge keeps the stored image and
// changes only valid_to and is_current (a deletion vector and one new row,
// O(batch)). The prior open row of a key is the current table's stored
// version of it before the batch (its key index), or the previous applied
// change in the batch. Each synthetic change carries the version of the
// change that caused it, so a replayed batch is a duplicate for the version
// guard, and the table's own per-partition offsets skip what it holds.
type SCD2 struct {
	t       *merge.Table
	schemas map[*normalize.Schema]*normalize.Schema
	// stored: the closing schema of stored rows, for the table columns
	// storedCols (one pointer while they stay: the merge caches by pointer)
	stored     *normalize.Schema
	storedCols string
}

// OpenSCD2 opens (or prepares to create) the SCD2 table at location.
func OpenSCD2(ctx context.Context, location string, opts SCD2Options) (*SCD2, error) {
	t, err := merge.Open(ctx, location, merge.Options{Sink: opts.Sink, Storage: opts.Storage, StorageOptions: opts.StorageOptions,
		Logger: opts.Logger, Fault: opts.Fault, Truncate: merge.TruncateIgnore,
		Widening: opts.Widening, ColumnMapping: opts.ColumnMapping})
	if err != nil {
		return nil, fmt.Errorf("scd2 table %s: %w", location, err)
	}
	return &SCD2{t: t, schemas: map[*normalize.Schema]*normalize.Schema{}}, nil
}

// Table is the SCD2 table's merge table (reads, tests).
func (s *SCD2) Table() *merge.Table { return s.t }

// CheckStart refuses an SCD2 table that would start after its current
// table: the open rows of keys changed before it would be missing, and
// closing them would write rows without images.
func (s *SCD2) CheckStart(cur *merge.Table) error {
	if s.t.Version() >= 0 {
		return nil
	}
	if live, _ := cur.LiveRows(); live > 0 { // tombstones have no open version
		return fmt.Errorf("scd2 table %s does not exist but the current table %s has rows: an SCD2 table starts with its current table "+
			"(build one from the history: `cdc-sink replay --from-history HISTORY --table NEW --scd2 NEW_SCD2`, then run on NEW with history.scd2 pointing at NEW_SCD2)", s.t.Dir(), cur.Dir())
	}
	return nil
}

type openRow struct {
	names  []string // source key columns
	key    []any
	ver    versioning.Version
	sch    *normalize.Schema // schema of the open row's change in this batch; nil: stored
	stored bool
}

// Write materializes the batch's applied changes (in.Outcomes) given the
// current table cur in its state before the batch.
func (s *SCD2) Write(ctx context.Context, cur *merge.Table, in Input) error {
	if err := s.CheckStart(cur); err != nil {
		return err
	}
	var truncs []*normalize.Change
	type group struct{ idx []int }
	groups := map[string]*group{}
	var order []string
	for i, c := range in.Changes {
		if in.Outcomes[i] != merge.OutcomeApplied {
			continue
		}
		if c.Op == normalize.OpTruncate {
			truncs = append(truncs, c)
			continue
		}
		k := string(merge.AppendKey(nil, c.Key))
		g, ok := groups[k]
		if !ok {
			g = &group{}
			groups[k] = g
			order = append(order, k)
		}
		g.idx = append(g.idx, i)
	}
	slices.SortStableFunc(truncs, func(a, b *normalize.Change) int { return a.Version.Compare(b.Version) })
	// firstTrunc: the first truncate of the batch newer than v, which closes
	// a row opened at v (the merge wipes stored rows older than a truncate;
	// changes of the batch older than it are stale, so never open rows).
	firstTrunc := func(v versioning.Version) *normalize.Change {
		for _, t := range truncs {
			if v.Less(t.Version) {
				return t
			}
		}
		return nil
	}
	var out []*normalize.Change
	stored := s.storedSchema() // nil: no table yet
	closedByTrunc := map[string]bool{}
	if len(truncs) > 0 && s.t.Version() >= 0 {
		rows, err := s.t.Rows(ctx)
		if err != nil {
			return fmt.Errorf("scd2 table %s: read open rows for a truncate: %w", s.t.Dir(), err)
		}
		keyNames := s.keyNames()
		sch := stored
		for _, r := range rows {
			if del, _ := r["_cdc_deleted"].(bool); del {
				continue
			}
			if cur, _ := r[SCD2IsCurrent].(bool); !cur {
				continue
			}
			vs, _ := r[SCD2Version].(string)
			v, err := versioning.ParseVersion(vs)
			if err != nil {
				return fmt.Errorf("scd2 table %s: row version %q: %w", s.t.Dir(), vs, err)
			}
			t := firstTrunc(v)
			if t == nil {
				continue
			}
			key := make([]any, len(keyNames))
			for i, n := range keyNames {
				key[i] = r[n]
			}
			closedByTrunc[string(merge.AppendKey(nil, key))] = true
			out = append(out, s.closing(sch, openRow{names: keyNames, key: key, ver: v, stored: true}, t))
		}
	}
	for _, k := range order {
		g := groups[k]
		slices.SortStableFunc(g.idx, func(a, b int) int { return in.Changes[a].Version.Compare(in.Changes[b].Version) })
		first := in.Changes[g.idx[0]]
		var open *openRow
		if v, live, ok := cur.Stored(first.Key); ok && live && !closedByTrunc[k] && firstTrunc(v) == nil {
			open = &openRow{names: first.KeyNames, key: first.Key, ver: v, stored: true}
		}
		for _, i := range g.idx {
			c := in.Changes[i]
			if open != nil {
				sch := open.sch
				if open.stored {
					sch = stored
				}
				if sch == nil {
					return fmt.Errorf("scd2 table %s: key %v has a live row in the current table and no SCD2 row to close", s.t.Dir(), open.key)
				}
				out = append(out, s.closing(sch, *open, c))
				open = nil
			}
			if c.Op != normalize.OpUpsert {
				continue // a delete closes, opens nothing
			}
			o, err := s.opening(c)
			if err != nil {
				return err
			}
			out = append(out, o)
			open = &openRow{names: c.KeyNames, key: c.Key, ver: c.Version, sch: o.Schema}
		}
	}
	// what the table already holds (a batch replayed after a crash before
	// the current table's commit)
	keep := out[:0]
	for _, c := range out {
		if next, ok := s.t.NextOffset(c.Coord.Topic, c.Coord.Partition); ok && c.Coord.Offset < next {
			continue
		}
		keep = append(keep, c)
	}
	from := map[merge.TP]int64{}
	for tp := range in.Offsets {
		n, ok := s.t.NextOffset(tp.Topic, tp.Partition)
		if !ok {
			n = -1
		}
		from[tp] = n
	}
	_, err := s.t.Apply(ctx, &merge.Batch{Changes: keep, Offsets: in.Offsets, From: from},
		func(_ context.Context, _ int64, rs []merge.Reject) error {
			if len(rs) == 0 {
				return nil
			}
			c := keep[rs[0].Index]
			return fmt.Errorf("scd2 table %s: record %s/%d@%d refused: %s: %s", s.t.Dir(), c.Coord.Topic, c.Coord.Partition, c.Coord.Offset, rs[0].Reason, rs[0].Message)
		})
	if err != nil {
		return fmt.Errorf("scd2 table %s: batch %d: %w", s.t.Dir(), in.BatchID, err)
	}
	return nil
}

func (s *SCD2) keyNames() []string {
	ks := s.t.KeyColumns()
	return ks[:len(ks)-1] // without source_version
}

// storedSchema is the schema of a closing change of a stored row: every
// column of the table (the image ones unavailable: kept by the merge).
func (s *SCD2) storedSchema() *normalize.Schema {
	if s.t.Version() < 0 {
		return nil
	}
	types := s.t.ColumnTypes()
	sch := &normalize.Schema{}
	var id strings.Builder
	for _, n := range s.t.Columns() {
		if layout.IsMetaColumn(n) {
			continue
		}
		sch.Columns = append(sch.Columns, normalize.ColumnDef{Name: n, Type: types[n], Nullable: true})
		fmt.Fprintf(&id, "%s %v;", n, types[n])
	}
	if s.stored != nil && s.storedCols == id.String() {
		return s.stored
	}
	s.stored, s.storedCols = sch, id.String()
	return sch
}

// scdSchema is the SCD2 row schema of a change's after image (one pointer
// per source schema: the merge caches column mappings by pointer).
func (s *SCD2) scdSchema(src *normalize.Schema) *normalize.Schema {
	if sch, ok := s.schemas[src]; ok {
		return sch
	}
	sch := &normalize.Schema{Columns: slices.Concat(src.Columns, scd2Cols), Fingerprint: src.Fingerprint ^ 0x5cd2}
	s.schemas[src] = sch
	return sch
}

func scdKey(c *normalize.Change) ([]string, []any) {
	return append(slices.Clone(c.KeyNames), SCD2Version), append(slices.Clone(c.Key), c.Version.String())
}

func sourceTs(c *normalize.Change) any {
	if c.SourceTsMicros == 0 {
		return nil // a Kafka tombstone: no source time (as the history's _cdc_source_ts)
	}
	return c.SourceTsMicros
}

// opening is the row of an applied upsert: its after image (TOAST columns
// Debezium did not send are null, as in the history's after image).
func (s *SCD2) opening(c *normalize.Change) (*normalize.Change, error) {
	for _, col := range scd2Cols {
		if c.Schema.Index(col.Name) >= 0 {
			return nil, quarantine.Errorf(quarantine.SchemaMismatch, "scd2 table %s: record %s/%d@%d: source column %s is also an SCD2 column: history.scd2 cannot materialize this table",
				s.t.Dir(), c.Coord.Topic, c.Coord.Partition, c.Coord.Offset, col.Name)
		}
	}
	sch := s.scdSchema(c.Schema)
	row := make([]any, 0, len(sch.Columns))
	for _, v := range c.Row {
		if normalize.IsUnavailable(v) {
			v = nil
		}
		row = append(row, v)
	}
	row = append(row, c.Version.String(), sourceTs(c), nil, true)
	o := *c
	o.KeyNames, o.Key = scdKey(c)
	o.Schema, o.Row = sch, row
	o.SourceOp, o.Op = 'c', normalize.OpUpsert
	o.Before, o.BeforeSchema, o.OldKey, o.KeyMoved, o.Tombstone = nil, nil, nil, false, false
	return &o, nil
}

// closing closes the open row r, on behalf of change by (the key's next
// applied change, or a truncate): valid_to and is_current change, every
// other column is kept by the merge (unavailable).
func (s *SCD2) closing(sch *normalize.Schema, r openRow, by *normalize.Change) *normalize.Change {
	names := r.names
	row := make([]any, len(sch.Columns))
	for j, col := range sch.Columns {
		switch col.Name {
		case SCD2Version:
			row[j] = r.ver.String()
		case SCD2ValidTo:
			row[j] = sourceTs(by)
		case SCD2IsCurrent:
			row[j] = false
		default:
			row[j] = normalize.Unavailable
			if k := slices.Index(names, col.Name); k >= 0 {
				row[j] = r.key[k]
			}
		}
	}
	return &normalize.Change{
		Table: by.Table, Op: normalize.OpUpsert, SourceOp: 'u',
		KeyNames: append(slices.Clone(names), SCD2Version), Key: append(slices.Clone(r.key), r.ver.String()),
		Schema: sch, Row: row, TxID: by.TxID, HasTxID: by.HasTxID, Position: by.Position, Version: by.Version,
		SourceTsMicros: by.SourceTsMicros, Coord: by.Coord,
	}
}
