package jsonstr

import (
	"strings"
	"testing"
)

// plainNaive is the byte loop Plain replaces.
func plainNaive(b []byte, i int) int {
	for ; i < len(b); i++ {
		if c := b[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' {
			return i
		}
	}
	return i
}

func TestPlain(t *testing.T) {
	long := strings.Repeat("abcdefgh", 5)
	for _, tc := range []struct {
		in   string
		from int
		want int
	}{
		{"", 0, 0},
		{"abc", 0, 3},
		{`abc"`, 0, 3},
		{`abcdefghijk"`, 0, 11},
		{`abcdefghijk"`, 11, 11},
		{`abcdefgh\n`, 0, 8},
		{"abcdefg\x1f", 0, 7},
		{"abcdefg\x20", 0, 8},
		{"abcdefg\x7f", 0, 8},
		{"abcdefg\x80", 0, 7},
		{"abc\xffdefgh", 0, 3},
		{"\"\"\"\"\"\"\"\"\"", 0, 0},
		{"a\x00\"bcdefgh", 0, 1},   // a zero byte, then a quote: the first is the stop
		{"ab!#\x21\x23[]\"", 0, 8}, // neighbours of the stop bytes are plain
		{long + `"`, 0, len(long)},
		{long + `"`, 3, len(long)},
		{long, 0, len(long)},
	} {
		if got := Plain([]byte(tc.in), tc.from); got != tc.want {
			t.Errorf("Plain(%q, %d) = %d, want %d", tc.in, tc.from, got, tc.want)
		}
	}
}

// TestPlainEveryByte puts each byte value at each position of a 16-byte run.
func TestPlainEveryByte(t *testing.T) {
	for c := 0; c < 256; c++ {
		for pos := 0; pos < 16; pos++ {
			b := []byte(strings.Repeat("x", 16))
			b[pos] = byte(c)
			for from := 0; from <= pos; from++ {
				if got, want := Plain(b, from), plainNaive(b, from); got != want {
					t.Fatalf("byte %#x at %d from %d: %d, want %d", c, pos, from, got, want)
				}
			}
		}
	}
}

func FuzzPlain(f *testing.F) {
	f.Add([]byte(`{\"id\":1,\"name\":\"abc\"}`), uint8(0))
	f.Add([]byte("plain text with é and \x01"), uint8(3))
	f.Fuzz(func(t *testing.T, b []byte, from uint8) {
		i := int(from) % (len(b) + 1)
		if got, want := Plain(b, i), plainNaive(b, i); got != want {
			t.Fatalf("Plain(%q, %d) = %d, want %d", b, i, got, want)
		}
	})
}

func BenchmarkPlain(b *testing.B) {
	text := []byte(strings.Repeat("lorem ipsum dolor sit amet ", 10) + `"`)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		Plain(text, 0)
	}
}

func BenchmarkPlainNaive(b *testing.B) {
	text := []byte(strings.Repeat("lorem ipsum dolor sit amet ", 10) + `"`)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		plainNaive(text, 0)
	}
}
