// Tests against an in-process S3 server that loses replies (ambiguous commit outcomes).

package merge

import (
	"context"
	"math/rand"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/delta/s3store"
	"github.com/cdcsink/cdc-sink/internal/seaweed"
)

// lossyS3 forwards requests to the server but, for the skip+1-th
// conditional PUT whose path contains match, loses the reply: the object is
// written, the writer sees a timeout (an ambiguous outcome).
type lossyS3 struct {
	match string
	skip  int64
	seen  atomic.Int64
	lost  atomic.Int64
}

type lostReply struct{}

func (lostReply) Error() string   { return "read tcp 127.0.0.1: i/o timeout" }
func (lostReply) Timeout() bool   { return true }
func (lostReply) Temporary() bool { return true }

func (l *lossyS3) Do(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultClient.Do(r)
	if err == nil && r.Method == http.MethodPut && r.Header.Get("If-None-Match") == "*" && strings.Contains(r.URL.Path, l.match) {
		if l.seen.Add(1) == l.skip+1 {
			resp.Body.Close()
			l.lost.Add(1)
			return nil, lostReply{}
		}
	}
	return resp, err
}

// The ambiguous-commit case of TestTransientStorageFailuresAreRetried on a
// real S3 server: the commit lands but its reply is lost; the S3 store
// reports it transient, the retry finds its own commit (the key is taken:
// ErrObjectExists, then the txn says it is ours) and re-plans to nothing.
// The table ends equal to an uninterrupted run, with no extra version.
func TestAmbiguousCommitOnS3(t *testing.T) {
	for _, k := range []string{"AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test-secret")
	t.Setenv("AWS_CONFIG_FILE", os.DevNull)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", os.DevNull)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	srv, err := seaweed.Start(t.TempDir(), "merge-test")
	if err != nil {
		t.Fatalf("SeaweedFS is needed for this test: %v", err)
	}
	t.Cleanup(srv.Stop)

	rng := rand.New(rand.NewSource(7))
	evs := genStream(rng, 12, 90)
	var batches [][]event
	for rest := evs; len(rest) > 0; rest = rest[min(len(rest), 9):] {
		batches = append(batches, rest[:min(len(rest), 9)])
	}
	ref := delta.NewMemStorage()
	refTable, _, err := applyAll(t, ref, batches)
	if err != nil {
		t.Fatal(err)
	}
	want, wantVersion := stateOf(t, refTable), refTable.Version()

	for _, c := range []struct{ name, match string }{
		{"commit", "/_delta_log/"},
		{"data file", ".parquet"},
	} {
		t.Run(c.name, func(t *testing.T) {
			lossy := &lossyS3{match: c.match, skip: 4}
			st, err := s3store.New(context.Background(), s3store.Config{Bucket: "merge-test", Prefix: "t/" + strings.ReplaceAll(c.name, " ", "-"),
				S3: delta.S3Options{Endpoint: srv.Endpoint, PathStyle: true}, HTTPClient: lossy})
			if err != nil {
				t.Fatal(err)
			}
			tb, retries, err := applyAll(t, st, batches)
			if err != nil {
				t.Fatal(err)
			}
			if lossy.lost.Load() != 1 || retries == 0 {
				t.Fatalf("lost replies %d, retries %d: the fault did not fire", lossy.lost.Load(), retries)
			}
			fresh, err := Open(context.Background(), "s3://merge-test", Options{Sink: "model", Storage: st})
			if err != nil {
				t.Fatal(err)
			}
			got := stateOf(t, fresh)
			if len(got) != len(want) {
				t.Fatalf("%d keys, want %d", len(got), len(want))
			}
			for k, w := range want {
				if got[k] != w {
					t.Fatalf("key %d: %+v, want %+v", k, got[k], w)
				}
			}
			if tb.Version() != wantVersion || fresh.Version() != wantVersion {
				t.Errorf("version %d (reopened %d), want %d as without failures", tb.Version(), fresh.Version(), wantVersion)
			}
		})
	}
}
