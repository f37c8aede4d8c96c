// Tests of the key index against a plain map.

package merge

import (
	"fmt"
	"hash/maphash"
	"testing"

	"github.com/cdcsink/cdc-sink/versioning"
)

// The index agrees with a map under inserts, overwrites and lookups of
// present and absent keys, through both the string and []byte paths.
func TestKeyIndexMatchesMap(t *testing.T) {
	x := newKeyIndex()
	want := map[string]loc{}
	for i := 0; i < 20000; i++ {
		k := string(AppendKey(nil, []any{int64(i % 7000), fmt.Sprint("k", i%13)}))
		l := loc{file: int32(i % 17), row: int32(i), ver: versioning.Version{LSN: uint64(i)}, deleted: i%5 == 0}
		if i%2 == 0 {
			x.Set(k, l)
		} else {
			x.SetBytes([]byte(k), l)
		}
		want[k] = l
	}
	if x.Len() != len(want) {
		t.Fatalf("Len = %d, want %d", x.Len(), len(want))
	}
	for k, l := range want {
		if got, ok := x.Get(k); !ok || got != l {
			t.Fatalf("Get(%q) = %v %v, want %v", k, got, ok, l)
		}
		if got, ok := x.GetBytes([]byte(k)); !ok || got != l {
			t.Fatalf("GetBytes(%q) = %v %v, want %v", k, got, ok, l)
		}
	}
	for _, k := range []string{"", "absent", string(AppendKey(nil, []any{int64(99999), "k1"}))} {
		if _, ok := x.Get(k); ok {
			t.Fatalf("Get(%q) found an absent key", k)
		}
	}
	n := 0
	for k, l := range x.All() {
		if want[k] != l {
			t.Fatalf("All: %q -> %v, want %v", k, l, want[k])
		}
		n++
	}
	if n != len(want) {
		t.Fatalf("All yielded %d keys, want %d", n, len(want))
	}
}

// Keys whose hashes collide are still told apart by their bytes.
func TestKeyIndexCollisions(t *testing.T) {
	x := newKeyIndex()
	// force every key into one chain by reusing one hash
	h := maphash.String(x.seed, "same")
	for i := 0; i < 50; i++ {
		x.add(h, len(fmt.Sprint(i)), loc{row: int32(i)})
		x.keys = append(x.keys, fmt.Sprint(i)...)
	}
	for i := 0; i < 50; i++ {
		if j := x.find(h, fmt.Sprint(i)); j < 0 || x.ents[j].loc.row != int32(i) {
			t.Fatalf("key %d: entry %d", i, j)
		}
	}
	if j := x.find(h, "50"); j != -1 {
		t.Fatalf("absent key in a chain found at %d", j)
	}
}
