// Package source reads Kafka records, from a broker or from a kcat -J file,
// and hands them on unchanged. It owns no decoding.
package source

import "time"

// Header is one Kafka record header. A nil Value is a null header value.
type Header struct {
	Key   string
	Value []byte
}

// Record is one Kafka record exactly as it was read. A nil Key or Value is a
// Kafka null (a nil Value is a tombstone); an empty non-nil slice is an empty
// byte string. Nothing downstream may modify the slices: quarantine writes them
// back byte-for-byte, and decoded values are views of them (envelope.Row).
// A source never changes or reuses the slices of a record it returned.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   []Header
	Timestamp time.Time
	// TimestampType is kcat's tstype: "create", "logappend" or "" when unknown.
	TimestampType string
}

// Header returns the value of the last header named key, and whether it exists.
func (r *Record) Header(key string) ([]byte, bool) {
	for i := len(r.Headers) - 1; i >= 0; i-- {
		if r.Headers[i].Key == key {
			return r.Headers[i].Value, true
		}
	}
	return nil, false
}
