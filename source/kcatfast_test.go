package source

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
)

// slowLine is ParseLine's encoding/json path alone: the definition.
func slowLine(line []byte) (kcatLine, error) {
	var l kcatLine
	err := json.Unmarshal(bytes.TrimRight(line, "\r"), &l)
	return l, err
}

// fastAsSlow is parseFast's result in encoding/json's shape.
func fastAsSlow(l kcatLine, key, payload []byte) kcatLine {
	if key != nil {
		s := string(key)
		l.Key = &s
	}
	if payload != nil {
		s := string(payload)
		l.Payload = &s
	}
	return l
}

func checkFast(t *testing.T, line []byte) bool {
	t.Helper()
	l, key, payload, ok := parseFast(bytes.TrimRight(line, "\r"))
	if !ok {
		return false
	}
	want, err := slowLine(line)
	if err != nil {
		t.Fatalf("parseFast accepted %q, encoding/json refuses it: %v", line, err)
	}
	if got := fastAsSlow(l, key, payload); !reflect.DeepEqual(got, want) {
		t.Fatalf("parseFast(%q) =\n%s\nencoding/json:\n%s", line, dump(got), dump(want))
	}
	return true
}

func dump(l kcatLine) string {
	b, _ := json.Marshal(l)
	return string(b)
}

// The lines cdc-sink, kcat and bench/gen write take the fast path and read
// as encoding/json reads them; the others fall back.
func TestParseFast(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for i := range 200 {
		if line := Encode(randRecord(r, i)); !checkFast(t, line) {
			if !bytes.Contains(line, []byte(`\u`)) { // surrogate escapes: encoding/json's rules
				t.Fatalf("an encoded record declined: %s", line)
			}
		}
	}
	for _, c := range []struct {
		line string
		fast bool
	}{
		{`{"topic":"t","partition":1,"offset":24968,"tstype":"create","ts":1793491230028,"broker":-1,"headers":["a","b","c",null],"key":"{\"id\":6005}","payload":"{\"before\":null,\"x\":\"\\\"q\\\" \u00e9\/\"}"}`, true},
		{` { "payload" : "" , "key" : null } ` + "\r", true},
		{`{"error":"bad","topic":"t","x":true,"y":false,"z":null,"n":-12}`, true},
		{`{}`, true},
		{`{"Topic":"t"}`, false},                // case-folded member name
		{`{"topic":"t","topic":"u"}`, false},    // duplicate
		{`{"partition":1.0}`, false},            // not an integer
		{`{"partition":2147483648}`, false},     // out of range
		{`{"offset":01}`, false},                // not JSON
		{`{"payload":"\ud83d\ude00"}`, false},   // surrogate pair
		{`{"payload":"` + "\xff" + `"}`, false}, // invalid UTF-8
		{`{"x":{"nested":1}}`, false},           // unknown member with an object
		{`{"x":1.5}`, false},                    // unknown member with a float
		{`{"payload":"a"} x`, false},            // trailing data
		{`{"payload":"a",}`, false},             // trailing comma
		{`{"headers":["a",1]}`, false},          // header not a string
		{`{"payload":"a` + "\n" + `"}`, false},  // control character
		{`{"k\u0065y":"v"}`, false},             // escaped member name
		{`null`, false},
	} {
		if got := checkFast(t, []byte(c.line)); got != c.fast {
			t.Errorf("parseFast(%q) took the fast path: %v, want %v", c.line, got, c.fast)
		}
	}
}

// parseFast never disagrees with encoding/json: when it accepts a line, the
// line is valid and decodes to the same members.
func FuzzParseFastMatchesJSON(f *testing.F) {
	r := rand.New(rand.NewPCG(9, 10))
	for i := range 20 {
		f.Add(Encode(randRecord(r, i)))
	}
	f.Add([]byte(`{"topic":"t","partition":0,"offset":3,"headers":["a",null],"key":null,"payload":"\u00e9\"\\"}`))
	f.Add([]byte(`{"error":"x","ts":-1,"tstype":null,"headers":null}`))
	f.Add([]byte(`{"TOPIC":"t","kEy":"k"}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		checkFast(t, line)
	})
}
