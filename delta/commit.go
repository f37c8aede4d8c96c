// Creating tables and committing transactions with optimistic concurrency, conflict checks and fences.

package delta

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"time"

	"github.com/cdcsink/cdc-sink/delta/schema"
)

// EngineVersion is reported in commitInfo.engineInfo as "cdc-sink/<EngineVersion>".
var EngineVersion = "dev"

// DefaultMaxAttempts bounds commit retries after concurrent blind appends.
const DefaultMaxAttempts = 10

// Create writes version 0 of a new table (protocol + metaData + commitInfo).
// It fails with ErrTableExists when any commit already exists.
func Create(ctx context.Context, store Storage, tablePath string, meta Metadata, protocol Protocol) (*Table, error) {
	t := OpenTable(store, tablePath)
	if v, err := t.LatestVersion(ctx); err == nil {
		return nil, fmt.Errorf("create %s: %w (at v%d)", tablePath, ErrTableExists, v)
	}
	if meta.ID == "" {
		meta.ID = newUUID()
	}
	if meta.CreatedTime == nil {
		now := time.Now().UnixMilli()
		meta.CreatedTime = &now
	}
	if protocol.MinReaderVersion == 0 {
		protocol = Protocol{MinReaderVersion: 1, MinWriterVersion: 2}
	}
	if protocol.MinReaderVersion == 3 && protocol.ReaderFeatures == nil {
		protocol.ReaderFeatures = []string{}
	}
	if protocol.MinWriterVersion == 7 && protocol.WriterFeatures == nil {
		protocol.WriterFeatures = []string{}
	}
	if err := checkWriteSupported(&protocol, &meta); err != nil {
		return nil, fmt.Errorf("create %s: %w", tablePath, err)
	}
	ci := commitInfo("CREATE TABLE", map[string]any{"partitionBy": meta.PartitionColumns}, -1, false)
	data, err := MarshalCommit([]Action{{CommitInfo: ci}, {Protocol: &protocol}, {Metadata: &meta}})
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", tablePath, err)
	}
	if err := store.PutIfAbsent(ctx, t.logKey(commitName(0)), data); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("create %s: %w", tablePath, ErrTableExists)
		}
		return nil, fmt.Errorf("create %s: write v0: %w", tablePath, err)
	}
	return t, nil
}

func commitInfo(op string, params map[string]any, readVersion int64, blind bool) map[string]any {
	ci := map[string]any{
		"timestamp":           time.Now().UnixMilli(),
		"operation":           op,
		"operationParameters": operationParameters(params),
		"isolationLevel":      "Serializable",
		"isBlindAppend":       blind,
		"engineInfo":          "cdc-sink/" + EngineVersion,
		"txnId":               newUUID(),
	}
	if readVersion >= 0 {
		ci["readVersion"] = readVersion
	}
	return ci
}

// operationParameters renders params as Spark does: Delta's CommitInfo has
// operationParameters: Map[String, String], and Spark fails to read a
// commitInfo whose parameter is a JSON array or object (readChangeFeed,
// DESCRIBE HISTORY), so those are stored as their JSON text, like Spark's
// "partitionBy": "[]". Scalars stay as they are (Jackson reads them as
// strings).
func operationParameters(params map[string]any) map[string]any {
	out := make(map[string]any, len(params))
	for k, v := range params {
		switch v.(type) {
		case nil, string, bool, int, int32, int64, float64, json.Number:
			out[k] = v
		default:
			if b, err := json.Marshal(v); err == nil {
				out[k] = string(b)
			} else {
				out[k] = fmt.Sprint(v)
			}
		}
	}
	return out
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// Transaction collects actions against a read snapshot and commits them
// with optimistic concurrency. Not safe for concurrent use.
type Transaction struct {
	table    *Table
	read     *Snapshot
	adds     []Add
	removes  []Remove
	cdcs     []CDC
	metadata *Metadata
	protocol *Protocol
	domains  []DomainMetadata
	appTxns  []Txn
	readTxns map[string]bool
	expect   map[string]int64
	readAll  bool
	winners  WinnerCheck

	// MaxAttempts bounds retries (default DefaultMaxAttempts).
	MaxAttempts int
	// SkipCheckpoint disables the automatic checkpoint after commit.
	SkipCheckpoint bool
	// Now overrides the clock (tests).
	Now func() time.Time
}

// CommitResult is what a successful commit produced.
type CommitResult struct {
	Version int64 // the table version written
	// Rebased counts the concurrent commits that won a version before ours
	// and did not conflict: ours was retried on top of them unchanged.
	Rebased int
	// CheckpointErr is why the automatic checkpoint after the commit failed
	// (nil: none was due, or it was written). The commit itself stands:
	// checkpoints are best effort, readers replay the log without them.
	CheckpointErr error
	// CheckpointDue says the version is a multiple of delta.checkpointInterval:
	// a checkpoint was attempted, or, with SkipCheckpoint, is the caller's to write.
	CheckpointDue bool
}

// Begin starts a transaction reading snap.
func (t *Table) Begin(snap *Snapshot) *Transaction {
	return &Transaction{table: t, read: snap, readTxns: map[string]bool{}, MaxAttempts: DefaultMaxAttempts}
}

// Begin starts a transaction on the snapshot's table.
func (s *Snapshot) Begin() *Transaction { return s.table.Begin(s) }

// ReadSnapshot is the snapshot the transaction started from.
func (tx *Transaction) ReadSnapshot() *Snapshot { return tx.read }

// Add appends add actions (new data files, or files with a new DV).
func (tx *Transaction) Add(adds ...Add) *Transaction { tx.adds = append(tx.adds, adds...); return tx }

// Remove appends remove actions. DeletionTimestamp defaults to now.
// To replace a file's DV: Remove{Path, DeletionVector: old} + Add{Path, DeletionVector: new}.
func (tx *Transaction) Remove(removes ...Remove) *Transaction {
	tx.removes = append(tx.removes, removes...)
	return tx
}

// RemoveFile builds a remove for an active add (keeps its DV, size, partition values).
func RemoveFile(a Add, ts time.Time) Remove {
	ms := ts.UnixMilli()
	ext := true
	size := a.Size
	return Remove{Path: a.Path, DeletionTimestamp: &ms, DataChange: true, ExtendedFileMetadata: &ext,
		PartitionValues: a.PartitionValues, Size: &size, DeletionVector: a.DeletionVector,
		BaseRowID: a.BaseRowID, DefaultRowCommitVersion: a.DefaultRowCommitVersion}
}

// SetMetadata replaces the table metadata (schema evolution, properties).
func (tx *Transaction) SetMetadata(m Metadata) *Transaction { tx.metadata = &m; return tx }

// SetProtocol upgrades the protocol.
func (tx *Transaction) SetProtocol(p Protocol) *Transaction { tx.protocol = &p; return tx }

// SetDomainMetadata sets a domain's configuration (adds the domainMetadata
// writer feature requirement: the table protocol must list it).
func (tx *Transaction) SetDomainMetadata(domain, configuration string) *Transaction {
	tx.domains = append(tx.domains, DomainMetadata{Domain: domain, Configuration: configuration})
	return tx
}

// RemoveDomainMetadata tombstones a domain.
func (tx *Transaction) RemoveDomainMetadata(domain string) *Transaction {
	cfg, _ := tx.read.DomainMetadata(domain)
	tx.domains = append(tx.domains, DomainMetadata{Domain: domain, Configuration: cfg, Removed: true})
	return tx
}

// SetAppTransaction records appId's batch version in this commit (idempotent writes).
func (tx *Transaction) SetAppTransaction(appID string, version int64) *Transaction {
	tx.appTxns = append(tx.appTxns, Txn{AppID: appID, Version: version})
	tx.readTxns[appID] = true
	return tx
}

// SetAppTransactionBlind records appId's version without depending on it:
// a concurrent commit setting the same appId does not conflict (the later
// commit's version is the table's). For a counter that labels commits
// rather than making them idempotent.
func (tx *Transaction) SetAppTransactionBlind(appID string, version int64) *Transaction {
	tx.appTxns = append(tx.appTxns, Txn{AppID: appID, Version: version})
	return tx
}

// TxnVersion reads appId's version from the read snapshot and records the
// dependency: a concurrent commit setting that appId makes ours conflict.
func (tx *Transaction) TxnVersion(appID string) (int64, bool) {
	tx.readTxns[appID] = true
	return tx.read.TxnVersion(appID)
}

// ExpectTxn makes the commit conditional on appId's txn version being
// version (-1: no txn for appId) in the read snapshot and staying so until
// the commit lands: otherwise Commit fails with a *FencedError
// (errors.Is(err, ErrFenced)), never by retrying at the next version. A
// writer advancing a Kafka partition's offset from X expects X: a concurrent
// owner that moved it fences this one out.
func (tx *Transaction) ExpectTxn(appID string, version int64) *Transaction {
	if tx.expect == nil {
		tx.expect = map[string]int64{}
	}
	tx.expect[appID] = version
	tx.readTxns[appID] = true
	return tx
}

// checkExpected checks the ExpectTxn preconditions against the txn versions
// of a snapshot (winner < 0) or against the txn actions of a winning commit.
func (tx *Transaction) checkExpected(winner int64, acts []Action) error {
	if len(tx.expect) == 0 {
		return nil
	}
	var fences []Fence
	if winner < 0 {
		for app, want := range tx.expect {
			found := int64(-1)
			if v, ok := tx.read.TxnVersion(app); ok {
				found = v
			}
			if found != want {
				fences = append(fences, Fence{AppID: app, Expected: want, Found: found})
			}
		}
	} else {
		for i := range acts {
			if t := acts[i].Txn; t != nil {
				if want, ok := tx.expect[t.AppID]; ok && t.Version != want {
					fences = append(fences, Fence{AppID: t.AppID, Expected: want, Found: t.Version})
				}
			}
		}
	}
	if len(fences) == 0 {
		return nil
	}
	sort.Slice(fences, func(i, j int) bool { return fences[i].AppID < fences[j].AppID })
	wv := winner
	if wv < 0 {
		wv = tx.read.version
	}
	return &FencedError{ReadVersion: tx.read.version, WinnerVersion: wv, Fences: fences}
}

// ReadWholeTable declares that this transaction's writes depend on the
// whole table contents (e.g. MERGE): any concurrent data change conflicts.
func (tx *Transaction) ReadWholeTable() *Transaction { tx.readAll = true; return tx }

// WinnerCheck decides whether a concurrent commit that won the version
// before ours (its version and actions) invalidates our writes. It runs
// after the built-in checks (metaData, protocol, our txn appIds and
// domains, removes of files we also remove, fences) have passed. A
// *ConflictError return is the conflict (Commit fills in the versions and
// attempts); nil rebases ours onto it (retried at the next version
// unchanged); any other error fails the commit as it is (ours did not land).
type WinnerCheck func(ctx context.Context, version int64, actions []Action) error

// CheckWinners makes f the judge of concurrent data changes, for a writer
// that knows which rows its writes depend on (e.g. a MERGE by key that can
// read the keys of a winner's new files): a finer rule than
// ReadWholeTable, which it replaces.
func (tx *Transaction) CheckWinners(f WinnerCheck) *Transaction {
	tx.winners = f
	tx.readAll = false
	return tx
}

func (tx *Transaction) now() time.Time {
	if tx.Now != nil {
		return tx.Now()
	}
	return time.Now()
}

// validate enforces the spec's "no two reconciling actions in one commit"
// and our writer-feature support.
func (tx *Transaction) validate() error {
	seen := map[string]bool{}
	for i := range tx.adds {
		a := &tx.adds[i]
		if a.Path == "" {
			return fmt.Errorf("add #%d: empty path", i)
		}
		k := a.Key()
		if seen[k] {
			return fmt.Errorf("add %s appears twice in one commit", a.Path)
		}
		seen[k] = true
	}
	rseen := map[string]bool{}
	for i := range tx.removes {
		r := &tx.removes[i]
		if r.Path == "" {
			return fmt.Errorf("remove #%d: empty path", i)
		}
		k := r.Key()
		if rseen[k] || seen[k] {
			return fmt.Errorf("remove %s reconciles with another action in the same commit", r.Path)
		}
		rseen[k] = true
	}
	apps := map[string]bool{}
	for _, t := range tx.appTxns {
		if apps[t.AppID] {
			return fmt.Errorf("two txn actions for appId %q in one commit", t.AppID)
		}
		apps[t.AppID] = true
	}
	doms := map[string]bool{}
	for _, d := range tx.domains {
		if doms[d.Domain] {
			return fmt.Errorf("two domainMetadata actions for %q in one commit", d.Domain)
		}
		doms[d.Domain] = true
	}
	p, m := tx.read.protocol, tx.read.metadata
	if tx.protocol != nil {
		p = *tx.protocol
	}
	if tx.metadata != nil {
		m = *tx.metadata
	}
	if err := checkWriteSupported(&p, &m); err != nil {
		return err
	}
	if err := tx.checkChangeData(&p, &m); err != nil {
		return err
	}
	if tx.metadata != nil {
		st, err := schema.Parse(m.SchemaString)
		if err != nil {
			return fmt.Errorf("new metaData: %w", err)
		}
		if err := st.Validate(); err != nil {
			return fmt.Errorf("new metaData: %w", err)
		}
		// e.g. a schema.DropColumn of a partition column: Delta cannot drop those.
		for _, c := range m.PartitionColumns {
			if f, _ := st.Field(c); f == nil {
				return fmt.Errorf("new metaData: partition column %q is not in the schema", c)
			}
		}
		// A commit that replaces every data file may change column types
		// freely (the new files carry the new types: an overwrite, a table
		// rewrite); otherwise old files stay and only widenings are allowed.
		if old, err := tx.read.Schema(); err == nil && !tx.replacesAllFiles() {
			if err := checkTypeChangesAllowed(old, st, &p, &m); err != nil {
				return fmt.Errorf("new metaData: %w", err)
			}
		}
	}
	if len(tx.domains) > 0 && !p.HasFeature("domainMetadata") {
		return &UnsupportedFeatureError{Feature: "domainMetadata (not enabled in table protocol: add writer feature domainMetadata, writer version 7)"}
	}
	for i := range tx.adds {
		if tx.adds[i].DeletionVector != nil && !p.HasFeature("deletionVectors") {
			return &UnsupportedFeatureError{Feature: "deletionVectors (not enabled in table protocol)"}
		}
	}
	if m.Configuration["delta.appendOnly"] == "true" {
		for _, r := range tx.removes {
			if r.DataChange {
				return fmt.Errorf("table is append-only (delta.appendOnly=true): remove of %s refused", r.Path)
			}
		}
	}
	return nil
}

// IsBlindAppend: only adds (no DV), no removes, no reads of table data.
func (tx *Transaction) IsBlindAppend() bool {
	if len(tx.removes) > 0 || tx.metadata != nil || tx.protocol != nil || tx.readAll {
		return false
	}
	for i := range tx.adds {
		if tx.adds[i].DeletionVector != nil {
			return false
		}
	}
	return true
}

func (tx *Transaction) actions(op string, params map[string]any, readVersion int64) []Action {
	now := tx.now().UnixMilli()
	acts := make([]Action, 0, 3+len(tx.adds)+len(tx.removes)+len(tx.cdcs)+len(tx.domains)+len(tx.appTxns))
	ci := commitInfo(op, params, readVersion, tx.IsBlindAppend())
	ci["timestamp"] = now
	acts = append(acts, Action{CommitInfo: ci})
	if tx.protocol != nil {
		acts = append(acts, Action{Protocol: tx.protocol})
	}
	if tx.metadata != nil {
		acts = append(acts, Action{Metadata: tx.metadata})
	}
	for i := range tx.appTxns {
		t := tx.appTxns[i]
		t.LastUpdated = &now
		acts = append(acts, Action{Txn: &t})
	}
	for i := range tx.domains {
		acts = append(acts, Action{DomainMetadata: &tx.domains[i]})
	}
	for i := range tx.removes {
		r := tx.removes[i]
		if r.DeletionTimestamp == nil {
			r.DeletionTimestamp = &now
		}
		acts = append(acts, Action{Remove: &r})
	}
	for i := range tx.adds {
		acts = append(acts, Action{Add: &tx.adds[i]})
	}
	for i := range tx.cdcs {
		acts = append(acts, Action{CDC: &tx.cdcs[i]})
	}
	return acts
}

// checkConflict decides whether a winning commit invalidates ours.
func (tx *Transaction) checkConflict(winner int64, acts []Action) error {
	conflict := func(format string, a ...any) error {
		return &ConflictError{ReadVersion: tx.read.version, WinnerVersion: winner, Reason: fmt.Sprintf(format, a...)}
	}
	var ourRemoves map[string]bool
	if len(tx.removes) > 0 {
		ourRemoves = make(map[string]bool, len(tx.removes))
		for _, r := range tx.removes {
			ourRemoves[r.Path] = true
		}
	}
	ourDomains := map[string]bool{}
	for _, d := range tx.domains {
		ourDomains[d.Domain] = true
	}
	for i := range acts {
		a := &acts[i]
		switch {
		case a.Metadata != nil:
			return conflict("concurrent metaData change")
		case a.Protocol != nil:
			return conflict("concurrent protocol change")
		case a.Txn != nil:
			if tx.readTxns[a.Txn.AppID] {
				return conflict("concurrent txn for appId %q (version %d)", a.Txn.AppID, a.Txn.Version)
			}
		case a.DomainMetadata != nil:
			if ourDomains[a.DomainMetadata.Domain] {
				return conflict("concurrent change of domain %q", a.DomainMetadata.Domain)
			}
		case a.Remove != nil:
			if ourRemoves[a.Remove.Path] {
				return conflict("concurrent remove of %s", a.Remove.Path)
			}
			if tx.readAll && a.Remove.DataChange {
				return conflict("concurrent delete of %s while we read the whole table", a.Remove.Path)
			}
		case a.Add != nil:
			if tx.readAll && a.Add.DataChange {
				return conflict("concurrent add of %s while we read the whole table", a.Add.Path)
			}
		}
	}
	return nil
}

// Commit writes the transaction as the next table version. On a lost race
// it reads the winning commits; if none logically conflicts it retries at
// the next version, up to MaxAttempts. A logical conflict returns a
// *ConflictError (errors.Is(err, ErrConflict)). After success it writes a
// checkpoint when version % delta.checkpointInterval == 0; a checkpoint
// failure does not fail the commit (readers fall back to older checkpoints
// and replay) and is dropped: callers that report it use CommitWithResult.
func (tx *Transaction) Commit(ctx context.Context, op string, params map[string]any) (int64, error) {
	res, err := tx.CommitWithResult(ctx, op, params)
	if err != nil {
		return -1, err
	}
	return res.Version, nil
}

// CommitWithResult is Commit, also reporting a failed checkpoint.
func (tx *Transaction) CommitWithResult(ctx context.Context, op string, params map[string]any) (CommitResult, error) {
	fail := CommitResult{Version: -1}
	if err := tx.validate(); err != nil {
		return fail, fmt.Errorf("commit %s: %w", op, err)
	}
	if err := tx.checkExpected(-1, nil); err != nil {
		return fail, fmt.Errorf("commit %s: %w", op, err)
	}
	acts := tx.actions(op, params, tx.read.version)
	data, err := MarshalCommit(acts)
	if err != nil {
		return fail, fmt.Errorf("commit %s: %w", op, err)
	}
	max := tx.MaxAttempts
	if max <= 0 {
		max = DefaultMaxAttempts
	}
	v := tx.read.version + 1
	rebased := 0
	for attempt := 1; ; attempt++ {
		err := tx.table.store.PutIfAbsent(ctx, tx.table.logKey(commitName(v)), data)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) {
			return fail, fmt.Errorf("commit %s v%d: %w", op, v, err)
		}
		winner, rerr := tx.table.readCommit(ctx, v)
		if rerr != nil {
			return fail, fmt.Errorf("commit %s: conflict check: %w", op, rerr)
		}
		// a fence first: it is not a conflict to re-plan, whatever else the winner did
		if ferr := tx.checkExpected(v, winner); ferr != nil {
			return fail, fmt.Errorf("commit %s: %w", op, ferr)
		}
		cerr := tx.checkConflict(v, winner)
		if cerr == nil && tx.winners != nil {
			cerr = tx.winners(ctx, v, winner)
		}
		if cerr != nil {
			var ce *ConflictError
			if !errors.As(cerr, &ce) {
				return fail, fmt.Errorf("commit %s: check concurrent commit v%d: %w", op, v, cerr)
			}
			ce.ReadVersion, ce.WinnerVersion, ce.Attempts = tx.read.version, v, attempt
			return fail, fmt.Errorf("commit %s: %w", op, cerr)
		}
		rebased++
		if attempt >= max {
			return fail, fmt.Errorf("commit %s: %w", op, &ConflictError{ReadVersion: tx.read.version, WinnerVersion: v, Attempts: attempt,
				Reason: fmt.Sprintf("gave up after %d attempts against concurrent commits", attempt)})
		}
		v++
	}
	res := CommitResult{}
	interval := tx.read.CheckpointInterval()
	if tx.metadata != nil {
		s := &Snapshot{metadata: *tx.metadata}
		interval = s.CheckpointInterval()
	}
	res.CheckpointDue = v%interval == 0
	if res.CheckpointDue && !tx.SkipCheckpoint {
		res.CheckpointErr = tx.table.WriteCheckpointAt(ctx, v)
	}
	res.Version, res.Rebased = v, rebased
	return res, nil
}

// replacesAllFiles reports whether the transaction removes every data file
// of the snapshot it read (the files it adds are then the whole table).
func (tx *Transaction) replacesAllFiles() bool {
	if tx.read == nil {
		return true
	}
	removed := make(map[string]bool, len(tx.removes))
	for _, r := range tx.removes {
		removed[r.Path] = true
	}
	for _, a := range tx.read.Files() {
		if !removed[a.Path] {
			return false
		}
	}
	return true
}
