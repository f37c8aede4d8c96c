package pipeline

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/cdcsink/cdc-sink/source"
)

// Transient apply failures are retried within RetryBudget, then the batch
// fails with ErrRetriesExhausted, which the runner does not retry again.
func TestApplyRetryBudget(t *testing.T) {
	p, tb, _ := newTest(t)
	p.cfg.RetryBudget = 30 * time.Millisecond
	tb.always = quarantine.Transient(errors.New("storage down"))
	_, err := p.Process(context.Background(), []*source.Record{rec("t", 0, "a", "x")})
	if !errors.Is(err, ErrRetriesExhausted) || isRetryable(err) {
		t.Fatalf("err = %v, want ErrRetriesExhausted, not retryable by the runner", err)
	}
	if tb.attempts < 2 {
		t.Errorf("%d attempts, want the failure retried within the budget", tb.attempts)
	}
}

// What the runner retries: transient failures nobody below has given up on.
func TestIsRetryable(t *testing.T) {
	transient := quarantine.Transient(errors.New("storage down"))
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"transient", transient, true},
		{"budget spent below", fmt.Errorf("table x: %w: %w", ErrRetriesExhausted, transient), false},
		{"merge gave up on conflicts", fmt.Errorf("table x: %w: %w", merge.ErrGaveUp, merge.ErrReplan), false},
		{"permanent", errors.New("bad table"), false},
	} {
		if got := isRetryable(tc.err); got != tc.want {
			t.Errorf("%s: isRetryable = %v, want %v", tc.name, got, tc.want)
		}
	}
}
