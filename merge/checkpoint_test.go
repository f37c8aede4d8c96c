// Tests that a failed checkpoint after a commit is logged and does not fail the batch.

package merge

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path"
	"strings"
	"testing"

	"github.com/cdcsink/cdc-sink/delta"
)

// noCheckpoints refuses to store checkpoints (written with Put); commits
// (PutIfAbsent) go through.
type noCheckpoints struct{ delta.Storage }

func (s noCheckpoints) Put(ctx context.Context, key string, data []byte) error {
	if strings.Contains(path.Base(key), ".checkpoint.") {
		return fmt.Errorf("put %s: refused by test", key)
	}
	return s.Storage.Put(ctx, key, data)
}

// A checkpoint that cannot be written does not fail the batch (checkpoints
// are best effort) but is logged, once per failed checkpoint.
func TestCheckpointFailureLogged(t *testing.T) {
	ctx := context.Background()
	var logs bytes.Buffer
	tb, err := Open(ctx, "mem", Options{Sink: "s", CheckpointInterval: 2, Storage: noCheckpoints{delta.NewMemStorage()},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for i := int64(1); i <= 4; i++ {
		if _, err := tb.Apply(ctx, batchOf("t", i, ch(i, 'c', "x", "1.00", v(uint64(i)))), noReject(t)); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	// versions 0 (create) … 4: checkpoints were due at 2 and 4
	if got := strings.Count(logs.String(), "checkpoint failed"); got != 2 {
		t.Fatalf("%d checkpoint failures logged at table version %d, want 2:\n%s", got, tb.Version(), logs.String())
	}
	if live, _ := tb.LiveRows(); live != 4 {
		t.Fatalf("%d live rows, want 4", live)
	}
}
