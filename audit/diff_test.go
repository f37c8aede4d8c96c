package audit

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestDiff(t *testing.T) {
	tmp := t.TempDir()
	a := filepath.Join(tmp, "a")
	apply(t, a, "s1", 3, upsert(1, "one", 1, 10), upsert(2, "two", 2, 11), upsert(3, "three", 3, 12))
	apply(t, a, "s1", 5, upsert(2, "two v2", 2, 20), del(3, 21))
	// Same content, other history and sink: metadata columns differ.
	same := filepath.Join(tmp, "same")
	apply(t, same, "s2", 2, upsert(1, "one", 1, 10), upsert(2, "two v2", 2, 20))
	// 1 changed, 2 deleted, 5 added.
	bad := filepath.Join(tmp, "bad")
	apply(t, bad, "s3", 3, upsert(1, "one", 9, 10), del(2, 20), upsert(5, "five", 5, 30))
	for _, d := range []string{a, same, bad} {
		if n, want := liveDeltaRS(t, d), map[string]int{a: 2, same: 2, bad: 2}[d]; n != want {
			t.Fatalf("delta-rs reads %d live rows of %s, want %d", n, d, want)
		}
	}

	tests := []struct {
		name          string
		a, b          string
		key           []string
		equal         bool
		onlyA, onlyB  []string
		differ        []KeyDiff
		liveA, liveB  int
		wantErrSubstr string
	}{
		{name: "rebuilt table is equal", a: a, b: same, equal: true, liveA: 2, liveB: 2},
		{name: "explicit key", a: a, b: same, key: []string{"id"}, equal: true, liveA: 2, liveB: 2},
		{name: "differences", a: a, b: bad, onlyA: []string{"[2]"}, onlyB: []string{"[5]"},
			differ: []KeyDiff{{"[1]", "qty: A=1 B=9"}}, liveA: 2, liveB: 2},
		{name: "unknown key column", a: a, b: same, key: []string{"nope"}, wantErrSubstr: `key column "nope" missing from A`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Diff(context.Background(), open(t, tc.a), open(t, tc.b), DiffOptions{Key: tc.key})
			if tc.wantErrSubstr != "" {
				var re *RequestError
				if !errors.As(err, &re) || !strings.Contains(err.Error(), tc.wantErrSubstr) {
					t.Fatalf("err = %v, want a RequestError containing %q", err, tc.wantErrSubstr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Equal() != tc.equal || !reflect.DeepEqual(r.OnlyInA, tc.onlyA) || !reflect.DeepEqual(r.OnlyInB, tc.onlyB) ||
				!reflect.DeepEqual(r.Differing, tc.differ) || r.A.Live != tc.liveA || r.B.Live != tc.liveB {
				t.Fatalf("report %+v", r)
			}
			if want := []string{"id", "name", "qty", "_cdc_deleted"}; !reflect.DeepEqual(r.Columns, want) {
				t.Fatalf("columns %v, want %v", r.Columns, want)
			}
		})
	}
}
