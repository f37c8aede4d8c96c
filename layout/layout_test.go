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

func TestParseBatchAppID(t *testing.T) {
	for _, tc := range []struct {
		sink, app, inst string
		ok              bool
	}{
		{"s", "s", "", true}, // the single-instance layout
		{"s", "s@pod-0", "pod-0", true},
		{"s", "s@", "", false},
		{"s", "s@a/b", "", false},
		{"s", "s@a@b", "", false},
		{"s", "s/t/0", "", false}, // an offset
		{"s", "s-redrive", "", false},
		{"s", "s-redrive@x", "", false},
	} {
		inst, ok := ParseBatchAppID(tc.sink, tc.app)
		if inst != tc.inst || ok != tc.ok {
			t.Errorf("ParseBatchAppID(%q, %q) = %q, %v", tc.sink, tc.app, inst, ok)
		}
		if tc.ok && BatchAppID(tc.sink, tc.inst) != tc.app {
			t.Errorf("BatchAppID(%q, %q) = %q, want %q", tc.sink, tc.inst, BatchAppID(tc.sink, tc.inst), tc.app)
		}
	}
}

func TestParseTrackerDomain(t *testing.T) {
	for _, tc := range []struct {
		sink, domain, topic string
		part                int32
		legacy, ok          bool
	}{
		{"s", "cdcsink.tracker.s", "", 0, true, true},
		{"s", "cdcsink.tracker.s/loja.public.orders/2", "loja.public.orders", 2, false, true},
		{"s", "cdcsink.tracker.s.x/t/2", "", 0, false, false}, // sink "s.x" is another sink
		{"s", "cdcsink.tracker.s/t/02", "", 0, false, false},
		{"s", "cdcsink.tracker.s/t", "", 0, false, false},
		{"s", "cdcsink.tracker.s2", "", 0, false, false},
		{"s", "delta.rowTracking", "", 0, false, false},
	} {
		topic, p, legacy, ok := ParseTrackerDomain(tc.sink, tc.domain)
		if topic != tc.topic || p != tc.part || legacy != tc.legacy || ok != tc.ok {
			t.Errorf("ParseTrackerDomain(%q, %q) = %q, %d, %v, %v", tc.sink, tc.domain, topic, p, legacy, ok)
		}
		if tc.ok && !tc.legacy && TrackerPartitionDomain(tc.sink, tc.topic, tc.part) != tc.domain {
			t.Errorf("TrackerPartitionDomain(%q, %q, %d) = %q", tc.sink, tc.topic, tc.part, TrackerPartitionDomain(tc.sink, tc.topic, tc.part))
		}
	}
}

// A successful parse of a batch appId or a tracker domain formats back to
// the same string.
func FuzzParseBatchAndTracker(f *testing.F) {
	f.Add("s", "s@pod-0")
	f.Add("s", "cdcsink.tracker.s/t/3")
	f.Add("s", "cdcsink.tracker.s")
	f.Fuzz(func(t *testing.T, sink, name string) {
		if inst, ok := ParseBatchAppID(sink, name); ok && BatchAppID(sink, inst) != name {
			t.Fatalf("ParseBatchAppID(%q, %q) = %q: formats back as %q", sink, name, inst, BatchAppID(sink, inst))
		}
		topic, p, legacy, ok := ParseTrackerDomain(sink, name)
		switch {
		case ok && legacy && name != TrackerDomain(sink):
			t.Fatalf("ParseTrackerDomain(%q, %q): legacy, but TrackerDomain is %q", sink, name, TrackerDomain(sink))
		case ok && !legacy && TrackerPartitionDomain(sink, topic, p) != name:
			t.Fatalf("ParseTrackerDomain(%q, %q) = %q, %d: formats back as %q", sink, name, topic, p, TrackerPartitionDomain(sink, topic, p))
		}
	})
}

func TestParsePartitionTag(t *testing.T) {
	for _, tc := range []struct {
		tag, topic string
		part       int32
		ok         bool
	}{
		{"loja.public.orders/3", "loja.public.orders", 3, true},
		{"t/0", "t", 0, true},
		{"t/2147483647", "t", 2147483647, true},
		{"a/b/1", "", 0, false}, // only Kafka names: no '/' in the topic
		{"/1", "", 0, false},
		{"t/", "", 0, false},
		{"t/01", "", 0, false},
		{"t/-1", "", 0, false},
		{"t/2147483648", "", 0, false},
		{"t", "", 0, false},
	} {
		topic, p, ok := ParsePartitionTag(tc.tag)
		if topic != tc.topic || p != tc.part || ok != tc.ok {
			t.Errorf("ParsePartitionTag(%q) = %q, %d, %v", tc.tag, topic, p, ok)
		}
		if tc.ok && PartitionTag(topic, p) != tc.tag {
			t.Errorf("PartitionTag(%q, %d) = %q", topic, p, PartitionTag(topic, p))
		}
	}
}

// A tag that parses formats back to itself.
func FuzzParsePartitionTag(f *testing.F) {
	f.Add("loja.public.orders/3")
	f.Add("t/01")
	f.Fuzz(func(t *testing.T, tag string) {
		topic, p, ok := ParsePartitionTag(tag)
		if ok && (PartitionTag(topic, p) != tag || p < 0 || topic == "") {
			t.Fatalf("ParsePartitionTag(%q) = %q, %d: formats back as %q", tag, topic, p, PartitionTag(topic, p))
		}
	})
}
