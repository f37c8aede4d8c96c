package source

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
	"unicode/utf8"
)

// The kcat -J line format (one JSON object per line, as `kcat -C -J` prints it):
//
//	{"topic":"t","partition":0,"offset":42,"tstype":"create","ts":1700000000000,"broker":-1,
//	 "headers":["k1","v1","k2",null],"key":"k"|null,"payload":"v"|null}
//
// Extensions over kcat, so that any record round-trips byte for byte:
//   - key_b64 / payload_b64 (standard base64, padded) replace key / payload when the bytes are
//     not valid UTF-8. Exactly one of key / key_b64 may be present (same for payload).
//   - headers_b64 replaces headers when any header key or value is not valid UTF-8: the same
//     flat [k1,v1,...] array with every key and non-null value base64-encoded.
//   - A null header value (null in the array) is a Kafka null header value.
//
// Absent key/payload mean null. "broker" is written as -1 and ignored when read. Unknown fields
// are ignored (the quarantine file adds "error"). Timestamps have millisecond precision; ts < 0
// or no ts means "no timestamp" (zero time.Time). tstype "create" and "logappend" are kept,
// anything else reads as "" (unknown).

// LineDefaults fills fields a file line leaves out. A line without "topic" gets Topic (an
// error if Topic is empty too), without "partition" gets Partition, without "offset" gets
// Offset. FileReader passes the command-line default topic, partition 0 and the 0-based line
// index (line number − 1) as the offset.
type LineDefaults struct {
	Topic     string
	Partition int32
	Offset    int64

	// known is a topic the caller has (the last line's): a line naming it
	// shares its string rather than allocating another.
	known string
}

// kcatLine is the decoded shape of one line. Pointers distinguish absent/null from zero.
type kcatLine struct {
	Topic      *string   `json:"topic"`
	Partition  *int32    `json:"partition"`
	Offset     *int64    `json:"offset"`
	TsType     string    `json:"tstype"`
	Ts         *int64    `json:"ts"`
	Headers    []*string `json:"headers"`
	HeadersB64 []*string `json:"headers_b64"`
	Key        *string   `json:"key"`
	KeyB64     *string   `json:"key_b64"`
	Payload    *string   `json:"payload"`
	PayloadB64 *string   `json:"payload_b64"`
}

// ParseLine decodes one kcat -J line (without its newline; a trailing '\r' is tolerated) into
// a Record, filling missing coordinates from d. It returns an error for anything that is not a
// well-formed record line; it never panics.
func ParseLine(line []byte, d LineDefaults) (*Record, error) {
	line = bytes.TrimRight(line, "\r")
	var h lineHolder
	known := d.known
	if known == "" {
		known = d.Topic
	}
	l, key, payload, hs, hasHs, fast := parseFast(line, &h, known)
	if !fast {
		// into its own variable: l, which the fast path's members point
		// from into h, then stays on the stack with h
		sl := new(kcatLine)
		err := json.Unmarshal(line, sl)
		l = *sl
		if err != nil {
			return nil, fmt.Errorf("malformed kcat JSON line: %w", err)
		}
		if t := bytes.TrimLeft(line, " \t\n\r"); len(t) == 0 || t[0] != '{' {
			return nil, errors.New("malformed kcat JSON line: not a JSON object")
		}
	}
	rec := &Record{Topic: d.Topic, Partition: d.Partition, Offset: d.Offset}
	if l.Topic != nil {
		rec.Topic = *l.Topic
	}
	if rec.Topic == "" {
		return nil, errors.New("record has no topic and no default topic is set")
	}
	if l.Partition != nil {
		if *l.Partition < 0 {
			return nil, fmt.Errorf("negative partition %d", *l.Partition)
		}
		rec.Partition = *l.Partition
	}
	if l.Offset != nil {
		if *l.Offset < 0 {
			return nil, fmt.Errorf("negative offset %d", *l.Offset)
		}
		rec.Offset = *l.Offset
	}
	switch l.TsType { // the constants, not l's string: l (and h) then stay on the stack
	case "create":
		rec.TimestampType = "create"
	case "logappend":
		rec.TimestampType = "logappend"
	}
	if l.Ts != nil && *l.Ts >= 0 {
		rec.Timestamp = time.UnixMilli(*l.Ts).UTC()
	}
	var err error
	if rec.Key, err = pickBytes("key", l.Key, key, l.KeyB64); err != nil {
		return nil, err
	}
	if rec.Value, err = pickBytes("payload", l.Payload, payload, l.PayloadB64); err != nil {
		return nil, err
	}
	if (l.Headers != nil || hasHs) && l.HeadersB64 != nil {
		return nil, errors.New(`both "headers" and "headers_b64"`)
	}
	if hasHs && len(hs) > 0 {
		rec.Headers = hs
	} else if rec.Headers, err = parseHeaders(l.Headers, false); err != nil {
		return nil, err
	}
	if l.HeadersB64 != nil {
		if rec.Headers, err = parseHeaders(l.HeadersB64, true); err != nil {
			return nil, err
		}
	}
	return rec, nil
}

// pickBytes: the text member (text, or raw when parseFast read it) or the
// base64 one.
func pickBytes(name string, text *string, raw []byte, b64 *string) ([]byte, error) {
	switch {
	case (text != nil || raw != nil) && b64 != nil:
		return nil, fmt.Errorf("both %q and %q", name, name+"_b64")
	case raw != nil:
		return raw, nil
	case text != nil:
		return []byte(*text), nil
	case b64 != nil:
		b, err := decodeB64(*b64)
		if err != nil {
			return nil, fmt.Errorf("%s_b64: %w", name, err)
		}
		return b, nil
	}
	return nil, nil
}

func decodeB64(s string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		// Tolerate unpadded input.
		if b2, err2 := base64.RawStdEncoding.DecodeString(s); err2 == nil {
			return b2, nil
		}
		return nil, err
	}
	return b, nil
}

func parseHeaders(a []*string, b64 bool) ([]Header, error) {
	if len(a) == 0 {
		return nil, nil
	}
	if len(a)%2 != 0 {
		return nil, fmt.Errorf("headers array has odd length %d", len(a))
	}
	hs := make([]Header, 0, len(a)/2)
	for i := 0; i < len(a); i += 2 {
		if a[i] == nil {
			return nil, fmt.Errorf("header %d has a null key", i/2)
		}
		h := Header{Key: *a[i]}
		if b64 {
			k, err := decodeB64(*a[i])
			if err != nil {
				return nil, fmt.Errorf("header %d key: %w", i/2, err)
			}
			h.Key = string(k)
		}
		if v := a[i+1]; v != nil {
			if b64 {
				b, err := decodeB64(*v)
				if err != nil {
					return nil, fmt.Errorf("header %d value: %w", i/2, err)
				}
				h.Value = b
			} else {
				h.Value = []byte(*v)
			}
		}
		hs = append(hs, h)
	}
	return hs, nil
}

// Encode returns rec as one kcat -J JSON object, without a trailing newline. Key, value and
// headers use the text fields when their bytes are valid UTF-8 and the _b64 fields otherwise,
// so ParseLine(Encode(rec)) reproduces rec byte for byte (timestamps to the millisecond).
func Encode(rec *Record) []byte {
	return AppendJSON(make([]byte, 0, 128+len(rec.Key)+len(rec.Value)), rec)
}

// AppendJSON appends Encode(rec) to dst.
func AppendJSON(dst []byte, rec *Record) []byte {
	dst = append(dst, '{')
	dst = AppendJSONFields(dst, rec)
	return append(dst, '}')
}

// AppendJSONFields appends the members of rec's JSON object without the surrounding braces,
// for formats that extend the line with more members (the quarantine file adds "error").
func AppendJSONFields(dst []byte, rec *Record) []byte {
	dst = append(dst, `"topic":`...)
	dst = appendString(dst, rec.Topic)
	dst = append(dst, `,"partition":`...)
	dst = strconv.AppendInt(dst, int64(rec.Partition), 10)
	dst = append(dst, `,"offset":`...)
	dst = strconv.AppendInt(dst, rec.Offset, 10)
	if rec.TimestampType != "" {
		dst = append(dst, `,"tstype":`...)
		dst = appendString(dst, rec.TimestampType)
	}
	if !rec.Timestamp.IsZero() {
		dst = append(dst, `,"ts":`...)
		dst = strconv.AppendInt(dst, rec.Timestamp.UnixMilli(), 10)
	}
	dst = append(dst, `,"broker":-1`...)
	if len(rec.Headers) > 0 {
		text := true
		for _, h := range rec.Headers {
			if !utf8.ValidString(h.Key) || (h.Value != nil && !utf8.Valid(h.Value)) {
				text = false
				break
			}
		}
		if text {
			dst = append(dst, `,"headers":[`...)
		} else {
			dst = append(dst, `,"headers_b64":[`...)
		}
		for i, h := range rec.Headers {
			if i > 0 {
				dst = append(dst, ',')
			}
			if text {
				dst = appendString(dst, h.Key)
			} else {
				dst = appendB64(dst, []byte(h.Key))
			}
			dst = append(dst, ',')
			switch {
			case h.Value == nil:
				dst = append(dst, "null"...)
			case text:
				dst = appendString(dst, string(h.Value))
			default:
				dst = appendB64(dst, h.Value)
			}
		}
		dst = append(dst, ']')
	}
	dst = appendBytesField(dst, "key", rec.Key)
	dst = appendBytesField(dst, "payload", rec.Value)
	return dst
}

// WriteJSONLine writes Encode(rec) followed by '\n' to w.
func WriteJSONLine(w io.Writer, rec *Record) error {
	b := AppendJSON(make([]byte, 0, 129+len(rec.Key)+len(rec.Value)), rec)
	_, err := w.Write(append(b, '\n'))
	return err
}

func appendBytesField(dst []byte, name string, b []byte) []byte {
	switch {
	case b == nil:
		dst = append(dst, ',', '"')
		dst = append(dst, name...)
		return append(dst, `":null`...)
	case utf8.Valid(b):
		dst = append(dst, ',', '"')
		dst = append(dst, name...)
		dst = append(dst, '"', ':')
		return appendString(dst, string(b))
	default:
		dst = append(dst, ',', '"')
		dst = append(dst, name...)
		dst = append(dst, `_b64":`...)
		return appendB64(dst, b)
	}
}

func appendB64(dst []byte, b []byte) []byte {
	dst = append(dst, '"')
	dst = base64.StdEncoding.AppendEncode(dst, b)
	return append(dst, '"')
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD (callers use the _b64
// forms for bytes that are not valid UTF-8).
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
