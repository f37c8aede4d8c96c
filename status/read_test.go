package status

import (
	"fmt"
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
		{"s", "s", "", 0, false},         // the batch txn
		{"s", "s-redrive/t/1", "", 0, false},
		{"s", "s/t/", "", 0, false},
		{"s", "s/t/+1", "", 0, false},
		{"s", "s/t/01", "", 0, false},
		{"s", "s/t/99999999999", "", 0, false},
		{"s", "s//1", "", 0, false},
	} {
		topic, p, ok := parseOffsetAppID(tc.sink, tc.app)
		if topic != tc.topic || p != tc.part || ok != tc.ok {
			t.Errorf("parseOffsetAppID(%q, %q) = %q, %d, %v", tc.sink, tc.app, topic, p, ok)
		}
	}
}

// Whatever the appId, a parse that succeeds is the exact inverse of how
// merge formats it.
func FuzzParseOffsetAppID(f *testing.F) {
	f.Add("s", "s/loja.public.orders/3")
	f.Add("s", "s/a/b/0")
	f.Add("x/y", "x/y/t/12")
	f.Add("s", "s/t/-1")
	f.Fuzz(func(t *testing.T, sink, app string) {
		topic, p, ok := parseOffsetAppID(sink, app)
		if !ok {
			return
		}
		if got := fmt.Sprintf("%s/%s/%d", sink, topic, p); got != app || p < 0 || topic == "" {
			t.Fatalf("parseOffsetAppID(%q, %q) = %q, %d: formats back as %q", sink, app, topic, p, got)
		}
	})
}
