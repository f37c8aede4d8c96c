package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/internal/azurite"
	"github.com/cdcsink/cdc-sink/internal/faultproxy"
)

// TestObjectStoreFaults: faults between the sink and the object store (a
// proxy in front of Azurite, and of SeaweedFS for S3): the response of a
// commit PUT that the store applied is dropped (an ambiguous outcome), a
// burst of 503s on data-file uploads, a connection reset in the middle of an
// upload, and latency on log reads. The replay must end with the table equal
// to an uninterrupted local replay, the same contiguous versions, and nothing
// quarantined (transient faults are retried, never quarantined).
func TestObjectStoreFaults(t *testing.T) {
	for _, backend := range []string{"azure", "s3"} {
		t.Run(backend, func(t *testing.T) {
			var ft faultTarget
			switch backend {
			case "azure":
				srv := azurite.Start(t)
				srv.CreateContainer(t, "lake")
				srv.Env(t)
				ft = faultTarget{target: fmt.Sprintf("http://127.0.0.1:%d", srv.Port), remote: "az://lake/lake/faulty", upload: http.MethodPut,
					point: func(t *testing.T, proxy string) {
						t.Setenv("CDC_SINK_STORAGE_AZURE_ENDPOINT", proxy+"/"+azurite.Account)
					}}
			case "s3":
				srv := s3Env(t, "lake-faults")
				ft = faultTarget{target: srv.Endpoint, remote: "s3://lake-faults/lake/faulty", upload: http.MethodPut,
					point: func(t *testing.T, proxy string) { t.Setenv("CDC_SINK_STORAGE_S3_ENDPOINT", proxy) }}
			}
			objectStoreFaults(t, ft)
		})
	}
}

// faultTarget is one object store behind the fault proxy.
type faultTarget struct {
	target string // the store's endpoint
	remote string // the table location on it
	upload string // the HTTP method of an object upload (GCS: POST, then PUT for resumable chunks)
	point  func(t *testing.T, proxyURL string)
}

func objectStoreFaults(t *testing.T, ft faultTarget) {
	remote := ft.remote
	// Rules match the object a request addresses (faultproxy.Proxy.Object),
	// the same for every store: a path for S3 and Azure, a query parameter or
	// an upload session for GCS.
	proxy, err := faultproxy.New(ft.target,
		faultproxy.Rule{Method: ft.upload, Object: regexp.MustCompile(`/_delta_log/00000000000000000002\.json$`), Action: faultproxy.DropResponse, Times: 1},
		faultproxy.Rule{Method: ft.upload, Object: regexp.MustCompile(`\.parquet$`), Action: faultproxy.Status, Status: 503, Skip: 1, Times: 4},
		faultproxy.Rule{Method: ft.upload, Object: regexp.MustCompile(`\.parquet$`), Action: faultproxy.ResetMidBody, AfterBytes: 200, Skip: 2, Times: 1},
		faultproxy.Rule{Method: http.MethodGet, Object: regexp.MustCompile(`/_delta_log/`), Action: faultproxy.Delay, Delay: 300 * time.Millisecond, Times: 2},
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	ft.point(t, proxy.URL)

	tmp := t.TempDir()
	in := filepath.Join(tmp, "items.jsonl")
	azureLoad(t, in)
	local := filepath.Join(tmp, "items")
	for _, table := range []string{local, remote} {
		q := filepath.Join(tmp, filepath.Base(table)+".quarantine.jsonl")
		code, out, errOut := runCLI(t, "replay", "--from-file", in, "--table", table, "--sink-name", "items",
			"--batch-records", "50", "--quarantine-file", q, "--quiet")
		if code != 0 || !strings.Contains(out, " 0 quarantined") {
			t.Fatalf("replay into %s: exit %d (want 0, nothing quarantined)\n%s\n%s", table, code, out, errOut)
		}
		if b, err := os.ReadFile(q); err == nil && len(b) > 0 {
			t.Fatalf("%s: quarantined:\n%s", table, b)
		}
	}
	total, by := proxy.Fired()
	if total != 1+4+1+2 {
		t.Fatalf("faults fired: %d %v, want all 8", total, by)
	}
	if code, out, errOut := runCLI(t, "diff", local, remote); code != 0 {
		t.Fatalf("diff local %s: exit %d\n%s\n%s", remote, code, out, errOut)
	}
	// same versions, contiguous (the dropped-response commit landed once)
	ctx := context.Background()
	versions := func(loc string) (int64, []string) {
		st, err := delta.OpenStorage(ctx, loc, storageOpts)
		if err != nil {
			t.Fatal(err)
		}
		snap, err := delta.OpenTable(st, "").Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ents, err := st.List(ctx, "_delta_log", "")
		if err != nil {
			t.Fatal(err)
		}
		var commits []string
		for _, e := range ents {
			if strings.HasSuffix(e.Name, ".json") {
				commits = append(commits, e.Name)
			}
		}
		return snap.Version(), commits
	}
	lv, lc := versions(local)
	rv, rc := versions(remote)
	if lv != rv || len(lc) != len(rc) || int64(len(rc)) != rv+1 {
		t.Fatalf("versions: local v%d %v, remote v%d %v (want equal and contiguous)", lv, lc, rv, rc)
	}
	t.Logf("faults %v; both tables at v%d", by, rv)
}
