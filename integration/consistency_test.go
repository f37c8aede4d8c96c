//go:build e2e

package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcsink/cdc-sink/consistency"
	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/internal/deltacheck"
	"github.com/cdcsink/cdc-sink/tablerows"
)

// TestTransactionConsistency: consistency: transaction on the real stack (docs/consistency.md).
// A connector with provide.transaction.metadata=true captures two tables, orders and items,
// into topics of two partitions (the transaction topic has one). A workload commits
// transactions that insert orders and items together, tagged with the transaction: some
// concurrent (two connections interleaving their statements), every tenth one large (1,500
// items, many times the batch size). Meanwhile the sink is killed with SIGKILL and restarted,
// and so is Kafka Connect (which then re-sends what it had not flushed). Every version of both
// tables is read back: each transaction's rows are there all or none, and each version carries
// its watermark. The final tables equal Postgres (verify, delta-rs).
func TestTransactionConsistency(t *testing.T) {
	needStack(t)
	ctx := context.Background()
	id := fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffffff)
	prefix, name := "e2e_tx_"+id, "e2e-tx-"+id
	tables := []string{"e2e_tx_" + id + "_orders", "e2e_tx_" + id + "_items"}
	pg := pgConn(t)
	mustExec(t, pg, fmt.Sprintf("CREATE TABLE %s (id bigint PRIMARY KEY, tag text NOT NULL, n int NOT NULL)", tables[0]))
	mustExec(t, pg, fmt.Sprintf("CREATE TABLE %s (id bigint PRIMARY KEY, order_id bigint NOT NULL, tag text NOT NULL)", tables[1]))
	mustExec(t, pg, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s, %s", prefix, tables[0], tables[1]))
	topics := []string{prefix + ".public." + tables[0], prefix + ".public." + tables[1]}
	txTopic := prefix + ".transaction"
	t.Cleanup(func() {
		deleteConnector(name)
		c := pgConn(t)
		if err := dropSlot(c, prefix); err != nil {
			t.Logf("cleanup: %v", err)
		}
		_, _ = c.Exec(context.Background(), "DROP PUBLICATION IF EXISTS "+prefix)
		for _, tb := range tables {
			_, _ = c.Exec(context.Background(), "DROP TABLE IF EXISTS "+tb)
		}
		deleteTopics(append(topics, txTopic)...)
	})
	cc := connectorConfig("json", tables[0], prefix, prefix, prefix)
	cc["table.include.list"] = "public." + tables[0] + ",public." + tables[1]
	cc["provide.transaction.metadata"] = "true"
	cc["topic.creation.default.partitions"] = "2"
	// the transaction topic keeps one partition: ENDs in commit order
	cc["topic.creation.groups"] = "txmeta"
	cc["topic.creation.txmeta.include"] = strings.ReplaceAll(txTopic, ".", `\.`)
	cc["topic.creation.txmeta.partitions"] = "1"
	cc["topic.creation.txmeta.replication.factor"] = "1"
	registerConnector(t, name, cc)
	waitFor(t, "transaction connector RUNNING", 3*time.Minute, func() bool { return connectorRunning(name) }, func() string { return "" })

	s := newSink(t, name, topics[0], "")
	dirs := []string{filepath.Join(filepath.Dir(s.TableDir), "orders"), filepath.Join(filepath.Dir(s.TableDir), "items")}
	manifest := filepath.Join(filepath.Dir(s.TableDir), "_groups", "shop")
	cfg := fmt.Sprintf(`sink: %s
consistency: transaction
consistency_group: shop
transactions:
  topic: %s
  manifest: %s
kafka:
  brokers: [%s]
  group: %s
  topics: [%s, %s]
  properties:
    session.timeout.ms: "6000"
    heartbeat.interval.ms: "1000"
tables:
  map:
    %s: %s
    %s: %s
batch:
  max_records: 100
  max_interval: 300ms
quarantine:
  file: %s
http:
  listen: ""
log:
  level: info
  format: json
`, name, txTopic, manifest, stk.Brokers, name, topics[0], topics[1], topics[0], dirs[0], topics[1], dirs[1], s.QuarantinePath())
	if err := os.WriteFile(s.ConfigPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)

	// the workload: tag → rows per table, for the transactions that committed
	var (
		mu     sync.Mutex
		wrote  = map[string][2]int{}
		order  []string // tags in commit order (the client's: a nested transaction commits first)
		nextID int64
	)
	txn := func(ctx context.Context, c *pgx.Conn, tag string, orders, items int, between func()) error {
		tx, err := c.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		mu.Lock()
		base := nextID
		nextID += int64(orders + items)
		mu.Unlock()
		for i := range orders {
			if _, err := tx.Exec(ctx, fmt.Sprintf("INSERT INTO %s VALUES ($1, $2, $3)", tables[0]), base+int64(i), tag, i); err != nil {
				return err
			}
			if i == 0 && between != nil {
				between()
			}
		}
		if items > 0 {
			if _, err := tx.Exec(ctx, fmt.Sprintf("INSERT INTO %s SELECT g, $1, $2 FROM generate_series($3::bigint, $4::bigint) g", tables[1]),
				base, tag, base+int64(orders), base+int64(orders+items)-1); err != nil {
				return err
			}
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		mu.Lock()
		wrote[tag] = [2]int{orders, items}
		order = append(order, tag)
		mu.Unlock()
		return nil
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	c1, c2 := pgConn(t), pgConn(t)
	done := make(chan error, 1)
	stopped := make(chan struct{})
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stopped:
				if i >= 60 {
					done <- nil
					return
				}
			default:
			}
			tag := fmt.Sprintf("t%d", i)
			items := rng.IntN(9)
			if i%10 == 9 {
				items = 1500
			}
			var err error
			if i%4 == 1 {
				// a concurrent transaction commits between this one's statements
				var inner error
				err = txn(ctx, c1, tag, 1+rng.IntN(4), items, func() {
					inner = txn(ctx, c2, tag+"c", 1+rng.IntN(3), rng.IntN(6), nil)
				})
				err = errors.Join(err, inner)
			} else {
				err = txn(ctx, c1, tag, 1+rng.IntN(4), items, nil)
			}
			if err != nil {
				done <- err
				return
			}
			time.Sleep(60 * time.Millisecond) // pacing the load, not synchronisation
		}
	}()
	latest := func(dir string) int64 {
		tb, err := tablerows.Open(ctx, dir)
		if err != nil {
			return -1
		}
		return tb.Version()
	}
	diag := func() string {
		st, _ := connectorState(name)
		return fmt.Sprintf("connector %s; orders v%d items v%d\nsink log:\n%s", st, latest(dirs[0]), latest(dirs[1]), s.Tail(25))
	}
	commits := func(what string, n int64) {
		v0 := latest(dirs[1])
		waitFor(t, what, 3*time.Minute, func() bool {
			if !s.Alive() {
				t.Fatalf("the sink exited (%v)\n%s", s.exitErr, s.Tail(40))
			}
			return latest(dirs[1]) >= v0+n
		}, diag)
	}
	s.Start(t)
	commits("the sink to commit items", 4)
	s.Kill9(t)
	t.Logf("kill -9 of the sink at items v%d", latest(dirs[1]))
	s.Start(t)
	commits("commits after the sink's restart", 4)
	killAndWait(t, stackPid(t, "connect"), syscall.SIGKILL, 30*time.Second)
	t.Logf("kill -9 of Kafka Connect at items v%d", latest(dirs[1]))
	stackUp(t, "connect")
	waitFor(t, "the connector RUNNING after Connect's restart", 4*time.Minute, func() bool {
		st, _ := connectorState(name)
		if st == "FAILED" {
			_, _, _ = connectReq("POST", "/connectors/"+name+"/restart?includeTasks=true&onlyFailed=true", nil)
		}
		return connectorRunning(name)
	}, diag)
	commits("commits after Connect's restart", 3)
	close(stopped)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("the workload did not finish in 3 min")
	}
	for i, tb := range tables {
		var last string
		waitFor(t, tb+" == postgres (cdc-sink verify)", 3*time.Minute, func() bool {
			out, code := verify("public."+tb, dirs[i])
			last = out
			return code == 0
		}, func() string { return diag() + "\nlast verify:\n" + clip(last, 400) })
	}
	s.Stop()
	if q, err := os.ReadFile(s.QuarantinePath()); err == nil && len(strings.TrimSpace(string(q))) > 0 {
		t.Fatalf("quarantined records:\n%.2000s", q)
	}
	// every version: each transaction's rows all or none
	mu.Lock()
	defer mu.Unlock()
	for i, dir := range dirs {
		tb, err := tablerows.Open(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		var through int64 = -1
		partial, whole := 0, 0
		for v := int64(1); v <= tb.Version(); v++ {
			at, err := tb.At(ctx, v)
			if err != nil {
				t.Fatal(err)
			}
			wm, ok, err := consistency.ReadWatermark(at.Snap.DomainMetadata, name)
			if err != nil || !ok || wm.Through < through {
				t.Fatalf("%s v%d: watermark %+v (%v %v) after through %d", tables[i], v, wm, ok, err, through)
			}
			through = wm.Through
			count := map[string]int{}
			if err := at.Scan(ctx, tablerows.ScanOptions{Columns: []string{"tag"}}, func(r tablerows.Row) error {
				count[strings.Trim(r[0], `"`)]++
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			for tag, n := range count {
				if want := wrote[tag][i]; n != want {
					t.Errorf("%s v%d holds %d rows of transaction %s, which wrote %d", tables[i], v, n, tag, want)
					partial++
				} else {
					whole++
				}
			}
		}
		if partial > 0 {
			t.Fatalf("%s: %d partial transactions in its versions", tables[i], partial)
		}
		t.Logf("%s: %d versions, each transaction whole in all of them (%d transaction-versions checked), through %d",
			tables[i], tb.Version(), whole, through)
		// an independent reader at the end and at a version in the middle
		for _, v := range []int64{tb.Version() / 2, tb.Version()} {
			rows := deltacheck.ReadDeltaRSAt(t, dir, "NOT _cdc_deleted", v)
			count := map[string]int{}
			for _, r := range deltacheck.Decode(t, rows.Rows) {
				count[fmt.Sprint(r["tag"])]++
			}
			for tag, n := range count {
				if want := wrote[tag][i]; n != want {
					t.Fatalf("delta-rs: %s v%d holds %d rows of transaction %s, which wrote %d", tables[i], v, n, tag, want)
				}
			}
		}
	}
	// every published cut: both tables at their versions are the state of Postgres right after
	// one of its commits: the first k transactions in commit order, whole, in both tables
	l := consistency.OpenStorage(openLocal(t, manifest), "shop")
	seqs, err := l.Entries(ctx)
	if err != nil || len(seqs) < 3 {
		t.Fatalf("%d cuts published (%v)", len(seqs), err)
	}
	pos := map[string]int{}
	for i, tag := range order {
		pos[tag] = i
	}
	for _, seq := range seqs {
		e, err := l.Get(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		k := -1 // transactions in the cut, from orders (every transaction writes one)
		for i, dir := range dirs {
			v, ok := e.Tables[dir]
			if !ok {
				continue // a table not read yet when the cut was taken
			}
			tb, err := tablerows.Open(ctx, dir)
			if err != nil {
				t.Fatal(err)
			}
			at, err := tb.At(ctx, v)
			if err != nil {
				t.Fatal(err)
			}
			tags := map[string]bool{}
			if err := at.Scan(ctx, tablerows.ScanOptions{Columns: []string{"tag"}}, func(r tablerows.Row) error {
				tags[strings.Trim(r[0], `"`)] = true
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			n := 0 // the prefix of commit order these tags are
			for n < len(order) && (tags[order[n]] || (i == 1 && wrote[order[n]][1] == 0)) {
				n++
			}
			for tag := range tags {
				if pos[tag] >= n {
					t.Fatalf("cut %d (W=%d): %s v%d holds transaction %s (commit #%d) but not #%d", seq, e.Watermark, tables[i], v, tag, pos[tag], n)
				}
			}
			if i == 0 {
				k = n
				continue
			}
			if k >= 0 && n < k {
				t.Fatalf("cut %d (W=%d): orders holds the first %d transactions, items only %d", seq, e.Watermark, k, n)
			}
			for tag := range tags {
				if k >= 0 && pos[tag] >= k {
					t.Fatalf("cut %d (W=%d): items holds transaction #%d, orders only the first %d", seq, e.Watermark, pos[tag], k)
				}
			}
		}
	}
	if out, code := runCLI("consistent-versions", "shop", "--manifest", manifest); code != 0 || !strings.Contains(out, "VERSION AS OF") {
		t.Fatalf("consistent-versions: exit %d\n%s", code, out)
	}
	t.Logf("%d cuts checked against Postgres commit order", len(seqs))
	if n := s.LogCount("applied in parts"); n > 0 {
		t.Fatalf("the gate applied %d transactions in parts (its bounds are far above this workload)", n)
	}
	t.Logf("%d transactions committed; sink starts %d", len(wrote), s.starts)
}

func openLocal(t *testing.T, dir string) delta.Storage {
	t.Helper()
	st, err := delta.OpenStorage(context.Background(), dir, delta.StorageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}
