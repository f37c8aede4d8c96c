// Vacuum and log cleanup: deleting files no retained version needs.

package delta

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"
)

// VacuumOptions configures Vacuum. The zero value is a dry run using the
// table's delta.deletedFileRetentionDuration and the current time.
type VacuumOptions struct {
	// Retention overrides delta.deletedFileRetentionDuration when > 0.
	Retention time.Duration
	// Execute actually deletes; false (default) is a dry run.
	Execute bool
	// Now overrides the clock.
	Now time.Time
	// KeepVersions are versions that must stay readable (a consistency
	// group's cuts name them): every file they reference is kept, however
	// old.
	KeepVersions []int64
}

// VacuumResult lists the files vacuum deleted (or would delete).
type VacuumResult struct {
	Version int64    // snapshot version used
	Files   []string // table-relative keys, sorted
	DryRun  bool
}

// Vacuum deletes data and DV files that neither the current snapshot nor an
// unexpired tombstone references and whose modification time is older than
// the retention, and change data files (_change_data/) older than the
// retention. Other files and directories whose name starts with '_' or '.'
// (the log, sidecars, temp files) are never touched.
func Vacuum(ctx context.Context, t *Table, opts VacuumOptions) (VacuumResult, error) {
	w, ok := t.store.(Walker)
	if !ok {
		return VacuumResult{}, fmt.Errorf("vacuum: storage %T cannot list recursively", t.store)
	}
	snap, err := t.Snapshot(ctx)
	if err != nil {
		return VacuumResult{}, fmt.Errorf("vacuum: %w", err)
	}
	if err := checkWriteSupported(&snap.protocol, &snap.metadata); err != nil {
		return VacuumResult{}, fmt.Errorf("vacuum: %w", err)
	}
	now := opts.Now
	if now.IsZero() {
		now = time.Now()
	}
	ret := opts.Retention
	if ret <= 0 {
		ret = snap.DeletedFileRetention()
	}
	keep := map[string]bool{}
	ref := func(p string, d *DeletionVector) {
		if rel, ok := relPath(p); ok {
			keep[rel] = true
		}
		if d != nil && d.StorageType == "u" {
			if rel, err := d.RelativePath(); err == nil {
				keep[rel] = true
			}
		}
	}
	for i := range snap.files {
		ref(snap.files[i].Path, snap.files[i].DeletionVector)
	}
	for _, r := range snap.TombstonesAt(now) {
		ref(r.Path, r.DeletionVector)
	}
	for _, v := range opts.KeepVersions {
		if v == snap.version {
			continue
		}
		old, err := t.SnapshotAt(ctx, v)
		if err != nil {
			return VacuumResult{}, fmt.Errorf("vacuum: version %d must stay readable: %w", v, err)
		}
		for i := range old.files {
			ref(old.files[i].Path, old.files[i].DeletionVector)
		}
	}
	files, err := w.WalkFiles(ctx, t.path)
	if err != nil {
		return VacuumResult{}, fmt.Errorf("vacuum: list files: %w", err)
	}
	res := VacuumResult{Version: snap.version, DryRun: !opts.Execute}
	cutoff := now.Add(-ret)
	prefix := ""
	if t.path != "" {
		prefix = t.path + "/"
	}
	for _, f := range files {
		rel := strings.TrimPrefix(f.Key, prefix)
		if hiddenPath(rel) || keep[rel] || f.ModTime.After(cutoff) {
			continue
		}
		res.Files = append(res.Files, rel)
	}
	sort.Strings(res.Files)
	if opts.Execute {
		for _, rel := range res.Files {
			if err := t.store.Delete(ctx, t.Key(rel)); err != nil {
				return res, fmt.Errorf("vacuum: delete %s: %w", rel, err)
			}
		}
	}
	return res, nil
}

func hiddenPath(rel string) bool {
	// Change data files are not hidden (as in Spark): no snapshot or
	// tombstone ever references them, so they go once older than the
	// retention, like removed files; younger ones stay for change readers.
	rel = strings.TrimPrefix(rel, ChangeDataDir+"/")
	for _, seg := range strings.Split(rel, "/") {
		if strings.HasPrefix(seg, "_") || strings.HasPrefix(seg, ".") {
			return true
		}
	}
	return false
}

// relPath turns an add/remove path (URI-encoded, relative) into a
// table-relative key; absolute URIs are not ours to vacuum.
func relPath(p string) (string, bool) {
	if strings.Contains(p, "://") || strings.HasPrefix(p, "/") {
		return "", false
	}
	u, err := url.PathUnescape(p)
	if err != nil {
		return p, true
	}
	return u, true
}

// CleanupLog deletes expired log files per the spec: with cutoff =
// now - delta.logRetentionDuration, keep the newest checkpoint written at or
// before the cutoff, its commit and everything after; delete older
// commits, checkpoints and .crc files. Returns the deleted keys.
func CleanupLog(ctx context.Context, t *Table, now time.Time) ([]string, error) {
	return CleanupLogKeeping(ctx, t, now, nil)
}

// CleanupLogKeeping is CleanupLog that keeps versions readable: the log
// from the newest checkpoint at or before the oldest of them (from the
// first commit when there is none) stays.
func CleanupLogKeeping(ctx context.Context, t *Table, now time.Time, keep []int64) ([]string, error) {
	snap, err := t.Snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("cleanup log: %w", err)
	}
	cutoff := now.Add(-snap.LogRetention())
	dir := t.Key(logDir)
	files, err := t.store.List(ctx, dir, "")
	if err != nil {
		return nil, fmt.Errorf("cleanup log: list: %w", err)
	}
	l := parseLogListing(dir, files)
	var keepFrom int64 = -1
	for i := len(l.checkpoints) - 1; i >= 0; i-- {
		cp := l.checkpoints[i]
		st, err := t.store.Stat(ctx, cp.keys[0])
		if err != nil {
			continue
		}
		if !st.ModTime.After(cutoff) {
			keepFrom = cp.version
			break
		}
	}
	if len(keep) > 0 {
		oldest := slices.Min(keep)
		floor := int64(0)
		for _, cp := range l.checkpoints {
			if cp.version <= oldest {
				floor = max(floor, cp.version)
			}
		}
		keepFrom = min(keepFrom, floor)
	}
	if keepFrom <= 0 {
		return nil, nil
	}
	var deleted []string
	for _, f := range files {
		if f.IsDir || len(f.Name) < 21 || f.Name[20] != '.' {
			continue
		}
		var v int64
		if _, err := fmt.Sscanf(f.Name[:20], "%d", &v); err != nil || v >= keepFrom {
			continue
		}
		rest := f.Name[21:]
		if rest != "json" && rest != "crc" && !strings.HasPrefix(rest, "checkpoint.") {
			continue
		}
		st, err := t.store.Stat(ctx, f.Key)
		if err != nil || st.ModTime.After(cutoff) {
			continue
		}
		if err := t.store.Delete(ctx, f.Key); err != nil {
			return deleted, fmt.Errorf("cleanup log: delete %s: %w", f.Name, err)
		}
		deleted = append(deleted, f.Key)
	}
	return deleted, nil
}
