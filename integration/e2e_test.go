//go:build e2e

package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcsink/cdc-sink/internal/deltacheck"
)

// pipe is one path Postgres → Debezium connector → topic → cdc-sink → Delta table.
type pipe struct {
	Mode                                        string // json | avro
	Connector, Slot, Publication, Prefix, Topic string
	Sink                                        *sinkProc
	History                                     string // its history table (docs/history.md)
	lastVerify                                  string
}

// fixture: one source table captured by two connectors (JSON and Avro), each read by its own
// cdc-sink into its own Delta table. Every phase's changes therefore go through both paths.
type fixture struct {
	t      *testing.T
	table  string
	source string
	pg     *pgx.Conn
	w      *workload
	pipes  []*pipe
	timing []string
}

func newFixture(t *testing.T) *fixture {
	id := fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffffff)
	f := &fixture{t: t, table: "e2e_" + id, pg: pgConn(t)}
	f.source = "public." + f.table
	f.w = newWorkload(f.table, uint64(time.Now().UnixNano()))
	for _, mode := range []string{"json", "avro"} {
		p := &pipe{Mode: mode,
			Connector:   "e2e-" + mode + "-" + id,
			Slot:        "e2e_" + mode + "_" + id,
			Publication: "e2e_" + mode + "_" + id,
			Prefix:      "e2e_" + mode + "_" + id,
		}
		p.Topic = p.Prefix + ".public." + f.table
		reg := ""
		if mode == "avro" {
			reg = stk.RegistryURL
		}
		p.Sink = newSink(t, "e2e-sink-"+mode+"-"+id, p.Topic, reg)
		// A history table beside the live one, from the first record on: the phases below
		// (kill -9s, redeliveries, ALTER TYPE) go through it too, and "history-rebuild"
		// rebuilds the table from it after the topic's records are deleted.
		p.History = p.Sink.TableDir + "-history"
		p.Sink.ExtraConfig = fmt.Sprintf("history:\n  map:\n    %s: %s\n", p.Topic, p.History)
		p.Sink.WriteConfig(t)
		f.pipes = append(f.pipes, p)
	}
	t.Cleanup(f.cleanup)
	return f
}

func (f *fixture) cleanup() {
	for _, p := range f.pipes {
		p.Sink.Stop()
	}
	for _, p := range f.pipes {
		deleteConnector(p.Connector)
	}
	c, err := pgx.Connect(context.Background(), stk.DSN)
	if err != nil {
		f.t.Logf("cleanup: %v", err)
		return
	}
	defer c.Close(context.Background())
	var topics []string
	for _, p := range f.pipes {
		if err := dropSlot(c, p.Slot); err != nil {
			f.t.Logf("cleanup: %v", err)
		}
		_, _ = c.Exec(context.Background(), "DROP PUBLICATION IF EXISTS "+p.Publication)
		topics = append(topics, p.Topic)
	}
	_, _ = c.Exec(context.Background(), "DROP TABLE IF EXISTS "+f.source)
	deleteTopics(topics...)
}

// phase runs fn as a subtest, logs its duration, and stops the test if it failed.
func (f *fixture) phase(name string, fn func(t *testing.T)) {
	t0 := time.Now()
	ok := f.t.Run(name, fn)
	d := time.Since(t0).Round(10 * time.Millisecond)
	f.timing = append(f.timing, fmt.Sprintf("%-28s %8s", name, d))
	f.t.Logf("phase %s: %s", name, d)
	if !ok {
		f.t.FailNow()
	}
}

// diag describes every pipe: connector status, topic end offset, table state, sink log tail.
func (f *fixture) diag() string {
	var b strings.Builder
	for _, p := range f.pipes {
		st, raw := connectorState(p.Connector)
		fmt.Fprintf(&b, "=== %s: connector %s: %s\n", p.Mode, p.Connector, st)
		if st != "RUNNING RUNNING" {
			fmt.Fprintf(&b, "%s\n", raw)
		}
		v, next := tableInfo(p.Sink.TableDir, p.Sink.Name, p.Topic)
		fmt.Fprintf(&b, "topic %s end offset %d; table v%d, next offset %d; sink alive=%v\n",
			p.Topic, highWater(p.Topic), v, next, p.Sink.Alive())
		if p.lastVerify != "" {
			fmt.Fprintf(&b, "last verify:\n%s\n", clip(p.lastVerify, 400))
		}
		fmt.Fprintf(&b, "sink log tail (%s):\n%s\n", p.Sink.LogPath, p.Sink.Tail(25))
	}
	return b.String()
}

func (f *fixture) requireSinksAlive(t *testing.T) {
	t.Helper()
	for _, p := range f.pipes {
		if !p.Sink.Alive() {
			t.Fatalf("%s sink exited unexpectedly (%v)\n%s", p.Mode, p.Sink.exitErr, p.Sink.Tail(40))
		}
	}
}

// converge waits (deadline) until `cdc-sink verify` passes for every pipe, then checks the
// table through delta-rs and that nothing was quarantined. The caller wrote the marker last.
func (f *fixture) converge(t *testing.T, timeout time.Duration) {
	t.Helper()
	t0 := time.Now()
	for _, p := range f.pipes {
		p := p
		waitFor(t, p.Mode+" table == postgres (cdc-sink verify)", timeout-time.Since(t0), func() bool {
			f.requireSinksAlive(t)
			out, code := verify(f.source, p.Sink.TableDir)
			p.lastVerify = out
			return code == 0
		}, f.diag)
	}
	conv := time.Since(t0)
	t1 := time.Now()
	for _, p := range f.pipes {
		f.deltaRSCheck(t, p)
		if b, err := os.ReadFile(p.Sink.QuarantinePath()); err == nil && len(bytes.TrimSpace(b)) > 0 {
			t.Errorf("%s: records were quarantined:\n%.2000s", p.Mode, b)
		}
	}
	var st []string
	for _, p := range f.pipes {
		v, next := tableInfo(p.Sink.TableDir, p.Sink.Name, p.Topic)
		st = append(st, fmt.Sprintf("%s: table v%d next offset %d / topic end %d", p.Mode, v, next, highWater(p.Topic)))
	}
	t.Logf("converged in %s (verify), delta-rs check %s; %s", conv.Round(10*time.Millisecond),
		time.Since(t1).Round(10*time.Millisecond), strings.Join(st, "; "))
}

// pgRow is the subset of columns compared through delta-rs (verify compares every column).
type pgRow struct {
	Amount, Ref, Note, Due string
	Rev                    int64
	Paid                   bool
}

func (f *fixture) pgRows(t *testing.T) map[string]pgRow {
	t.Helper()
	rows, err := f.pg.Query(context.Background(), fmt.Sprintf(
		`SELECT id, amount::text, ref::text, coalesce(note, '<null>'), coalesce(due::text, '<null>'), rev, paid FROM %s`, f.source))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]pgRow{}
	for rows.Next() {
		var id int64
		var r pgRow
		if err := rows.Scan(&id, &r.Amount, &r.Ref, &r.Note, &r.Due, &r.Rev, &r.Paid); err != nil {
			t.Fatal(err)
		}
		out[strconv.FormatInt(id, 10)] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// deltaRSCheck reads the live rows with delta-rs (deletion vectors applied) and compares them
// with Postgres: same keys, same amount/ref/note/due/rev/paid.
func (f *fixture) deltaRSCheck(t *testing.T, p *pipe) {
	t.Helper()
	f.deltaRSCheckDir(t, p.Mode, p.Sink.TableDir)
}

func (f *fixture) deltaRSCheckDir(t *testing.T, mode, dir string) {
	t.Helper()
	want := f.pgRows(t)
	tb := deltacheck.ReadDeltaRS(t, dir, "NOT _cdc_deleted")
	got := deltacheck.ByKey(deltacheck.Decode(t, tb.Rows), "id")
	str := func(v any) string {
		if v == nil {
			return "<null>"
		}
		return fmt.Sprint(v)
	}
	var bad []string
	for id, w := range want {
		g, ok := got[id]
		if !ok {
			bad = append(bad, "missing id "+id)
			continue
		}
		gr := pgRow{Amount: str(g["amount"]), Ref: str(g["ref"]), Note: str(g["note"]), Due: str(g["due"]),
			Paid: g["paid"] == true}
		if n, ok := g["rev"].(json.Number); ok {
			gr.Rev, _ = n.Int64()
		}
		if gr != w {
			short := func(r pgRow) pgRow {
				if len(r.Note) > 40 {
					r.Note = r.Note[:40] + fmt.Sprintf("…(%d bytes)", len(r.Note))
				}
				return r
			}
			bad = append(bad, fmt.Sprintf("id %s: postgres %+v delta-rs %+v", id, short(w), short(gr)))
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			bad = append(bad, "extra live id "+id)
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		if len(bad) > 15 {
			bad = append(bad[:15], fmt.Sprintf("… %d more", len(bad)-15))
		}
		t.Fatalf("%s: delta-rs (%s v%d) disagrees with postgres:\n%s", mode, filepath.Base(dir), tb.Version, strings.Join(bad, "\n"))
	}
}

// stackPid returns the pid of a stack service when it is the one this suite's stack dir started
// (so a test never kills somebody else's broker), else skips the test.
func stackPid(t *testing.T, service string) int {
	t.Helper()
	pf := filepath.Join(stk.Dir, "run", service+".pid")
	b, err := os.ReadFile(pf)
	if err != nil {
		t.Skipf("%s: no pid file %s (the running stack is not %s): not restarting it", service, pf, stk.Dir)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	cl, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if pid <= 0 || err != nil || !bytes.Contains(cl, []byte("-Dcdc.sink.stack="+service)) || !bytes.Contains(cl, []byte(stk.Dir)) {
		t.Skipf("%s: pid file %s does not name a live %s of this stack: not restarting it", service, pf, service)
	}
	return pid
}

func killAndWait(t *testing.T, pid int, sig syscall.Signal, timeout time.Duration) {
	t.Helper()
	_ = syscall.Kill(pid, sig)
	deadline := time.Now().Add(timeout)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			if sig != syscall.SIGKILL {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				deadline = time.Now().Add(15 * time.Second)
				sig = syscall.SIGKILL
				continue
			}
			t.Fatalf("pid %d still alive after %s", pid, sig)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// stackUp starts only the named services with scripts/stack/up.sh (idempotent).
func stackUp(t *testing.T, services string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(stk.Scripts, "up.sh"))
	cmd.Env = append(os.Environ(), "CDC_SINK_STACK_SERVICES="+services, "CDC_SINK_STACK_DIR="+stk.Dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("up.sh (%s): %v\n%s", services, err, out)
	}
}

// TestPipeline is the suite: one source table, both converter paths, phases in order
// (each ends with every table verified equal to Postgres), faults last, Spark at the very end.
func TestPipeline(t *testing.T) {
	needStack(t)
	ctx := context.Background()
	f := newFixture(t)
	w := f.w
	const seedRows = 300
	var connT *pgx.Conn
	var txT pgx.Tx

	f.phase("seed+long-tx", func(t *testing.T) {
		mustExec(t, f.pg, fmt.Sprintf(tableDDL, f.table))
		// Debezium 3.6 snapshots a pre-created slot at pg_current_wal_lsn(), the WAL *write*
		// position, and streams every transaction that committed after it. With asynchronous
		// commit a seed commit can still sit in WAL buffers past that position (the WAL writer
		// runs every 200 ms, later on a loaded machine) and is then streamed again after the
		// snapshot: 306 records instead of 300. Synchronous commit makes each seed commit
		// written before it returns, so the snapshot position covers all of them.
		mustExec(t, f.pg, "SET synchronous_commit = on")
		// Pre-create slots and publications: creating a logical slot waits for all running
		// transactions, so it must exist before T writes (the connector then reuses it).
		for _, p := range f.pipes {
			mustExec(t, f.pg, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", p.Publication, f.source))
			mustExec(t, f.pg, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", p.Slot)
		}
		w.nextID = 0
		for range seedRows {
			if err := w.insert(ctx, f.pg, w.newID()); err != nil {
				t.Fatal(err)
			}
		}
		// T: a long transaction, written before the connectors exist and committed after their
		// snapshot: invisible to the snapshot, streamed afterwards with LSNs below the snapshot's.
		connT = pgConn(f.t) // outlives this phase: committed in the next one
		var err error
		if txT, err = connT.Begin(ctx); err != nil {
			t.Fatal(err)
		}
		for _, id := range []int64{1, 2, 3, 10} {
			if err := w.updateAmount(ctx, txT, id); err != nil {
				t.Fatal(err)
			}
		}
		for range 3 {
			if err := w.insert(ctx, txT, w.newID()); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.delete(ctx, txT, 4); err != nil {
			t.Fatal(err)
		}
		if err := w.changeKey(ctx, txT, 5, 100005); err != nil {
			t.Fatal(err)
		}
	})

	f.phase("snapshot", func(t *testing.T) {
		for _, p := range f.pipes {
			registerConnector(t, p.Connector, connectorConfig(p.Mode, f.table, p.Slot, p.Publication, p.Prefix))
		}
		for _, p := range f.pipes {
			p := p
			d := waitFor(t, p.Mode+" snapshot done ("+strconv.Itoa(seedRows)+" records on "+p.Topic+")", 4*time.Minute, func() bool {
				return connectorRunning(p.Connector) && highWater(p.Topic) >= seedRows
			}, f.diag)
			t.Logf("%s: connector RUNNING and snapshot on the topic after %s", p.Mode, d.Round(10*time.Millisecond))
			if hw := highWater(p.Topic); hw != seedRows {
				t.Fatalf("%s: %d records on %s while T is open, want exactly the %d snapshot rows (more: T was streamed before its commit, or seed rows were streamed again after the snapshot)", p.Mode, hw, p.Topic, seedRows)
			}
		}
		if err := txT.Commit(ctx); err != nil {
			t.Fatalf("commit T: %v", err)
		}
		for _, p := range f.pipes {
			p.Sink.Start(t)
		}
		if err := w.marker(ctx, f.pg); err != nil {
			t.Fatal(err)
		}
		f.converge(t, 4*time.Minute)
	})

	f.phase("streaming-dml", func(t *testing.T) {
		t0 := time.Now()
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		// TOASTed rows (id%10==0): updates that leave note alone stream the unavailable-value
		// placeholder; the table must keep the old note.
		for _, id := range []int64{20, 30, 40} {
			must(w.updateAmount(ctx, f.pg, id))
		}
		must(w.updateNote(ctx, f.pg, 50))
		must(w.updateNulls(ctx, f.pg, 60))
		for id := int64(100); id < 110; id++ {
			must(w.delete(ctx, f.pg, id))
		}
		// Primary-key changes: a plain row, and a TOASTed one whose note is not rewritten.
		must(w.changeKey(ctx, f.pg, 11, 100011))
		must(w.changeKey(ctx, f.pg, 70, 100070))
		// Change a key then change it back, and reuse a deleted key.
		must(w.changeKey(ctx, f.pg, 12, 100012))
		must(w.changeKey(ctx, f.pg, 100012, 12))
		must(w.insert(ctx, f.pg, 100))
		// One statement touching many rows.
		mustExec(t, f.pg, fmt.Sprintf("UPDATE %s SET paid = NOT paid, rev = rev + 1 WHERE id BETWEEN 150 AND 249", f.source))
		// Several changes of one key in one transaction: c,u,d,c and c,u,u.
		tx, err := f.pg.Begin(ctx)
		must(err)
		k1, k2 := w.newID(), w.newID()
		must(w.insert(ctx, tx, k1))
		must(w.updateAmount(ctx, tx, k1))
		must(w.delete(ctx, tx, k1))
		must(w.insert(ctx, tx, k1))
		must(w.insert(ctx, tx, k2))
		must(w.updateAmount(ctx, tx, k2))
		must(w.updateNote(ctx, tx, k2))
		must(tx.Commit(ctx))
		// Interleaved transactions: A writes first, B writes and commits first, then A touches
		// B's row and commits (commit order is the opposite of first-write order).
		connB := pgConn(t)
		txA, err := f.pg.Begin(ctx)
		must(err)
		txB, err := connB.Begin(ctx)
		must(err)
		must(w.updateAmount(ctx, txA, 120))
		must(w.updateAmount(ctx, txB, 121))
		must(w.insert(ctx, txB, w.newID()))
		must(w.updateNote(ctx, txB, 122))
		must(txB.Commit(ctx))
		must(w.updateAmount(ctx, txA, 121))
		must(w.delete(ctx, txA, 122))
		must(w.insert(ctx, txA, w.newID()))
		must(txA.Commit(ctx))
		for range 20 {
			must(w.randomTx(ctx, f.pg))
		}
		must(w.marker(ctx, f.pg))
		t.Logf("workload %s", time.Since(t0).Round(10*time.Millisecond))
		f.converge(t, 3*time.Minute)
	})

	f.phase("pk-change-split-batches", func(t *testing.T) {
		// The JSON sink restarted with batch.max_records=1: the delete half and the create half
		// of every primary-key change land in different batches (regression for the TOAST value
		// of a moved row, see README "Bugs found").
		js := f.pipes[0].Sink
		js.Stop()
		js.MaxRecords = 1
		js.WriteConfig(t)
		js.Start(t)
		for i, id := range []int64{80, 90, 130} { // TOASTed rows (id%10 == 0)
			if err := w.changeKey(ctx, f.pg, id, 200000+int64(i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.changeKey(ctx, f.pg, 140, 200140); err != nil {
			t.Fatal(err)
		}
		if err := w.updateAmount(ctx, f.pg, 200140); err != nil { // then an update of the moved row
			t.Fatal(err)
		}
		if err := w.marker(ctx, f.pg); err != nil {
			t.Fatal(err)
		}
		f.converge(t, 3*time.Minute)
		js.Stop()
		js.MaxRecords = 200
		js.WriteConfig(t)
		js.Start(t)
	})

	// Source DDL mid-stream: ALTER … TYPE to wider types, then values only the
	// wide types hold. The live tables follow by rewrite (the default, so
	// delta-rs keeps reading them), nothing is quarantined, verify equals
	// Postgres; the rebuild below replays the same topics with
	// --widening type_widening and Spark reads that table at the end.
	f.phase("alter-type", func(t *testing.T) {
		mustExec(t, f.pg, fmt.Sprintf("ALTER TABLE %s ALTER COLUMN rev TYPE bigint", f.source))
		mustExec(t, f.pg, fmt.Sprintf("ALTER TABLE %s ALTER COLUMN amount TYPE numeric(16,4)", f.source))
		// the connection's prepared statements were planned for the old types
		if err := f.pg.DeallocateAll(ctx); err != nil {
			t.Fatal(err)
		}
		mustExec(t, f.pg, fmt.Sprintf("UPDATE %s SET rev = rev + 5000000000, amount = amount + 0.1234 WHERE id BETWEEN 20 AND 29", f.source))
		for _, id := range []int64{31, 32} {
			if err := w.updateAmount(ctx, f.pg, id); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.marker(ctx, f.pg); err != nil {
			t.Fatal(err)
		}
		f.converge(t, 3*time.Minute)
	})

	f.phase("sink-kill-9", func(t *testing.T) {
		// A paced workload in the background; kill -9 both sinks twice while it runs (once
		// mid-stream, once while catching up after the restart).
		done := make(chan error, 1)
		wc := pgConn(t)
		go func() {
			for range 60 {
				if err := w.randomTx(ctx, wc); err != nil {
					done <- err
					return
				}
				time.Sleep(80 * time.Millisecond) // pacing the load, not synchronisation
			}
			done <- nil
		}()
		for round := 1; round <= 2; round++ {
			for _, p := range f.pipes {
				p := p
				v0 := tableVersion(p.Sink.TableDir)
				waitFor(t, p.Mode+" table to commit while the workload runs", 2*time.Minute, func() bool {
					f.requireSinksAlive(t)
					return tableVersion(p.Sink.TableDir) >= v0+1
				}, f.diag)
				p.Sink.Kill9(t)
				t.Logf("round %d: kill -9 %s sink at table v%d (topic end %d)", round, p.Mode, tableVersion(p.Sink.TableDir), highWater(p.Topic))
				p.Sink.Start(t)
			}
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(3 * time.Minute):
			t.Fatal("workload did not finish in 3 min")
		}
		if err := w.marker(ctx, f.pg); err != nil {
			t.Fatal(err)
		}
		f.converge(t, 3*time.Minute)
	})

	f.phase("connect-kill-9", func(t *testing.T) {
		pid := stackPid(t, "connect")
		hw0 := map[string]int64{}
		for _, p := range f.pipes {
			hw0[p.Mode] = highWater(p.Topic)
		}
		// A burst of single-row updates (one record each); kill -9 the worker as soon as they are
		// on the topics, likely before Connect flushed their source offsets (every 1 s), so
		// Debezium redelivers them after the restart.
		k := w.singleUpdates(t, f.pg, 40)
		for _, p := range f.pipes {
			p := p
			waitFor(t, p.Mode+" burst on the topic", time.Minute, func() bool { return highWater(p.Topic) >= hw0[p.Mode]+int64(k) }, f.diag)
		}
		t0 := time.Now()
		killAndWait(t, pid, syscall.SIGKILL, 30*time.Second)
		k2 := w.singleUpdates(t, f.pg, 20) // written while Connect is down
		stackUp(t, "connect")
		for _, p := range f.pipes {
			p := p
			waitFor(t, p.Mode+" connector RUNNING after the Connect restart", 3*time.Minute, func() bool { return connectorRunning(p.Connector) }, f.diag)
		}
		t.Logf("connect down+restart+connectors RUNNING: %s", time.Since(t0).Round(10*time.Millisecond))
		if err := w.marker(ctx, f.pg); err != nil {
			t.Fatal(err)
		}
		f.converge(t, 4*time.Minute)
		for _, p := range f.pipes {
			extra := highWater(p.Topic) - (hw0[p.Mode] + int64(k+k2) + 1)
			t.Logf("%s: %d records redelivered by Debezium after the Connect kill (absorbed as duplicates)", p.Mode, extra)
		}
	})

	f.phase("kafka-restart", func(t *testing.T) {
		pid := stackPid(t, "kafka")
		t0 := time.Now()
		killAndWait(t, pid, syscall.SIGTERM, 60*time.Second)
		tDown := time.Since(t0)
		// Changes made while the broker is down: Debezium holds them (the slot keeps the WAL).
		for range 10 {
			if err := w.randomTx(ctx, f.pg); err != nil {
				t.Fatal(err)
			}
		}
		stackUp(t, "kafka")
		t.Logf("broker stopped in %s, outage %s", tDown.Round(10*time.Millisecond), time.Since(t0).Round(10*time.Millisecond))
		for _, p := range f.pipes {
			p := p
			waitFor(t, p.Mode+" connector RUNNING after the broker restart", 3*time.Minute, func() bool {
				s, _ := connectorState(p.Connector)
				if strings.Contains(s, "FAILED") {
					// Not a sink problem: report it and restart the failed task.
					t.Logf("%s connector %s after the broker restart: restarting failed task", p.Mode, s)
					_, _, _ = connectReq("POST", "/connectors/"+p.Connector+"/restart?includeTasks=true&onlyFailed=true", nil)
				}
				return s == "RUNNING RUNNING"
			}, f.diag)
		}
		for range 10 {
			if err := w.randomTx(ctx, f.pg); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.marker(ctx, f.pg); err != nil {
			t.Fatal(err)
		}
		// converge also fails if a sink exited: they must ride through the outage.
		f.converge(t, 10*time.Minute)
	})

	// The table on object storage: `run` into s3:// on SeaweedFS, kill -9 twice while changes
	// flow; after the last source change of the suite, so the spark phase compares it too.
	var s3 *s3Target
	var s3Sink *sinkProc
	f.phase("s3-run-kill-9", func(t *testing.T) {
		s3 = startS3(t, f.t)
		s3Sink = f.s3RunKill9(t, s3)
	})

	// The runbook's rebuild: replay each topic from the beginning into a new
	// table with its own sink name (stopping at the end offsets captured at
	// start), then `diff` it against the live table.
	f.phase("rebuild-replay", func(t *testing.T) {
		for _, p := range f.pipes {
			rebuild := p.Sink.TableDir + "-rebuild"
			// small batches: files written before the ALTER keep the narrow types
			args := []string{"replay", "--topics", p.Topic, "--brokers", stk.Brokers, "--starting", "earliest",
				"--table", rebuild, "--sink-name", p.Sink.Name + "-rebuild", "--batch-records", "100",
				"--quarantine-file", rebuild + ".quarantine.jsonl", "--quiet"}
			if p.Mode == "json" {
				args = append(args, "--widening", "type_widening")
			}
			if p.Mode == "avro" {
				args = append(args, "--registry", stk.RegistryURL)
			}
			if out, code := runCLI(args...); code != 0 {
				t.Fatalf("%s rebuild replay: exit %d\n%s", p.Mode, code, out)
			}
			if out, code := runCLI("diff", p.Sink.TableDir, rebuild); code != 0 {
				t.Fatalf("%s: rebuild differs from the live table (exit %d)\n%s", p.Mode, code, clip(out, 4000))
			}
			if out, code := verify(f.source, rebuild); code != 0 {
				t.Fatalf("%s: rebuild differs from postgres\n%s", p.Mode, clip(out, 4000))
			}
		}
	})

	// Kafka retention is not analytic retention: the topics' records are deleted, as when
	// retention has passed, so the table can no longer be rebuilt from Kafka; it is rebuilt
	// from its history table instead and must equal Postgres. First the history is checked
	// against the topic: one row per record, every offset exactly once, through the kill -9s
	// and Debezium's redeliveries above.
	f.phase("history-rebuild", func(t *testing.T) {
		for _, p := range f.pipes {
			p := p
			hw := highWater(p.Topic)
			waitFor(t, p.Mode+" table at the topic's end", 2*time.Minute, func() bool {
				f.requireSinksAlive(t)
				_, next := tableInfo(p.Sink.TableDir, p.Sink.Name, p.Topic)
				return next == hw
			}, f.diag)
			// the history is written before the table's commit: complete once the table is
			if missing, dup := historyCoverage(t, p.History, p.Topic, hw); len(missing)+len(dup) > 0 {
				t.Fatalf("%s: history %s vs topic offsets [0, %d): missing %s, more than once %s", p.Mode,
					p.History, hw, clip(fmt.Sprint(missing), 300), clip(fmt.Sprint(dup), 300))
			}
			deleteRecords(t, p.Topic, hw)
			if lo := lowWater(t, p.Topic); lo != hw {
				t.Fatalf("%s: topic %s starts at offset %d after deleting its records, want %d", p.Mode, p.Topic, lo, hw)
			}
			rebuilt := p.Sink.TableDir + "-from-history"
			if out, code := runCLI("replay", "--from-history", p.History, "--table", rebuilt,
				"--sink-name", p.Sink.Name+"-from-history", "--quiet"); code != 0 {
				t.Fatalf("%s: replay --from-history: exit %d\n%s", p.Mode, code, clip(out, 4000))
			}
			if out, code := verify(f.source, rebuilt); code != 0 {
				t.Fatalf("%s: the table rebuilt from history differs from postgres\n%s", p.Mode, clip(out, 4000))
			}
			if out, code := runCLI("diff", p.Sink.TableDir, rebuilt); code != 0 {
				t.Fatalf("%s: the table rebuilt from history differs from the live table (exit %d)\n%s", p.Mode, code, clip(out, 4000))
			}
			f.deltaRSCheckDir(t, p.Mode, rebuilt)
			t.Logf("%s: history holds offsets [0, %d) of %s once each; its rebuild equals postgres and the live table", p.Mode, hw, p.Topic)
		}
	})

	f.phase("spark", func(t *testing.T) {
		var want int
		if err := f.pg.QueryRow(ctx, "SELECT count(*) FROM "+f.source).Scan(&want); err != nil {
			t.Fatal(err)
		}
		for _, p := range f.pipes {
			p.Sink.Stop()
		}
		dirs := []string{}
		for _, p := range f.pipes {
			dirs = append(dirs, p.Sink.TableDir)
		}
		// the JSON rebuild was widened with Delta typeWidening (narrow old files)
		widened := f.pipes[0].Sink.TableDir + "-rebuild"
		dirs = append(dirs, widened)
		// Spark reads the s3:// table through hadoop-aws s3a.
		sparkS3Env(t, s3)
		dirs = append(dirs, s3Sink.TableDir)
		got, rows := sparkLive(t, dirs)
		sameRows(t, s3Sink.TableDir, rows[s3Sink.TableDir])
		for _, dir := range dirs {
			t.Logf("spark: %s %d live rows, postgres %d", filepath.Base(dir), got[dir], want)
			if got[dir] != want {
				t.Errorf("spark reads %d live rows in %s, postgres has %d", got[dir], dir, want)
			}
		}
		pg := f.pgRows(t)
		var bad []string
		for id, w := range pg {
			r := rows[widened][id]
			if fmt.Sprint(r["amount"]) != w.Amount || fmt.Sprint(r["rev"]) != strconv.FormatInt(w.Rev, 10) {
				bad = append(bad, fmt.Sprintf("id %s: postgres amount %s rev %d, spark %v %v", id, w.Amount, w.Rev, r["amount"], r["rev"]))
			}
		}
		sort.Strings(bad)
		if len(bad) > 0 {
			t.Errorf("spark reads the typeWidening table differently from postgres (%d rows), e.g.:\n  %s", len(bad), strings.Join(bad[:min(len(bad), 10)], "\n  "))
		}
	})

	t.Logf("phase timings:\n  %s", strings.Join(f.timing, "\n  "))
}

// sparkLive reads the tables with pyspark + delta-spark (scripts/spark_rows.py, one Spark
// session): per table, the count of rows with _cdc_deleted = false and those rows by id.
func sparkLive(t *testing.T, dirs []string) (map[string]int, map[string]map[string]map[string]any) {
	t.Helper()
	py := stk.Python
	if py == "" {
		py = deltacheck.Python(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, append([]string{filepath.Join(deltacheck.RepoRoot(), "scripts", "spark_rows.py")}, dirs...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("spark: %v\n%s", err, tailLines(stderr.String(), 40))
	}
	counts := map[string]int{}
	rows := map[string]map[string]map[string]any{}
	cur := ""
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var h struct {
			Table   string `json:"table"`
			Deleted *bool  `json:"_cdc_deleted"`
		}
		if err := json.Unmarshal(sc.Bytes(), &h); err != nil {
			t.Fatalf("spark output: %v", err)
		}
		if h.Table != "" {
			cur = h.Table
			counts[cur] = 0
			rows[cur] = map[string]map[string]any{}
			continue
		}
		if h.Deleted != nil && !*h.Deleted {
			counts[cur]++
			r := deltacheck.Decode(t, []string{sc.Text()})[0]
			rows[cur][fmt.Sprint(r["id"])] = r
		}
	}
	return counts, rows
}

// clip shortens every line of s to at most n bytes (verify prints whole 12 KB notes).
func clip(s string, n int) string {
	l := strings.Split(s, "\n")
	for i := range l {
		if len(l[i]) > n {
			l[i] = l[i][:n] + fmt.Sprintf("…(%d bytes)", len(l[i]))
		}
	}
	return strings.Join(l, "\n")
}

func tailLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// historyCoverage reads the Kafka lineage of a history table with DuckDB (delta-rs 1.6 refuses
// a history whose columns widened: docs/history.md) and returns the offsets of topic partition
// 0 below hw that have no history row, and those with more than one.
func historyCoverage(t *testing.T, dir, topic string, hw int64) (missing, dup []int64) {
	t.Helper()
	q := fmt.Sprintf("SELECT _cdc_partition AS p, _cdc_offset AS o, count(*) AS n FROM delta_scan('%s') WHERE _cdc_topic = '%s' GROUP BY ALL ORDER BY 1, 2",
		strings.ReplaceAll(dir, "'", "''"), strings.ReplaceAll(topic, "'", "''"))
	cmd := exec.Command(deltacheck.Python(t), filepath.Join(deltacheck.RepoRoot(), "scripts", "history_sql.py"))
	cmd.Stdin = strings.NewReader(q)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("duckdb over %s: %v\n%s", dir, err, stderr.String())
	}
	seen := map[int64]int64{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for first := true; sc.Scan(); first = false {
		if first {
			continue // {"columns": [...]}
		}
		var r struct{ P, O, N int64 }
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("duckdb row %q: %v", sc.Text(), err)
		}
		if r.P != 0 || r.O < 0 || r.O >= hw {
			t.Fatalf("history %s has a row for %s[%d]@%d, outside the topic's [0, %d)", dir, topic, r.P, r.O, hw)
		}
		seen[r.O] = r.N
	}
	for o := int64(0); o < hw; o++ {
		switch n := seen[o]; {
		case n == 0:
			missing = append(missing, o)
		case n > 1:
			dup = append(dup, o)
		}
	}
	return missing, dup
}
