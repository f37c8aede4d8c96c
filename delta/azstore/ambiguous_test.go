package azstore

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/internal/azurite"
)

// hang never answers until the request's context ends (a per-try timeout).
type hang struct{ calls atomic.Int32 }

func (h *hang) Do(req *http.Request) (*http.Response, error) {
	h.calls.Add(1)
	<-req.Context().Done()
	return nil, req.Context().Err()
}

// A request sent but never answered within the per-try timeout is
// transient (its outcome is unknown), not the caller's cancellation.
func TestPerTryTimeoutIsTransient(t *testing.T) {
	h := &hang{}
	fakeStore(t, &scripted{})
	transport = h
	retryOptions = policy.RetryOptions{MaxRetries: 1, RetryDelay: time.Millisecond, TryTimeout: 50 * time.Millisecond}
	l, _ := delta.ParseLocation("az://cont/root")
	s, err := Open(context.Background(), l, delta.AzureOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for op, f := range map[string]func() error{
		"put-if-absent": func() error {
			return s.PutIfAbsent(context.Background(), "_delta_log/00000000000000000001.json", []byte("{}"))
		},
		"get": func() error { _, err := s.Get(context.Background(), "x"); return err },
	} {
		h.calls.Store(0)
		err := f()
		if !delta.IsTransient(err) {
			t.Errorf("%s: %v, want transient", op, err)
		}
		t.Logf("%s after %d tries: %v", op, h.calls.Load(), err)
	}
}

// loseAnswer forwards requests to the server but, for the first PUT,
// drops the answer: the commit lands and the writer hears nothing.
type loseAnswer struct {
	next http.RoundTripper
	lost atomic.Bool
}

func (l *loseAnswer) Do(req *http.Request) (*http.Response, error) {
	resp, err := l.next.RoundTrip(req)
	if err == nil && req.Method == http.MethodPut && l.lost.CompareAndSwap(false, true) {
		resp.Body.Close()
		return nil, io.ErrUnexpectedEOF
	}
	return resp, err
}

// The ambiguous commit on a real server: reported transient (never
// "exists" to the writer whose create landed); the retry then sees
// ErrObjectExists and the object is the writer's own, which is how the
// pipeline recognises its own commit.
func TestAmbiguousCommitOnServer(t *testing.T) {
	srv := azurite.Start(t)
	srv.CreateContainer(t, "lake")
	srv.Env(t)
	old := transport
	la := &loseAnswer{next: http.DefaultTransport}
	transport = la
	t.Cleanup(func() { transport = old })
	l, _ := delta.ParseLocation("az://lake/amb")
	s, err := Open(context.Background(), l, delta.AzureOptions{Endpoint: srv.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := "_delta_log/00000000000000000000.json"
	err = s.PutIfAbsent(ctx, key, []byte("mine"))
	if !delta.IsTransient(err) || delta.IsExists(err) {
		t.Fatalf("lost answer: %v, want transient", err)
	}
	err = s.PutIfAbsent(ctx, key, []byte("mine"))
	if !delta.IsExists(err) {
		t.Fatalf("retry: %v, want exists", err)
	}
	if got, err := s.Get(ctx, key); err != nil || string(got) != "mine" {
		t.Fatalf("Get = %q %v", got, err)
	}
}
