package consistency

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/delta/storagetest"
)

func TestManifestLog(t *testing.T) {
	ctx := context.Background()
	st := delta.NewMemStorage()
	l := OpenStorage(st, "g")
	if _, ok, err := l.Latest(ctx); ok || err != nil {
		t.Fatalf("empty log: %v %v", ok, err)
	}
	for i, w := range []int64{10, 20, 30} {
		seq, err := l.Append(ctx, Entry{Watermark: w, Tables: map[string]int64{"a": int64(i)}, Time: time.Unix(1, 0).UTC()})
		if err != nil || seq != int64(i+1) {
			t.Fatalf("append %d: seq %d, %v", w, seq, err)
		}
	}
	// a second writer (a fresh Log) goes on after the newest entry
	other := OpenStorage(st, "g")
	if seq, err := other.Append(ctx, Entry{Watermark: 40}); err != nil || seq != 4 {
		t.Fatalf("second writer: seq %d, %v", seq, err)
	}
	// and the first, whose next number was taken, moves past it
	if seq, err := l.Append(ctx, Entry{Watermark: 50}); err != nil || seq != 5 {
		t.Fatalf("after a taken number: seq %d, %v", seq, err)
	}
	e, ok, err := OpenStorage(st, "g").Latest(ctx)
	if err != nil || !ok || e.Seq != 5 || e.Watermark != 50 || e.Group != "g" {
		t.Fatalf("latest %+v %v %v", e, ok, err)
	}
	if _, err := OpenStorage(st, "h").Get(ctx, 1); err == nil || !strings.Contains(err.Error(), `want group "h"`) {
		t.Fatalf("another group's log read: %v", err)
	}
}

// A write whose answer is lost after it landed is retried and found to be
// ours, not counted twice.
func TestManifestAmbiguousWrite(t *testing.T) {
	ctx := context.Background()
	lost := delta.Transient(errors.New("connection reset"))
	f := storagetest.NewFaulty(delta.NewMemStorage(), storagetest.Fault{Op: storagetest.OpPutIfAbsent, Pattern: "*.json", After: lost, Times: 1})
	l := OpenStorage(f, "g")
	e := Entry{Watermark: 7, Tables: map[string]int64{"a": 1}, Time: time.Unix(1, 0).UTC()}
	if _, err := l.Append(ctx, e); err == nil {
		t.Fatal("the lost answer was not reported")
	}
	if seq, err := l.Append(ctx, e); err != nil || seq != 1 {
		t.Fatalf("retry: seq %d, %v", seq, err)
	}
	if seqs, _ := l.Entries(ctx); len(seqs) != 1 {
		t.Fatalf("entries %v, want one", seqs)
	}
}
