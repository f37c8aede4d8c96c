// Table: opening a cdc-sink table, its options, and Apply, the version-guarded MERGE of one batch.

package merge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
	"github.com/apache/arrow-go/v18/arrow"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/delta/schema"
	"github.com/cdcsink/cdc-sink/layout"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/cdcsink/cdc-sink/versioning"
)

// TruncateMode says what a source truncate (op=t) does.
type TruncateMode string

const (
	TruncateApply  TruncateMode = "apply"  // tombstone every row older than the truncate
	TruncateIgnore TruncateMode = "ignore" // count and skip it
)

// Options configures a Table.
type Options struct {
	// Sink is the sink name: prefix of the txn appIds (batch counter,
	// per-partition offsets), and owner recorded in the table.
	Sink string
	// InstanceID is this instance's stable name among the instances of the
	// sink writing one table (a pod name): its batch counter is the txn
	// appId "<sink>@<InstanceID>" (layout.BatchAppID), so instances do not
	// all conflict on one appId. Empty: "<sink>", the single-instance
	// layout. Letters, digits, '.', '_' or '-'.
	InstanceID string
	// Instance names this process in each commit's commitInfo
	// (operationParameters.instance) for audits of who advanced what.
	// Default: InstanceID, else host name and process id.
	Instance string
	// AllowForeignSink lets this sink write a table created by another sink.
	AllowForeignSink bool
	Truncate         TruncateMode
	// CheckpointInterval for new tables (delta.checkpointInterval); 0 = 10.
	CheckpointInterval int
	// MaxCommitAttempts bounds re-plans after a concurrent writer changed
	// what the batch read (0 = 100); ConflictBudget bounds their time
	// (0 = 2m). Then Apply fails with ErrGaveUp. Generous: with today's
	// layout two instances hiding rows in one shared file (the initial
	// snapshot's) conflict on every race, and a batch bigger than the
	// other instance's can lose many in a row before it wins.
	MaxCommitAttempts int
	ConflictBudget    time.Duration
	Logger            *slog.Logger
	Now               func() time.Time
	// Widening says how a column whose source type widened is followed
	// ("" = WidenRewrite).
	Widening WideningMode
	// OnDropColumn says what happens to a column the source dropped ("" = DropKeep).
	OnDropColumn DropMode
	// ColumnMapping of tables this sink creates: ColumnMappingNone (default)
	// or ColumnMappingName. Existing tables keep theirs.
	ColumnMapping string
	// ChangeDataFeed creates tables with Delta's Change Data Feed on
	// (delta.enableChangeDataFeed=true, writer feature changeDataFeed), and
	// refuses to open an existing table that has it off (enable it with
	// `cdc-sink table set-property`). Whatever this says, commits to a table
	// with the feed on carry its change data (cdf.go).
	ChangeDataFeed bool
	// PartitionAligned writes each batch as one data file per Kafka
	// partition (tagged layout.TagPartition), so that instances owning
	// different partitions hide rows in different files and never
	// conflict, and scopes the key index to the partitions this instance
	// writes: other partitions' keys are only located by a 64-bit hash
	// (partindex.go, docs/table-layout.md "Partition-aligned layout").
	// Tables are interchangeable between the two modes.
	PartitionAligned bool
	// Fault is a test seam, nil in production: when set it is called at
	// each FaultPoint of a commit, and an error aborts Apply there without
	// any clean-up, as a crash would (crash-safety and fencing tests, also
	// from cmd/cdc-sink, which is why it is not in an export_test.go).
	Fault func(FaultPoint) error
	// Storage, when set, holds the table (rooted at it) instead of the
	// storage Open derives from the location (tests: delta.MemStorage,
	// storagetest.Faulty).
	Storage delta.Storage
	// StorageOptions configure the object store backend when Storage is nil.
	StorageOptions delta.StorageOptions
}

// ErrForeignSink is returned when the table belongs to another sink name.
var ErrForeignSink = errors.New("table is owned by another sink")

// ErrChangeDataFeedOff: Options.ChangeDataFeed asks for the feed, but the
// existing table does not have it on.
var ErrChangeDataFeedOff = errors.New("change data feed is not enabled on the table")

// Table applies micro-batches to one Delta table: a version-guarded MERGE
// (insert / update / logical delete) committed atomically with the sink's
// batch id, the source offsets and the versioning state.
//
// Rows are never rewritten in place: a replaced or deleted row is hidden by a
// deletion vector on its file and its new image is appended in a new file, so
// a batch costs O(batch), not O(table). Table keeps a key → (file, row,
// version) index in memory, rebuilt from the table on open.
type Table struct {
	dir  string
	opts Options
	ops  *deltaOps
	st   *state // nil while the table does not exist
	// pending: offsets of batches that were quarantined whole before the
	// table existed (progress.go); taken over by the first commit.
	pending *pendingProgress
	// released: partitions (layout tags) this instance no longer writes,
	// dropped from the key index at the next Refresh (Release, partindex.go).
	relMu    sync.Mutex
	released map[string]bool
}

type loc struct {
	file    int32
	row     int32
	ver     versioning.Version
	deleted bool
}

type fileState struct {
	add  *delta.Add
	dv   *roaring64.Bitmap // nil: no deleted rows
	rows int64             // physical rows
	live int64             // rows not in dv
	// part is the file's layout.TagPartition ("": rows of any partition);
	// indexed: its live rows are in the key index (else, in a scoped
	// state, in foreignKeys: partindex.go).
	part    string
	indexed bool
}

type state struct {
	version int64
	meta    *delta.Metadata
	proto   delta.Protocol
	schema  *schema.StructType
	arrow   *arrow.Schema
	keyCols []string
	files   []*fileState
	byPath  map[string]int32
	index   *keyIndex
	// foreign and adopted: the partition-scoped index (Options.PartitionAligned,
	// partindex.go); foreign is nil when every file is in index.
	foreign *foreignKeys
	adopted map[string]bool
	offsets map[TP]int64
	tracker []versioning.PartitionState
	domains map[string]string // every domain metadata of the table but the trackers'
	batchID int64             // this instance's batch counter (txn layout.BatchAppID)
	topID   int64             // highest batch id of any instance of the sink
	colMaps map[*normalize.Schema]*colMap
	metaIdx [9]int // positions of the metadata columns, in metaFields order
	// cdf: the table has Change Data Feed on, so every batch commit carries
	// a change data file (cdf.go).
	cdf bool
}

// setSchema installs a (new) table schema and the derived lookups.
func (st *state) setSchema(s *schema.StructType) error {
	st.schema = s
	st.arrow = schema.ToArrow(s)
	st.colMaps = map[*normalize.Schema]*colMap{}
	for i, f := range metaFields() {
		j := fieldIndex(s, f.Name)
		if j < 0 {
			return fmt.Errorf("table schema lacks metadata column %s: not a cdc-sink table", f.Name)
		}
		st.metaIdx[i] = j
	}
	return nil
}

// Open opens the table at dir (a location: see delta.ParseLocation), or prepares to create it on
// the first batch. The key index is rebuilt from the table's files.
func Open(ctx context.Context, dir string, opts Options) (*Table, error) {
	if opts.Sink == "" {
		return nil, errors.New("merge: sink name is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.InstanceID != "" && !validInstanceID(opts.InstanceID) {
		return nil, fmt.Errorf("merge: instance id %q: must be 1-64 letters, digits, '.', '_' or '-'", opts.InstanceID)
	}
	if opts.Instance == "" {
		opts.Instance = opts.InstanceID
	}
	if opts.Instance == "" {
		host, _ := os.Hostname()
		opts.Instance = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Truncate == "" {
		opts.Truncate = TruncateApply
	}
	if opts.Widening == "" {
		opts.Widening = WidenRewrite
	}
	if opts.MaxCommitAttempts <= 0 {
		opts.MaxCommitAttempts = 100
	}
	if opts.ConflictBudget <= 0 {
		opts.ConflictBudget = 2 * time.Minute
	}
	if opts.CheckpointInterval <= 0 {
		opts.CheckpointInterval = 10
	}
	ops, err := newDeltaOps(ctx, dir, opts.Storage, opts.StorageOptions)
	if err != nil {
		return nil, err
	}
	ops.logger, ops.fault = opts.Logger, opts.Fault
	t := &Table{dir: dir, opts: opts, ops: ops}
	if err := t.reload(ctx); err != nil {
		return nil, err
	}
	return t, nil
}

// Dir is the table location.
func (t *Table) Dir() string { return t.dir }

// Version is the table version the Table last saw or wrote (-1: no table yet).
func (t *Table) Version() int64 {
	if t.st == nil {
		return -1
	}
	return t.st.version
}

// NextOffset implements pipeline.Table.
func (t *Table) NextOffset(topic string, partition int32) (int64, bool) {
	tp := TP{topic, partition}
	if t.st != nil {
		if o, ok := t.st.offsets[tp]; ok || t.pending == nil {
			return o, ok
		}
	}
	o, ok := t.pending.offsets()[tp]
	return o, ok
}

// Offsets returns the next offset per partition recorded in the table.
func (t *Table) Offsets() map[TP]int64 {
	out := map[TP]int64{}
	if t.st != nil {
		for k, v := range t.st.offsets {
			out[k] = v
		}
	}
	return out
}

// TrackerState implements pipeline.Table.
func (t *Table) TrackerState() []versioning.PartitionState {
	if t.st == nil {
		return nil
	}
	return t.st.tracker
}

// Domain is the configuration of a domain metadata of the table as of the
// last commit this process read or wrote (Batch.Domains); ok is false when
// the table has none (or does not exist yet).
func (t *Table) Domain(name string) (string, bool) {
	if t.st == nil {
		return "", false
	}
	cfg, ok := t.st.domains[name]
	return cfg, ok
}

// LastBatchID is this instance's last committed batch id (0: none).
func (t *Table) LastBatchID() int64 {
	if t.st == nil {
		return 0
	}
	return t.st.batchID
}

// LiveRows counts rows that are not tombstones, and tombstones.
func (t *Table) LiveRows() (live, deleted int) {
	if t.st == nil {
		return 0, 0
	}
	deleted = t.st.index.Deleted()
	live = t.st.index.Len() - deleted
	if t.st.scoped() {
		t.st.foreign.each(func(v uint64) {
			if _, _, del := unpackForeign(v); t.st.rowDead(v) {
				return
			} else if del {
				deleted++
			} else {
				live++
			}
		})
	}
	return live, deleted
}

func offsetAppID(sink string, tp TP) string { return layout.OffsetAppID(sink, tp.Topic, tp.Partition) }

// reload reads the latest snapshot and rebuilds the in-memory state.
func (t *Table) reload(ctx context.Context) error {
	snap, err := t.ops.latest(ctx)
	if err != nil {
		return err
	}
	if snap == nil {
		t.st = nil
		t.pending, err = t.loadPending(ctx)
		return err
	}
	st, err := t.loadState(ctx, snap)
	if err != nil {
		return err
	}
	t.st = st
	if st.batchID == 0 && t.pending == nil {
		// created, but no batch of ours committed yet (a crash in between):
		// table-less progress may still be waiting to be taken over
		if t.pending, err = t.loadPending(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (t *Table) loadState(ctx context.Context, snap *snapshotView) (*state, error) {
	meta := snap.meta
	if owner := meta.Configuration[layout.ConfSink]; owner != "" && owner != t.opts.Sink && !t.opts.AllowForeignSink {
		return nil, fmt.Errorf("%w: table %s belongs to sink %q, this is %q", ErrForeignSink, t.dir, owner, t.opts.Sink)
	}
	keyConf := meta.Configuration[layout.ConfKeyColumns]
	if keyConf == "" {
		return nil, fmt.Errorf("table %s has no %s property: not a cdc-sink table", t.dir, layout.ConfKeyColumns)
	}
	st := &state{
		version: snap.version,
		meta:    meta,
		proto:   snap.snap.Protocol(),
		keyCols: strings.Split(keyConf, ","),
		byPath:  map[string]int32{},
		index:   newKeyIndex(),
		offsets: map[TP]int64{},
	}
	if err := st.setSchema(snap.schema); err != nil {
		return nil, fmt.Errorf("table %s: %w", t.dir, err)
	}
	if t.opts.PartitionAligned {
		st.foreign = newForeignKeys(st.index.seed)
		st.adopted = map[string]bool{}
	}
	st.cdf = delta.ChangeDataFeedEnabled(&st.proto, meta)
	if t.opts.ChangeDataFeed && !st.cdf {
		return nil, fmt.Errorf("%w: table %s has %s off; enable it first with `cdc-sink table set-property %s %s=true` "+
			"(the feed then starts at that version), or turn tables.change_data_feed off", ErrChangeDataFeedOff, t.dir,
			delta.ConfEnableChangeDataFeed, t.dir, delta.ConfEnableChangeDataFeed)
	}
	ownBatch := layout.BatchAppID(t.opts.Sink, t.opts.InstanceID)
	for app, v := range snap.txns {
		if _, ok := layout.ParseBatchAppID(t.opts.Sink, app); ok {
			st.topID = max(st.topID, v)
			if app == ownBatch {
				st.batchID = v
			}
		} else if topic, p, ok := layout.ParseOffsetAppID(t.opts.Sink, app); ok {
			st.offsets[TP{topic, p}] = v
		}
	}
	tracker, err := ReadTracker(t.opts.Sink, snap.domains)
	if err != nil {
		return nil, fmt.Errorf("table %s: %w", t.dir, err)
	}
	st.tracker = tracker
	st.domains = map[string]string{}
	for d, cfg := range snap.domains {
		if _, _, _, ok := layout.ParseTrackerDomain(t.opts.Sink, d); !ok {
			st.domains[d] = cfg
		}
	}
	for _, a := range snap.files {
		fs := &fileState{add: a, rows: -1, part: filePartition(a)}
		if a.DeletionVector != nil {
			bm, err := t.ops.readDV(ctx, a.DeletionVector)
			if err != nil {
				return nil, fmt.Errorf("table %s: deletion vector of %s: %w", t.dir, a.Path, err)
			}
			fs.dv = bm
		}
		st.byPath[a.Path] = int32(len(st.files))
		st.files = append(st.files, fs)
	}
	if err := t.indexFiles(ctx, st); err != nil {
		return nil, fmt.Errorf("table %s: rebuild key index: %w", t.dir, err)
	}
	return st, nil
}

// colMap maps one source schema onto the table schema.
type colMap struct {
	idx  []int       // source column i → table column idx[i]
	cast []*castSpec // source column i → conversion to the table's (wider) type; nil: none
	err  error       // schema_mismatch for changes with this schema
}

func (m *colMap) castAt(i int) *castSpec {
	if i < len(m.cast) {
		return m.cast[i]
	}
	return nil
}

// castSpec converts a source value to the table column's type, which is
// wider (normalize.Widen): the column was widened earlier, or a redelivered
// change predates the widening.
type castSpec struct{ from, to normalize.Type }

func (t *Table) mapping(s *normalize.Schema) *colMap {
	if m, ok := t.st.colMaps[s]; ok {
		return m
	}
	m := &colMap{idx: make([]int, len(s.Columns)), cast: make([]*castSpec, len(s.Columns))}
	for i, c := range s.Columns {
		j := fieldIndex(t.st.schema, c.Name)
		if c.NullOnly {
			// A schemaless column seen only as null has no real type yet:
			// its values are null whatever the table's type (-1: not stored).
			m.idx[i] = j
			continue
		}
		if j < 0 {
			if _, ok := t.st.dropped()[c.Name]; ok {
				m.idx[i] = -1 // dropped from the table: an older change's value is ignored
				continue
			}
			m.err = fmt.Errorf("column %s is not in the table schema", c.Name)
			break
		}
		have := t.st.schema.Fields[j].Type
		haveN, err := normalizeType(have)
		if err != nil {
			m.err = quarantine.Errorf(quarantine.SchemaMismatch, "column %s: table type %s: %v", c.Name, have.TypeName(), err)
			break
		}
		if !normalize.TypeEqual(haveN, c.Type) {
			w, ok := normalize.Widen(haveN, c.Type)
			if !ok || !normalize.TypeEqual(w, haveN) {
				m.err = t.mismatch(c.Name, haveN, c.Type, ok)
				break
			}
			m.cast[i] = &castSpec{from: c.Type, to: haveN}
		}
		m.idx[i] = j
	}
	t.st.colMaps[s] = m
	return m
}

// mismatch explains why a change of column col (type in) cannot be written
// to the table's column (type have); widenable: a common wider type exists
// but evolve did not apply it (a key column, or schema.widening off).
func (t *Table) mismatch(col string, have, in normalize.Type, widenable bool) error {
	const fix = "see docs/runbook.md (a column changed type): cdc-sink table alter, then quarantine redrive"
	switch {
	case !widenable:
		return quarantine.Errorf(quarantine.SchemaMismatch, "column %s: table has %s, change has %s: incompatible types (%s)", col, have, in, fix)
	case slices.Contains(t.st.keyCols, col):
		return quarantine.Errorf(quarantine.SchemaMismatch, "column %s: table has %s, change has %s: key columns widen only between integer types or between decimals (%s)", col, have, in, fix)
	default:
		return quarantine.Errorf(quarantine.SchemaMismatch, "column %s: table has %s, change has %s: a widening, but this sink does not widen columns (schema.widening: %s) (%s)", col, have, in, t.opts.Widening, fix)
	}
}

func fieldIndex(s *schema.StructType, name string) int {
	for i, f := range s.Fields {
		if f.Name == name {
			return i
		}
	}
	return -1
}

// Apply applies one batch. reject is called, before anything is committed,
// with the changes the merge refuses; if it fails nothing is committed. A
// batch whose changes and offsets the table already reflects commits nothing.
func (t *Table) Apply(ctx context.Context, b *Batch, reject func(ctx context.Context, batchID int64, rs []Reject) error) (*Result, error) {
	// Another process (a second sink instance, optimize, purge) may have
	// committed since our last look: plan against the current table.
	if err := t.Refresh(ctx); err != nil {
		return nil, err
	}
	// The one owner of re-plans: bounded by attempts and by time, with
	// jittered backoff (instances racing for one table must not re-collide
	// in lockstep). delta only rebases over commits that do not conflict.
	// Rejects go to the caller once per batch, not once per attempt: a
	// re-plan finds the same ones again (the first call always happens, so
	// a caller can flush what it rejected itself).
	sent, called := map[int]bool{}, false
	once := func(ctx context.Context, batchID int64, rs []Reject) error {
		fresh := make([]Reject, 0, len(rs))
		for _, r := range rs {
			if !sent[r.Index] {
				fresh = append(fresh, r)
			}
		}
		if called && len(fresh) == 0 {
			return nil
		}
		if err := reject(ctx, batchID, fresh); err != nil {
			return err
		}
		called = true
		for _, r := range fresh {
			sent[r.Index] = true
		}
		return nil
	}
	var lastErr error
	start := time.Now()
	back := 5 * time.Millisecond
	attempt := 0
	for {
		res, err := t.applyOnce(ctx, b, once)
		attempt++
		if err == nil {
			res.Attempts, res.Conflicts = attempt, attempt-1
			return res, nil
		}
		if errors.Is(err, ErrFenced) || !errors.Is(err, ErrReplan) {
			// fenced: never re-planned (the caller re-reads its progress)
			return nil, err
		}
		lastErr = err
		wait := back/2 + rand.N(back)
		if attempt >= t.opts.MaxCommitAttempts || time.Since(start)+wait > t.opts.ConflictBudget {
			break
		}
		t.opts.Logger.Info("concurrent commit won, re-planning batch", "table", t.dir, "attempt", attempt, "err", err)
		if err := t.reload(ctx); err != nil {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, errors.Join(lastErr, ctx.Err())
		case <-time.After(wait):
		}
		back = min(2*back, 250*time.Millisecond) // a loser that waits long only loses again
	}
	// Not transient: retrying the batch later would race the same writers
	// again, for ever; the run stops and says why.
	return nil, fmt.Errorf("table %s: %w (%d attempts in %v): %w", t.dir, ErrGaveUp, attempt, time.Since(start).Round(time.Millisecond), lastErr)
}

// ErrReplan marks a commit attempt that lost to a concurrent commit which
// changed what the batch read (a key of the batch, a file it rewrites, the
// metadata): Apply reloads and plans the batch again. Apply itself returns
// it only wrapped in ErrGaveUp.
var ErrReplan = errors.New("a concurrent commit changed what the batch read: re-plan")

// ErrGaveUp: the batch was re-planned Options.MaxCommitAttempts times, or
// for Options.ConflictBudget, and lost the commit race every time.
// Permanent (not quarantine.IsTransient): the pipeline does not retry it.
var ErrGaveUp = errors.New("gave up re-planning a batch that kept losing to concurrent commits")

func (t *Table) applyOnce(ctx context.Context, b *Batch, reject func(context.Context, int64, []Reject) error) (_ *Result, err error) {
	res := &Result{}
	foldStart := time.Now()
	// Changes the table already covers by offset were filtered by the caller;
	// here only the content decides.
	var rejects []Reject
	if t.st == nil {
		first := firstSchemaChange(b.Changes)
		if first == nil {
			// Nothing creatable (only deletes of unseen keys without schema, or
			// only rejects): the table is created by the first upsert.
			if len(b.Changes) > 0 {
				first = b.Changes[0]
			}
		}
		if first != nil {
			if err := t.create(ctx, first); err != nil {
				return nil, err
			}
		} else {
			// No table and nothing to write: quarantine what was bad, then
			// record how far we got, so a restart does not quarantine it again.
			batchID := int64(1)
			if t.pending != nil {
				batchID = t.pending.BatchID + 1
			}
			if err := reject(ctx, batchID, nil); err != nil {
				return nil, err
			}
			moves := false
			cur := t.pending.offsets()
			for tp, o := range b.Offsets {
				if c, ok := cur[tp]; !ok || o > c {
					moves = true
				}
			}
			if moves {
				if err := t.savePending(ctx, batchID, b.Offsets); err != nil {
					return nil, err
				}
				res.BatchID = batchID
			}
			return res, nil
		}
	}
	expect, err := t.checkFence(b)
	if err != nil {
		return nil, err
	}
	// Schema evolution (new columns, widened types) is committed with the
	// batch's data; undone in memory unless that commit lands.
	sc, err := t.evolve(b.Changes)
	if err != nil {
		return nil, err
	}
	schemaCommitted := false
	defer func() {
		if sc != nil && !schemaCommitted && t.st != nil {
			t.revertSchema(sc)
		}
	}()
	usable := make([]*normalize.Change, 0, len(b.Changes))
	usableIdx := make([]int, 0, len(b.Changes))
	var ignored []int
	for i, c := range b.Changes {
		if c.Schema != nil && c.Row != nil {
			if m := t.mapping(c.Schema); m.err != nil {
				reason, ok := quarantine.ReasonOf(m.err)
				if !ok {
					reason = quarantine.SchemaMismatch
				}
				rejects = append(rejects, Reject{Index: i, Reason: reason, Message: m.err.Error()})
				continue
			}
		}
		if c.Op == normalize.OpTruncate && t.opts.Truncate == TruncateIgnore {
			res.Stale++
			ignored = append(ignored, i)
			continue
		}
		if c.Op != normalize.OpTruncate && len(c.Key) != len(t.st.keyCols) {
			rejects = append(rejects, Reject{Index: i, Reason: quarantine.SchemaMismatch,
				Message: fmt.Sprintf("key has %d columns %v, table key is %v", len(c.Key), c.KeyNames, t.st.keyCols)})
			continue
		}
		usable = append(usable, c)
		usableIdx = append(usableIdx, i)
	}
	if err := t.resolveKeys(ctx, usable); err != nil {
		return nil, err
	}
	folded := foldBatch(usable, t.storedKeys)
	for _, ci := range folded.Conflicts {
		c := usable[ci]
		rejects = append(rejects, Reject{Index: usableIdx[ci], Reason: quarantine.VersionConflict,
			Message: fmt.Sprintf("key %v: version %s already seen with different content", c.Key, c.Version)})
	}
	res.Stale += folded.Stale
	res.Duplicate += folded.Duplicate
	res.Rejected = len(rejects)
	res.FoldMs = time.Since(foldStart).Milliseconds()

	finals := folded.Finals
	if folded.Truncate != nil {
		extra, err := t.truncateFinals(ctx, folded)
		if err != nil {
			return nil, err
		}
		finals = append(finals, extra...)
	}
	offsetsMove := false
	for tp, o := range b.Offsets {
		if cur, ok := t.st.offsets[tp]; !ok || o > cur {
			offsetsMove = true
		}
	}
	// Above every instance's: batch ids keep growing when an instance
	// changes its id (one is a counter per instance, not a unique id: two
	// instances committing at once may use the same number).
	batchID := max(t.st.batchID, t.st.topID) + 1
	carried := t.carriedOffsets(b)
	if len(carried) > 0 {
		offsetsMove = true
		if t.pending.BatchID >= batchID {
			batchID = t.pending.BatchID + 1
		}
	}
	if err := reject(ctx, batchID, rejects); err != nil {
		return nil, fmt.Errorf("quarantine batch %d: %w", batchID, err)
	}
	res.Outcomes = folded.outcomes(len(b.Changes), usableIdx, rejects, ignored)
	if len(finals) == 0 && !offsetsMove {
		// nothing written with the evolved schema: it is reverted (defer)
		res.Version = t.st.version
		res.BatchID = t.st.batchID
		return res, nil
	}
	if b.BeforeCommit != nil {
		if err := b.BeforeCommit(ctx, batchID, res.Outcomes); err != nil {
			return nil, fmt.Errorf("batch %d before commit: %w", batchID, err)
		}
	}
	writeStart := time.Now()
	pre := &plan{}
	if sc != nil && sc.rewrite {
		// Before write(): its deletion vectors then apply to the new files.
		sc.rewritten, err = t.rewriteFiles(ctx, sc.oldSchema, pre, res)
		if err != nil {
			return nil, err
		}
	}
	plan, err := t.write(ctx, finals, batchID, res)
	if err != nil {
		return nil, err
	}
	if sc != nil && sc.rewrite {
		plan.adds = append(pre.adds, plan.adds...)
		plan.removes = append(pre.removes, plan.removes...)
		dropRewrittenDVSwaps(plan, sc.rewritten, t.st)
	}
	if err := t.fault(FaultDVWritten); err != nil {
		return nil, err
	}
	res.WriteMs = time.Since(writeStart).Milliseconds()
	commitStart := time.Now()
	domains, err := trackerDomains(t.opts.Sink, b)
	if err != nil {
		return nil, err
	}
	now := t.opts.Now()
	plan.txns = append(plan.txns, delta.Txn{AppID: layout.BatchAppID(t.opts.Sink, t.opts.InstanceID), Version: batchID, LastUpdated: ptr(now.UnixMilli())})
	if t.opts.InstanceID == "" {
		// "<sink>", shared by every instance without an id: a label, not
		// what makes the commit idempotent (the offsets are), so another
		// instance's concurrent batch counter does not conflict with ours
		plan.blindTxn = plan.txns[len(plan.txns)-1].AppID
	}
	offsets := b.Offsets
	if len(carried) > 0 {
		offsets = maps.Clone(b.Offsets)
		maps.Copy(offsets, carried)
	}
	tps := make([]TP, 0, len(offsets))
	for tp := range offsets {
		tps = append(tps, tp)
	}
	slices.SortFunc(tps, TP.Compare)
	for _, tp := range tps {
		o := offsets[tp]
		if cur, ok := t.st.offsets[tp]; ok && cur > o {
			o = cur // never move progress backwards
		}
		plan.txns = append(plan.txns, delta.Txn{AppID: offsetAppID(t.opts.Sink, tp), Version: o, LastUpdated: ptr(now.UnixMilli())})
	}
	plan.domains = append(plan.domains, domains...)
	for _, d := range slices.Sorted(maps.Keys(b.Domains)) {
		if _, _, _, ok := layout.ParseTrackerDomain(t.opts.Sink, d); ok {
			return nil, fmt.Errorf("batch domain %s: the sink's versioning state is written by Apply only", d)
		}
		plan.domains = append(plan.domains, delta.DomainMetadata{Domain: d, Configuration: b.Domains[d]})
	}
	plan.expect = expect
	var rb *rebaseLog
	if folded.Truncate == nil && sc == nil {
		// the plan depends on its own keys' rows only: a winner that
		// changed other keys is rebased over, not re-planned
		rb = &rebaseLog{}
		plan.winners = t.winnerCheck(batchKeys(folded.Keys, finals), rb)
	}
	params := map[string]any{
		"batchId": batchID, "sink": t.opts.Sink, "instance": t.opts.Instance,
		"inserted": res.Inserted, "updated": res.Updated, "deleted": res.Deleted,
		"stale": res.Stale, "duplicate": res.Duplicate, "rejected": res.Rejected,
	}
	if sc != nil {
		plan.metadata, plan.protocol = sc.meta, sc.proto
		if len(sc.added) > 0 {
			params["addedColumns"] = sc.added
		}
		if len(sc.widened) > 0 {
			params["widenedColumns"] = sc.widened
		}
		if len(sc.dropped) > 0 {
			params["droppedColumns"] = sc.dropped
		}
	}
	if err := t.fault(FaultBeforeCommit); err != nil {
		return nil, err
	}
	if b.From != nil {
		// what the batch advanced from, for audits of the fence (AuditFencing)
		from := make(map[string]int64, len(b.From))
		for tp, o := range b.From {
			if _, ok := b.Offsets[tp]; ok {
				from[tp.Topic+"/"+strconv.Itoa(int(tp.Partition))] = o
			}
		}
		params["fromOffsets"] = from
	}
	v, logBytes, err := t.ops.commit(ctx, t.st.version, plan, "MERGE", params)
	if err != nil {
		var fe *delta.FencedError
		if errors.As(err, &fe) {
			return nil, t.fencedByCommit(fe, expect, err)
		}
		if errors.Is(err, delta.ErrConflict) {
			return nil, fmt.Errorf("%w: commit batch %d to %s: %w", ErrReplan, batchID, t.dir, err)
		}
		return nil, fmt.Errorf("commit batch %d to %s: %w", batchID, t.dir, err)
	}
	if len(carried) > 0 {
		for tp, o := range carried {
			t.st.offsets[tp] = o
		}
		// the table holds them now; a leftover file is harmless (reload ignores it while the log exists)
		if err := t.ops.store.Delete(ctx, progressKey(t.opts.Sink)); err != nil {
			t.opts.Logger.Warn("remove progress file", "table", t.dir, "err", err)
		}
		t.pending = nil
	}
	if sc != nil {
		schemaCommitted = true
		t.opts.Logger.Info("schema evolved", "table", t.dir, "version", v, "added", sc.added, "widened", sc.widened, "dropped", sc.dropped)
	}
	if err := t.fault(FaultAfterCommit); err != nil {
		return nil, err
	}
	res.BytesWritten += logBytes
	res.CommitMs = time.Since(commitStart).Milliseconds()
	res.Committed = true
	res.Version = v
	res.BatchID = batchID
	if v != t.st.version+1 {
		// Other writers committed in between without conflicting with us:
		// apply what they did to the state, or (a file they removed for
		// good, a commit not seen by the check) rebuild it from the table.
		if rb != nil {
			res.Rebases = rb.commits
		}
		if rb == nil || rb.reload || int64(rb.commits) != v-t.st.version-1 {
			if err := t.reload(ctx); err != nil {
				return nil, err
			}
			return res, nil
		}
		if err := t.applyRebase(rb); err != nil {
			t.opts.Logger.Warn("rebase of the in-memory state failed; reloading the table", "table", t.dir, "err", err)
			if err := t.reload(ctx); err != nil {
				return nil, err
			}
			return res, nil
		}
	}
	t.afterCommit(v, plan, b, batchID)
	return res, nil
}

func ptr[T any](v T) *T { return &v }

// storedKeys is what the index holds for keys (foldBatch's stored).
func (t *Table) storedKeys(keys []string) []storedKey {
	ent := make([]uint32, len(keys))
	locs := make([]loc, len(keys))
	t.st.index.Lookup(keys, ent, locs)
	out := make([]storedKey, len(keys))
	for i, l := range locs {
		if ent[i] != 0 {
			out[i] = storedKey{Exists: true, Deleted: l.deleted, Version: l.ver, Loc: l, Ent: ent[i]}
		}
	}
	return out
}

// mergeTracker is the versioning state after a batch: the table's state,
// with the partitions this batch covers replaced by the batch's. Another
// instance owns the other partitions; their state must not be replaced by
// this process's (possibly older) view of them.
func mergeTracker(stored []versioning.PartitionState, b *Batch) []versioning.PartitionState {
	ours := map[TP]bool{}
	for _, s := range b.Tracker {
		if _, ok := b.Offsets[TP{s.Topic, s.Partition}]; ok {
			ours[TP{s.Topic, s.Partition}] = true
		}
	}
	out := make([]versioning.PartitionState, 0, len(stored)+len(b.Tracker))
	for _, s := range stored {
		if !ours[TP{s.Topic, s.Partition}] {
			out = append(out, s)
		}
	}
	for _, s := range b.Tracker {
		if ours[TP{s.Topic, s.Partition}] {
			out = append(out, s)
		}
	}
	sortStates(out)
	return out
}

// FaultPoint names a step of Apply's commit where Options.Fault is called.
type FaultPoint string

// The steps, in order. A batch that needs no deletion vector skips
// FaultDVWritten.
const (
	FaultDataWritten  FaultPoint = "data-written"  // new data files stored
	FaultDVWritten    FaultPoint = "dv-written"    // deletion vectors stored
	FaultBeforeCommit FaultPoint = "before-commit" // about to write the log entry
	FaultAfterCommit  FaultPoint = "after-commit"  // log entry written, state not yet updated
	// FaultBeforeCheckpoint comes between the two when the version is due a
	// checkpoint; an error there only skips the checkpoint (best effort).
	FaultBeforeCheckpoint FaultPoint = "before-checkpoint"
)

func (t *Table) fault(point FaultPoint) error {
	if t.opts.Fault == nil {
		return nil
	}
	return t.opts.Fault(point)
}

func firstSchemaChange(cs []*normalize.Change) *normalize.Change {
	for _, c := range cs {
		if c.Schema != nil && c.Op == normalize.OpUpsert {
			return c
		}
	}
	return nil
}

// afterCommit moves the in-memory state to the committed version.
func (t *Table) afterCommit(v int64, p *plan, b *Batch, batchID int64) {
	st := t.st
	st.version = v
	st.batchID = batchID
	st.topID = max(st.topID, batchID)
	for tp, o := range b.Offsets {
		if cur, ok := st.offsets[tp]; !ok || o > cur {
			st.offsets[tp] = o
		}
	}
	st.tracker = mergeTracker(st.tracker, b)
	maps.Copy(st.domains, b.Domains)
	for _, u := range p.dvUpdates {
		fs := st.files[u.file]
		fs.add = u.add
		fs.dv = u.bitmap
		fs.live = fs.rows - int64(u.bitmap.GetCardinality())
	}
	for _, nf := range p.newFiles {
		id := int32(len(st.files))
		st.byPath[nf.add.Path] = id
		// the batch's partitions were adopted (resolveKeys): its files are indexed
		st.files = append(st.files, &fileState{add: nf.add, rows: nf.rows, live: nf.rows, part: filePartition(nf.add), indexed: true})
		for i, k := range nf.keys {
			st.index.SetAt(nf.ents[i], k, loc{file: id, row: int32(i), ver: nf.versions[i], deleted: nf.deleted[i]})
		}
	}
}

// Refresh reloads the table state if another writer committed since this
// Table last looked (e.g. before seeking a newly assigned partition).
func (t *Table) Refresh(ctx context.Context) error {
	if t.takeReleased() {
		t.opts.Logger.Info("partitions revoked: reloading the table so that the key index holds only this instance's partitions", "table", t.dir)
		return t.reload(ctx)
	}
	v, err := t.ops.tbl.LatestVersion(ctx)
	if errors.Is(err, delta.ErrNotATable) {
		if t.st == nil {
			return nil
		}
		return fmt.Errorf("table %s disappeared: %w", t.dir, err)
	}
	if err != nil {
		return err
	}
	if t.st != nil && t.st.version == v {
		return nil
	}
	if t.st != nil && v > t.st.version && v-t.st.version <= maxCatchUp {
		ok, err := t.catchUp(ctx, v)
		if err != nil {
			t.opts.Logger.Warn("catching up with other writers' commits failed; reloading the table", "table", t.dir, "err", err)
		} else if ok {
			return nil
		}
	}
	return t.reload(ctx)
}

// maxCatchUp bounds the commits Refresh applies one by one; further
// behind, a reload (checkpoint + log tail) is cheaper.
const maxCatchUp = 200

// catchUp applies the commits after the state's version up to v to the
// in-memory state, as a commit rebased over them would (rebase.go): their
// new files and keys, deletion vectors, offsets, batch counters and tracker
// state. Instances of a sink on one table then pay one batch's worth of
// reading per other instance's commit, instead of a reload and re-scan of
// the table before every batch. ok is false when a commit did something
// that is not applied incrementally (metadata or protocol, a file removed
// for good): the caller reloads.
func (t *Table) catchUp(ctx context.Context, v int64) (ok bool, err error) {
	rb := &rebaseLog{}
	check := t.winnerCheck(nil, rb)
	for ver := t.st.version + 1; ver <= v; ver++ {
		acts, err := t.ops.tbl.ReadCommit(ctx, ver)
		if err != nil {
			return false, err
		}
		for i := range acts {
			if acts[i].Metadata != nil || acts[i].Protocol != nil {
				return false, nil
			}
		}
		if err := check(ctx, ver, acts); err != nil {
			return false, err
		}
		if rb.reload {
			return false, nil
		}
	}
	if err := t.applyRebase(rb); err != nil {
		return false, err
	}
	t.st.version = v
	return true, nil
}

// Row is one stored row: column name → value in the normalize value model.
type Row map[string]any

// Rows returns the current rows of the table (tombstones included, see
// _cdc_deleted), ordered by key. Meant for small tables (demo, tests): it
// reads one row at a time through the key index.
func (t *Table) Rows(ctx context.Context) ([]Row, error) {
	if t.st == nil {
		return nil, nil
	}
	if err := t.adoptAll(ctx); err != nil {
		return nil, err
	}
	type keyLoc struct {
		key string
		loc loc
	}
	all := make([]keyLoc, 0, t.st.index.Len())
	for k, l := range t.st.index.All() {
		all = append(all, keyLoc{k, l})
	}
	slices.SortFunc(all, func(a, b keyLoc) int { return strings.Compare(a.key, b.key) })
	byFile := map[int32][]int{}
	for i, e := range all {
		byFile[e.loc.file] = append(byFile[e.loc.file], i)
	}
	out := make([]Row, len(all))
	for file, idx := range byFile {
		rows := make([]int64, len(idx))
		for j, i := range idx {
			rows[j] = int64(all[i].loc.row)
		}
		vals, err := t.ops.readRows(ctx, t.st, file, rows)
		if err != nil {
			return nil, err
		}
		for j, i := range idx {
			r := Row{}
			for c, f := range t.st.schema.Fields {
				r[f.Name] = vals[j][c]
			}
			out[i] = r
		}
	}
	return out, nil
}

// Columns returns the table's column names in schema order.
func (t *Table) Columns() []string {
	if t.st == nil {
		return nil
	}
	out := make([]string, len(t.st.schema.Fields))
	for i, f := range t.st.schema.Fields {
		out[i] = f.Name
	}
	return out
}

// KeyColumns returns the table's key columns.
func (t *Table) KeyColumns() []string {
	if t.st == nil {
		return nil
	}
	return append([]string(nil), t.st.keyCols...)
}

// ColumnTypes returns the normalized type of every column the table has.
func (t *Table) ColumnTypes() map[string]normalize.Type {
	out := map[string]normalize.Type{}
	if t.st == nil {
		return out
	}
	for _, f := range t.st.schema.Fields {
		if nt, err := normalizeType(f.Type); err == nil {
			out[f.Name] = nt
		}
	}
	return out
}

// carriedOffsets are the pending (table-less) offsets the table does not
// hold yet and this batch does not advance: the first commit after the
// table was created records them too.
func (t *Table) carriedOffsets(b *Batch) map[TP]int64 {
	if t.pending == nil {
		return nil
	}
	var out map[TP]int64
	for tp, o := range t.pending.offsets() {
		if bo, ok := b.Offsets[tp]; ok && bo >= o {
			continue
		}
		if cur, ok := t.st.offsets[tp]; ok && cur >= o {
			continue
		}
		if out == nil {
			out = map[TP]int64{}
		}
		out[tp] = o
	}
	return out
}

// Stored reports the version of key's stored row and whether it is live
// (not a tombstone); ok=false: the table has no row for key. It reads the
// in-memory key index: the state before the batch being applied when
// called from Batch.BeforeCommit (history SCD2: the prior version of a key).
func (t *Table) Stored(key []any) (ver versioning.Version, live, ok bool) {
	if t.st == nil {
		return versioning.Version{}, false, false
	}
	l, ok := t.st.index.GetBytes(AppendKey(nil, key))
	if !ok {
		return versioning.Version{}, false, false
	}
	return l.ver, !l.deleted, true
}
