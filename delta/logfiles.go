// Naming and listing _delta_log files: commits and checkpoints (classic, multi-part, V2).

package delta

import (
	"fmt"
	"path"
	"strconv"
	"strings"
)

const logDir = "_delta_log"

func commitName(v int64) string { return fmt.Sprintf("%020d.json", v) }

func checkpointName(v int64) string { return fmt.Sprintf("%020d.checkpoint.parquet", v) }

// checkpointRef is one complete checkpoint found in the log listing.
type checkpointRef struct {
	version int64
	keys    []string // one key, or all parts in order
	v2      bool     // UUID-named (v2 spec) checkpoint
	json    bool     // v2 JSON checkpoint
}

// logListing is the parsed listing of _delta_log.
type logListing struct {
	commits     map[int64]string // version -> key
	checkpoints []checkpointRef  // complete checkpoints, ascending version
	maxCommit   int64            // -1 when none
}

// parseLogListing classifies _delta_log entries. Unknown names (crc,
// compacted logs, temp files, _last_checkpoint) are ignored.
func parseLogListing(dir string, files []FileInfo) logListing {
	l := logListing{commits: map[int64]string{}, maxCommit: -1}
	type partKey struct{ v, n int64 }
	parts := map[partKey][]string{}
	var partOrder []partKey
	for _, f := range files {
		name := f.Name
		if f.IsDir || len(name) < 21 || name[20] != '.' {
			continue
		}
		v, err := strconv.ParseInt(name[:20], 10, 64)
		if err != nil || v < 0 {
			continue
		}
		rest := name[21:]
		key := path.Join(dir, name)
		switch {
		case rest == "json":
			l.commits[v] = key
			if v > l.maxCommit {
				l.maxCommit = v
			}
		case rest == "checkpoint.parquet":
			l.checkpoints = append(l.checkpoints, checkpointRef{version: v, keys: []string{key}})
		case strings.HasPrefix(rest, "checkpoint."):
			segs := strings.Split(rest, ".")
			// checkpoint.<i>.<n>.parquet
			if len(segs) == 4 && segs[3] == "parquet" && len(segs[1]) == 10 && len(segs[2]) == 10 {
				i, err1 := strconv.ParseInt(segs[1], 10, 64)
				n, err2 := strconv.ParseInt(segs[2], 10, 64)
				if err1 != nil || err2 != nil || i < 1 || n < 1 || i > n || n > 100000 {
					continue
				}
				pk := partKey{v, n}
				if parts[pk] == nil {
					parts[pk] = make([]string, n)
					partOrder = append(partOrder, pk)
				}
				parts[pk][i-1] = key
				continue
			}
			// checkpoint.<uuid>.json|parquet (v2)
			if len(segs) == 3 && (segs[2] == "json" || segs[2] == "parquet") && len(segs[1]) == 36 {
				l.checkpoints = append(l.checkpoints, checkpointRef{version: v, keys: []string{key}, v2: true, json: segs[2] == "json"})
			}
		}
	}
	for _, pk := range partOrder {
		complete := true
		for _, k := range parts[pk] {
			if k == "" {
				complete = false
				break
			}
		}
		if complete {
			l.checkpoints = append(l.checkpoints, checkpointRef{version: pk.v, keys: parts[pk]})
		}
	}
	// sort ascending by version (insertion sort: few entries usually unsorted)
	cps := l.checkpoints
	for i := 1; i < len(cps); i++ {
		for j := i; j > 0 && cps[j].version < cps[j-1].version; j-- {
			cps[j], cps[j-1] = cps[j-1], cps[j]
		}
	}
	return l
}
