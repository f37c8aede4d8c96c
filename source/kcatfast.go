package source

import (
	"bytes"
	"strconv"
	"unicode/utf8"
)

// parseFast decodes the common shape of a kcat -J line in one pass: the
// members ParseLine knows, each at most once, with plain values (strings
// whose escapes are not surrogates, integers, null) and unknown members whose
// value is a scalar. Anything else — and anything encoding/json would read
// differently (case-folded member names, invalid UTF-8, duplicates) — makes
// it decline (ok false) and ParseLine falls back to encoding/json, which
// stays the definition of the format: FuzzParseFastMatchesJSON holds the
// two equal. Key and payload bytes are unescaped once, straight into the
// record's slices (encoding/json unescapes into a string that is then
// copied): a third of replay's CPU was this line parsing.
func parseFast(line []byte) (l kcatLine, key, payload []byte, ok bool) {
	p := fastParser{b: line}
	p.ws()
	if !p.eat('{') {
		return l, nil, nil, false
	}
	var seen uint16
	p.ws()
	if p.eat('}') {
		return l, nil, nil, p.end()
	}
	for {
		p.ws()
		name, ok := p.plainString()
		if !ok {
			return l, nil, nil, false
		}
		p.ws()
		if !p.eat(':') {
			return l, nil, nil, false
		}
		p.ws()
		field := fieldIndex(name)
		if field < 0 {
			if foldsToField(name) || !p.skipScalar() {
				return l, nil, nil, false
			}
		} else {
			if seen&(1<<field) != 0 {
				return l, nil, nil, false
			}
			seen |= 1 << field
			if !p.member(field, &l, &key, &payload) {
				return l, nil, nil, false
			}
		}
		p.ws()
		if p.eat(',') {
			continue
		}
		if p.eat('}') {
			return l, key, payload, p.end()
		}
		return l, nil, nil, false
	}
}

const (
	fTopic = iota
	fPartition
	fOffset
	fTsType
	fTs
	fHeaders
	fHeadersB64
	fKey
	fKeyB64
	fPayload
	fPayloadB64
)

var fieldNames = [...]string{"topic", "partition", "offset", "tstype", "ts", "headers", "headers_b64", "key", "key_b64", "payload", "payload_b64"}

func fieldIndex(name []byte) int {
	for i, n := range fieldNames {
		if string(name) == n {
			return i
		}
	}
	return -1
}

// foldsToField: encoding/json matches member names case-insensitively, with
// Unicode folding (the Kelvin sign folds to k): a name that might match is
// left to it.
func foldsToField(name []byte) bool {
	for _, c := range name {
		if c >= 0x80 {
			return true
		}
	}
	for _, n := range fieldNames {
		if len(n) != len(name) {
			continue
		}
		eq := true
		for i, c := range name {
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != n[i] {
				eq = false
				break
			}
		}
		if eq {
			return true
		}
	}
	return false
}

type fastParser struct {
	b []byte
	i int
}

func (p *fastParser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *fastParser) eat(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *fastParser) end() bool {
	p.ws()
	return p.i == len(p.b)
}

func (p *fastParser) null() bool {
	if len(p.b)-p.i >= 4 && string(p.b[p.i:p.i+4]) == "null" {
		p.i += 4
		return true
	}
	return false
}

// plainString reads a string without escapes and with valid UTF-8 (member
// names), returning a view into the line.
func (p *fastParser) plainString() ([]byte, bool) {
	if !p.eat('"') {
		return nil, false
	}
	start := p.i
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			s := p.b[start:p.i]
			p.i++
			return s, utf8.Valid(s)
		case c == '\\' || c < 0x20:
			return nil, false
		}
		p.i++
	}
	return nil, false
}

// str reads a string value, unescaped into a new slice.
func (p *fastParser) str() ([]byte, bool) {
	if !p.eat('"') {
		return nil, false
	}
	start := p.i
	// the end: the first quote not escaped by an odd run of backslashes
	for {
		j := bytes.IndexByte(p.b[p.i:], '"')
		if j < 0 {
			return nil, false
		}
		p.i += j
		n := 0
		for k := p.i - 1; k >= start && p.b[k] == '\\'; k-- {
			n++
		}
		if n%2 == 0 {
			break
		}
		p.i++
	}
	raw := p.b[start:p.i]
	p.i++
	hi := false
	for _, c := range raw {
		if c < 0x20 {
			return nil, false
		}
		hi = hi || c >= 0x80
	}
	if hi && !utf8.Valid(raw) {
		return nil, false // encoding/json replaces invalid bytes with U+FFFD
	}
	j := bytes.IndexByte(raw, '\\')
	if j < 0 {
		return append([]byte(nil), raw...), true
	}
	out := make([]byte, 0, len(raw))
	for j >= 0 {
		out = append(out, raw[:j]...)
		raw = raw[j+1:]
		if len(raw) == 0 {
			return nil, false
		}
		switch raw[0] {
		case '"', '\\', '/':
			out = append(out, raw[0])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			if len(raw) < 5 {
				return nil, false
			}
			v, err := strconv.ParseUint(string(raw[1:5]), 16, 32)
			if err != nil || (v >= 0xD800 && v < 0xE000) {
				return nil, false // surrogates: encoding/json's rules
			}
			out = utf8.AppendRune(out, rune(v))
			raw = raw[4:]
		default:
			return nil, false
		}
		raw = raw[1:]
		j = bytes.IndexByte(raw, '\\')
	}
	return append(out, raw...), true
}

// integer reads a JSON integer in [lo, hi].
func (p *fastParser) integer(lo, hi int64) (int64, bool) {
	start := p.i
	p.eat('-')
	digits := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	if p.i == digits || (p.b[digits] == '0' && p.i-digits > 1) {
		return 0, false
	}
	if p.i < len(p.b) {
		switch p.b[p.i] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	v, err := strconv.ParseInt(string(p.b[start:p.i]), 10, 64)
	if err != nil || v < lo || v > hi {
		return 0, false
	}
	return v, true
}

// skipScalar skips a string, number, true, false or null.
func (p *fastParser) skipScalar() bool {
	if p.i >= len(p.b) {
		return false
	}
	switch c := p.b[p.i]; {
	case c == '"':
		_, ok := p.str()
		return ok
	case c == '-' || (c >= '0' && c <= '9'):
		_, ok := p.integer(-1<<63, 1<<63-1)
		return ok
	case c == 'n':
		return p.null()
	case c == 't' && len(p.b)-p.i >= 4 && string(p.b[p.i:p.i+4]) == "true":
		p.i += 4
		return true
	case c == 'f' && len(p.b)-p.i >= 5 && string(p.b[p.i:p.i+5]) == "false":
		p.i += 5
		return true
	}
	return false
}

func (p *fastParser) optString() (*string, bool) {
	if p.null() {
		return nil, true
	}
	b, ok := p.str()
	if !ok {
		return nil, false
	}
	s := string(b)
	return &s, true
}

func (p *fastParser) member(field int, l *kcatLine, key, payload *[]byte) bool {
	var ok bool
	switch field {
	case fTopic:
		l.Topic, ok = p.optString()
	case fKeyB64:
		l.KeyB64, ok = p.optString()
	case fPayloadB64:
		l.PayloadB64, ok = p.optString()
	case fTsType:
		var s *string
		if s, ok = p.optString(); s != nil {
			l.TsType = *s
		}
	case fKey, fPayload:
		dst := key
		if field == fPayload {
			dst = payload
		}
		if p.null() {
			return true
		}
		*dst, ok = p.str()
		if ok && *dst == nil {
			*dst = []byte{} // present and empty, not null
		}
	case fPartition:
		if p.null() {
			return true
		}
		var v int64
		if v, ok = p.integer(-1<<31, 1<<31-1); ok {
			x := int32(v)
			l.Partition = &x
		}
	case fOffset, fTs:
		if p.null() {
			return true
		}
		var v int64
		if v, ok = p.integer(-1<<63, 1<<63-1); ok {
			if field == fOffset {
				l.Offset = &v
			} else {
				l.Ts = &v
			}
		}
	case fHeaders, fHeadersB64:
		var a []*string
		if a, ok = p.strings(); ok {
			if field == fHeaders {
				l.Headers = a
			} else {
				l.HeadersB64 = a
			}
		}
	}
	return ok
}

// strings reads null or an array of strings and nulls.
func (p *fastParser) strings() ([]*string, bool) {
	if p.null() {
		return nil, true
	}
	if !p.eat('[') {
		return nil, false
	}
	a := []*string{}
	p.ws()
	if p.eat(']') {
		return a, true
	}
	for {
		p.ws()
		s, ok := p.optString()
		if !ok {
			return nil, false
		}
		a = append(a, s)
		p.ws()
		if p.eat(',') {
			continue
		}
		return a, p.eat(']')
	}
}
