package source

import (
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/cdcsink/cdc-sink/internal/jsonstr"
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
// copied): a third of replay's CPU was this line parsing. The text
// "headers" member is read straight into hs (hasHs: present, not null),
// not into l.Headers: four allocations a header fewer.
//
// The scalar members point into h (the caller's, so that they need no
// allocation of their own), and a topic equal to known is known itself: a
// file's lines mostly name one topic.
func parseFast(line []byte, h *lineHolder, known string) (l kcatLine, key, payload []byte, hs []Header, hasHs, ok bool) {
	p := fastParser{b: line} // h is kept apart: p's contents escape (scan's pool)
	p.ws()
	if !p.eat('{') {
		return l, nil, nil, nil, false, false
	}
	var seen uint16
	p.ws()
	if p.eat('}') {
		return l, nil, nil, nil, false, p.end()
	}
	for {
		p.ws()
		name, ok := p.plainString()
		if !ok {
			return l, nil, nil, nil, false, false
		}
		p.ws()
		if !p.eat(':') {
			return l, nil, nil, nil, false, false
		}
		p.ws()
		field := fieldIndex(name)
		if field < 0 {
			if foldsToField(name) || !p.skipScalar() {
				return l, nil, nil, nil, false, false
			}
		} else {
			if seen&(1<<field) != 0 {
				return l, nil, nil, nil, false, false
			}
			seen |= 1 << field
			if !p.member(field, &l, h, known, &key, &payload) {
				return l, nil, nil, nil, false, false
			}
		}
		p.ws()
		if p.eat(',') {
			continue
		}
		if p.eat('}') {
			// pointed at here, not in member: a pointer stored through
			// a pointer parameter escapes, and h with it
			if p.got&(1<<fTopic) != 0 {
				l.Topic = &h.topic
			}
			if p.got&(1<<fPartition) != 0 {
				l.Partition = &h.partition
			}
			if p.got&(1<<fOffset) != 0 {
				l.Offset = &h.offset
			}
			if p.got&(1<<fTs) != 0 {
				l.Ts = &h.ts
			}
			return l, key, payload, p.hs, p.hasHs, p.end()
		}
		return l, nil, nil, nil, false, false
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
	b     []byte
	i     int
	hs    []Header
	hasHs bool
	got   uint16 // the scalar members read into the holder (bits by field)
}

// lineHolder holds the scalar members parseFast reads, for kcatLine's
// pointers to point at.
type lineHolder struct {
	topic     string
	partition int32
	offset    int64
	ts        int64
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

// strScratch holds the buffers str unescapes into before the string's
// length is known; the result is then copied out at its exact size, since
// records keep it for a whole batch.
var strScratch = sync.Pool{New: func() any { return new([]byte) }}

// str reads a string value, unescaped into a new slice.
func (p *fastParser) str() ([]byte, bool) {
	v, sp, ok := p.scan()
	if !ok {
		return nil, false
	}
	s := append([]byte(nil), v...)
	release(sp, v)
	return s, true
}

// release returns scan's scratch buffer, if it used one.
func release(sp *[]byte, v []byte) {
	if sp != nil {
		*sp = v[:0]
		strScratch.Put(sp)
	}
}

// scan reads a string value in one pass and returns its unescaped bytes: a
// view into the line, or, when the string has escapes, into a scratch buffer
// (sp, for release once the bytes are copied). A kcat line's payload is JSON
// escaped into a string, an escaped quote every few bytes: finding the end
// first, then checking the bytes, then unescaping was a fifth of a
// bootstrap's CPU (bench/README.md).
func (p *fastParser) scan() (v []byte, sp *[]byte, ok bool) {
	if !p.eat('"') {
		return nil, nil, false
	}
	b, i := p.b, p.i
	start := i     // the plain bytes not yet copied
	var out []byte // with sp: the unescaped bytes so far
	hi := false
	for {
		i = jsonstr.Plain(b, i)
		if i == len(b) {
			return nil, nil, false
		}
		switch c := b[i]; {
		case c == '"':
			v = b[start:i]
			if sp != nil {
				out = append(out, v...)
				v = out
			}
			p.i = i + 1
			if hi && !utf8.Valid(v) {
				release(sp, v)
				return nil, nil, false // encoding/json replaces invalid bytes with U+FFFD
			}
			return v, sp, true
		case c == '\\':
			if sp == nil {
				sp = strScratch.Get().(*[]byte)
				out = (*sp)[:0]
			}
			out = append(out, b[start:i]...)
			if i++; i == len(b) {
				return nil, nil, false
			}
			switch b[i] {
			case '"', '\\', '/':
				out = append(out, b[i])
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
				v, ok := hex4(b[i+1:])
				if !ok || (v >= 0xD800 && v < 0xE000) {
					return nil, nil, false // surrogates: encoding/json's rules
				}
				out = utf8.AppendRune(out, v)
				i += 4
			default:
				return nil, nil, false
			}
			i++
			start = i
		case c < 0x20:
			return nil, nil, false
		default:
			hi = true
			i++
		}
	}
}

// hex4 reads the four hex digits of a \u escape.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var v rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		v = v<<4 | rune(c)
	}
	return v, true
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
	v, sp, ok := p.scan()
	if !ok {
		return nil, false
	}
	s := string(v)
	release(sp, v)
	return &s, true
}

func (p *fastParser) member(field int, l *kcatLine, h *lineHolder, known string, key, payload *[]byte) bool {
	var ok bool
	switch field {
	case fTopic:
		if p.null() {
			return true
		}
		var v []byte
		var sp *[]byte
		if v, sp, ok = p.scan(); ok {
			if string(v) == known {
				h.topic = known
			} else {
				h.topic = string(v)
			}
			release(sp, v)
			p.got |= 1 << fTopic
		}
	case fKeyB64:
		l.KeyB64, ok = p.optString()
	case fPayloadB64:
		l.PayloadB64, ok = p.optString()
	case fTsType:
		if p.null() {
			return true
		}
		var v []byte
		var sp *[]byte
		if v, sp, ok = p.scan(); ok {
			switch string(v) {
			case "create":
				l.TsType = "create"
			case "logappend":
				l.TsType = "logappend"
			default:
				l.TsType = string(v)
			}
			release(sp, v)
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
			h.partition = int32(v)
			p.got |= 1 << fPartition
		}
	case fOffset, fTs:
		if p.null() {
			return true
		}
		var v int64
		if v, ok = p.integer(-1<<63, 1<<63-1); ok {
			if field == fOffset {
				h.offset = v
				p.got |= 1 << fOffset
			} else {
				h.ts = v
				p.got |= 1 << fTs
			}
		}
	case fHeaders:
		ok = p.headers()
	case fHeadersB64:
		l.HeadersB64, ok = p.strings()
	}
	return ok
}

// headers reads null or the "headers" array into p.hs: key, value pairs,
// the keys strings and the values strings or null. Anything parseHeaders
// would refuse (an odd length, a null key) declines, for its error. The
// keys and values are gathered first and copied out in one string, one
// byte slice and one []Header: two allocations a header were 14% of a
// file replay's (bench/README.md, *Allocations on the write path*).
func (p *fastParser) headers() bool {
	if p.null() {
		return true
	}
	if !p.eat('[') {
		return false
	}
	p.hasHs = true
	p.ws()
	if p.eat(']') {
		return true
	}
	type span struct {
		k, v int32 // ends in the key and value buffers
		null bool
	}
	// on the stack while they fit (Debezium's few headers do): a pooled
	// buffer would cost as much as the allocations saved
	var spanArr [8]span
	var kArr, vArr [512]byte
	spans, kb, vb := spanArr[:0], kArr[:0], vArr[:0]
	for {
		p.ws()
		k, sp, ok := p.scan()
		if !ok {
			return false // also a null key
		}
		kb = append(kb, k...)
		release(sp, k)
		p.ws()
		if !p.eat(',') {
			return false
		}
		p.ws()
		null := p.null()
		if !null {
			v, sp, ok := p.scan()
			if !ok {
				return false
			}
			vb = append(vb, v...)
			release(sp, v)
		}
		if len(kb) > 1<<30 || len(vb) > 1<<30 {
			return false // spans are int32; encoding/json decides
		}
		spans = append(spans, span{k: int32(len(kb)), v: int32(len(vb)), null: null})
		p.ws()
		if p.eat(',') {
			continue
		}
		if !p.eat(']') {
			return false
		}
		break
	}
	keys := string(kb)
	vals := make([]byte, len(vb)) // never nil: "" is empty, not null
	copy(vals, vb)
	p.hs = make([]Header, len(spans))
	var k0, v0 int32
	for i, s := range spans {
		p.hs[i].Key = keys[k0:s.k]
		if !s.null {
			p.hs[i].Value = vals[v0:s.v:s.v]
		}
		k0, v0 = s.k, s.v
	}
	return true
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
