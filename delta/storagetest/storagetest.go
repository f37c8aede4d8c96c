// Package storagetest checks a delta.Storage against the contract the Delta
// protocol relies on (Run), and wraps a Storage to inject scripted failures
// (Faulty) for tests of the code above it.
package storagetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"sync"
	"testing"

	"github.com/cdcsink/cdc-sink/delta"
)

// Racers is how many goroutines race for one PutIfAbsent key.
const Racers = 16

// Run runs the conformance suite. newStore must return an empty store for
// each call (a fresh root per subtest).
func Run(t *testing.T, newStore func(t *testing.T) delta.Storage) {
	ctx := context.Background()
	t.Run("MissingIsTypedNotFound", func(t *testing.T) {
		s := newStore(t)
		_, err := s.Get(ctx, "nope/x.json")
		checkNotFound(t, "Get", err)
		_, _, err = s.Open(ctx, "nope/x.json")
		checkNotFound(t, "Open", err)
		_, err = s.Stat(ctx, "nope/x.json")
		checkNotFound(t, "Stat", err)
		if err := s.Delete(ctx, "nope/x.json"); err != nil {
			t.Errorf("Delete of a missing key: %v, want nil", err)
		}
		ls, err := s.List(ctx, "nope", "")
		if err != nil || len(ls) != 0 {
			t.Errorf("List of a missing dir = %v, %v; want empty, nil", ls, err)
		}
	})
	t.Run("PutGetOverwrite", func(t *testing.T) {
		s := newStore(t)
		must(t, s.Put(ctx, "a/b/c.txt", []byte("one")))
		expect(t, s, "a/b/c.txt", []byte("one"))
		must(t, s.Put(ctx, "a/b/c.txt", []byte("two!")))
		expect(t, s, "a/b/c.txt", []byte("two!"))
		fi, err := s.Stat(ctx, "a/b/c.txt")
		must(t, err)
		if fi.Size != 4 || fi.IsDir {
			t.Errorf("Stat = %+v, want size 4, not a dir", fi)
		}
		must(t, s.Put(ctx, "empty", nil))
		expect(t, s, "empty", []byte{})
		must(t, s.Delete(ctx, "a/b/c.txt"))
		_, err = s.Get(ctx, "a/b/c.txt")
		checkNotFound(t, "Get after Delete", err)
	})
	t.Run("PutIfAbsentRefusesExisting", func(t *testing.T) {
		s := newStore(t)
		must(t, s.PutIfAbsent(ctx, "_delta_log/00000000000000000000.json", []byte("first")))
		err := s.PutIfAbsent(ctx, "_delta_log/00000000000000000000.json", []byte("second"))
		checkExists(t, err)
		expect(t, s, "_delta_log/00000000000000000000.json", []byte("first"))
		must(t, s.Put(ctx, "_delta_log/_last_checkpoint", []byte("x")))
		checkExists(t, s.PutIfAbsent(ctx, "_delta_log/_last_checkpoint", []byte("y")))
	})
	t.Run("PutIfAbsentExactlyOneWinner", func(t *testing.T) {
		s := newStore(t)
		for round := 0; round < 5; round++ {
			key := fmt.Sprintf("_delta_log/%020d.json", round)
			errs := make([]error, Racers)
			var start, done sync.WaitGroup
			start.Add(1)
			for i := range Racers {
				done.Add(1)
				go func() {
					defer done.Done()
					start.Wait()
					errs[i] = s.PutIfAbsent(ctx, key, fmt.Appendf(nil, "writer %d", i))
				}()
			}
			start.Done()
			done.Wait()
			winner := -1
			for i, err := range errs {
				switch {
				case err == nil:
					if winner >= 0 {
						t.Fatalf("round %d: writers %d and %d both won %s", round, winner, i, key)
					}
					winner = i
				case !delta.IsExists(err):
					t.Fatalf("round %d: loser %d: %v, want an error matching delta.ErrObjectExists", round, i, err)
				case delta.IsTransient(err):
					t.Fatalf("round %d: exists error %v classified transient", round, err)
				}
			}
			if winner < 0 {
				t.Fatalf("round %d: no writer won %s", round, key)
			}
			expect(t, s, key, fmt.Appendf(nil, "writer %d", winner))
		}
	})
	t.Run("ListFromSortedDirect", func(t *testing.T) {
		s := newStore(t)
		for _, v := range []int{7, 0, 12, 3, 10} {
			must(t, s.PutIfAbsent(ctx, fmt.Sprintf("tbl/_delta_log/%020d.json", v), []byte("{}")))
		}
		must(t, s.Put(ctx, "tbl/_delta_log/_last_checkpoint", []byte("{}")))
		must(t, s.Put(ctx, "tbl/_delta_log/sub/deeper.json", []byte("{}")))
		must(t, s.Put(ctx, "tbl/part-0.parquet", []byte("x")))
		must(t, s.Put(ctx, "tbl/_delta_logx", []byte("x"))) // a sibling sharing the prefix
		ls, err := s.List(ctx, "tbl/_delta_log", "")
		must(t, err)
		want := []string{"00000000000000000000.json", "00000000000000000003.json", "00000000000000000007.json",
			"00000000000000000010.json", "00000000000000000012.json", "_last_checkpoint", "sub"}
		checkNames(t, "List", ls, want)
		for _, fi := range ls {
			if fi.Key != "tbl/_delta_log/"+fi.Name {
				t.Errorf("List entry %q has key %q", fi.Name, fi.Key)
			}
		}
		ls, err = s.List(ctx, "tbl/_delta_log", fmt.Sprintf("%020d", 7))
		must(t, err)
		checkNames(t, "List from v7", ls, want[2:])
		ls, err = s.List(ctx, "tbl/_delta_log/", "00000000000000000010.json")
		must(t, err)
		checkNames(t, "List from v10 (trailing slash)", ls, want[3:])
		ls, err = s.List(ctx, "tbl/_delta_log", "zzz")
		must(t, err)
		checkNames(t, "List past the end", ls, nil)
	})
	t.Run("RangeReads", func(t *testing.T) {
		s := newStore(t)
		data := []byte("0123456789abcdefghij")
		must(t, s.Put(ctx, "f.bin", data))
		r, size, err := s.Open(ctx, "f.bin")
		must(t, err)
		defer r.Close()
		if size != int64(len(data)) {
			t.Fatalf("Open size %d, want %d", size, len(data))
		}
		buf := make([]byte, 5)
		if n, err := r.ReadAt(buf, 10); n != 5 || err != nil && err != io.EOF || string(buf) != "abcde" {
			t.Errorf("ReadAt(10) = %d %v %q", n, err, buf)
		}
		if n, err := r.ReadAt(buf, 17); n != 3 || err == nil || string(buf[:n]) != "hij" {
			t.Errorf("ReadAt past the end = %d %v %q, want 3 bytes and an error", n, err, buf[:n])
		}
		if _, err := r.Seek(-4, io.SeekEnd); err != nil {
			t.Fatal(err)
		}
		rest, err := io.ReadAll(r)
		if err != nil || string(rest) != "ghij" {
			t.Errorf("Seek(-4, end)+Read = %q %v", rest, err)
		}
	})
	t.Run("LargeObject", func(t *testing.T) {
		s := newStore(t)
		n := 3<<20 + 12345
		if !testing.Short() {
			n = 16 << 20
		}
		data := make([]byte, n)
		rand.New(rand.NewSource(1)).Read(data)
		must(t, s.PutIfAbsent(ctx, "big/part-0.parquet", data))
		got, err := s.Get(ctx, "big/part-0.parquet")
		must(t, err)
		if !bytes.Equal(got, data) {
			t.Fatalf("large object: got %d bytes back, want %d identical", len(got), len(data))
		}
		r, size, err := s.Open(ctx, "big/part-0.parquet")
		must(t, err)
		defer r.Close()
		if size != int64(n) {
			t.Fatalf("size %d want %d", size, n)
		}
		tail := make([]byte, 8) // a parquet footer read
		if _, err := r.ReadAt(tail, size-8); err != nil && err != io.EOF {
			t.Fatal(err)
		}
		if !bytes.Equal(tail, data[n-8:]) {
			t.Error("footer bytes differ")
		}
		fi, err := s.Stat(ctx, "big/part-0.parquet")
		must(t, err)
		if fi.Size != int64(n) {
			t.Errorf("Stat size %d want %d", fi.Size, n)
		}
	})
	t.Run("CancelledContext", func(t *testing.T) {
		s := newStore(t)
		must(t, s.Put(ctx, "x", []byte("x")))
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		checks := map[string]error{
			"Put":         s.Put(cctx, "y", []byte("y")),
			"PutIfAbsent": s.PutIfAbsent(cctx, "z", []byte("z")),
			"Delete":      s.Delete(cctx, "x"),
		}
		_, checks["Get"] = s.Get(cctx, "x")
		_, _, checks["Open"] = s.Open(cctx, "x")
		_, checks["List"] = s.List(cctx, "", "")
		_, checks["Stat"] = s.Stat(cctx, "x")
		for op, err := range checks {
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%s with a cancelled context: %v, want context.Canceled", op, err)
			}
			if delta.IsTransient(err) {
				t.Errorf("%s: cancellation classified transient", op)
			}
		}
		for _, k := range []string{"y", "z"} {
			if _, err := s.Stat(ctx, k); !delta.IsNotFound(err) {
				t.Errorf("%s was written despite the cancelled context (%v)", k, err)
			}
		}
		expect(t, s, "x", []byte("x"))
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func expect(t *testing.T, s delta.Storage, key string, want []byte) {
	t.Helper()
	got, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("Get %s: %v", key, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Get %s = %q, want %q", key, got, want)
	}
}

func checkNotFound(t *testing.T, op string, err error) {
	t.Helper()
	if !delta.IsNotFound(err) {
		t.Errorf("%s of a missing key: %v, want an error matching delta.ErrObjectNotFound", op, err)
	} else if delta.IsTransient(err) {
		t.Errorf("%s: not-found classified transient", op)
	}
}

func checkExists(t *testing.T, err error) {
	t.Helper()
	if !delta.IsExists(err) {
		t.Errorf("PutIfAbsent on an existing key: %v, want an error matching delta.ErrObjectExists", err)
	} else if delta.IsTransient(err) {
		t.Errorf("exists classified transient: %v", err)
	}
}

func checkNames(t *testing.T, what string, ls []delta.FileInfo, want []string) {
	t.Helper()
	var got []string
	for _, fi := range ls {
		got = append(got, fi.Name)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}
