package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/delta/s3store"
	"github.com/cdcsink/cdc-sink/internal/deltacheck"
	"github.com/cdcsink/cdc-sink/internal/seaweed"
)

// s3Env starts SeaweedFS and points cdc-sink (and the AWS SDK) at it, with
// dummy credentials and none of the developer's AWS configuration.
func s3Env(t *testing.T, bucket string) *seaweed.Server {
	t.Helper()
	srv, err := seaweed.Start(t.TempDir(), bucket)
	if err != nil {
		t.Fatalf("SeaweedFS is needed for the S3 tests: %v", err)
	}
	t.Cleanup(srv.Stop)
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test-secret", "AWS_REGION": "us-east-1",
		"AWS_CONFIG_FILE": os.DevNull, "AWS_SHARED_CREDENTIALS_FILE": os.DevNull, "AWS_EC2_METADATA_DISABLED": "true",
		"CDC_SINK_STORAGE_S3_ENDPOINT": srv.Endpoint, "CDC_SINK_STORAGE_S3_PATH_STYLE": "true",
	} {
		t.Setenv(k, v)
	}
	for _, k := range []string{"AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN"} {
		t.Setenv(k, "") // restored after the test
		os.Unsetenv(k)
	}
	return srv
}

// s3Stream writes a Debezium stream for public.items spread over parts
// Kafka partitions (a key always in the same partition, as Kafka does):
// one kcat file per partition, plus all of them in one file. Keys are
// inserted, updated several times and some deleted.
func s3Stream(t *testing.T, dir string, parts, keys, events int) (all string, files []string) {
	t.Helper()
	rng := rand.New(rand.NewSource(42))
	lines := make([][]string, parts)
	offsets := make([]int64, parts)
	alive := map[int]bool{}
	lsn := int64(1000)
	for range events {
		id := rng.Intn(keys) + 1
		p := id % parts
		lsn += int64(1 + rng.Intn(5))
		key := map[string]any{"id": id}
		row := map[string]any{"id": id, "qty": rng.Intn(1000), "name": fmt.Sprintf("item-%d-%d", id, lsn)}
		var rec string
		switch {
		case !alive[id]:
			rec, alive[id] = dbzRecord(offsets[p], "c", lsn, itemsInt, nil, row, key), true
		case rng.Intn(6) == 0:
			rec, alive[id] = dbzRecord(offsets[p], "d", lsn, itemsInt, map[string]any{"id": id}, nil, key), false
		default:
			rec = dbzRecord(offsets[p], "u", lsn, itemsInt, nil, row, key)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(rec), &m); err != nil {
			t.Fatal(err)
		}
		m["partition"] = p
		b, _ := json.Marshal(m)
		lines[p] = append(lines[p], string(b))
		offsets[p]++
	}
	var everything []string
	for p := range parts {
		f := filepath.Join(dir, fmt.Sprintf("items-p%d.jsonl", p))
		writeKcatLines(t, f, lines[p]...)
		files = append(files, f)
		everything = append(everything, lines[p]...)
	}
	all = filepath.Join(dir, "items-all.jsonl")
	writeKcatLines(t, all, everything...)
	return all, files
}

func s3CLI(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("cdc-sink %s: exit %d\n%s\n%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// logVersions lists the commit versions in the table's _delta_log.
func logVersions(t *testing.T, loc string) []int64 {
	t.Helper()
	st, err := delta.OpenStorage(context.Background(), loc, storageOpts)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.(*s3store.Store); !ok && strings.HasPrefix(loc, "s3://") {
		t.Fatalf("%s opened as %T", loc, st)
	}
	ls, err := st.List(context.Background(), "_delta_log", "")
	if err != nil {
		t.Fatal(err)
	}
	var vs []int64
	for _, fi := range ls {
		var v int64
		if n, _ := fmt.Sscanf(fi.Name, "%020d.json", &v); n == 1 && strings.HasSuffix(fi.Name, ".json") && len(fi.Name) == 25 {
			vs = append(vs, v)
		}
	}
	return vs
}

func checkContiguous(t *testing.T, what string, vs []int64) {
	t.Helper()
	for i, v := range vs {
		if v != int64(i) {
			t.Fatalf("%s: versions %v are not contiguous from 0", what, vs)
		}
	}
}

// cdc-sink replays into an s3:// table on SeaweedFS exactly as into a local
// directory; four processes racing into one S3 table (one per partition)
// end at the same state with contiguous versions; delta-rs reads the S3
// table identically to the local one.
func TestReplayOnS3(t *testing.T) {
	const bucket = "lake-test"
	srv := s3Env(t, bucket)
	tmp := t.TempDir()
	all, parts := s3Stream(t, tmp, 4, 120, 600)
	local := filepath.Join(tmp, "local-items")
	s3table := "s3://" + bucket + "/lake/items"

	replay := func(table string, in ...string) string {
		args := []string{"replay", "--table", table, "--sink-name", "items", "--batch-records", "50", "--quiet",
			"--quarantine-file", filepath.Join(tmp, "q.jsonl")}
		for _, f := range in {
			args = append(args, "--from-file", f)
		}
		return s3CLI(t, args...)
	}
	outLocal := replay(local, all)
	outS3 := replay(s3table, all)
	if !strings.Contains(outS3, "live rows") {
		t.Fatalf("replay on S3 printed:\n%s", outS3)
	}
	t.Logf("local: %s\ns3:    %s", strings.TrimSpace(outLocal), strings.TrimSpace(outS3))
	if q, err := os.ReadFile(filepath.Join(tmp, "q.jsonl")); err == nil && len(q) > 0 {
		t.Fatalf("records quarantined:\n%s", q)
	}

	t.Run("info and show", func(t *testing.T) {
		infoL, infoS := s3CLI(t, "table", "info", local), s3CLI(t, "table", "info", s3table)
		for _, want := range []string{"items/dbz.public.items/0", "items/dbz.public.items/3"} {
			if !strings.Contains(infoS, want) {
				t.Errorf("info on S3 lacks %q:\n%s", want, infoS)
			}
		}
		strip := func(s string) string { // the location and the commit time differ
			var keep []string
			for _, l := range strings.Split(s, "\n") {
				if !strings.HasPrefix(l, "table:") && !strings.HasPrefix(l, "last commit:") {
					keep = append(keep, l)
				}
			}
			return strings.Join(keep, "\n")
		}
		if strip(infoL) != strip(infoS) {
			t.Errorf("table info differs:\nlocal:\n%s\ns3:\n%s", infoL, infoS)
		}
		showL := s3CLI(t, "table", "show", local, "--columns", "id,qty,name")
		showS := s3CLI(t, "table", "show", s3table, "--columns", "id,qty,name")
		if sortedLines(showL) != sortedLines(showS) || len(showS) == 0 {
			t.Errorf("table show differs (%d vs %d bytes)", len(showL), len(showS))
		}
		if out := s3CLI(t, "diff", local, s3table); !strings.Contains(out, "tables are equal") {
			t.Errorf("diff: %s", out)
		}
		checkContiguous(t, "single replay", logVersions(t, s3table))
	})

	raced := "s3://" + bucket + "/lake/items-raced"
	t.Run("four racing processes", func(t *testing.T) {
		bin := sinkBinary(t)
		var wg sync.WaitGroup
		outs := make([]bytes.Buffer, len(parts))
		errs := make([]error, len(parts))
		for i, f := range parts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cmd := exec.Command(bin, "replay", "--table", raced, "--sink-name", "items", "--batch-records", "20", "--quiet",
					"--from-file", f, "--quarantine-file", filepath.Join(tmp, fmt.Sprintf("q%d.jsonl", i)))
				cmd.Stdout, cmd.Stderr = &outs[i], &outs[i]
				errs[i] = cmd.Run()
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("replay process %d: %v\n%s", i, err, outs[i].String())
			}
		}
		if out := s3CLI(t, "diff", local, raced); !strings.Contains(out, "tables are equal") {
			t.Errorf("diff local vs raced: %s", out)
		}
		vs := logVersions(t, raced)
		checkContiguous(t, "raced", vs)
		info := s3CLI(t, "table", "info", raced)
		for p := range parts {
			if !strings.Contains(info, fmt.Sprintf("items/dbz.public.items/%d", p)) {
				t.Errorf("raced table lacks the offsets of partition %d:\n%s", p, info)
			}
		}
		t.Logf("4 racing processes: all exit 0, %d contiguous versions (0..%d), equal to the local replay", len(vs), vs[len(vs)-1])
	})

	// Maintenance on S3: optimize rewrites the files, vacuum lists (WalkFiles)
	// and deletes the unreferenced ones; the content does not change.
	t.Run("optimize and vacuum", func(t *testing.T) {
		before := len(logVersions(t, s3table))
		out := s3CLI(t, "table", "optimize", s3table)
		if len(logVersions(t, s3table)) != before+1 {
			t.Fatalf("optimize made no commit: %s", out)
		}
		out = s3CLI(t, "table", "vacuum", s3table, "--retention", "0s", "--dry-run=false")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		t.Logf("vacuum: %s", lines[len(lines)-1])
		if out := s3CLI(t, "diff", local, s3table); !strings.Contains(out, "tables are equal") {
			t.Errorf("diff after optimize+vacuum: %s", out)
		}
	})

	t.Run("delta-rs reads the S3 table", func(t *testing.T) {
		opts := map[string]string{
			"AWS_ENDPOINT_URL": srv.Endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
			"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test-secret", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
		}
		want := deltacheck.ReadDeltaRS(t, local, "")
		for _, loc := range []string{s3table, raced} {
			got := deltacheck.ReadDeltaRSWith(t, loc, "", opts)
			if len(got.Rows) == 0 || strings.Join(projectRows(t, got.Rows), "\n") != strings.Join(projectRows(t, want.Rows), "\n") {
				t.Errorf("%s through delta-rs: %d rows, local %d; differ", loc, len(got.Rows), len(want.Rows))
			}
		}
	})
}

// projectRows keeps the business columns and the tombstone flag (the
// _cdc_ lineage columns differ between a single replay and racing ones).
func projectRows(t *testing.T, rows []string) []string {
	t.Helper()
	var out []string
	for _, m := range deltacheck.Decode(t, rows) {
		b, _ := json.Marshal(map[string]any{"id": m["id"], "qty": m["qty"], "name": m["name"], "_cdc_deleted": m["_cdc_deleted"]})
		out = append(out, string(b))
	}
	return strings.Split(sortedLines(strings.Join(out, "\n")), "\n")
}
