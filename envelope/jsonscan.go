package envelope

import (
	"encoding/base64"
	"math"
	"strconv"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"

	"github.com/cdcsink/cdc-sink/internal/jsonstr"
	"github.com/cdcsink/cdc-sink/quarantine"
)

// This file is the hand-rolled JSON scanner of the hot path. It walks the
// record bytes once, guided by a cached Connect schema where there is one,
// and never builds an intermediate tree. A string without escapes and a
// number are views into the record's bytes (sources never reuse or change
// them; the event keeps them alive as long as it is held); strings with
// escapes and decoded base64 go to a per-record arena, allocated on first
// need with room for the rest of the record (bench/README.md, *Decoded values
// as views of the record*).

// decodeErr is an error found while scanning; path segments are appended while
// the recursion unwinds (innermost first), so the success path pays nothing.
type decodeErr struct {
	reason quarantine.Reason
	off    int
	msg    string
	path   []string
}

func (e *decodeErr) Error() string { return e.msg }

func (e *decodeErr) at(seg string) *decodeErr {
	e.path = append(e.path, seg)
	return e
}

// pathString renders the unwound path outermost first: payload.after.tags[2].
func (e *decodeErr) pathString() string {
	s := ""
	for i := len(e.path) - 1; i >= 0; i-- {
		seg := e.path[i]
		if s != "" && (len(seg) == 0 || seg[0] != '[') {
			s += "."
		}
		s += seg
	}
	return s
}

// scanner is the state for one key or value.
type scanner struct {
	buf      []byte
	pos      int
	arena    []byte // append-only, nil until needed; unescaped strings are views into it
	depth    int
	maxDepth int
	intern   *interner // schemaless field names
	bx       boxes     // chunks the decoded values live in
	inKey    bool      // decoding a record key (shape prediction)
	field    string    // the field whose value is being decoded (shape prediction)
	st       *stacks   // the pooled holder of vstack and nstack
	vstack   []any     // pending array elements / object values
	nstack   []string  // pending schemaless object names
	// env receives the source and transaction blocks of a value read as an
	// envelope (envfast.go); nil for keys and when the record may be read
	// as a flattened row. envPlain allows the schemaless fast path, which
	// decodeJSON checks afterwards (envUsed); envSeen marks the blocks met.
	env      *Event
	envPlain bool
	envUsed  bool
	envSeen  uint8
}

func (s *scanner) fail(reason quarantine.Reason, format string) *decodeErr {
	return &decodeErr{reason: reason, off: s.pos, msg: format}
}

// mismatch reports a value of the wrong JSON kind for the declared type.
func (s *scanner) mismatch(want string) *decodeErr {
	got := "end of input"
	if s.pos < len(s.buf) {
		switch c := s.buf[s.pos]; {
		case c == '"':
			got = "string"
		case c == '{':
			got = "object"
		case c == '[':
			got = "array"
		case c == 't' || c == 'f':
			got = "boolean"
		case c == '-' || ('0' <= c && c <= '9'):
			got = "number"
		default:
			return s.syntax("value")
		}
	}
	return &decodeErr{reason: quarantine.TypeMismatch, off: s.pos, msg: "expected " + want + ", got " + got}
}

func (s *scanner) syntax(what string) *decodeErr {
	if s.pos >= len(s.buf) {
		return &decodeErr{reason: quarantine.MalformedJSON, off: s.pos, msg: "unexpected end of input, expected " + what}
	}
	return &decodeErr{reason: quarantine.MalformedJSON, off: s.pos,
		msg: "invalid character " + strconv.QuoteRune(rune(s.buf[s.pos])) + ", expected " + what}
}

func (s *scanner) ws() {
	for s.pos < len(s.buf) {
		switch s.buf[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// peek returns the next non-space byte (0 at end of input).
func (s *scanner) peek() byte {
	if s.pos < len(s.buf) && s.buf[s.pos] > ' ' {
		return s.buf[s.pos]
	}
	s.ws()
	if s.pos < len(s.buf) {
		return s.buf[s.pos]
	}
	return 0
}

func (s *scanner) consume(c byte, what string) *decodeErr {
	if s.peek() != c {
		return s.syntax(what)
	}
	s.pos++
	return nil
}

func (s *scanner) literal(lit string) bool {
	if len(s.buf)-s.pos >= len(lit) && string(s.buf[s.pos:s.pos+len(lit)]) == lit {
		s.pos += len(lit)
		return true
	}
	return false
}

func (s *scanner) push() *decodeErr {
	s.depth++
	if s.depth > s.maxDepth {
		return s.fail(quarantine.MalformedJSON, "nesting deeper than "+strconv.Itoa(s.maxDepth))
	}
	return nil
}

// stacks are the scratch stacks of a scanner, pooled between records (they
// are cleared before they go back).
type stacks struct {
	v []any
	n []string
}

var stackPool = sync.Pool{New: newStacks}

func newStacks() any { return &stacks{v: make([]any, 0, 64), n: make([]string, 0, 64)} }

// unpooledStacks is set only by allocation-counting tests: under -race
// sync.Pool drops a random quarter of what is put back, so a count that
// includes the pool varies from run to run.
var unpooledStacks bool

func (s *scanner) getStacks() {
	if unpooledStacks {
		s.st = newStacks().(*stacks)
	} else {
		s.st = stackPool.Get().(*stacks)
	}
	s.vstack, s.nstack = s.st.v[:0], s.st.n[:0]
}

func (s *scanner) putStacks() {
	st := s.st
	s.st = nil
	if st == nil || cap(s.vstack) == 0 || cap(s.vstack) > 1<<16 {
		return
	}
	// every push is popped and cleared where it is consumed; the holder is
	// reused so that returning the stacks allocates nothing
	st.v, st.n = s.vstack[:0], s.nstack[:0]
	if !unpooledStacks {
		stackPool.Put(st)
	}
	s.vstack, s.nstack = nil, nil
}

// ---- objects ----

// objStart consumes '{' and reports whether the object is empty (then '}' is consumed too).
func (s *scanner) objStart() (empty bool, err *decodeErr) {
	if err := s.consume('{', "object"); err != nil {
		return false, err
	}
	if s.peek() == '}' {
		s.pos++
		return true, nil
	}
	return false, nil
}

// objKey reads a member name and the following ':'. The returned slice is
// only valid until the next key is read (it may live in scratch).
func (s *scanner) objKey(scratch *[64]byte) ([]byte, *decodeErr) {
	if s.peek() != '"' {
		return nil, s.syntax("string (object key)")
	}
	s.pos++
	start := s.pos
	s.pos = jsonstr.Plain(s.buf, start)
	if s.pos == len(s.buf) {
		return nil, s.syntax("'\"' ending object key")
	}
	if s.buf[s.pos] == '"' {
		key := s.buf[start:s.pos]
		s.pos++
		if err := s.consume(':', "':' after object key"); err != nil {
			return nil, err
		}
		return key, nil
	}
	// slow path: an escape, a control character or non-ASCII; full string
	// decoding into scratch (or heap if long)
	s.pos = start - 1
	mark := len(s.arena)
	str, err := s.str()
	if err != nil {
		return nil, err
	}
	var key []byte
	if len(str) <= len(scratch) {
		key = append(scratch[:0], str...)
	} else {
		key = []byte(str)
	}
	s.arena = s.arena[:mark] // the key did not need to be kept
	if err := s.consume(':', "':' after object key"); err != nil {
		return nil, err
	}
	return key, nil
}

// objNext consumes ',' (more=true) or '}' (more=false).
func (s *scanner) objNext() (more bool, err *decodeErr) {
	switch s.peek() {
	case ',':
		s.pos++
		return true, nil
	case '}':
		s.pos++
		return false, nil
	}
	return false, s.syntax("',' or '}' in object")
}

// ---- strings ----

// str reads a JSON string: a view of the record, or of the arena when it has escapes.
func (s *scanner) str() (string, *decodeErr) {
	b, err := s.strBytes()
	if err != nil || len(b) == 0 {
		return "", err
	}
	return unsafe.String(&b[0], len(b)), nil
}

// strBytes reads a JSON string (unescaped, UTF-8 validated): a view of the
// record without escapes, else into the arena.
func (s *scanner) strBytes() ([]byte, *decodeErr) {
	if s.peek() != '"' {
		return nil, s.syntax("string")
	}
	s.pos++
	start := s.pos
	buf := s.buf
	i := jsonstr.Plain(buf, s.pos)
	if i < len(buf) && buf[i] == '"' { // fast path: plain ASCII, no escapes
		s.pos = i + 1
		return buf[start:i:i], nil
	}
	s.room(len(buf) - start)
	mark := len(s.arena)
	s.arena = append(s.arena, buf[start:i]...)
	for {
		if i >= len(buf) {
			s.pos = i
			return nil, s.syntax("'\"' ending string")
		}
		c := buf[i]
		switch {
		case c == '"':
			s.pos = i + 1
			return s.arena[mark:len(s.arena):len(s.arena)], nil
		case c == '\\':
			if i+1 >= len(buf) {
				s.pos = i + 1
				return nil, s.syntax("escape sequence")
			}
			e := buf[i+1]
			i += 2
			switch e {
			case '"', '\\', '/':
				s.arena = append(s.arena, e)
			case 'b':
				s.arena = append(s.arena, '\b')
			case 'f':
				s.arena = append(s.arena, '\f')
			case 'n':
				s.arena = append(s.arena, '\n')
			case 'r':
				s.arena = append(s.arena, '\r')
			case 't':
				s.arena = append(s.arena, '\t')
			case 'u':
				r, ok := hex4(buf, i)
				if !ok {
					s.pos = i
					return nil, s.fail(quarantine.MalformedJSON, "invalid \\u escape")
				}
				i += 4
				if utf16.IsSurrogate(r) {
					r2 := rune(-1)
					if i+6 <= len(buf) && buf[i] == '\\' && buf[i+1] == 'u' {
						if x, ok := hex4(buf, i+2); ok {
							r2 = x
						}
					}
					if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
						r = dec
						i += 6
					} else {
						r = utf8.RuneError // lone surrogate, as encoding/json does
					}
				}
				s.arena = utf8.AppendRune(s.arena, r)
			default:
				s.pos = i - 1
				return nil, s.fail(quarantine.MalformedJSON, "invalid escape character "+strconv.QuoteRune(rune(e)))
			}
		case c < 0x20:
			s.pos = i
			return nil, s.fail(quarantine.MalformedJSON, "control character in string")
		case c < 0x80:
			s.arena = append(s.arena, c)
			i++
		default:
			r, size := utf8.DecodeRune(buf[i:])
			if r == utf8.RuneError && size <= 1 {
				s.pos = i
				return nil, s.fail(quarantine.MalformedJSON, "invalid UTF-8 in string")
			}
			s.arena = append(s.arena, buf[i:i+size]...)
			i += size
		}
		// copy the next run of plain bytes in one go
		j := jsonstr.Plain(buf, i)
		s.arena = append(s.arena, buf[i:j]...)
		i = j
	}
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r*16 + rune(c)
	}
	return r, true
}

// ---- numbers ----

// numToken scans a JSON number and returns its literal bytes.
func (s *scanner) numToken() ([]byte, bool, *decodeErr) {
	buf := s.buf
	start := s.pos
	i := s.pos
	isInt := true
	if i < len(buf) && buf[i] == '-' {
		i++
	}
	if i >= len(buf) {
		return nil, false, s.syntax("number")
	}
	switch {
	case buf[i] == '0':
		i++
	case '1' <= buf[i] && buf[i] <= '9':
		for i < len(buf) && '0' <= buf[i] && buf[i] <= '9' {
			i++
		}
	default:
		s.pos = i
		return nil, false, s.syntax("digit")
	}
	if i < len(buf) && buf[i] == '.' {
		isInt = false
		i++
		d := i
		for i < len(buf) && '0' <= buf[i] && buf[i] <= '9' {
			i++
		}
		if i == d {
			s.pos = i
			return nil, false, s.syntax("digit after decimal point")
		}
	}
	if i < len(buf) && (buf[i] == 'e' || buf[i] == 'E') {
		isInt = false
		i++
		if i < len(buf) && (buf[i] == '+' || buf[i] == '-') {
			i++
		}
		d := i
		for i < len(buf) && '0' <= buf[i] && buf[i] <= '9' {
			i++
		}
		if i == d {
			s.pos = i
			return nil, false, s.syntax("digit in exponent")
		}
	}
	s.pos = i
	return buf[start:i], isInt, nil
}

// int64Val parses an integer number in [lo, hi].
func (s *scanner) int64Val(lo, hi int64) (int64, *decodeErr) {
	start := s.pos
	tok, isInt, err := s.numToken()
	if err != nil {
		return 0, err
	}
	if !isInt {
		s.pos = start
		return 0, s.fail(quarantine.TypeMismatch, "expected integer, got "+strconv.Quote(string(tok)))
	}
	neg := tok[0] == '-'
	digits := tok
	if neg {
		digits = tok[1:]
	}
	var u uint64
	for _, c := range digits {
		d := uint64(c - '0')
		if u > (math.MaxUint64-d)/10 {
			s.pos = start
			return 0, s.fail(quarantine.TypeMismatch, "integer out of range: "+string(tok))
		}
		u = u*10 + d
	}
	var v int64
	if neg {
		if u > 1<<63 {
			s.pos = start
			return 0, s.fail(quarantine.TypeMismatch, "integer out of range: "+string(tok))
		}
		v = -int64(u)
	} else {
		if u > math.MaxInt64 {
			s.pos = start
			return 0, s.fail(quarantine.TypeMismatch, "integer out of range: "+string(tok))
		}
		v = int64(u)
	}
	if v < lo || v > hi {
		s.pos = start
		return 0, s.fail(quarantine.TypeMismatch, "integer out of range: "+string(tok))
	}
	return v, nil
}

// floatVal parses a number (or the strings "NaN", "Infinity", "-Infinity"
// that Jackson writes for non-finite doubles). bits is 32 or 64: a float32
// is parsed at 32-bit precision and widened, as the Avro path does.
func (s *scanner) floatVal(bits int) (float64, *decodeErr) {
	start := s.pos
	if s.buf[s.pos] == '"' {
		switch {
		case s.literal(`"NaN"`):
			return math.NaN(), nil
		case s.literal(`"Infinity"`):
			return math.Inf(1), nil
		case s.literal(`"-Infinity"`):
			return math.Inf(-1), nil
		}
		return 0, s.mismatch("number")
	}
	tok, _, err := s.numToken()
	if err != nil {
		return 0, err
	}
	f, perr := strconv.ParseFloat(unsafe.String(&tok[0], len(tok)), bits)
	if perr != nil {
		s.pos = start
		return 0, s.fail(quarantine.TypeMismatch, "number out of range: "+string(tok))
	}
	return f, nil
}

// number returns the literal text of a number as a Number (a view of the record).
func (s *scanner) number() (Number, *decodeErr) {
	tok, _, err := s.numToken()
	if err != nil {
		return "", err
	}
	return Number(unsafe.String(&tok[0], len(tok))), nil
}

// room makes sure the arena has room for n more bytes without moving. The
// first allocation of a record takes the rest of the record at once: an
// unescaped string or a decoded base64 value is never longer than its text,
// so one allocation serves the whole record.
func (s *scanner) room(n int) {
	if cap(s.arena)-len(s.arena) >= n {
		return
	}
	next := make([]byte, len(s.arena), len(s.arena)+max(n, len(s.buf)-s.pos))
	copy(next, s.arena)
	s.arena = next
}

// ---- skipping ----

// skip skips any JSON value, validating its syntax.
func (s *scanner) skip() *decodeErr {
	switch s.peek() {
	case '{':
		if err := s.push(); err != nil {
			return err
		}
		s.pos++
		if s.peek() == '}' {
			s.pos++
			s.depth--
			return nil
		}
		for {
			if err := s.skipString(); err != nil {
				return err
			}
			if err := s.consume(':', "':' after object key"); err != nil {
				return err
			}
			if err := s.skip(); err != nil {
				return err
			}
			more, err := s.objNext()
			if err != nil {
				return err
			}
			if !more {
				s.depth--
				return nil
			}
		}
	case '[':
		if err := s.push(); err != nil {
			return err
		}
		s.pos++
		if s.peek() == ']' {
			s.pos++
			s.depth--
			return nil
		}
		for {
			if err := s.skip(); err != nil {
				return err
			}
			switch s.peek() {
			case ',':
				s.pos++
			case ']':
				s.pos++
				s.depth--
				return nil
			default:
				return s.syntax("',' or ']' in array")
			}
		}
	case '"':
		return s.skipString()
	case 't':
		if s.literal("true") {
			return nil
		}
	case 'f':
		if s.literal("false") {
			return nil
		}
	case 'n':
		if s.literal("null") {
			return nil
		}
	default:
		_, _, err := s.numToken()
		return err
	}
	return s.syntax("value")
}

// skipString skips a string, checking escapes, control characters and UTF-8.
func (s *scanner) skipString() *decodeErr {
	if s.peek() != '"' {
		return s.syntax("string")
	}
	buf := s.buf
	i := s.pos + 1
	for {
		i = jsonstr.Plain(buf, i)
		if i >= len(buf) {
			s.pos = i
			return s.syntax("'\"' ending string")
		}
		c := buf[i]
		switch {
		case c == '"':
			s.pos = i + 1
			return nil
		case c == '\\':
			if i+1 >= len(buf) {
				s.pos = i
				return s.syntax("escape sequence")
			}
			switch buf[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if _, ok := hex4(buf, i+2); !ok {
					s.pos = i
					return s.fail(quarantine.MalformedJSON, "invalid \\u escape")
				}
				i += 6
			default:
				s.pos = i
				return s.fail(quarantine.MalformedJSON, "invalid escape character")
			}
		case c < 0x20:
			s.pos = i
			return s.fail(quarantine.MalformedJSON, "control character in string")
		default:
			r, size := utf8.DecodeRune(buf[i:])
			if r == utf8.RuneError && size <= 1 {
				s.pos = i
				return s.fail(quarantine.MalformedJSON, "invalid UTF-8 in string")
			}
			i += size
		}
	}
}

// ---- schemaless values ----

// anyVal decodes a value without a schema: nil, bool, Number, string, []any, *Row.
func (s *scanner) anyVal() (any, *decodeErr) {
	switch s.peek() {
	case '{':
		r, err := s.anyObject()
		if err != nil {
			return nil, err
		}
		return r, nil
	case '[':
		if err := s.push(); err != nil {
			return nil, err
		}
		s.pos++
		return s.array(nil)
	case '"':
		str, err := s.str()
		if err != nil {
			return nil, err
		}
		return s.bx.str(str, tString), nil
	case 't':
		if s.literal("true") {
			return true, nil
		}
	case 'f':
		if s.literal("false") {
			return false, nil
		}
	case 'n':
		if s.literal("null") {
			return nil, nil
		}
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		n, err := s.number()
		if err != nil {
			return nil, err
		}
		return s.bx.str(string(n), tNumber), nil
	}
	return nil, s.syntax("value")
}

// anyObject decodes an object without a schema into a *Row with nil Schema.
func (s *scanner) anyObject() (*Row, *decodeErr) {
	if err := s.push(); err != nil {
		return nil, err
	}
	empty, err := s.objStart()
	if err != nil {
		return nil, err
	}
	r := s.bx.row()
	if empty {
		r.Names, r.Values = []string{}, []any{}
		s.depth--
		return r, nil
	}
	base := len(s.vstack)
	nbase := len(s.nstack)
	var scratch [64]byte
	// pred is the shape objects starting with this first name had last
	// time; while the names match it they need no interner lookup.
	var pred []string
	place := shapePlace{key: s.inKey, parent: s.field}
	for i := 0; ; i++ {
		k, err := s.objKey(&scratch)
		if err != nil {
			return nil, err
		}
		var name string
		if i < len(pred) && string(k) == pred[i] {
			name = pred[i]
		} else {
			name = s.intern.get(k)
			if i == 0 {
				place.first = name
				pred = s.intern.predict(place)
			} else {
				pred = nil
			}
		}
		s.field = name
		var v any
		if !s.envPlain || s.depth != 1 || !s.plainEnvelopeMember(name) {
			if v, err = s.anyVal(); err != nil {
				return nil, err.at(name)
			}
		}
		s.nstack = append(s.nstack, name)
		s.vstack = append(s.vstack, v)
		more, err := s.objNext()
		if err != nil {
			return nil, err
		}
		if !more {
			n := len(s.vstack) - base
			r.Values = s.bx.values(n)
			copy(r.Values, s.vstack[base:])
			if len(pred) == n {
				r.Names = pred // every name matched the prediction
			} else {
				r.Names = s.intern.shape(s.nstack[nbase:])
				s.intern.learn(place, r.Names)
			}
			clear(s.vstack[base:])
			clear(s.nstack[nbase:])
			s.vstack = s.vstack[:base]
			s.nstack = s.nstack[:nbase]
			s.depth--
			return r, nil
		}
	}
}

// array decodes the elements of an array whose '[' is consumed; items nil
// means schemaless.
func (s *scanner) array(items *node) (any, *decodeErr) {
	if s.peek() == ']' {
		s.pos++
		s.depth--
		return []any{}, nil
	}
	base := len(s.vstack)
	for {
		var v any
		var err *decodeErr
		if items == nil {
			v, err = s.anyVal()
		} else {
			v, err = s.typedVal(items)
		}
		if err != nil {
			return nil, err.at("[" + strconv.Itoa(len(s.vstack)-base) + "]")
		}
		s.vstack = append(s.vstack, v)
		switch s.peek() {
		case ',':
			s.pos++
		case ']':
			s.pos++
			s.depth--
			out := s.bx.values(len(s.vstack) - base)
			copy(out, s.vstack[base:])
			clear(s.vstack[base:])
			s.vstack = s.vstack[:base]
			return out, nil
		default:
			return nil, s.syntax("',' or ']' in array")
		}
	}
}

// ---- schema-guided values ----

// typedVal decodes a value of Connect type n.
func (s *scanner) typedVal(n *node) (any, *decodeErr) {
	c := s.peek()
	if c == 'n' {
		if s.literal("null") {
			return nil, nil
		}
		return nil, s.syntax("value")
	}
	switch n.kind {
	case kInt8, kInt16, kInt32, kInt64:
		if c != '-' && (c < '0' || c > '9') {
			return nil, s.mismatch(n.s.Type)
		}
		v, err := s.int64Val(n.lo, n.hi)
		if err != nil {
			return nil, err
		}
		return s.bx.int64(v), nil
	case kFloat32, kFloat64:
		if c != '-' && c != '"' && (c < '0' || c > '9') {
			return nil, s.mismatch(n.s.Type)
		}
		bits := 64
		if n.kind == kFloat32 {
			bits = 32
		}
		v, err := s.floatVal(bits)
		if err != nil {
			return nil, err
		}
		return s.bx.float64(v), nil
	case kBool:
		if s.literal("true") {
			return true, nil
		}
		if s.literal("false") {
			return false, nil
		}
		return nil, s.mismatch("boolean")
	case kString:
		if c != '"' {
			return nil, s.mismatch("string")
		}
		str, err := s.str()
		if err != nil {
			return nil, err
		}
		return s.bx.str(str, tString), nil
	case kBytes:
		if c == '"' {
			return s.base64Val()
		}
		if n.decimal && (c == '-' || ('0' <= c && c <= '9')) {
			// decimal.format=NUMERIC writes Decimal as a JSON number
			num, err := s.number()
			if err != nil {
				return nil, err
			}
			return s.bx.str(string(num), tNumber), nil
		}
		return nil, s.mismatch("base64 string (bytes)")
	case kArray:
		if c != '[' {
			return nil, s.mismatch("array")
		}
		if err := s.push(); err != nil {
			return nil, err
		}
		s.pos++
		return s.array(n.items)
	case kMap:
		if c != '{' {
			if c == '[' {
				return nil, s.fail(quarantine.TypeMismatch, "maps with non-string keys are not supported")
			}
			return nil, s.mismatch("object (map)")
		}
		if err := s.push(); err != nil {
			return nil, err
		}
		empty, err := s.objStart()
		if err != nil {
			return nil, err
		}
		m := map[string]any{}
		if empty {
			s.depth--
			return m, nil
		}
		for {
			if s.peek() != '"' {
				return nil, s.syntax("string (map key)")
			}
			k, err := s.str()
			if err != nil {
				return nil, err
			}
			if err := s.consume(':', "':' after map key"); err != nil {
				return nil, err
			}
			v, err := s.typedVal(n.values)
			if err != nil {
				return nil, err.at(k)
			}
			m[k] = v
			more, err := s.objNext()
			if err != nil {
				return nil, err
			}
			if !more {
				s.depth--
				return m, nil
			}
		}
	case kStruct:
		if c != '{' {
			return nil, s.mismatch("object (struct)")
		}
		r, err := s.structVal(n)
		if err != nil {
			return nil, err
		}
		return r, nil
	}
	return nil, s.fail(quarantine.MalformedEvent, "unsupported schema type "+n.s.Type)
}

// structVal decodes an object into a *Row laid out as struct node n. Fields
// missing from the object are nil; members the schema does not know are skipped.
func (s *scanner) structVal(n *node) (*Row, *decodeErr) {
	if err := s.push(); err != nil {
		return nil, err
	}
	empty, err := s.objStart()
	if err != nil {
		return nil, err
	}
	r := s.bx.row()
	r.Schema, r.Names, r.Values = n.s, n.names, s.bx.values(len(n.fields))
	if empty {
		s.depth--
		return r, nil
	}
	var scratch [64]byte
	next := 0
	for {
		k, err := s.objKey(&scratch)
		if err != nil {
			return nil, err
		}
		idx := n.fieldIndex(k, next)
		if idx < 0 {
			if err := s.skip(); err != nil {
				return nil, err
			}
		} else {
			done := false
			if n.env != nil && s.env != nil && s.depth == 1 {
				if done, err = s.typedEnvelopeMember(n.env, n, idx); err != nil {
					return nil, err.at(n.names[idx])
				}
			}
			if !done {
				v, err := s.typedVal(n.fields[idx])
				if err != nil {
					return nil, err.at(n.names[idx])
				}
				r.Values[idx] = v
			} else {
				r.Values[idx] = nil
			}
			next = idx + 1
		}
		more, err := s.objNext()
		if err != nil {
			return nil, err
		}
		if !more {
			s.depth--
			return r, nil
		}
	}
}

// base64Val decodes a base64 string (standard alphabet, as Jackson writes)
// into the arena. URL-safe and unpadded input is accepted as well.
func (s *scanner) base64Val() (any, *decodeErr) {
	start := s.pos
	mark := len(s.arena)
	raw, err := s.strBytes()
	if err != nil {
		return nil, err
	}
	// raw is a view of the record or, with escapes, the arena's bytes from
	// mark on: decode behind it, then move the result down to mark
	n := base64.StdEncoding.DecodedLen(len(raw)) + 2 // +2: room for unpadded input
	s.room(n)
	s.arena = s.arena[:len(s.arena)+n]
	dst := s.arena[len(s.arena)-n:]
	nb, derr := base64.StdEncoding.Decode(dst, raw)
	if derr != nil {
		for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
			if nb, derr = enc.Decode(dst, raw); derr == nil {
				break
			}
		}
		if derr != nil {
			s.pos = start
			s.arena = s.arena[:mark]
			return nil, s.fail(quarantine.TypeMismatch, "invalid base64 for bytes")
		}
	}
	copy(s.arena[mark:], dst[:nb])
	s.arena = s.arena[:mark+nb]
	return s.bx.bytes(s.arena[mark : mark+nb : mark+nb]), nil
}
