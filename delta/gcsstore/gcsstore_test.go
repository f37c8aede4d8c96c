package gcsstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"github.com/fsouza/fake-gcs-server/fakestorage"
	gax "github.com/googleapis/gax-go/v2"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/delta/storagetest"
)

const testBucket = "lake"

func TestMain(m *testing.M) {
	if storagetest.IsRacingChild() {
		os.Exit(storagetest.RacingChild(openRacingChild))
	}
	os.Exit(m.Run())
}

// fakeServer starts an in-process fake-gcs-server on a loopback port with
// one bucket; it is stopped when t ends.
func fakeServer(t *testing.T) *fakestorage.Server {
	t.Helper()
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{Scheme: "http", Host: "127.0.0.1", Writer: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	if !strings.HasPrefix(srv.URL(), "http://127.0.0.1:") {
		t.Fatalf("fake server at %s, want a loopback address", srv.URL())
	}
	srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: testBucket})
	return srv
}

var prefixSeq atomic.Int64

func newStore(t *testing.T, endpoint string) *Store {
	t.Helper()
	s, err := New(testBucket, fmt.Sprintf("t%d/root", prefixSeq.Add(1)), delta.GCSOptions{Endpoint: endpoint})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// fastRetries shortens the SDK backoff for tests that provoke retries.
func fastRetries(t *testing.T) {
	old := retryBackoff
	retryBackoff = gax.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond, Multiplier: 2}
	t.Cleanup(func() { retryBackoff = old })
}

func TestConformance(t *testing.T) {
	srv := fakeServer(t)
	storagetest.Run(t, func(t *testing.T) delta.Storage { return newStore(t, srv.URL()) })
}

// The emulator must enforce ifGenerationMatch=0, or the conformance
// suite's exclusivity check would prove nothing: check it directly on the
// SDK, then under a race of many writers through the Store.
func TestFakeServerEnforcesDoesNotExist(t *testing.T) {
	srv := fakeServer(t)
	ctx := context.Background()
	s := newStore(t, srv.URL())
	cl, err := s.conn.get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	obj := cl.Bucket(testBucket).Object("direct/00.json").If(storage.Conditions{DoesNotExist: true})
	for i, want := range []bool{true, false} {
		w := obj.NewWriter(ctx)
		fmt.Fprintf(w, "writer %d", i)
		err := w.Close()
		if (err == nil) != want {
			t.Fatalf("conditional create #%d: %v (want success=%v)", i+1, err, want)
		}
		if !want && !delta.IsExists(s.classify(ctx, "put-if-absent", "direct/00.json", err)) {
			t.Fatalf("second conditional create: %v, want a 412 classified as ErrObjectExists", err)
		}
	}

	const racers, rounds = 24, 10
	for round := range rounds {
		key := fmt.Sprintf("_delta_log/%020d.json", round)
		var wins atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make(chan error, racers)
		for i := range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				err := s.PutIfAbsent(ctx, key, fmt.Appendf(nil, "writer %d", i))
				switch {
				case err == nil:
					wins.Add(1)
				case !delta.IsExists(err) || delta.IsTransient(err):
					errs <- err
				}
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("round %d: loser error %v, want a permanent ErrObjectExists", round, err)
		}
		if wins.Load() != 1 {
			t.Fatalf("round %d: %d winners among %d racers, want exactly 1", round, wins.Load(), racers)
		}
	}
}

// Racing processes (storagetest.RacingProcesses): the fake server listens
// on a loopback TCP port, so copies of this test binary reach it as they
// would a real GCS endpoint and race ifGenerationMatch=0 uploads on it.
func TestPutIfAbsentRacingProcesses(t *testing.T) {
	srv := fakeServer(t)
	s := newStore(t, srv.URL())
	storagetest.RacingProcesses(t, 8, 25, []string{"GCSSTORE_ENDPOINT=" + srv.URL(), "GCSSTORE_PREFIX=" + s.prefix}, s)
}

// openRacingChild opens the store the parent of a racing child named.
func openRacingChild(context.Context) (delta.Storage, error) {
	return New(testBucket, os.Getenv("GCSSTORE_PREFIX"), delta.GCSOptions{Endpoint: os.Getenv("GCSSTORE_ENDPOINT")})
}

// A large object goes through the chunked resumable upload (several
// chunks) and reads back intact, whole, ranged and sequentially.
func TestLargeObject(t *testing.T) {
	srv := fakeServer(t)
	ctx := context.Background()
	s := newStore(t, srv.URL())
	n := 100<<20 + 4321
	if testing.Short() {
		n = 20<<20 + 4321
	}
	data := make([]byte, n)
	rand.New(rand.NewSource(7)).Read(data)
	t0 := time.Now()
	if err := s.PutIfAbsent(ctx, "big/part-00000.parquet", data); err != nil {
		t.Fatal(err)
	}
	up := time.Since(t0)
	if err := s.PutIfAbsent(ctx, "big/part-00000.parquet", []byte("x")); !delta.IsExists(err) {
		t.Fatalf("second PutIfAbsent of the large object: %v, want ErrObjectExists", err)
	}
	fi, err := s.Stat(ctx, "big/part-00000.parquet")
	if err != nil || fi.Size != int64(n) {
		t.Fatalf("Stat = %+v, %v; want size %d", fi, err, n)
	}
	r, size, err := s.Open(ctx, "big/part-00000.parquet")
	if err != nil || size != int64(n) {
		t.Fatalf("Open = %d, %v", size, err)
	}
	defer r.Close()
	rng := rand.New(rand.NewSource(8))
	for range 20 {
		off := rng.Int63n(int64(n))
		buf := make([]byte, rng.Intn(1<<20)+1)
		got, err := r.ReadAt(buf, off)
		want := data[off:min(off+int64(len(buf)), int64(n))]
		if got != len(want) || !bytes.Equal(buf[:got], want) || (got < len(buf)) != (err == io.EOF) {
			t.Fatalf("ReadAt(%d, %d) = %d, %v", off, len(buf), got, err)
		}
	}
	if _, err := r.Seek(int64(n/3), io.SeekStart); err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	if _, err := io.CopyBuffer(h, r, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	if want := sha256.Sum256(data[n/3:]); !bytes.Equal(h.Sum(nil), want[:]) {
		t.Fatal("sequential read from n/3 differs")
	}
	t1 := time.Now()
	got, err := s.Get(ctx, "big/part-00000.parquet")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Get: %d bytes, %v; want the %d bytes written", len(got), err, n)
	}
	t.Logf("%d MiB: upload %v, get %v", n>>20, up.Round(time.Millisecond), time.Since(t1).Round(time.Millisecond))
}

func TestListDirsAndPlaceholders(t *testing.T) {
	srv := fakeServer(t)
	ctx := context.Background()
	s := newStore(t, srv.URL())
	for _, k := range []string{"d/a.json", "d/a/x", "d/a-b", "d/b", "d/c/d/e"} {
		if err := s.Put(ctx, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	// a folder placeholder object, as consoles and other tools create
	cl, _ := s.conn.get(ctx)
	w := cl.Bucket(testBucket).Object(s.prefix + "d/").NewWriter(ctx)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		from string
		want string
	}{
		{"", "a/ a-b:5 a.json:8 b:3 c/"},
		{"a-", "a-b:5 a.json:8 b:3 c/"}, // the prefix "a/" is past "a-" by name, not by base name
		{"a.json", "a.json:8 b:3 c/"},
		{"c", "c/"},
		{"zz", ""},
	} {
		ls, err := s.List(ctx, "d", c.from)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, fi := range ls {
			if fi.IsDir {
				got = append(got, fi.Name+"/")
			} else {
				got = append(got, fmt.Sprintf("%s:%d", fi.Name, fi.Size))
			}
			if fi.Key != "d/"+fi.Name {
				t.Errorf("key %q for %q", fi.Key, fi.Name)
			}
		}
		if strings.Join(got, " ") != c.want {
			t.Errorf("List(d, %q) = %v, want %s", c.from, got, c.want)
		}
	}
	all, err := s.WalkFiles(ctx, "d")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, fi := range all {
		keys = append(keys, fi.Key)
	}
	if fmt.Sprint(keys) != "[d/a-b d/a.json d/a/x d/b d/c/d/e]" {
		t.Errorf("WalkFiles = %v", keys)
	}
	// ".." cannot climb out of the root.
	if got, err := s.Get(ctx, "../../d/b"); err != nil || string(got) != "d/b" {
		t.Errorf("Get(../../d/b) = %q, %v; want the root's d/b", got, err)
	}
}

// An Open reader reads the generation it opened: after the key is
// replaced it fails as not found, never mixing old and new bytes.
func TestOpenPinsGeneration(t *testing.T) {
	srv := fakeServer(t)
	ctx := context.Background()
	s := newStore(t, srv.URL())
	if err := s.Put(ctx, "_delta_log/_last_checkpoint", []byte("old-old-old")); err != nil {
		t.Fatal(err)
	}
	r, _, err := s.Open(ctx, "_delta_log/_last_checkpoint")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := s.Put(ctx, "_delta_log/_last_checkpoint", []byte("new-new-new")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 3)
	n, err := r.ReadAt(buf, 4)
	if err == nil && string(buf[:n]) != "old" {
		t.Fatalf("ReadAt after replace = %q, want the old generation or an error", buf[:n])
	}
	if err != nil && !delta.IsNotFound(err) {
		t.Fatalf("ReadAt after replace: %v, want not found", err)
	}
}

func TestBackendRegisteredAndOffline(t *testing.T) {
	t.Setenv("STORAGE_EMULATOR_HOST", "")
	ctx := context.Background()
	st, err := delta.OpenStorage(ctx, "gs://my-lake/tables/items", delta.StorageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, ok := st.(*Store)
	if !ok {
		t.Fatalf("gs:// opened a %T", st)
	}
	if s.bucket != "my-lake" || s.prefix != "tables/items/" || s.String() != "gs://my-lake/tables/items" {
		t.Errorf("store = %q %q %s", s.bucket, s.prefix, s)
	}
	s.conn.mu.Lock()
	created := s.conn.client != nil
	s.conn.mu.Unlock()
	if created {
		t.Error("opening a gs:// location created a client (it must not touch the network)")
	}
	for loc, want := range map[string]string{
		"gs://UPPER/t":       "invalid GCS bucket name",
		"gs://a/t":           "invalid GCS bucket name",
		"gs://bad_-.bucket-": "invalid GCS bucket name",
	} {
		_, err := delta.OpenStorage(ctx, loc, delta.StorageOptions{})
		if !errors.Is(err, delta.ErrInvalidLocation) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), loc) {
			t.Errorf("%s: %v, want ErrInvalidLocation naming it with %q", loc, err, want)
		}
	}
	if _, err := delta.OpenStorage(ctx, "gs://ok-bucket/t", delta.StorageOptions{GCS: delta.GCSOptions{Endpoint: "ftp://x"}}); err == nil {
		t.Error("an ftp:// endpoint was accepted")
	}
	for in, want := range map[string]string{
		"http://127.0.0.1:4443":           "http://127.0.0.1:4443/storage/v1/",
		"127.0.0.1:4443":                  "http://127.0.0.1:4443/storage/v1/",
		"https://gcs.example/storage/v1":  "https://gcs.example/storage/v1/",
		"https://gcs.example/storage/v1/": "https://gcs.example/storage/v1/",
		"http://localhost:9023/":          "http://localhost:9023/storage/v1/",
	} {
		if got, err := normalizeEndpoint(in); err != nil || got != want {
			t.Errorf("normalizeEndpoint(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// STORAGE_EMULATOR_HOST alone (no Endpoint option) reaches the emulator.
func TestEmulatorHostEnv(t *testing.T) {
	srv := fakeServer(t)
	u, _ := url.Parse(srv.URL())
	t.Setenv("STORAGE_EMULATOR_HOST", u.Host)
	ctx := context.Background()
	st, err := delta.OpenStorage(ctx, "gs://"+testBucket+"/env/t", delta.StorageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutIfAbsent(ctx, "_delta_log/00000000000000000000.json", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	obj, err := srv.GetObject(testBucket, "env/t/_delta_log/00000000000000000000.json")
	if err != nil || string(obj.Content) != "{}" {
		t.Fatalf("object on the emulator: %q, %v", obj.Content, err)
	}
}

// scripted answers a fixed status to every request and counts them.
type scripted struct {
	status int
	reset  bool // close the connection without an answer
	n      atomic.Int32
}

func (h *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.n.Add(1)
	_, _ = io.Copy(io.Discard, r.Body) // as GCS does (the SDK's upload stalls on an unread body)
	if h.reset {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(h.status)
	fmt.Fprintf(w, `{"error":{"code":%d,"message":"scripted %d","errors":[{"message":"scripted","reason":"x"}]}}`, h.status, h.status)
}

func TestErrorClassification(t *testing.T) {
	fastRetries(t)
	ctx := context.Background()
	type op struct {
		name string
		do   func(s *Store) error
	}
	ops := []op{
		{"get", func(s *Store) error { _, err := s.Get(ctx, "k/v.json"); return err }},
		{"stat", func(s *Store) error { _, err := s.Stat(ctx, "k/v.json"); return err }},
		{"list", func(s *Store) error { _, err := s.List(ctx, "k", ""); return err }},
		{"put", func(s *Store) error { return s.Put(ctx, "k/v.json", []byte("x")) }},
		{"put-if-absent", func(s *Store) error { return s.PutIfAbsent(ctx, "k/v.json", []byte("x")) }},
		{"delete", func(s *Store) error { return s.Delete(ctx, "k/v.json") }},
	}
	for _, c := range []struct {
		status    int
		reset     bool
		transient bool
		msg       string
	}{
		{status: 429, transient: true, msg: "throttled (HTTP 429)"},
		{status: 500, transient: true, msg: "HTTP 500"},
		{status: 503, transient: true, msg: "HTTP 503"},
		{reset: true, transient: true, msg: "network error"},
		{status: 403, msg: "roles/storage.objectUser"},
		{status: 401, msg: "not authenticated"},
		{status: 400, msg: "refused (HTTP 400)"},
	} {
		h := &scripted{status: c.status, reset: c.reset}
		hs := httptest.NewServer(h)
		for _, o := range ops {
			h.n.Store(0)
			s := newStore(t, hs.URL)
			err := o.do(s)
			what := fmt.Sprintf("%s on status %d (reset %v)", o.name, c.status, c.reset)
			if err == nil {
				t.Errorf("%s: no error", what)
				continue
			}
			if delta.IsTransient(err) != c.transient {
				t.Errorf("%s: %v: transient=%v, want %v", what, err, delta.IsTransient(err), c.transient)
			}
			if delta.IsNotFound(err) || delta.IsExists(err) {
				t.Errorf("%s: %v matches not-found/exists", what, err)
			}
			msg := err.Error()
			if !strings.Contains(msg, "gcs "+o.name+" ") || !strings.Contains(msg, "gs://"+testBucket+"/"+s.prefix+"k/") || !strings.Contains(msg, c.msg) {
				t.Errorf("%s: message %q: want the operation, the object and %q", what, msg, c.msg)
			}
			if n := h.n.Load(); n > maxAttempts {
				t.Errorf("%s: %d requests, want at most %d (bounded retries)", what, n, maxAttempts)
			}
			if c.transient && o.name != "put-if-absent" && h.n.Load() != maxAttempts && o.name != "list" {
				t.Logf("%s: %d attempts", what, h.n.Load())
			}
		}
		hs.Close()
	}
}

func TestMissingBucket(t *testing.T) {
	srv := fakeServer(t)
	ctx := context.Background()
	s, err := New("no-such-bucket", "t", delta.GCSOptions{Endpoint: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.List(ctx, "_delta_log", "")
	if err == nil {
		t.Skip("the fake server lists a missing bucket as empty")
	}
	if delta.IsTransient(err) || delta.IsNotFound(err) || !strings.Contains(err.Error(), `bucket "no-such-bucket" does not exist`) {
		t.Errorf("List in a missing bucket: %v; want a permanent error naming the bucket", err)
	}
}

// dropFirstUpload forwards every request to the fake server, but for the
// first upload it drops the answer after the server applied it: the
// client sees a connection reset for a write that landed.
type dropFirstUpload struct {
	proxy   *httputil.ReverseProxy
	dropped atomic.Bool
}

func (d *dropFirstUpload) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/upload/") && d.dropped.CompareAndSwap(false, true) {
		d.proxy.ServeHTTP(httptest.NewRecorder(), r)
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close()
		}
		return
	}
	d.proxy.ServeHTTP(w, r)
}

// A PutIfAbsent whose first attempt landed but whose answer was lost is
// retried by the SDK, meets its own object (412) and must report success,
// not ErrObjectExists: the commit loop would otherwise treat its own
// commit as a competitor's.
func TestPutIfAbsentAmbiguousRetry(t *testing.T) {
	fastRetries(t)
	srv := fakeServer(t)
	u, _ := url.Parse(srv.URL())
	d := &dropFirstUpload{proxy: httputil.NewSingleHostReverseProxy(u)}
	hs := httptest.NewServer(d)
	defer hs.Close()
	ctx := context.Background()
	s := newStore(t, hs.URL)
	if err := s.PutIfAbsent(ctx, "_delta_log/00000000000000000001.json", []byte("mine")); err != nil {
		t.Fatalf("PutIfAbsent after a lost answer: %v, want success (the object is ours)", err)
	}
	if !d.dropped.Load() {
		t.Fatal("no answer was dropped")
	}
	if got, err := s.Get(ctx, "_delta_log/00000000000000000001.json"); err != nil || string(got) != "mine" {
		t.Fatalf("Get = %q, %v", got, err)
	}
	// Someone else's object behind the same lost answer stays a conflict.
	other := newStore(t, srv.URL())
	if err := other.Put(ctx, "_delta_log/00000000000000000002.json", []byte("theirs")); err != nil {
		t.Fatal(err)
	}
	s.prefix = other.prefix
	d.dropped.Store(false)
	err := s.PutIfAbsent(ctx, "_delta_log/00000000000000000002.json", []byte("mine"))
	if !delta.IsExists(err) || delta.IsTransient(err) {
		t.Fatalf("PutIfAbsent on another writer's object after a lost answer: %v, want ErrObjectExists", err)
	}
}
