//go:build e2e

package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/jackc/pgx/v5"
)

// ---------------------------------------------------------------- Postgres

func pgConn(t testing.TB) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, stk.DSN)
	if err != nil {
		t.Fatalf("connect to postgres: %v", err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func mustExec(t testing.TB, c *pgx.Conn, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", firstLine(sql), err)
	}
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	return s
}

// dropSlot drops a replication slot once it is inactive (its connector stopped), retrying.
func dropSlot(c *pgx.Conn, slot string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, _ = c.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name=$1 AND NOT active`, slot)
		var n int
		err := c.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name=$1`, slot).Scan(&n)
		cancel()
		if err == nil && n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("slot %s still exists (active?) after 30s: %v", slot, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// ---------------------------------------------------------------- Kafka Connect

// connectorConfig is the config `scripts/stack/connector.sh config MODE` sends, with this test's
// names: one table, a pre-created slot and publication (so the slot exists before the test opens
// its long transaction: creating a logical slot waits for every running transaction).
func connectorConfig(mode, table, slot, publication, prefix string) map[string]string {
	c := map[string]string{
		"connector.class":             "io.debezium.connector.postgresql.PostgresConnector",
		"tasks.max":                   "1",
		"database.hostname":           "127.0.0.1",
		"database.port":               pgPort(),
		"database.user":               "dbz",
		"database.password":           "dbz",
		"database.dbname":             "loja",
		"topic.prefix":                prefix,
		"plugin.name":                 "pgoutput",
		"slot.name":                   slot,
		"publication.name":            publication,
		"publication.autocreate.mode": "disabled",
		"table.include.list":          "public." + table,
		"snapshot.mode":               "initial",
		"tombstones.on.delete":        "true",
		"skipped.operations":          "none",
		"topic.creation.default.replication.factor": "1",
		"topic.creation.default.partitions":         "1",
	}
	if mode == "json" {
		for _, side := range []string{"key", "value"} {
			c[side+".converter"] = "org.apache.kafka.connect.json.JsonConverter"
			c[side+".converter.schemas.enable"] = "true"
		}
		return c
	}
	// Apicurio 2.6 converter against the registry's v2 API, Confluent framing (magic 0 + 4-byte
	// contentId + Avro), as scripts/stack/connector.sh register avro.
	c["schema.name.adjustment.mode"] = "avro"
	c["field.name.adjustment.mode"] = "avro"
	for _, side := range []string{"key", "value"} {
		p := side + ".converter"
		c[p] = "io.apicurio.registry.utils.converter.AvroConverter"
		c[p+".apicurio.registry.url"] = registryBase() + "/apis/registry/v2"
		c[p+".apicurio.registry.auto-register"] = "true"
		c[p+".apicurio.registry.find-latest"] = "true"
		c[p+".apicurio.registry.as-confluent"] = "true"
		c[p+".apicurio.registry.use-id"] = "contentId"
		c[p+".apicurio.registry.headers.enabled"] = "false"
	}
	return c
}

func pgPort() string {
	// postgres://user:pw@host:PORT/db?...
	s := stk.DSN
	if i := strings.Index(s, "@"); i >= 0 {
		s = s[i+1:]
	}
	if i := strings.IndexAny(s, "/?"); i >= 0 {
		s = s[:i]
	}
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		return s[i+1:]
	}
	return "5432"
}

func registryBase() string { return strings.TrimSuffix(stk.RegistryURL, "/apis/ccompat/v7") }

var httpc = &http.Client{Timeout: 30 * time.Second}

func connectReq(method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, stk.ConnectURL+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, nil
}

// registerConnector PUTs the config (retrying while the worker rebalances).
func registerConnector(t testing.TB, name string, cfg map[string]string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		code, body, err := connectReq("PUT", "/connectors/"+name+"/config", cfg)
		if err == nil && (code == 200 || code == 201) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("register connector %s: HTTP %d %v: %s", name, code, err, body)
		}
		time.Sleep(time.Second)
	}
}

func deleteConnector(name string) {
	_, _, _ = connectReq("DELETE", "/connectors/"+name, nil)
}

// connectorState returns "CONNECTOR_STATE TASK_STATE..." and the raw status.
func connectorState(name string) (string, string) {
	code, body, err := connectReq("GET", "/connectors/"+name+"/status", nil)
	if err != nil {
		return "UNREACHABLE", err.Error()
	}
	if code != 200 {
		return fmt.Sprintf("HTTP%d", code), string(body)
	}
	var s struct {
		Connector struct{ State string }   `json:"connector"`
		Tasks     []struct{ State string } `json:"tasks"`
	}
	_ = json.Unmarshal(body, &s)
	parts := []string{s.Connector.State}
	for _, tk := range s.Tasks {
		parts = append(parts, tk.State)
	}
	return strings.Join(parts, " "), string(body)
}

func connectorRunning(name string) bool {
	s, _ := connectorState(name)
	return s == "RUNNING RUNNING"
}

// ---------------------------------------------------------------- Kafka

// highWater returns the end offset of partition 0 of topic (-1 when unknown).
func highWater(topic string) int64 {
	c, err := kafka.NewConsumer(&kafka.ConfigMap{
		"bootstrap.servers": stk.Brokers, "group.id": "cdc-sink-e2e-probe", "enable.auto.commit": false,
		"log_level": 3,
	})
	if err != nil {
		return -1
	}
	defer c.Close()
	_, hi, err := c.QueryWatermarkOffsets(topic, 0, 5000)
	if err != nil {
		return -1
	}
	return hi
}

// lowWater is the first offset still on partition 0 of topic.
func lowWater(t testing.TB, topic string) int64 {
	t.Helper()
	c, err := kafka.NewConsumer(&kafka.ConfigMap{
		"bootstrap.servers": stk.Brokers, "group.id": "cdc-sink-e2e-probe", "enable.auto.commit": false,
		"log_level": 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lo, _, err := c.QueryWatermarkOffsets(topic, 0, 5000)
	if err != nil {
		t.Fatalf("watermarks of %s: %v", topic, err)
	}
	return lo
}

// deleteRecords deletes the records of partition 0 of topic below offset before, as the
// broker does when retention passes.
func deleteRecords(t testing.TB, topic string, before int64) {
	t.Helper()
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": stk.Brokers, "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := a.DeleteRecords(ctx, []kafka.TopicPartition{{Topic: &topic, Partition: 0, Offset: kafka.Offset(before)}})
	if err != nil {
		t.Fatalf("delete records of %s below %d: %v", topic, before, err)
	}
	for _, r := range res.DeleteRecordsResults {
		if r.TopicPartition.Error != nil {
			t.Fatalf("delete records of %s below %d: %v", topic, before, r.TopicPartition.Error)
		}
	}
}

func deleteTopics(topics ...string) {
	if len(topics) == 0 { // the client panics on an empty list
		return
	}
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": stk.Brokers, "log_level": 3})
	if err != nil {
		return
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, _ = a.DeleteTopics(ctx, topics)
}

// ---------------------------------------------------------------- cdc-sink as a subprocess

// sinkProc is one `cdc-sink run --config` subprocess with its own sink name, group and table dir.
type sinkProc struct {
	Name, Topic, TableDir, ConfigPath, LogPath string
	cmd                                        *exec.Cmd
	exited                                     chan struct{}
	exitErr                                    error
	starts                                     int
	registryURL                                string
	MaxRecords                                 int // batch.max_records
	// ExtraConfig is appended to the YAML (e.g. a storage: block for an s3:// table).
	ExtraConfig string
	// Instance is the sink's instance_id: several sinkProcs of one Name share its group and
	// table (newInstance).
	Instance string
}

func newSink(t testing.TB, name, topic, registryURL string) *sinkProc {
	t.Helper()
	dir := filepath.Join(suiteDir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s := &sinkProc{Name: name, Topic: topic, TableDir: filepath.Join(dir, "table"),
		ConfigPath: filepath.Join(dir, "sink.yaml"), LogPath: filepath.Join(dir, "sink.log"),
		registryURL: registryURL, MaxRecords: 200}
	s.WriteConfig(t)
	return s
}

// newInstance is instance inst of sink name: its own config, log and quarantine file (in
// suiteDir/name@inst), the sink's group and the given table.
func newInstance(t testing.TB, name, inst, topic, table string) *sinkProc {
	t.Helper()
	dir := filepath.Join(suiteDir, name+"@"+inst)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s := &sinkProc{Name: name, Instance: inst, Topic: topic, TableDir: table,
		ConfigPath: filepath.Join(dir, "sink.yaml"), LogPath: filepath.Join(dir, "sink.log"), MaxRecords: 200}
	s.WriteConfig(t)
	return s
}

// WriteConfig writes the sink's YAML configuration (read at the next Start).
func (s *sinkProc) WriteConfig(t testing.TB) {
	t.Helper()
	name, topic, dir := s.Name, s.Topic, filepath.Dir(s.ConfigPath)
	reg := ""
	if s.registryURL != "" {
		reg = "registry:\n  url: " + s.registryURL + "\n"
	}
	head := name
	if s.Instance != "" {
		head += "\ninstance_id: " + s.Instance
	}
	// Small batches and a short interval: many commits, so a kill -9 lands mid-stream.
	cfg := fmt.Sprintf(`sink: %s
kafka:
  brokers: [%s]
  group: %s
  topics: [%s]
  properties:
    # a kill -9'd member holds the partition until its session expires (librdkafka default 45 s)
    session.timeout.ms: "6000"
    heartbeat.interval.ms: "1000"
tables:
  map:
    %s: %s
%sbatch:
  max_records: %d
  max_interval: 300ms
quarantine:
  file: %s
http:
  listen: ""
log:
  level: info
  format: json
merge:
  shutdown_grace: 20s
%s`, head, stk.Brokers, name, topic, topic, s.TableDir, reg, s.MaxRecords, filepath.Join(dir, "quarantine.jsonl"), s.ExtraConfig)
	if err := os.WriteFile(s.ConfigPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (s *sinkProc) QuarantinePath() string {
	return filepath.Join(filepath.Dir(s.ConfigPath), "quarantine.jsonl")
}

func (s *sinkProc) Start(t testing.TB) {
	t.Helper()
	lf, err := os.OpenFile(s.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	s.starts++
	fmt.Fprintf(lf, "---- start #%d at %s\n", s.starts, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(binPath, "run", "--config", s.ConfigPath)
	cmd.Stdout, cmd.Stderr = lf, lf
	// scripts/stack/env.sh exports CDC_SINK_KAFKA_BROKERS and CDC_SINK_REGISTRY_URL, which
	// `cdc-sink run` would take as config overrides (CDC_SINK_<PATH>): the file must rule.
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "CDC_SINK_") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		lf.Close()
		t.Fatalf("start %s: %v", s.Name, err)
	}
	s.cmd, s.exited, s.exitErr = cmd, make(chan struct{}), nil
	ch := s.exited
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(lf, "---- exited: %v\n", err)
		lf.Close()
		s.exitErr = err
		close(ch)
	}()
}

// Alive reports whether the process is still running.
func (s *sinkProc) Alive() bool {
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// Kill9 sends SIGKILL and waits for the process to be gone.
func (s *sinkProc) Kill9(t testing.TB) {
	t.Helper()
	if !s.Alive() {
		t.Fatalf("%s is not running (exit: %v)\n%s", s.Name, s.exitErr, s.Tail(40))
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not die after SIGKILL", s.Name)
	}
}

// Pause stops the process with SIGSTOP (a GC stall, a frozen VM): it holds its partitions
// until its session expires, then wakes up with Resume as a zombie of its old assignment.
func (s *sinkProc) Pause(t testing.TB) {
	t.Helper()
	if !s.Alive() {
		t.Fatalf("%s is not running (exit: %v)\n%s", s.Name, s.exitErr, s.Tail(40))
	}
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
}

// Resume sends SIGCONT.
func (s *sinkProc) Resume(t testing.TB) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}

// Stop sends SIGTERM (graceful) and waits; SIGKILL after 40 s. A paused process is resumed
// first.
func (s *sinkProc) Stop() {
	if !s.Alive() {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(40 * time.Second):
		_ = s.cmd.Process.Signal(syscall.SIGKILL)
		<-s.exited
	}
}

// Tail returns the last n lines of the sink's log.
func (s *sinkProc) Tail(n int) string {
	b, err := os.ReadFile(s.LogPath)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// LogCount counts log lines containing sub.
func (s *sinkProc) LogCount(sub string) int {
	b, _ := os.ReadFile(s.LogPath)
	return strings.Count(string(b), sub)
}

// ---------------------------------------------------------------- cdc-sink CLI checks

func runCLI(args ...string) (string, int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else {
			code = -1
			out = append(out, []byte(err.Error())...)
		}
	}
	return string(out), code
}

// verify runs `cdc-sink verify`: exit 0 = the table equals the Postgres table.
func verify(source, dir string) (string, int) {
	return runCLI("verify", "--pg", stk.DSN, "--source-table", source, "--table", dir, "--limit", "10")
}

// tableInfo returns the table version and the next offset recorded for topic partition 0.
func tableInfo(dir, sink, topic string) (version, next int64) {
	out, code := runCLI("table", "info", dir)
	version, next = -1, -1
	if code != 0 {
		return
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if v, ok := strings.CutPrefix(l, "version:"); ok {
			version, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
		if v, ok := strings.CutPrefix(l, sink+"/"+topic+"/0"); ok {
			next, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return
}

// tableVersion reads the newest commit number from _delta_log (cheap, no process).
func tableVersion(dir string) int64 {
	ents, err := os.ReadDir(filepath.Join(dir, "_delta_log"))
	if err != nil {
		return -1
	}
	v := int64(-1)
	for _, e := range ents {
		n := e.Name()
		if !strings.HasSuffix(n, ".json") || len(n) != 25 {
			continue
		}
		if x, err := strconv.ParseInt(strings.TrimSuffix(n, ".json"), 10, 64); err == nil && x > v {
			v = x
		}
	}
	return v
}

// ---------------------------------------------------------------- waiting

// waitFor polls cond every interval until it returns true, failing with diag() after timeout.
func waitFor(t testing.TB, what string, timeout time.Duration, cond func() bool, diag func() string) time.Duration {
	t.Helper()
	t0 := time.Now()
	deadline := t0.Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			d := ""
			if diag != nil {
				d = diag()
			}
			t.Fatalf("timeout after %s waiting for %s\n%s", timeout, what, d)
		}
		time.Sleep(500 * time.Millisecond)
	}
	return time.Since(t0)
}
