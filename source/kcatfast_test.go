package source

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// slowLine is ParseLine's encoding/json path alone: the definition.
func slowLine(line []byte) (kcatLine, error) {
	var l kcatLine
	err := json.Unmarshal(bytes.TrimRight(line, "\r"), &l)
	return l, err
}

// fastAsSlow is parseFast's result in encoding/json's shape.
func fastAsSlow(l kcatLine, key, payload []byte, hs []Header, hasHs bool) kcatLine {
	if hasHs {
		l.Headers = []*string{}
		for _, h := range hs {
			k := h.Key
			l.Headers = append(l.Headers, &k)
			if h.Value == nil {
				l.Headers = append(l.Headers, nil)
			} else {
				v := string(h.Value)
				l.Headers = append(l.Headers, &v)
			}
		}
	}
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
	l, key, payload, hs, hasHs, ok := parseFast(bytes.TrimRight(line, "\r"), &lineHolder{}, "")
	if !ok {
		return false
	}
	want, err := slowLine(line)
	if err != nil {
		t.Fatalf("parseFast accepted %q, encoding/json refuses it: %v", line, err)
	}
	if got := fastAsSlow(l, key, payload, hs, hasHs); !reflect.DeepEqual(got, want) {
		t.Fatalf("parseFast(%q) =\n%s\nencoding/json:\n%s", line, dump(got), dump(want))
	}
	// the same with a known topic, the line's own or another
	for _, known := range []string{"t", "loja.public.orders"} {
		l, key, payload, hs, hasHs, ok := parseFast(bytes.TrimRight(line, "\r"), &lineHolder{}, known)
		if got := fastAsSlow(l, key, payload, hs, hasHs); !ok || !reflect.DeepEqual(got, want) {
			t.Fatalf("parseFast(%q) with topic %q known = %v\n%s\nencoding/json:\n%s", line, known, ok, dump(got), dump(want))
		}
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
		{`{"headers":["k","","k",null]}`, true},
		{`{"headers":[],"headers_b64":[]}`, true}, // ParseLine refuses both
		{`{"headers":["k"]}`, false},              // odd length: parseHeaders' error
		{`{"headers":[null,"v"]}`, false},         // null key: parseHeaders' error
		{`{"payload":"a` + "\n" + `"}`, false},    // control character
		{`{"k\u0065y":"v"}`, false},               // escaped member name
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

// BenchmarkParseLine: one kcat line of a Debezium JSON change (the bench
// generator's shape: the value is JSON escaped into a string, with a JSON
// document escaped twice inside it and non-ASCII text).
func BenchmarkParseLine(b *testing.B) {
	value := `{"before":null,"after":{"id":1,"customer_id":154,"status":"CRIADO","amount":"BJzE",` +
		`"created_at":"2026-08-31T23:51:11.105365Z","updated_at":1793491200000000,"ship_date":20785,` +
		`"payload":"{\"items\": [{\"qty\": 6, \"sku\": \"SKU-690\"}], \"coupon\": null, \"customer\": \"Bruno\"}",` +
		`"tags":["prioridade","retirada","b2b"],"note":"São Paulo – SP #1","uuid":"31478d3c-3abc-4217-958c-a1f83d51d720",` +
		`"paid":false,"filler":"` + strings.Repeat("lorem ipsum dolor sit amet ", 8) + `"},` +
		`"source":{"version":"3.6.1.Final","connector":"postgresql","name":"loja","ts_ms":1793491200055,` +
		`"snapshot":"true","db":"loja","schema":"public","table":"orders","txId":771,"lsn":24023128},` +
		`"op":"r","ts_ms":1793491200055}`
	line := Encode(&Record{Topic: "loja.public.orders", Offset: 12345, Key: []byte(`{"id":1}`), Value: []byte(value),
		Timestamp: time.UnixMilli(1793491200055).UTC(), TimestampType: "create",
		Headers: []Header{{Key: "__debezium.context.connectorLogicalName", Value: []byte("loja")}}})
	if _, _, _, _, _, ok := parseFast(line, &lineHolder{}, ""); !ok {
		b.Fatalf("the benchmark line is not on the fast path: %s", line)
	}
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseLine(line, LineDefaults{}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestParseLineHeaders: headers read on the fast path are the records
// encoding/json's path makes: an empty value is empty, a null one nil, and
// the same lines are refused.
func TestParseLineHeaders(t *testing.T) {
	for _, line := range []string{
		`{"topic":"t","headers":["a","x","b","","c",null,"a","\u00e9\n"]}`,
		`{"topic":"t","headers":[]}`,
		`{"topic":"t","headers":null}`,
		`{"topic":"t","headers":["k"]}`,
		`{"topic":"t","headers":[null,"v"]}`,
		`{"topic":"t","headers":[],"headers_b64":[]}`,
		`{"topic":"t","headers":["k","v"],"headers_b64":null}`,
	} {
		got, gerr := ParseLine([]byte(line), LineDefaults{})
		l, err := slowLine([]byte(line))
		if err != nil {
			t.Fatal(err)
		}
		var want []Header
		werr := error(nil)
		if l.Headers != nil && l.HeadersB64 != nil {
			werr = errors.New("both")
		} else {
			want, werr = parseHeaders(l.Headers, false)
		}
		if (gerr == nil) != (werr == nil) {
			t.Errorf("%s: error %v, encoding/json's path: %v", line, gerr, werr)
			continue
		}
		if gerr == nil && !reflect.DeepEqual(got.Headers, want) {
			t.Errorf("%s: headers %#v, want %#v", line, got.Headers, want)
		}
	}
}

// TestParseLineAllocations: a line on the fast path costs the record, its
// key and value, and three allocations for all of its headers (up to 8
// headers of 512 bytes); a topic the
// reader knows (the last line's) is shared, not allocated again.
func TestParseLineAllocations(t *testing.T) {
	// key and value without escapes: unescaping uses pooled buffers, whose
	// allocations the race detector makes random (sync.Pool drops items)
	line := Encode(&Record{Topic: "loja.public.orders", Partition: 1, Offset: 12345, Key: []byte(`id=1`),
		Value: []byte(`op=c after=1`), Timestamp: time.UnixMilli(1793491200055).UTC(), TimestampType: "create",
		Headers: []Header{{Key: "__debezium.context.connectorLogicalName", Value: []byte("loja")},
			{Key: "__debezium.context.taskId", Value: []byte("0")}, {Key: "empty", Value: []byte{}}, {Key: "null"}}})
	known := strings.Clone("loja.public.orders")
	d := LineDefaults{known: known}
	rec, err := ParseLine(line, d)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Topic != known || unsafe.StringData(rec.Topic) != unsafe.StringData(known) {
		t.Errorf("topic %q is not the known topic's string", rec.Topic)
	}
	if len(rec.Headers) != 4 || rec.Headers[2].Value == nil || len(rec.Headers[2].Value) != 0 || rec.Headers[3].Value != nil ||
		string(rec.Headers[0].Value) != "loja" || rec.Headers[1].Key != "__debezium.context.taskId" ||
		cap(rec.Headers[0].Value) != len(rec.Headers[0].Value) {
		t.Errorf("headers %+v", rec.Headers)
	}
	if rec.Partition != 1 || rec.Offset != 12345 || rec.TimestampType != "create" || rec.Timestamp.UnixMilli() != 1793491200055 {
		t.Errorf("coordinates %+v", rec)
	}
	n := testing.AllocsPerRun(20, func() { ParseLine(line, d) })
	t.Logf("ParseLine: %.0f allocations", n)
	if n > 6 {
		t.Errorf("ParseLine: %.0f allocations, want at most 6 (record, key, value, three for the headers)", n)
	}
}
