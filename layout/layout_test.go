package layout

import (
	"testing"
)

func TestParseOffsetAppID(t *testing.T) {
	for _, tc := range []struct {
		sink, app, topic string
		part             int32
		ok               bool
	}{
		{"s", "s/loja.public.orders/3", "loja.public.orders", 3, true},
		{"s", "s/a/b/0", "a/b", 0, true}, // a topic with a slash: the partition is the last part
		{"x/y", "x/y/t/12", "t", 12, true},
		{"s", "s", "", 0, false}, // the batch txn
		{"s", "s-redrive/t/1", "", 0, false},
		{"s", "s/t/", "", 0, false},
		{"s", "s/t/+1", "", 0, false},
		{"s", "s/t/-1", "", 0, false},
		{"s", "s/t/01", "", 0, false},
		{"s", "s/t/99999999999", "", 0, false},
		{"s", "s//1", "", 0, false},
	} {
		topic, p, ok := ParseOffsetAppID(tc.sink, tc.app)
		if topic != tc.topic || p != tc.part || ok != tc.ok {
			t.Errorf("ParseOffsetAppID(%q, %q) = %q, %d, %v", tc.sink, tc.app, topic, p, ok)
		}
		if tc.ok {
			if got := OffsetAppID(tc.sink, tc.topic, tc.part); got != tc.app {
				t.Errorf("OffsetAppID(%q, %q, %d) = %q, want %q", tc.sink, tc.topic, tc.part, got, tc.app)
			}
		}
	}
}

// Whatever the appId, a parse that succeeds is the exact inverse of
// OffsetAppID.
func FuzzParseOffsetAppID(f *testing.F) {
	f.Add("s", "s/loja.public.orders/3")
	f.Add("s", "s/a/b/0")
	f.Add("x/y", "x/y/t/12")
	f.Add("s", "s/t/-1")
	f.Fuzz(func(t *testing.T, sink, app string) {
		topic, p, ok := ParseOffsetAppID(sink, app)
		if !ok {
			return
		}
		if got := OffsetAppID(sink, topic, p); got != app || p < 0 || topic == "" {
			t.Fatalf("ParseOffsetAppID(%q, %q) = %q, %d: formats back as %q", sink, app, topic, p, got)
		}
	})
}

func TestIsMetaColumn(t *testing.T) {
	for name, want := range map[string]bool{ColDeleted: true, ColOffset: true, "_cdc_": false, "_cdc": false, "id": false, "x_cdc_y": false} {
		if got := IsMetaColumn(name); got != want {
			t.Errorf("IsMetaColumn(%q) = %v, want %v", name, got, want)
		}
	}
}
