// Command mergebench measures cdc-sink's MERGE cost against table size:
// it builds a table of N rows, then applies batches of random-key changes
// (80% update, 10% insert, 10% delete) and reports median and p99 commit
// time, bytes written per batch and peak RSS.
//
// -keep leaves the table in -dir; a second run with -reuse on it measures
// the open (time, heap, peak RSS) in a process that did not build it:
//
//	go run ./bench/mergebench -rows 100000000 -batches 1 -dir /tmp/mb -keep
//	go run ./bench/mergebench -dir /tmp/mb -reuse -keep
//
//	go run ./bench/mergebench -rows 1000000 -batches 20 -batch 10000
//
// -table puts the table anywhere cdc-sink can: a directory or an s3:// URL
// (the S3 settings as cdc-sink takes them: the AWS SDK's chain plus
// CDC_SINK_STORAGE_S3_ENDPOINT / _PATH_STYLE / _REGION, or the -s3-* flags):
//
//	CDC_SINK_STORAGE_S3_ENDPOINT=http://127.0.0.1:8333 CDC_SINK_STORAGE_S3_PATH_STYLE=true \
//	  go run ./bench/mergebench -rows 1000000 -table s3://bench/orders
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/cdcsink/cdc-sink/delta"
	_ "github.com/cdcsink/cdc-sink/delta/s3store" // s3:// tables
	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/versioning"
)

var schema = &normalize.Schema{Columns: []normalize.ColumnDef{
	{Name: "id", Type: normalize.Type{Kind: normalize.Long}},
	{Name: "customer_id", Type: normalize.Type{Kind: normalize.Integer}, Nullable: true},
	{Name: "status", Type: normalize.Type{Kind: normalize.String}, Nullable: true},
	{Name: "amount", Type: normalize.Type{Kind: normalize.Decimal, Precision: 12, Scale: 2}, Nullable: true},
	{Name: "updated_at", Type: normalize.Type{Kind: normalize.Timestamp}, Nullable: true},
	{Name: "note", Type: normalize.Type{Kind: normalize.String}, Nullable: true},
}}

var statuses = []string{"CRIADO", "PAGO", "ENVIADO", "ENTREGUE", "CANCELADO"}

type gen struct {
	rng  *rand.Rand
	lsn  uint64
	next int64 // next new key
}

func (g *gen) change(id int64, op byte) *normalize.Change {
	g.lsn += 8
	c := &normalize.Change{Table: normalize.TableID{Server: "bench", Schema: "public", Table: "orders"},
		SourceOp: op, KeyNames: []string{"id"}, Key: []any{id}, Schema: schema,
		Version:        versioning.Version{Phase: versioning.PhaseStream, Commit: g.lsn - g.lsn%64, LSN: g.lsn},
		SourceTsMicros: time.Now().UnixMicro()}
	if op == 'd' {
		c.Op = normalize.OpDelete
		return c
	}
	c.Op = normalize.OpUpsert
	c.Row = []any{id, int32(g.rng.Intn(100000)), statuses[g.rng.Intn(len(statuses))],
		decimal.New(g.rng.Int63n(10_000_000), -2), time.Now().UnixMicro(), "note " + strconv.Itoa(g.rng.Intn(1000))}
	return c
}

type result struct {
	// Table is the location measured: "local" (a temp dir) or the -table value.
	Table        string  `json:"table"`
	Rows         int64   `json:"rows"`
	BatchChanges int     `json:"batch_changes"`
	Batches      int     `json:"batches"`
	BuildSeconds float64 `json:"build_seconds"`
	OpenSeconds  float64 `json:"open_seconds"`
	MedianMs     float64 `json:"median_ms"`
	P99Ms        float64 `json:"p99_ms"`
	MaxMs        float64 `json:"max_ms"`
	MedianBytes  int64   `json:"median_bytes_written"`
	MaxBytes     int64   `json:"max_bytes_written"`
	// The commit step alone (log write: put-if-absent of the next version),
	// per batch, as merge reports it (Result.CommitMs, whole milliseconds).
	CommitMedianMs int64 `json:"commit_median_ms"`
	CommitP99Ms    int64 `json:"commit_p99_ms"`
	// TotalBytes is everything the measured batches wrote (data, DVs, log).
	TotalBytes int64   `json:"total_bytes_written"`
	PeakRSSMiB float64 `json:"peak_rss_mib"`
	// HeapAfterOpenMiB is the live Go heap right after Open (a forced GC):
	// what holding this table open costs, mostly the key index.
	HeapAfterOpenMiB float64 `json:"heap_after_open_mib"`
	// OpenPeakRSSMiB is the peak RSS of the open alone (-reuse only: the
	// process has built nothing).
	OpenPeakRSSMiB float64 `json:"open_peak_rss_mib,omitempty"`
	// GCCPUSeconds is the CPU the garbage collector used during the batches.
	GCCPUSeconds  float64 `json:"gc_cpu_seconds"`
	ChangesPerSec float64 `json:"changes_per_sec"`
	TableVersion  int64   `json:"table_version"`
}

func main() {
	rows := flag.Int64("rows", 1_000_000, "table size to build")
	batch := flag.Int("batch", 10000, "changes per measured batch")
	batches := flag.Int("batches", 20, "measured batches")
	buildBatch := flag.Int("build-batch", 1_000_000, "rows per batch while building")
	dir := flag.String("dir", "", "directory holding the table (default: a temp dir, removed after)")
	location := flag.String("table", "", "table location instead of -dir: a path or s3://bucket/prefix (left in place)")
	s3Endpoint := flag.String("s3-endpoint", os.Getenv("CDC_SINK_STORAGE_S3_ENDPOINT"), "S3 endpoint (default $CDC_SINK_STORAGE_S3_ENDPOINT)")
	s3PathStyle := flag.Bool("s3-path-style", os.Getenv("CDC_SINK_STORAGE_S3_PATH_STYLE") == "true", "path-style S3 addressing (default $CDC_SINK_STORAGE_S3_PATH_STYLE)")
	s3Region := flag.String("s3-region", os.Getenv("CDC_SINK_STORAGE_S3_REGION"), "S3 region (default $CDC_SINK_STORAGE_S3_REGION, then the SDK's)")
	keep := flag.Bool("keep", false, "keep the table")
	reuse := flag.Bool("reuse", false, "measure a table an earlier -keep run built at -dir or -table: no build, so the open (open_seconds, open_peak_rss_mib) and the batches run in a fresh process")
	cpuprof := flag.String("cpuprofile", "", "write a CPU profile of the measured batches")
	openprof := flag.String("openprofile", "", "with -reuse: write a CPU profile of the open")
	cdf := flag.Bool("cdf", false, "the table has Change Data Feed on (each batch also writes its change data file)")
	flag.Parse()
	ctx := context.Background()
	table, name := *location, *location
	if table == "" {
		d := *dir
		if d == "" {
			var err error
			if d, err = os.MkdirTemp("", "mergebench"); err != nil {
				fail(err)
			}
		}
		if !*keep {
			defer os.RemoveAll(d)
		}
		table, name = filepath.Join(d, "orders"), "local"
	} else if *dir != "" {
		fail(fmt.Errorf("-dir and -table are exclusive"))
	}
	// Refuse a bad location or an unsupported scheme before building anything.
	so := delta.StorageOptions{S3: delta.S3Options{Endpoint: *s3Endpoint, PathStyle: *s3PathStyle, Region: *s3Region}}
	if _, err := delta.OpenStorage(ctx, table, so); err != nil {
		fail(fmt.Errorf("-table %s: %w", table, err))
	}
	opts := merge.Options{Sink: "bench", StorageOptions: so, ChangeDataFeed: *cdf}
	g := &gen{rng: rand.New(rand.NewSource(1))}
	res := result{Table: name, Rows: *rows, BatchChanges: *batch, Batches: *batches}
	off := int64(0)
	apply := func(t *merge.Table, cs []*normalize.Change) *merge.Result {
		off += int64(len(cs))
		r, err := t.Apply(ctx, &merge.Batch{Changes: cs, Offsets: map[merge.TP]int64{{Topic: "bench", Partition: 0}: off}},
			func(context.Context, int64, []merge.Reject) error { return nil })
		if err != nil {
			fail(err)
		}
		return r
	}
	if *openprof != "" {
		if !*reuse {
			fail(fmt.Errorf("-openprofile needs -reuse"))
		}
		f, err := os.Create(*openprof)
		if err != nil {
			fail(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fail(err)
		}
	}
	t0 := time.Now()
	t, err := merge.Open(ctx, table, opts)
	if err != nil {
		fail(err)
	}
	pprof.StopCPUProfile() // a no-op without -openprofile
	if *reuse {
		// Continue the earlier run's streams: keys 0…n-1 exist (the build and
		// the batches add keys in order) and the versions must exceed the
		// stored ones, or every update would be a stale skip.
		if t.Version() < 0 {
			fail(fmt.Errorf("-reuse: no table at %s", table))
		}
		live, deleted := t.LiveRows()
		off = t.Offsets()[merge.TP{Topic: "bench", Partition: 0}]
		g.next, g.lsn = int64(live+deleted), 8*uint64(off)
		res.Rows = g.next
		*rows = g.next
	}
	for g.next < *rows {
		n := min(int64(*buildBatch), *rows-g.next)
		cs := make([]*normalize.Change, n)
		for i := range cs {
			cs[i] = g.change(g.next, 'c')
			g.next++
		}
		apply(t, cs)
		fmt.Fprintf(os.Stderr, "built %d rows (%.0fs)\n", g.next, time.Since(t0).Seconds())
	}
	if *reuse {
		// The process has done nothing but open the table: its peak RSS so
		// far is the open's.
		res.OpenSeconds = time.Since(t0).Seconds()
		res.OpenPeakRSSMiB = peakRSS()
	} else {
		res.BuildSeconds = time.Since(t0).Seconds()
		t = nil
		runtime.GC()
		t0 = time.Now()
		if t, err = merge.Open(ctx, table, opts); err != nil {
			fail(err)
		}
		res.OpenSeconds = time.Since(t0).Seconds()
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	res.HeapAfterOpenMiB = float64(ms.HeapAlloc) / (1 << 20)
	gc0 := gcCPU()
	if *cpuprof != "" {
		f, err := os.Create(*cpuprof)
		if err != nil {
			fail(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fail(err)
		}
		defer pprof.StopCPUProfile()
	}
	var durs []float64
	var bytes, commits []int64
	total := time.Duration(0)
	live := g.next
	for b := 0; b < *batches; b++ {
		cs := make([]*normalize.Change, 0, *batch)
		used := map[int64]bool{}
		for len(cs) < *batch {
			p := g.rng.Float64()
			switch {
			case p < 0.10:
				cs = append(cs, g.change(g.next, 'c'))
				g.next++
			default:
				id := g.rng.Int63n(live)
				if used[id] {
					continue
				}
				used[id] = true
				if p < 0.20 {
					cs = append(cs, g.change(id, 'd'))
				} else {
					cs = append(cs, g.change(id, 'u'))
				}
			}
		}
		s := time.Now()
		r := apply(t, cs)
		el := time.Since(s)
		total += el
		durs = append(durs, float64(el.Microseconds())/1000)
		bytes = append(bytes, r.BytesWritten)
		commits = append(commits, r.CommitMs)
		res.TotalBytes += r.BytesWritten
		fmt.Fprintf(os.Stderr, "batch %d: %v, %d bytes, ins=%d upd=%d del=%d (fold %dms write %dms commit %dms)\n",
			b, el.Round(time.Millisecond), r.BytesWritten, r.Inserted, r.Updated, r.Deleted, r.FoldMs, r.WriteMs, r.CommitMs)
	}
	sort.Float64s(durs)
	sort.Slice(bytes, func(i, j int) bool { return bytes[i] < bytes[j] })
	res.MedianMs = durs[len(durs)/2]
	res.P99Ms = durs[min(len(durs)-1, int(float64(len(durs))*0.99))]
	res.MaxMs = durs[len(durs)-1]
	res.MedianBytes = bytes[len(bytes)/2]
	res.MaxBytes = bytes[len(bytes)-1]
	sort.Slice(commits, func(i, j int) bool { return commits[i] < commits[j] })
	res.CommitMedianMs = commits[len(commits)/2]
	res.CommitP99Ms = commits[min(len(commits)-1, int(float64(len(commits))*0.99))]
	res.PeakRSSMiB = peakRSS()
	res.GCCPUSeconds = gcCPU() - gc0
	res.ChangesPerSec = float64(*batch**batches) / total.Seconds()
	res.TableVersion = t.Version()
	pprof.StopCPUProfile()
	out, _ := json.MarshalIndent(res, "", "  ")
	fmt.Println(string(out))
}

// gcCPU is the CPU time the GC has used so far (runtime/metrics).
func gcCPU() float64 {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64 {
		return 0
	}
	return s[0].Value.Float64()
}

// peakRSS reads VmHWM from /proc/self/status (Linux).
func peakRSS() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			f := strings.Fields(line)
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "mergebench:", err)
	os.Exit(1)
}
