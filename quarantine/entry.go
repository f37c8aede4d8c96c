package quarantine

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cdcsink/cdc-sink/source"
)

// Entry is one quarantined record: the original record, untouched, and why it was rejected.
type Entry struct {
	// Record is the original record (coordinates, key, value, headers, timestamp). Writers
	// never modify it.
	Record *source.Record
	// Reason is the documented class of the failure.
	Reason Reason
	// Message is the human-readable detail (the *Error message).
	Message string
	// Sink is the name of the sink that rejected the record.
	Sink string
	// BatchID is the micro-batch the record belonged to.
	BatchID int64
	// Rule is the quality rule that rejected the record (Reason
	// RuleViolation); empty otherwise.
	Rule string
	// Version is the source version (versioning.Version.String()) the sink
	// gave the change, when it got that far (rule violations); a redrive
	// applies the change with it, so the version guard judges it as the
	// original change. Empty for records that were never versioned.
	Version string
	// Time is when the record was quarantined; writers use the time of Write when it is zero.
	Time time.Time
	// At is set by readers: where the entry was read from, "topic/partition@offset" for the
	// quarantine topic or "file:line" for a quarantine file. Writers ignore it.
	At string
}

// The headers a Kafka quarantine record carries after the original record's headers, always
// all of them and in this order (HeaderNames). Numbers are decimal; times are RFC 3339 with
// nanoseconds in UTC (source timestamp empty when the record had none).
const (
	HeaderReason          = "cdc-sink.reason"
	HeaderMessage         = "cdc-sink.message"
	HeaderSourceTopic     = "cdc-sink.source.topic"
	HeaderSourcePartition = "cdc-sink.source.partition"
	HeaderSourceOffset    = "cdc-sink.source.offset"
	HeaderSourceTimestamp = "cdc-sink.source.timestamp"
	HeaderSink            = "cdc-sink.sink"
	HeaderBatch           = "cdc-sink.batch"
	HeaderTime            = "cdc-sink.time"
	// HeaderRule and HeaderVersion follow the block (HeaderNames), in this
	// order, only when Entry.Rule / Entry.Version are set.
	HeaderRule    = "cdc-sink.rule"
	HeaderVersion = "cdc-sink.version"
)

// HeaderNames lists the quarantine headers in the order they are appended. Readers strip
// exactly this trailing block, so original headers are returned byte for byte even if they
// happen to use the same names.
var HeaderNames = [...]string{HeaderReason, HeaderMessage, HeaderSourceTopic,
	HeaderSourcePartition, HeaderSourceOffset, HeaderSourceTimestamp, HeaderSink, HeaderBatch,
	HeaderTime}

// Writer durably stores quarantine entries.
type Writer interface {
	// Write returns nil only after every entry is durably acknowledged (Kafka: acks=all;
	// file: fsync). On error some entries may have been stored anyway, so a retry can
	// duplicate them (at-least-once); the caller must not advance past these records.
	// Errors that a retry may fix satisfy IsTransient.
	Write(ctx context.Context, entries []Entry) error
	// Close releases the writer.
	io.Closer
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	return time.Parse(time.RFC3339Nano, s)
}

// appendHeaders returns the original headers followed by the quarantine headers of e.
func (e *Entry) appendHeaders() []source.Header {
	r := e.Record
	hs := make([]source.Header, 0, len(r.Headers)+len(HeaderNames))
	hs = append(hs, r.Headers...)
	vals := [...]string{string(e.Reason), e.Message, r.Topic,
		strconv.FormatInt(int64(r.Partition), 10), strconv.FormatInt(r.Offset, 10),
		formatTime(r.Timestamp), e.Sink, strconv.FormatInt(e.BatchID, 10), formatTime(e.Time)}
	for i, n := range HeaderNames {
		hs = append(hs, source.Header{Key: n, Value: []byte(vals[i])})
	}
	if e.Rule != "" {
		hs = append(hs, source.Header{Key: HeaderRule, Value: []byte(e.Rule)})
	}
	if e.Version != "" {
		hs = append(hs, source.Header{Key: HeaderVersion, Value: []byte(e.Version)})
	}
	return hs
}

// entryFromHeaders rebuilds an Entry from a quarantine record's key, value and headers.
func entryFromHeaders(key, value []byte, hs []source.Header) (Entry, error) {
	// The block ends with HeaderTime; the optional headers after it are ours
	// (the original record's headers all come before the block).
	var rule, version string
	if k := len(hs); k > len(HeaderNames) && hs[k-1].Key == HeaderVersion {
		version, hs = string(hs[k-1].Value), hs[:k-1]
	}
	if k := len(hs); k > len(HeaderNames) && hs[k-1].Key == HeaderRule && hs[k-2].Key == HeaderTime {
		rule, hs = string(hs[k-1].Value), hs[:k-1]
	}
	if version != "" && hs[len(hs)-1].Key != HeaderTime {
		return Entry{}, fmt.Errorf("not a quarantine record: %s after %q, want after %q", HeaderVersion, hs[len(hs)-1].Key, HeaderTime)
	}
	n := len(hs) - len(HeaderNames)
	if n < 0 {
		return Entry{}, fmt.Errorf("not a quarantine record: %d headers, want at least %d", len(hs), len(HeaderNames))
	}
	v := make(map[string]string, len(HeaderNames))
	for i, name := range HeaderNames {
		h := hs[n+i]
		if h.Key != name {
			return Entry{}, fmt.Errorf("not a quarantine record: header %d is %q, want %q", n+i, h.Key, name)
		}
		v[name] = string(h.Value)
	}
	rec := &source.Record{Topic: v[HeaderSourceTopic], Key: key, Value: value}
	if n > 0 {
		rec.Headers = hs[:n:n]
	}
	p, err := strconv.ParseInt(v[HeaderSourcePartition], 10, 32)
	if err != nil {
		return Entry{}, fmt.Errorf("%s: %w", HeaderSourcePartition, err)
	}
	rec.Partition = int32(p)
	if rec.Offset, err = strconv.ParseInt(v[HeaderSourceOffset], 10, 64); err != nil {
		return Entry{}, fmt.Errorf("%s: %w", HeaderSourceOffset, err)
	}
	if rec.Timestamp, err = parseTime(v[HeaderSourceTimestamp]); err != nil {
		return Entry{}, fmt.Errorf("%s: %w", HeaderSourceTimestamp, err)
	}
	e := Entry{Record: rec, Reason: Reason(v[HeaderReason]), Message: v[HeaderMessage], Sink: v[HeaderSink], Rule: rule, Version: version}
	if e.BatchID, err = strconv.ParseInt(v[HeaderBatch], 10, 64); err != nil {
		return Entry{}, fmt.Errorf("%s: %w", HeaderBatch, err)
	}
	if e.Time, err = parseTime(v[HeaderTime]); err != nil {
		return Entry{}, fmt.Errorf("%s: %w", HeaderTime, err)
	}
	return e, nil
}

// OffsetRange selects original records by coordinates: Topic ("" = any), Partition (-1 = any)
// and offsets in [From, To) (To ≤ 0 = no upper bound).
type OffsetRange struct {
	Topic     string
	Partition int32
	From, To  int64
}

// Contains reports whether r lies in the range.
func (o OffsetRange) Contains(r *source.Record) bool {
	return (o.Topic == "" || o.Topic == r.Topic) &&
		(o.Partition < 0 || o.Partition == r.Partition) &&
		r.Offset >= o.From && (o.To <= 0 || r.Offset < o.To)
}

// ParseOffsetRange parses the CLI form "topic[/partition][@from[-to]]": "orders",
// "orders/3", "orders/3@100-200" (offsets 100..199), "orders@100-" (100 and later),
// "orders/3@42" (just offset 42). An empty topic ("/3@5") matches any topic.
func ParseOffsetRange(s string) (OffsetRange, error) {
	o := OffsetRange{Partition: -1}
	rest := s
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		span := rest[i+1:]
		rest = rest[:i]
		from, to, dash := strings.Cut(span, "-")
		var err error
		if o.From, err = strconv.ParseInt(from, 10, 64); err != nil || o.From < 0 {
			return o, fmt.Errorf("offset range %q: bad start offset %q", s, from)
		}
		switch {
		case !dash:
			o.To = o.From + 1
		case to != "":
			if o.To, err = strconv.ParseInt(to, 10, 64); err != nil || o.To <= o.From {
				return o, fmt.Errorf("offset range %q: bad end offset %q", s, to)
			}
		}
	}
	if i := strings.LastIndexByte(rest, '/'); i >= 0 {
		p, err := strconv.ParseInt(rest[i+1:], 10, 32)
		if err != nil || p < 0 {
			return o, fmt.Errorf("offset range %q: bad partition %q", s, rest[i+1:])
		}
		o.Partition = int32(p)
		rest = rest[:i]
	}
	o.Topic = rest
	return o, nil
}

// Filter selects entries for audit and redrive. Empty fields select everything; the entry
// must match every non-empty field (and any one value within a field).
type Filter struct {
	Reasons []Reason
	// Topics are source topics (one per table).
	Topics []string
	// Sinks are sink names.
	Sinks []string
	// Since and Until bound Entry.Time (quarantine time) to [Since, Until); zero = unbounded.
	Since, Until time.Time
	// Offsets select original coordinates; an entry matches if any range contains it.
	Offsets []OffsetRange
}

// Match reports whether e passes the filter.
func (f *Filter) Match(e *Entry) bool {
	if len(f.Reasons) > 0 && !contains(f.Reasons, e.Reason) {
		return false
	}
	if len(f.Topics) > 0 && (e.Record == nil || !contains(f.Topics, e.Record.Topic)) {
		return false
	}
	if len(f.Sinks) > 0 && !contains(f.Sinks, e.Sink) {
		return false
	}
	if !f.Since.IsZero() && e.Time.Before(f.Since) {
		return false
	}
	if !f.Until.IsZero() && !e.Time.Before(f.Until) {
		return false
	}
	if len(f.Offsets) > 0 {
		if e.Record == nil {
			return false
		}
		for _, o := range f.Offsets {
			if o.Contains(e.Record) {
				return true
			}
		}
		return false
	}
	return true
}

func contains[T comparable](s []T, v T) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// Apply returns the entries that match f, in their original order.
func (f *Filter) Apply(entries []Entry) []Entry {
	var out []Entry
	for i := range entries {
		if f.Match(&entries[i]) {
			out = append(out, entries[i])
		}
	}
	return out
}

// Summary counts quarantine entries.
type Summary struct {
	Total    int
	ByReason map[Reason]int
	// ByTopic counts by source topic (one per table).
	ByTopic map[string]int
	// ByHour counts by Entry.Time truncated to the hour, in UTC.
	ByHour map[time.Time]int
	// ByRule counts rule violations (Reason RuleViolation) by rule name.
	ByRule map[string]int
}

// Stats counts entries by reason, by source topic and by hour of quarantine time.
func Stats(entries []Entry) Summary {
	s := Summary{ByReason: map[Reason]int{}, ByTopic: map[string]int{}, ByHour: map[time.Time]int{}, ByRule: map[string]int{}}
	for i := range entries {
		e := &entries[i]
		s.Total++
		s.ByReason[e.Reason]++
		if e.Rule != "" {
			s.ByRule[e.Rule]++
		}
		if e.Record != nil {
			s.ByTopic[e.Record.Topic]++
		}
		s.ByHour[e.Time.UTC().Truncate(time.Hour)]++
	}
	return s
}

// Hours returns the keys of ByHour in chronological order.
func (s Summary) Hours() []time.Time {
	out := make([]time.Time, 0, len(s.ByHour))
	for h := range s.ByHour {
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}
