package envelope

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// FuzzStringMatchesEncodingJSON: a JSON string literal reads as
// encoding/json reads it, and is rejected where it rejects it, by strBytes
// and by skipString (which must also stop at the same byte). The one
// deliberate difference: invalid UTF-8, which encoding/json replaces with
// U+FFFD and the scanner rejects (malformed_json), is checked apart.
func FuzzStringMatchesEncodingJSON(f *testing.F) {
	for _, s := range []string{``, `abc`, `a\"b`, `\\`, `\u00e9x`, `\ud83d\ude00`, `\ud800`, "é", "\x01",
		`lorem ipsum dolor sit amet, consectetur`, `abcdefgh\nijklmnop\tq`, `\x`, `abc\`} {
		f.Add([]byte(s), []byte(`,"z":1}`))
	}
	f.Fuzz(func(t *testing.T, body, rest []byte) {
		in := append(append(append([]byte{'"'}, body...), '"'), rest...)
		// the oracle: encoding/json reading the first value of in
		var want string
		dec := json.NewDecoder(bytes.NewReader(in))
		werr := dec.Decode(&want)
		wend := int(dec.InputOffset())

		sc := scanner{buf: in}
		got, err := sc.strBytes()
		sk := scanner{buf: in}
		serr := sk.skipString()
		if (err == nil) != (serr == nil) || (err == nil && sc.pos != sk.pos) {
			t.Fatalf("%q: strBytes %v at %d, skipString %v at %d", in, err, sc.pos, serr, sk.pos)
		}
		switch {
		case err != nil && werr == nil && utf8.ValidString(want) && utf8.Valid(in[:wend]):
			t.Fatalf("%q: rejected (%v), encoding/json reads %q", in, err, want)
		case err == nil && werr != nil:
			t.Fatalf("%q: read as %q, encoding/json: %v", in, got, werr)
		case err == nil && (string(got) != want || sc.pos != wend):
			t.Fatalf("%q: %q ending at %d, encoding/json %q ending at %d", in, got, sc.pos, want, wend)
		}
	})
}
