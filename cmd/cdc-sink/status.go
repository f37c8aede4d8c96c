package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cdcsink/cdc-sink/status"
	"github.com/cdcsink/cdc-sink/tablerows"
)

// cmdStatus prints the status page's summary in a terminal, from a running
// sink (--url) or from tables (--tables DIR...).
func cmdStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("status", stderr)
	url := fs.String("url", "", "a running sink's HTTP listener, e.g. http://127.0.0.1:8081 (reads /status.json)")
	var tables multiFlag
	fs.Var(&tables, "tables", "table locations (repeatable, comma-separated, or followed by more locations)")
	asJSON := fs.Bool("json", false, "print the status document as JSON")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	dirs := append(splitList(tables), pos...)
	switch {
	case *url != "" && len(dirs) > 0:
		return &exitError{code: 2, msg: "status: --url and --tables are exclusive"}
	case *url == "" && len(tables) == 0:
		if len(pos) > 0 {
			return &exitError{code: 2, msg: fmt.Sprintf("status: unexpected argument %q (tables go after --tables)", pos[0])}
		}
		return &exitError{code: 2, msg: "usage: cdc-sink status (--url http://HOST:PORT | --tables DIR [DIR...]) [--json]"}
	}
	var st *status.Status
	if *url != "" {
		st, err = status.Fetch(ctx, &http.Client{Timeout: 15 * time.Second}, *url)
	} else {
		var ts []*tablerows.Table
		for _, d := range dirs {
			if err := tableArg("status", d); err != nil {
				return err
			}
			t, err := tablerows.OpenWith(ctx, d, storageOpts)
			if err != nil {
				return err
			}
			ts = append(ts, t)
		}
		st, err = status.FromTables(ctx, ts)
	}
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	return printStatus(stdout, st, *url != "")
}

func printStatus(out io.Writer, st *status.Status, live bool) error {
	w := bufio.NewWriter(out)
	when := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format(time.RFC3339) + " (" + st.Now.Sub(t).Round(time.Second).String() + " ago)"
	}
	if live {
		h := st.Health
		state := "ready"
		switch {
		case h.ConsecutiveFailures > 0:
			state = fmt.Sprintf("retrying (%d consecutive failures)", h.ConsecutiveFailures)
		case !h.Ready:
			state = "not ready"
		}
		fmt.Fprintf(w, "sink %s: %s\n", st.Sink, state)
		if h.LastError != "" {
			fmt.Fprintf(w, "last error (%s): %s\n", when(h.LastErrorAt), h.LastError)
		}
		fmt.Fprintf(w, "totals: %d records, %d batches, %d inserted, %d updated, %d deleted, %d quarantined\n",
			st.Totals.Records, st.Totals.Batches, st.Totals.Inserted, st.Totals.Updated, st.Totals.Deleted, st.Totals.Quarantined)
		if lb := st.LastBatch; lb != nil {
			fmt.Fprintf(w, "last batch: %d, %d records in %d ms, %s\n", lb.BatchID, lb.Records, lb.DurationMs, when(lb.At))
		}
	} else if st.Sink != "" {
		fmt.Fprintf(w, "sink %s (from the tables; no running sink consulted)\n", st.Sink)
	}
	fmt.Fprintln(w)
	rows := make([][]string, 0, len(st.Tables))
	for _, t := range st.Tables {
		rows = append(rows, []string{t.Name, strconv.FormatInt(t.Version, 10), strconv.FormatInt(t.BatchID, 10),
			strconv.FormatInt(t.Live, 10), strconv.FormatInt(t.Deleted, 10), when(t.LastCommit)})
	}
	writePlain(w, []string{"TABLE", "VERSION", "BATCH", "LIVE", "DELETED", "LAST COMMIT"}, rows)
	if len(st.Partitions) > 0 {
		fmt.Fprintln(w)
		rows = rows[:0]
		for _, p := range st.Partitions {
			lag := "-"
			if p.Lag >= 0 {
				lag = strconv.FormatInt(p.Lag, 10)
			}
			rows = append(rows, []string{p.Topic, strconv.Itoa(int(p.Partition)), strconv.FormatInt(p.Offset, 10), lag})
		}
		writePlain(w, []string{"TOPIC", "PARTITION", "NEXT OFFSET", "LAG"}, rows)
	}
	if live {
		fmt.Fprintln(w)
		if len(st.Series) > 0 {
			p := st.Series[len(st.Series)-1]
			fmt.Fprintf(w, "last %s: %.1f records/s, batch p50 %.0f ms p95 %.0f ms, end-to-end latency p50 %.2fs p95 %.2fs p99 %.2fs\n",
				st.Step, p.RecordsPerSec, p.BatchMsP50, p.BatchMsP95, p.LatencyP50, p.LatencyP95, p.LatencyP99)
		}
		reasons := make([]string, 0, len(st.Quarantine.ByReason))
		for r := range st.Quarantine.ByReason {
			reasons = append(reasons, r)
		}
		sort.Strings(reasons)
		parts := make([]string, len(reasons))
		for i, r := range reasons {
			parts[i] = fmt.Sprintf("%s %d", r, st.Quarantine.ByReason[r])
		}
		if len(parts) == 0 {
			parts = []string{"none"}
		}
		fmt.Fprintf(w, "quarantined since start: %s\n", strings.Join(parts, ", "))
		if len(st.Quarantine.ByRule) > 0 {
			rules := make([]string, 0, len(st.Quarantine.ByRule))
			for r := range st.Quarantine.ByRule {
				rules = append(rules, r)
			}
			sort.Strings(rules)
			for i, r := range rules {
				rules[i] = fmt.Sprintf("%s %d", r, st.Quarantine.ByRule[r])
			}
			fmt.Fprintf(w, "rule violations by rule: %s\n", strings.Join(rules, ", "))
		}
		for i, e := range st.Quarantine.Newest {
			if i == 5 {
				break
			}
			reason := e.Reason
			if e.Rule != "" {
				reason += " (" + e.Rule + ")"
			}
			fmt.Fprintf(w, "  %s  %s  %s/%d@%d  %s\n", e.Time.UTC().Format(time.RFC3339), reason, e.Topic, e.Partition, e.Offset, e.Message)
		}
	}
	return w.Flush()
}

// writePlain prints an aligned table without quoting (values are ours).
func writePlain(w io.Writer, header []string, rows [][]string) {
	width := make([]int, len(header))
	for i, h := range header {
		width[i] = len(h)
	}
	for _, r := range rows {
		for i, c := range r {
			width[i] = max(width[i], len(c))
		}
	}
	line := func(cells []string) {
		for i, c := range cells {
			if i > 0 {
				fmt.Fprint(w, "  ")
			}
			if i == len(cells)-1 {
				fmt.Fprint(w, c)
			} else {
				fmt.Fprintf(w, "%-*s", width[i], c)
			}
		}
		fmt.Fprintln(w)
	}
	line(header)
	for _, r := range rows {
		line(r)
	}
}
