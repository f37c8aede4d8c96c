package source

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// equalRecords compares records byte for byte, treating nil and empty header lists alike
// and timestamps with Equal.
func equalRecords(t *testing.T, want, got *Record) {
	t.Helper()
	if want.Topic != got.Topic || want.Partition != got.Partition || want.Offset != got.Offset {
		t.Fatalf("coordinates: want %s/%d@%d, got %s/%d@%d", want.Topic, want.Partition, want.Offset, got.Topic, got.Partition, got.Offset)
	}
	if !sameBytes(want.Key, got.Key) {
		t.Fatalf("key: want %q (nil=%v), got %q (nil=%v)", want.Key, want.Key == nil, got.Key, got.Key == nil)
	}
	if !sameBytes(want.Value, got.Value) {
		t.Fatalf("value: want %q (nil=%v), got %q (nil=%v)", want.Value, want.Value == nil, got.Value, got.Value == nil)
	}
	if len(want.Headers) != len(got.Headers) {
		t.Fatalf("headers: want %d, got %d", len(want.Headers), len(got.Headers))
	}
	for i := range want.Headers {
		if want.Headers[i].Key != got.Headers[i].Key || !sameBytes(want.Headers[i].Value, got.Headers[i].Value) {
			t.Fatalf("header %d: want %q=%q, got %q=%q", i, want.Headers[i].Key, want.Headers[i].Value, got.Headers[i].Key, got.Headers[i].Value)
		}
	}
	if !want.Timestamp.Equal(got.Timestamp) || want.TimestampType != got.TimestampType {
		t.Fatalf("timestamp: want %v %q, got %v %q", want.Timestamp, want.TimestampType, got.Timestamp, got.TimestampType)
	}
}

// sameBytes is byte equality that also distinguishes nil (Kafka null) from empty.
func sameBytes(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }

func randBytes(r *rand.Rand, kind int) []byte {
	switch kind % 5 {
	case 0:
		return nil
	case 1:
		return []byte{}
	case 2: // arbitrary bytes, usually not UTF-8
		b := make([]byte, r.IntN(64))
		for i := range b {
			b[i] = byte(r.UintN(256))
		}
		return b
	case 3: // text with escapes and multibyte runes
		const alphabet = "ab\"\\\n\r\t\x00\x1f\x7fé€😀\u2028</>&"
		rs := []rune(alphabet)
		var sb strings.Builder
		for n := r.IntN(20); n > 0; n-- {
			sb.WriteRune(rs[r.IntN(len(rs))])
		}
		return []byte(sb.String())
	default: // JSON-looking text
		return []byte(`{"before":null,"after":{"id":1}}`)
	}
}

func randRecord(r *rand.Rand, i int) *Record {
	rec := &Record{
		Topic:     "dbz.public.t" + string(rune('a'+i%3)),
		Partition: int32(r.IntN(8)),
		Offset:    r.Int64N(1 << 40),
		Key:       randBytes(r, r.IntN(5)),
		Value:     randBytes(r, r.IntN(5)),
	}
	if r.IntN(4) > 0 {
		rec.Timestamp = time.UnixMilli(r.Int64N(4e12)).UTC()
		rec.TimestampType = []string{"create", "logappend"}[r.IntN(2)]
	}
	for n := r.IntN(4); n > 0; n-- {
		k := string(randBytes(r, 3+r.IntN(2)))
		if r.IntN(6) == 0 {
			k = string([]byte{0xff, 'k'})
		}
		rec.Headers = append(rec.Headers, Header{Key: k, Value: randBytes(r, r.IntN(5))})
	}
	return rec
}

func TestEncodeRoundTripRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 5000 {
		rec := randRecord(r, i)
		line := Encode(rec)
		if bytes.IndexByte(line, '\n') >= 0 {
			t.Fatalf("encoded line contains a newline: %s", line)
		}
		got, err := ParseLine(line, LineDefaults{})
		if err != nil {
			t.Fatalf("record %d: %v\n%s", i, err, line)
		}
		equalRecords(t, rec, got)
	}
}

func TestEncodeChoosesTextOrBase64(t *testing.T) {
	cases := []struct {
		name string
		rec  Record
		want []string
		not  []string
	}{
		{"text", Record{Topic: "t", Key: []byte(`{"id":1}`), Value: []byte("é")},
			[]string{`"key":"{\"id\":1}"`, `"payload":"é"`}, []string{"_b64"}},
		{"null", Record{Topic: "t"}, []string{`"key":null`, `"payload":null`}, []string{"_b64"}},
		{"empty", Record{Topic: "t", Key: []byte{}, Value: []byte{}}, []string{`"key":""`, `"payload":""`}, nil},
		{"binary", Record{Topic: "t", Key: []byte{0, 0xff}, Value: []byte{0, 0, 0, 0, 1, 0xc3}},
			[]string{`"key_b64":"AP8="`, `"payload_b64":"AAAAAAHD"`}, []string{`"key":`, `"payload":`}},
		{"headers", Record{Topic: "t", Headers: []Header{{"a", []byte("1")}, {"b", nil}}},
			[]string{`"headers":["a","1","b",null]`}, nil},
		{"binary header", Record{Topic: "t", Headers: []Header{{"a", []byte{0xff}}}},
			[]string{`"headers_b64":["YQ==","/w=="]`}, []string{`"headers":`}},
		{"ts", Record{Topic: "t", Timestamp: time.UnixMilli(1700000000123), TimestampType: "create"},
			[]string{`"tstype":"create","ts":1700000000123`}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := string(Encode(&c.rec))
			for _, w := range c.want {
				if !strings.Contains(s, w) {
					t.Errorf("%s: missing %s", s, w)
				}
			}
			for _, w := range c.not {
				if strings.Contains(s, w) {
					t.Errorf("%s: unexpected %s", s, w)
				}
			}
		})
	}
}

func TestParseKcatOutput(t *testing.T) {
	// A line as kcat 1.7 prints it.
	line := `{"topic":"dbserver1.inventory.customers","partition":0,"offset":3,"tstype":"create","ts":1700000000000,"broker":1,"headers":["id","abc"],"key":"{\"id\":1004}","payload":null}`
	rec, err := ParseLine([]byte(line+"\r"), LineDefaults{})
	if err != nil {
		t.Fatal(err)
	}
	want := &Record{Topic: "dbserver1.inventory.customers", Offset: 3, Key: []byte(`{"id":1004}`),
		Headers: []Header{{"id", []byte("abc")}}, Timestamp: time.UnixMilli(1700000000000), TimestampType: "create"}
	equalRecords(t, want, rec)
}

func TestParseDefaultsAndErrors(t *testing.T) {
	d := LineDefaults{Topic: "dflt", Partition: 0, Offset: 7}
	rec, err := ParseLine([]byte(`{"payload":"x"}`), d)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Topic != "dflt" || rec.Partition != 0 || rec.Offset != 7 || string(rec.Value) != "x" || rec.Key != nil {
		t.Fatalf("defaults not applied: %+v", rec)
	}
	bad := []struct{ line, want string }{
		{`{"payload":"x"`, "malformed"},
		{`[1,2]`, "malformed"},
		{`null`, "not a JSON object"},
		{``, "malformed"},
		{`{"topic":"t"} {}`, "malformed"},
		{`{"topic":"t","partition":-1}`, "negative partition"},
		{`{"topic":"t","offset":-3}`, "negative offset"},
		{`{"topic":"t","partition":"0"}`, "malformed"},
		{`{"topic":"t","key":"a","key_b64":"YQ=="}`, "both"},
		{`{"topic":"t","payload_b64":"***"}`, "payload_b64"},
		{`{"topic":"t","headers":["a"]}`, "odd length"},
		{`{"topic":"t","headers":[null,"a"]}`, "null key"},
		{`{"topic":"t","headers":["a","b"],"headers_b64":[]}`, "both"},
		{`{"payload":"x"}`, "no topic"},
	}
	for _, b := range bad {
		_, err := ParseLine([]byte(b.line), LineDefaults{})
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: error %v, want it to mention %q", b.line, err, b.want)
		}
	}
}

func TestFileReader(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "in.jsonl")
	var buf bytes.Buffer
	r := rand.New(rand.NewPCG(3, 4))
	var want []*Record
	for i := range 50 {
		rec := randRecord(r, i)
		want = append(want, rec)
		if err := WriteJSONLine(&buf, rec); err != nil {
			t.Fatal(err)
		}
		if i == 10 {
			buf.WriteString("   \n") // blank lines are skipped but counted
		}
	}
	buf.WriteString(`{"payload":"no coordinates"}` + "\n")
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	fr, err := OpenFile(path, FileOptions{DefaultTopic: "dflt"})
	if err != nil {
		t.Fatal(err)
	}
	defer fr.Close()
	var got []*Record
	for {
		batch, err := fr.Poll(context.Background(), 7, time.Second)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, batch...)
	}
	if len(got) != 51 {
		t.Fatalf("got %d records, want 51", len(got))
	}
	for i := range want {
		equalRecords(t, want[i], got[i])
	}
	last := got[50]
	if last.Topic != "dflt" || last.Partition != 0 || last.Offset != 51 { // line 52 → index 51
		t.Fatalf("defaults: %s/%d@%d", last.Topic, last.Partition, last.Offset)
	}
}

func TestFileReaderErrorsNameLine(t *testing.T) {
	in := `{"topic":"t","offset":0,"payload":"a"}` + "\n\n" + `{"topic":"t","offset":1,"payload":` + "\n" + `{"topic":"t"}` + "\n"
	fr := NewFileReader(strings.NewReader(in), "dump.jsonl", FileOptions{})
	if _, err := fr.Next(); err != nil {
		t.Fatal(err)
	}
	_, err := fr.Next()
	var le *LineError
	if !errors.As(err, &le) || le.Line != 3 || le.File != "dump.jsonl" || !strings.HasPrefix(err.Error(), "dump.jsonl:3: ") {
		t.Fatalf("want a LineError at dump.jsonl:3, got %v", err)
	}
	if _, err2 := fr.Next(); err2 != err {
		t.Fatalf("error is not sticky: %v", err2)
	}
	// Poll returns the records before a bad line, then the error.
	fr = NewFileReader(strings.NewReader(in), "dump.jsonl", FileOptions{})
	batch, err := fr.Poll(context.Background(), 10, 0)
	if err != nil || len(batch) != 1 {
		t.Fatalf("first poll: %d records, %v", len(batch), err)
	}
	if _, err := fr.Poll(context.Background(), 10, 0); !errors.As(err, &le) {
		t.Fatalf("second poll: %v", err)
	}
	// Line length bound.
	long := `{"topic":"t","payload":"` + strings.Repeat("x", 1000) + `"}` + "\n"
	fr = NewFileReader(strings.NewReader(`{"topic":"t"}`+"\n"+long), "big", FileOptions{MaxLineBytes: 100})
	fr.Next()
	if _, err := fr.Next(); !errors.As(err, &le) || le.Line != 2 || !strings.Contains(err.Error(), "longer than 100") {
		t.Fatalf("want too-long error at line 2, got %v", err)
	}
}

func TestTransientMarker(t *testing.T) {
	err := transient(errors.New("boom"))
	var m interface{ Transient() bool }
	if !errors.As(err, &m) || !m.Transient() {
		t.Fatal("transient error lacks Transient()")
	}
}

func FuzzParseKcatLine(f *testing.F) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 20 {
		f.Add(Encode(randRecord(r, i)))
	}
	f.Add([]byte(`{"topic":"t","partition":0,"offset":3,"headers":["a",null],"key":null,"payload":"\ud800"}`))
	f.Add([]byte(`{"payload_b64":"AAE","headers_b64":["/w==","AA=="]}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		rec, err := ParseLine(line, LineDefaults{Topic: "d", Offset: 9})
		if err != nil {
			return
		}
		enc := Encode(rec)
		rec2, err := ParseLine(enc, LineDefaults{})
		if err != nil {
			t.Fatalf("re-parse of %s: %v", enc, err)
		}
		equalRecords(t, rec, rec2)
		if enc2 := Encode(rec2); !reflect.DeepEqual(enc, enc2) {
			t.Fatalf("encoding not stable:\n%s\n%s", enc, enc2)
		}
	})
}

// ReadFile returns every record of a good file, and for a bad one the
// LineError naming the line, never a partial slice.
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.jsonl")
	if err := os.WriteFile(good, []byte(`{"topic":"t","partition":1,"offset":7,"payload":"a"}`+"\n\n"+`{"topic":"t","offset":8,"payload":null}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	recs, err := ReadFile(good, FileOptions{})
	if err != nil || len(recs) != 2 || recs[0].Partition != 1 || recs[0].Offset != 7 || string(recs[0].Value) != "a" || recs[1].Value != nil {
		t.Fatalf("ReadFile(good) = %+v, %v", recs, err)
	}
	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, []byte(`{"topic":"t","payload":"a"}`+"\n"+`{"topic":`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var le *LineError
	if recs, err := ReadFile(bad, FileOptions{}); !errors.As(err, &le) || le.Line != 2 || recs != nil {
		t.Fatalf("ReadFile(bad) = %d records, %v; want a LineError at line 2", len(recs), err)
	}
	if _, err := ReadFile(filepath.Join(dir, "missing.jsonl"), FileOptions{}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ReadFile(missing) = %v", err)
	}
}
