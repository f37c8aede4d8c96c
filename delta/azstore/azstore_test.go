package azstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/delta/azstore"
	"github.com/cdcsink/cdc-sink/delta/storagetest"
	"github.com/cdcsink/cdc-sink/internal/azurite"
)

var roots atomic.Int64

func TestMain(m *testing.M) {
	if storagetest.IsRacingChild() {
		os.Exit(storagetest.RacingChild(openRacingChild))
	}
	os.Exit(m.Run())
}

// setup starts Azurite with container "lake" and the shared-key env.
func setup(t *testing.T) (*azurite.Server, delta.StorageOptions) {
	t.Helper()
	srv := azurite.Start(t)
	srv.CreateContainer(t, "lake")
	srv.Env(t)
	return srv, delta.StorageOptions{Azure: delta.AzureOptions{Endpoint: srv.Endpoint}}
}

func openAt(t *testing.T, loc string, opts delta.StorageOptions) *azstore.Store {
	t.Helper()
	st, err := delta.OpenStorage(context.Background(), loc, opts)
	if err != nil {
		t.Fatalf("OpenStorage(%s): %v", loc, err)
	}
	return st.(*azstore.Store)
}

func TestConformance(t *testing.T) {
	_, opts := setup(t)
	storagetest.Run(t, func(t *testing.T) delta.Storage {
		return openAt(t, fmt.Sprintf("az://lake/conformance/r%d", roots.Add(1)), opts)
	})
}

// The abfss:// form served by the Blob endpoint (here the emulator's).
func TestConformanceABFSS(t *testing.T) {
	_, opts := setup(t)
	storagetest.Run(t, func(t *testing.T) delta.Storage {
		return openAt(t, fmt.Sprintf("abfss://lake@%s.dfs.core.windows.net/abfss/r%d", azurite.Account, roots.Add(1)), opts)
	})
}

// A connection string alone (Azurite's development string) is enough.
func TestConnectionString(t *testing.T) {
	srv, _ := setup(t)
	t.Setenv("AZURE_STORAGE_ACCOUNT", "")
	t.Setenv("AZURE_STORAGE_KEY", "")
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", srv.ConnectionString())
	s := openAt(t, "az://lake/cs", delta.StorageOptions{})
	ctx := context.Background()
	if err := s.PutIfAbsent(ctx, "_delta_log/00000000000000000000.json", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, "_delta_log/00000000000000000000.json"); err != nil || string(got) != "{}" {
		t.Fatalf("Get = %q, %v", got, err)
	}
	if s.Account() != azurite.Account || s.Container() != "lake" || s.Prefix() != "cs" {
		t.Errorf("store = %s/%s/%s", s.Account(), s.Container(), s.Prefix())
	}
}

// Racing processes (storagetest.RacingProcesses): copies of this test
// binary, each with its own client, race If-None-Match: * uploads on
// Azurite. setup's shared-key environment is inherited by the children.
func TestPutIfAbsentRacingProcesses(t *testing.T) {
	_, opts := setup(t)
	loc := fmt.Sprintf("az://lake/racing-processes/r%d", roots.Add(1))
	storagetest.RacingProcesses(t, 8, 25, []string{"AZSTORE_RACING_LOCATION=" + loc}, openAt(t, loc, opts))
}

// openRacingChild opens the store the parent of a racing child named.
func openRacingChild(ctx context.Context) (delta.Storage, error) {
	return delta.OpenStorage(ctx, os.Getenv("AZSTORE_RACING_LOCATION"),
		delta.StorageOptions{Azure: delta.AzureOptions{Endpoint: os.Getenv("CDC_SINK_STORAGE_AZURE_ENDPOINT")}})
}

// racers is more than storagetest.Racers' minimum: 24 writers, 10 rounds,
// payloads large enough (1 MiB) that the uploads overlap on the wire.
func TestPutIfAbsentRace(t *testing.T) {
	_, opts := setup(t)
	s := openAt(t, "az://lake/race", opts)
	ctx := context.Background()
	const racers, rounds = 24, 10
	for round := range rounds {
		key := fmt.Sprintf("_delta_log/%020d.json", round)
		errs := make([]error, racers)
		var start, done sync.WaitGroup
		start.Add(1)
		for i := range racers {
			done.Add(1)
			go func() {
				defer done.Done()
				body := bytes.Repeat(fmt.Appendf(nil, "w%02d", i), 1<<18)
				start.Wait()
				errs[i] = s.PutIfAbsent(ctx, key, body)
			}()
		}
		start.Done()
		done.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil:
				if winner >= 0 {
					t.Fatalf("round %d: writers %d and %d both won", round, winner, i)
				}
				winner = i
			case !delta.IsExists(err) || delta.IsTransient(err):
				t.Fatalf("round %d: loser %d: %v", round, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no winner", round)
		}
		got, err := s.Get(ctx, key)
		if err != nil || !bytes.Equal(got, bytes.Repeat(fmt.Appendf(nil, "w%02d", winner), 1<<18)) {
			t.Fatalf("round %d: winner %d's object not intact (%d bytes, %v)", round, winner, len(got), err)
		}
	}
	t.Logf("%d rounds of %d racing writers: exactly one winner each", rounds, racers)
}

// A large object is staged in blocks and committed once; a second
// PutIfAbsent of it is refused at the commit and changes nothing.
func TestLargeStagedUpload(t *testing.T) {
	srv, opts := setup(t)
	s := openAt(t, "az://lake/large", opts)
	ctx := context.Background()
	n := 100 << 20
	if testing.Short() {
		n = 24 << 20
	}
	data := make([]byte, n)
	rand.New(rand.NewSource(7)).Read(data)
	t0 := time.Now()
	if err := s.PutIfAbsent(ctx, "part-0.parquet", data); err != nil {
		t.Fatal(err)
	}
	up := time.Since(t0)
	err := s.PutIfAbsent(ctx, "part-0.parquet", data[:azstore.BlockSize+1])
	if !delta.IsExists(err) {
		t.Fatalf("second staged PutIfAbsent: %v, want exists", err)
	}
	// The committed block list shows the staging.
	cred, _ := container.NewSharedKeyCredential(azurite.Account, azurite.Key)
	cc, err := container.NewClientWithSharedKeyCredential(srv.Endpoint+"/lake", cred, nil)
	if err != nil {
		t.Fatal(err)
	}
	bl, err := cc.NewBlockBlobClient("large/part-0.parquet").GetBlockList(ctx, blockblob.BlockListTypeCommitted, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantBlocks := (n + azstore.BlockSize - 1) / azstore.BlockSize
	if len(bl.CommittedBlocks) != wantBlocks {
		t.Errorf("committed blocks %d, want %d", len(bl.CommittedBlocks), wantBlocks)
	}
	fi, err := s.Stat(ctx, "part-0.parquet")
	if err != nil || fi.Size != int64(n) {
		t.Fatalf("Stat = %+v, %v", fi, err)
	}
	t1 := time.Now()
	got, err := s.Get(ctx, "part-0.parquet")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Get: %d bytes, %v; want the %d uploaded", len(got), err, n)
	}
	down := time.Since(t1)
	r, size, err := s.Open(ctx, "part-0.parquet")
	if err != nil || size != int64(n) {
		t.Fatalf("Open: %d %v", size, err)
	}
	defer r.Close()
	mid := make([]byte, 4096)
	off := int64(azstore.BlockSize - 100) // across a block boundary
	if _, err := r.ReadAt(mid, off); err != nil || !bytes.Equal(mid, data[off:off+4096]) {
		t.Fatalf("ReadAt across blocks: %v", err)
	}
	// Put replaces a large object with a small one atomically.
	if err := s.Put(ctx, "part-0.parquet", []byte("small")); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, "part-0.parquet"); err != nil || string(got) != "small" {
		t.Fatalf("after Put: %q %v", got, err)
	}
	t.Logf("%d MiB: staged upload in %d blocks %v, download %v", n>>20, len(bl.CommittedBlocks), up.Round(time.Millisecond), down.Round(time.Millisecond))
}

// An object replaced while a reader has it open fails that reader's next
// read instead of mixing versions.
func TestReaderPinsVersion(t *testing.T) {
	_, opts := setup(t)
	s := openAt(t, "az://lake/pin", opts)
	ctx := context.Background()
	if err := s.Put(ctx, "f", []byte("version one")); err != nil {
		t.Fatal(err)
	}
	r, _, err := s.Open(ctx, "f")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := s.Put(ctx, "f", []byte("version two")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := r.ReadAt(buf, 0); err == nil || delta.IsTransient(err) {
		t.Fatalf("read of a replaced object: %v, want a permanent error", err)
	}
}

func TestListSizesAndWalk(t *testing.T) {
	_, opts := setup(t)
	s := openAt(t, "az://lake/walk", opts)
	ctx := context.Background()
	for k, v := range map[string]string{"t/_delta_log/0.json": "ab", "t/p=1/a.parquet": "abc", "t/b.parquet": "abcd"} {
		if err := s.Put(ctx, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	ls, err := s.List(ctx, "t", "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, fi := range ls {
		got = append(got, fmt.Sprintf("%s:%d:%v", fi.Name, fi.Size, fi.IsDir))
	}
	if strings.Join(got, ",") != "_delta_log:0:true,b.parquet:4:false,p=1:0:true" {
		t.Errorf("List = %+v", ls)
	}
	w, err := s.WalkFiles(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, fi := range w {
		keys = append(keys, fmt.Sprint(fi.Key, ":", fi.Size))
	}
	if strings.Join(keys, ",") != "t/_delta_log/0.json:2,t/b.parquet:4,t/p=1/a.parquet:3" {
		t.Errorf("WalkFiles = %v", keys)
	}
}

// Errors against the real emulator: a wrong key, a missing container, a
// stopped server.
func TestErrorsFromServer(t *testing.T) {
	srv, opts := setup(t)
	ctx := context.Background()

	t.Setenv("AZURE_STORAGE_KEY", strings.Repeat("A", 86)+"==")
	bad := openAt(t, "az://lake/x", opts)
	_, err := bad.Get(ctx, "k")
	checkPermanent(t, "wrong key", err, "wrong account key")

	t.Setenv("AZURE_STORAGE_KEY", azurite.Key)
	nc := openAt(t, "az://nosuchcontainer/x", opts)
	err = nc.PutIfAbsent(ctx, "_delta_log/00000000000000000000.json", []byte("{}"))
	checkPermanent(t, "missing container", err, `container "nosuchcontainer" does not exist`)
	if delta.IsExists(err) || delta.IsNotFound(err) {
		t.Errorf("missing container classified as exists/not found: %v", err)
	}
	if err := nc.Delete(ctx, "k"); err == nil {
		t.Error("Delete in a missing container: no error")
	}

	s := openAt(t, "az://lake/x", opts)
	srv.Stop()
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	err = s.PutIfAbsent(cctx, "_delta_log/00000000000000000001.json", []byte("{}"))
	if !delta.IsTransient(err) {
		t.Errorf("stopped server: %v, want transient", err)
	} else if !strings.Contains(err.Error(), "put-if-absent lake/x/_delta_log/00000000000000000001.json") {
		t.Errorf("message lacks op and key: %v", err)
	}
	t.Logf("stopped server: %v", err)
	_, err = s.Get(cctx, "y")
	if !delta.IsTransient(err) {
		t.Errorf("Get on a stopped server: %v, want transient", err)
	}
}

func checkPermanent(t *testing.T, what string, err error, msg string) {
	t.Helper()
	var ae *azstore.Error
	switch {
	case err == nil:
		t.Errorf("%s: no error", what)
	case delta.IsTransient(err):
		t.Errorf("%s: classified transient: %v", what, err)
	case !errors.As(err, &ae):
		t.Errorf("%s: %T %v, want *azstore.Error", what, err, err)
	case !strings.Contains(err.Error(), msg):
		t.Errorf("%s: %q lacks %q", what, err, msg)
	case strings.Contains(err.Error(), azurite.Key) || strings.Contains(err.Error(), "AAAAAAAA"):
		t.Errorf("%s: message holds the key: %v", what, err)
	default:
		t.Logf("%s: %v", what, err)
	}
}

// Racing staged uploads (each larger than a block): the condition on the
// block list commit lets exactly one in, and the object is that writer's
// whole, never blocks mixed from two writers.
func TestStagedPutIfAbsentRace(t *testing.T) {
	_, opts := setup(t)
	s := openAt(t, "az://lake/stagedrace", opts)
	ctx := context.Background()
	const racers = 4
	bodies := make([][]byte, racers)
	for i := range bodies {
		bodies[i] = bytes.Repeat([]byte{byte('a' + i)}, azstore.BlockSize+azstore.BlockSize/2)
	}
	errs := make([]error, racers)
	var start, done sync.WaitGroup
	start.Add(1)
	for i := range racers {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			errs[i] = s.PutIfAbsent(ctx, "big.parquet", bodies[i])
		}()
	}
	start.Done()
	done.Wait()
	winner := -1
	for i, err := range errs {
		if err == nil {
			if winner >= 0 {
				t.Fatalf("writers %d and %d both won", winner, i)
			}
			winner = i
		} else if !delta.IsExists(err) {
			t.Fatalf("loser %d: %v", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no winner")
	}
	got, err := s.Get(ctx, "big.parquet")
	if err != nil || !bytes.Equal(got, bodies[winner]) {
		t.Fatalf("object is not writer %d's (%d bytes, %v)", winner, len(got), err)
	}
}
