// Table and Snapshot: replaying the log (from the newest checkpoint) into a table version.

package delta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cdcsink/cdc-sink/delta/schema"
)

// Table is a Delta table at path inside store.
type Table struct {
	store Storage
	path  string // slash path relative to the store root; "" = root
	dvs   dvCache
}

// OpenTable returns a handle; it does not touch storage (Snapshot does).
func OpenTable(store Storage, tablePath string) *Table {
	return &Table{store: store, path: strings.Trim(path.Clean("/"+tablePath), "/")}
}

// Store returns the table's storage.
func (t *Table) Store() Storage { return t.store }

// Path returns the table path inside the store.
func (t *Table) Path() string { return t.path }

// Key returns the storage key of a table-relative path.
func (t *Table) Key(rel string) string {
	if t.path == "" {
		return rel
	}
	return t.path + "/" + rel
}

func (t *Table) logKey(name string) string { return t.Key(logDir + "/" + name) }

// CommitKey returns the storage key of the JSON commit of version v.
func (t *Table) CommitKey(v int64) string { return t.logKey(commitName(v)) }

// Snapshot is the reconstructed state of a table at one version. It is
// immutable and safe for concurrent use.
type Snapshot struct {
	table             *Table
	version           int64
	checkpointVersion int64 // -1: replayed from version 0
	protocol          Protocol
	metadata          Metadata
	files             []Add
	tombstones        []Remove
	txns              map[string]Txn
	domains           map[string]DomainMetadata
	timestamp         int64 // commitInfo.timestamp of the last commit (ms), 0 if unknown

	schemaOnce sync.Once
	schema     *schema.StructType
	schemaErr  error
}

type lastCheckpointInfo struct {
	Version       int64 `json:"version"`
	Size          int64 `json:"size"`
	Parts         *int  `json:"parts,omitempty"`
	SizeInBytes   int64 `json:"sizeInBytes,omitempty"`
	NumOfAddFiles int64 `json:"numOfAddFiles,omitempty"`
}

// Snapshot loads the latest version.
func (t *Table) Snapshot(ctx context.Context) (*Snapshot, error) { return t.load(ctx, -1) }

// SnapshotAt loads the table as of version (time travel).
func (t *Table) SnapshotAt(ctx context.Context, version int64) (*Snapshot, error) {
	if version < 0 {
		return nil, fmt.Errorf("snapshot at v%d: negative version", version)
	}
	return t.load(ctx, version)
}

// LatestVersion returns the newest committed version without replaying.
func (t *Table) LatestVersion(ctx context.Context) (int64, error) {
	l, err := t.listLog(ctx, -1)
	if err != nil {
		return -1, err
	}
	v := l.maxCommit
	if n := len(l.checkpoints); n > 0 && l.checkpoints[n-1].version > v {
		v = l.checkpoints[n-1].version
	}
	if v < 0 {
		return -1, fmt.Errorf("%w: %s", ErrNotATable, t.path)
	}
	return v, nil
}

// Exists reports whether the table has at least one commit or checkpoint.
// Unlike Snapshot it distinguishes "no table here" (false, nil) from a
// storage failure (error), without replaying the log.
func (t *Table) Exists(ctx context.Context) (bool, error) {
	_, err := t.LatestVersion(ctx)
	if errors.Is(err, ErrNotATable) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, nil
}

// listLog lists _delta_log, starting at the _last_checkpoint hint when it is
// usable (so listing cost does not grow with history on stores that list
// from a start key), falling back to a full listing.
func (t *Table) listLog(ctx context.Context, target int64) (logListing, error) {
	dir := t.Key(logDir)
	from := ""
	if b, err := t.store.Get(ctx, t.logKey("_last_checkpoint")); err == nil {
		var lc lastCheckpointInfo
		if json.Unmarshal(b, &lc) == nil && lc.Version > 0 && (target < 0 || lc.Version <= target) {
			from = fmt.Sprintf("%020d", lc.Version)
		}
	}
	files, err := t.store.List(ctx, dir, from)
	if err != nil {
		return logListing{}, fmt.Errorf("list %s: %w", dir, err)
	}
	l := parseLogListing(dir, files)
	if from != "" && len(l.checkpoints) == 0 {
		// _last_checkpoint points at a checkpoint that is missing/corrupt.
		files, err = t.store.List(ctx, dir, "")
		if err != nil {
			return logListing{}, fmt.Errorf("list %s: %w", dir, err)
		}
		l = parseLogListing(dir, files)
	}
	return l, nil
}

// commitState is the forward replay of the JSON commits after the checkpoint.
type commitState struct {
	files    map[string]int // logical key -> index in entries
	entries  []fileEntry
	txns     map[string]Txn
	domains  map[string]DomainMetadata
	protocol *Protocol
	metadata *Metadata
	lastTS   int64
}

type fileEntry struct {
	add    *Add
	remove *Remove
}

func newCommitState() *commitState {
	return &commitState{files: map[string]int{}, txns: map[string]Txn{}, domains: map[string]DomainMetadata{}}
}

func (cs *commitState) set(key string, e fileEntry) {
	if i, ok := cs.files[key]; ok {
		cs.entries[i] = e
		return
	}
	cs.files[key] = len(cs.entries)
	cs.entries = append(cs.entries, e)
}

func (cs *commitState) apply(actions []Action) {
	for i := range actions {
		a := &actions[i]
		switch {
		case a.Remove != nil:
			cs.set(a.Remove.Key(), fileEntry{remove: a.Remove})
		case a.Add != nil:
			cs.set(a.Add.Key(), fileEntry{add: a.Add})
		case a.Txn != nil:
			cs.txns[a.Txn.AppID] = *a.Txn
		case a.DomainMetadata != nil:
			cs.domains[a.DomainMetadata.Domain] = *a.DomainMetadata
		case a.Protocol != nil:
			cs.protocol = a.Protocol
		case a.Metadata != nil:
			cs.metadata = a.Metadata
		case a.CommitInfo != nil:
			if ts, ok := a.CommitInfo["timestamp"].(float64); ok {
				cs.lastTS = int64(ts)
			}
		}
	}
}

// snapSink merges checkpoint rows under the (newer) commit state.
type snapSink struct {
	cs       *commitState
	snap     *Snapshot
	proto    *Protocol
	meta     *Metadata
	sidecars []string
}

func (s *snapSink) grow(rows int64) {
	if rows > 0 && rows < 1<<28 && int64(cap(s.snap.files)-len(s.snap.files)) < rows {
		f := make([]Add, len(s.snap.files), int64(len(s.snap.files))+rows)
		copy(f, s.snap.files)
		s.snap.files = f
	}
}

func (s *snapSink) add(a *Add) {
	if len(s.cs.files) > 0 {
		if _, ok := s.cs.files[a.Key()]; ok {
			return
		}
	}
	s.snap.files = append(s.snap.files, *a)
}

func (s *snapSink) remove(r *Remove) {
	if len(s.cs.files) > 0 {
		if _, ok := s.cs.files[r.Key()]; ok {
			return
		}
	}
	s.snap.tombstones = append(s.snap.tombstones, *r)
}

func (s *snapSink) txn(t Txn) {
	if _, ok := s.cs.txns[t.AppID]; !ok {
		s.snap.txns[t.AppID] = t
	}
}

func (s *snapSink) domain(d DomainMetadata) {
	if _, ok := s.cs.domains[d.Domain]; !ok {
		s.snap.domains[d.Domain] = d
	}
}

func (s *snapSink) metadata(m *Metadata) { c := *m; s.meta = &c }
func (s *snapSink) protocol(p *Protocol) { c := *p; s.proto = &c }
func (s *snapSink) sidecar(p string)     { s.sidecars = append(s.sidecars, p) }

// feedActions sends JSON-form actions (v2 JSON checkpoint) into a sink.
func feedActions(actions []Action, sink cpSink) {
	sink.grow(int64(len(actions)))
	for i := range actions {
		a := &actions[i]
		switch {
		case a.Add != nil:
			sink.add(a.Add)
		case a.Remove != nil:
			sink.remove(a.Remove)
		case a.Txn != nil:
			sink.txn(*a.Txn)
		case a.DomainMetadata != nil:
			sink.domain(*a.DomainMetadata)
		case a.Metadata != nil:
			sink.metadata(a.Metadata)
		case a.Protocol != nil:
			sink.protocol(a.Protocol)
		case a.Sidecar != nil:
			var sc struct {
				Path string `json:"path"`
			}
			if json.Unmarshal(a.Sidecar, &sc) == nil && sc.Path != "" {
				sink.sidecar(sc.Path)
			}
		}
	}
}

// ReadCommit reads the actions of commit v (a writer catching up with the
// commits since its snapshot, without replaying the whole log).
func (t *Table) ReadCommit(ctx context.Context, v int64) ([]Action, error) {
	return t.readCommit(ctx, v)
}

func (t *Table) readCommit(ctx context.Context, v int64) ([]Action, error) {
	name := commitName(v)
	b, err := t.store.Get(ctx, t.logKey(name))
	if err != nil {
		return nil, fmt.Errorf("read commit v%d: %w", v, err)
	}
	acts, err := ParseCommit(name, b)
	if err != nil {
		return nil, fmt.Errorf("read commit v%d: %w", v, err)
	}
	return acts, nil
}

func (t *Table) readCheckpoint(ctx context.Context, cp checkpointRef, sink *snapSink) error {
	for _, k := range cp.keys {
		if cp.json {
			b, err := t.store.Get(ctx, k)
			if err != nil {
				return err
			}
			acts, err := ParseCommit(path.Base(k), b)
			if err != nil {
				return err
			}
			feedActions(acts, sink)
			continue
		}
		if err := readCheckpointParquet(ctx, t.store, k, sink); err != nil {
			return err
		}
	}
	sidecars := sink.sidecars
	sink.sidecars = nil
	for _, sc := range sidecars {
		if strings.Contains(sc, "://") || strings.HasPrefix(sc, "/") {
			return fmt.Errorf("%w: absolute sidecar path %q not supported", ErrCorruptLog, sc)
		}
		if err := readCheckpointParquet(ctx, t.store, t.logKey("_sidecars/"+sc), sink); err != nil {
			return fmt.Errorf("sidecar %s: %w", sc, err)
		}
	}
	return nil
}

func (t *Table) load(ctx context.Context, target int64) (*Snapshot, error) {
	l, err := t.listLog(ctx, target)
	if err != nil {
		return nil, err
	}
	latest := l.maxCommit
	if n := len(l.checkpoints); n > 0 && l.checkpoints[n-1].version > latest {
		latest = l.checkpoints[n-1].version
	}
	if latest < 0 {
		return nil, fmt.Errorf("load %s: %w", t.Key(logDir), ErrNotATable)
	}
	if target < 0 {
		target = latest
	} else if target > latest {
		return nil, fmt.Errorf("snapshot at v%d: version does not exist (latest is v%d)", target, latest)
	}
	cp := newestCheckpoint(l, target, target+1)
	snap, err := t.replay(ctx, l, cp, target)
	var ce *checkpointError
	if err == nil || !errors.As(err, &ce) {
		return snap, err
	}
	// The checkpoint is unreadable (e.g. partially written by a writer on a
	// store without atomic puts): fall back to older checkpoints, then to
	// plain replay, as long as the needed commits still exist.
	files, lerr := t.store.List(ctx, t.Key(logDir), "")
	if lerr != nil {
		return nil, err
	}
	full := parseLogListing(t.Key(logDir), files)
	for below := cp.version; ; {
		older := newestCheckpoint(full, target, below)
		s2, err2 := t.replay(ctx, full, older, target)
		if err2 == nil {
			return s2, nil
		}
		if older == nil || !errors.As(err2, &ce) {
			return nil, err
		}
		below = older.version
	}
}

// newestCheckpoint returns the newest checkpoint with version <= target and
// < below, or nil.
func newestCheckpoint(l logListing, target, below int64) *checkpointRef {
	for i := len(l.checkpoints) - 1; i >= 0; i-- {
		if v := l.checkpoints[i].version; v <= target && v < below {
			return &l.checkpoints[i]
		}
	}
	return nil
}

// checkpointError marks a checkpoint that could not be read (so load may
// fall back to an older one).
type checkpointError struct {
	version int64
	err     error
}

func (e *checkpointError) Error() string {
	return fmt.Sprintf("read checkpoint v%d: %v", e.version, e.err)
}
func (e *checkpointError) Unwrap() error { return e.err }

// replay builds the snapshot at target from checkpoint cp (nil: from v0)
// plus the commits after it.
func (t *Table) replay(ctx context.Context, l logListing, cp *checkpointRef, target int64) (*Snapshot, error) {
	start := int64(0)
	if cp != nil {
		start = cp.version + 1
	}
	for v := start; v <= target; v++ {
		if _, ok := l.commits[v]; !ok {
			if cp == nil && v == 0 && len(l.commits) > 0 {
				return nil, fmt.Errorf("%w: commit v0 is missing and there is no checkpoint to start from (log truncated?)", ErrCorruptLog)
			}
			return nil, fmt.Errorf("%w: commit v%d is missing (versions must be contiguous, target v%d)", ErrCorruptLog, v, target)
		}
	}
	cs := newCommitState()
	for v := start; v <= target; v++ {
		acts, err := t.readCommit(ctx, v)
		if err != nil {
			return nil, err
		}
		cs.apply(acts)
	}
	snap := &Snapshot{table: t, version: target, checkpointVersion: -1, txns: map[string]Txn{}, domains: map[string]DomainMetadata{}, timestamp: cs.lastTS}
	sink := &snapSink{cs: cs, snap: snap}
	if cp != nil {
		snap.checkpointVersion = cp.version
		if err := t.readCheckpoint(ctx, *cp, sink); err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			return nil, &checkpointError{version: cp.version, err: err}
		}
	}
	return t.assemble(snap, cs, sink)
}

// assemble finishes a snapshot whose base (a checkpoint, or an older
// snapshot) went into sink: the commit state replayed after the base wins
// over it.
func (t *Table) assemble(snap *Snapshot, cs *commitState, sink *snapSink) (*Snapshot, error) {
	target := snap.version
	for _, e := range cs.entries {
		if e.add != nil {
			snap.files = append(snap.files, *e.add)
		} else {
			snap.tombstones = append(snap.tombstones, *e.remove)
		}
	}
	for k, v := range cs.txns {
		snap.txns[k] = v
	}
	for k, v := range cs.domains {
		snap.domains[k] = v
	}
	for k, d := range snap.domains {
		if d.Removed {
			delete(snap.domains, k)
		}
	}
	switch {
	case cs.protocol != nil:
		snap.protocol = *cs.protocol
	case sink.proto != nil:
		snap.protocol = *sink.proto
	default:
		return nil, fmt.Errorf("load v%d: %w: no protocol action in log", target, ErrCorruptLog)
	}
	switch {
	case cs.metadata != nil:
		snap.metadata = *cs.metadata
	case sink.meta != nil:
		snap.metadata = *sink.meta
	default:
		return nil, fmt.Errorf("load v%d: %w: no metaData action in log", target, ErrCorruptLog)
	}
	if err := checkReadSupported(&snap.protocol, &snap.metadata); err != nil {
		return nil, fmt.Errorf("load v%d: %w", target, err)
	}
	snap.expireTxns(time.Now())
	return snap, nil
}

// Advance returns the snapshot at version target, replaying only the commits
// after s (s.Version()+1 … target) over s's state: a writer that made those
// commits itself, or lost to a few winners, reads their JSON instead of
// reading the checkpoint again (a full load per commit was a tenth of a
// sink's CPU on a 1M-row table; bench/README.md). The result equals
// SnapshotAt(target) but for the order of Files and Tombstones, and its
// CheckpointVersion stays s's (the checkpoint its state was replayed from).
// s is not changed. An error (a commit missing, unreadable) leaves the caller to
// load the table instead.
func (s *Snapshot) Advance(ctx context.Context, target int64) (*Snapshot, error) {
	switch {
	case target < s.version:
		return nil, fmt.Errorf("advance v%d to v%d: target is older", s.version, target)
	case target == s.version:
		return s, nil
	}
	t := s.table
	cs := newCommitState()
	for v := s.version + 1; v <= target; v++ {
		acts, err := t.readCommit(ctx, v)
		if err != nil {
			return nil, fmt.Errorf("advance v%d to v%d: %w", s.version, target, err)
		}
		cs.apply(acts)
	}
	ts := cs.lastTS
	if ts == 0 {
		ts = s.timestamp
	}
	snap := &Snapshot{table: t, version: target, checkpointVersion: s.checkpointVersion,
		txns: make(map[string]Txn, len(s.txns)), domains: make(map[string]DomainMetadata, len(s.domains)), timestamp: ts}
	sink := &snapSink{cs: cs, snap: snap}
	sink.grow(int64(len(s.files) + len(cs.entries)))
	for i := range s.files {
		sink.add(&s.files[i])
	}
	for i := range s.tombstones {
		sink.remove(&s.tombstones[i])
	}
	for _, x := range s.txns {
		sink.txn(x)
	}
	for _, d := range s.domains {
		sink.domain(d)
	}
	sink.protocol(&s.protocol)
	sink.metadata(&s.metadata)
	snap, err := t.assemble(snap, cs, sink)
	if err != nil {
		return nil, fmt.Errorf("advance v%d to v%d: %w", s.version, target, err)
	}
	return snap, nil
}

// expireTxns applies delta.setTransactionRetentionDuration when set.
func (s *Snapshot) expireTxns(now time.Time) {
	v, ok := s.metadata.Configuration["delta.setTransactionRetentionDuration"]
	if !ok {
		return
	}
	d, err := ParseInterval(v)
	if err != nil || d <= 0 {
		return
	}
	cutoff := now.Add(-d).UnixMilli()
	for k, t := range s.txns {
		if t.LastUpdated != nil && *t.LastUpdated < cutoff {
			delete(s.txns, k)
		}
	}
}

// Table returns the table this snapshot belongs to.
func (s *Snapshot) Table() *Table { return s.table }

// Version is the table version of this snapshot.
func (s *Snapshot) Version() int64 { return s.version }

// CheckpointVersion is the checkpoint replay started from (-1: none).
func (s *Snapshot) CheckpointVersion() int64 { return s.checkpointVersion }

// Protocol returns the protocol action in effect.
func (s *Snapshot) Protocol() Protocol { return s.protocol }

// Metadata returns the metaData action in effect.
func (s *Snapshot) Metadata() Metadata { return s.metadata }

// Schema parses metaData.schemaString (cached).
func (s *Snapshot) Schema() (*schema.StructType, error) {
	s.schemaOnce.Do(func() {
		s.schema, s.schemaErr = schema.Parse(s.metadata.SchemaString)
		if s.schemaErr != nil {
			s.schemaErr = fmt.Errorf("parse schema of v%d: %w", s.version, s.schemaErr)
		}
	})
	return s.schema, s.schemaErr
}

// Files returns the active logical files (adds). The slice is shared: do
// not modify. Stats are parsed on demand with Add.ParsedStats.
func (s *Snapshot) Files() []Add { return s.files }

// NumFiles is len(Files()).
func (s *Snapshot) NumFiles() int { return len(s.files) }

// Tombstones returns removes that have not expired as of now
// (deletionTimestamp + delta.deletedFileRetentionDuration).
func (s *Snapshot) Tombstones() []Remove { return s.TombstonesAt(time.Now()) }

// TombstonesAt is Tombstones with an explicit clock.
func (s *Snapshot) TombstonesAt(now time.Time) []Remove {
	ret := s.DeletedFileRetention()
	cutoff := now.Add(-ret).UnixMilli()
	out := make([]Remove, 0, len(s.tombstones))
	for _, r := range s.tombstones {
		if r.DeletionTimestamp == nil || *r.DeletionTimestamp > cutoff {
			out = append(out, r)
		}
	}
	return out
}

// AllTombstones returns every remove known to the snapshot, expired or not.
func (s *Snapshot) AllTombstones() []Remove { return s.tombstones }

// TxnVersion returns the last committed version for appId.
func (s *Snapshot) TxnVersion(appID string) (int64, bool) {
	t, ok := s.txns[appID]
	return t.Version, ok
}

// Txns returns a copy of all app transactions.
func (s *Snapshot) Txns() map[string]Txn {
	out := make(map[string]Txn, len(s.txns))
	for k, v := range s.txns {
		out[k] = v
	}
	return out
}

// DomainMetadata returns the configuration of a (non-removed) domain.
func (s *Snapshot) DomainMetadata(domain string) (string, bool) {
	d, ok := s.domains[domain]
	return d.Configuration, ok
}

// Domains returns the names of all active domains, sorted.
func (s *Snapshot) Domains() []string {
	out := make([]string, 0, len(s.domains))
	for k := range s.domains {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Config returns a table property.
func (s *Snapshot) Config(key string) (string, bool) {
	v, ok := s.metadata.Configuration[key]
	return v, ok
}

// Timestamp is the commitInfo timestamp of the last replayed commit, if any.
func (s *Snapshot) Timestamp() time.Time {
	if s.timestamp == 0 {
		return time.Time{}
	}
	return time.UnixMilli(s.timestamp)
}

// PartitionColumns returns metaData.partitionColumns.
func (s *Snapshot) PartitionColumns() []string { return s.metadata.PartitionColumns }

// CheckpointInterval is delta.checkpointInterval (default 10).
func (s *Snapshot) CheckpointInterval() int64 {
	if v, ok := s.Config("delta.checkpointInterval"); ok {
		var n int64
		if _, err := fmt.Sscan(v, &n); err == nil && n > 0 {
			return n
		}
	}
	return 10
}

// DeletedFileRetention is delta.deletedFileRetentionDuration (default 1 week).
func (s *Snapshot) DeletedFileRetention() time.Duration {
	return s.durationConfig("delta.deletedFileRetentionDuration", 7*24*time.Hour)
}

// LogRetention is delta.logRetentionDuration (default 30 days).
func (s *Snapshot) LogRetention() time.Duration {
	return s.durationConfig("delta.logRetentionDuration", 30*24*time.Hour)
}

func (s *Snapshot) durationConfig(key string, def time.Duration) time.Duration {
	if v, ok := s.Config(key); ok {
		if d, err := ParseInterval(v); err == nil {
			return d
		}
	}
	return def
}

// ColumnMappingMode is delta.columnMapping.mode ("none" when unset).
func (s *Snapshot) ColumnMappingMode() string {
	if v, ok := s.Config("delta.columnMapping.mode"); ok && v != "" {
		return v
	}
	return "none"
}
