// Package jsonstr finds where the plain run of a JSON string ends: the bytes
// a scanner can copy or skip without looking at each one. Both JSON scanners
// of the hot path use it (envelope's record scanner and source's kcat line
// parser); their byte-at-a-time loops were a tenth of a bootstrap's CPU
// (bench/README.md, *Eight bytes at a time*).
package jsonstr

import (
	"encoding/binary"
	"math/bits"
)

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// Plain returns the index of the first byte of b at or after i that ends a
// plain run: a quote, a backslash, a control character (below 0x20) or a
// non-ASCII byte; len(b) if there is none.
//
// Eight bytes at a time: a byte equal to c is a zero byte of x^c·ones, and
// (y - ones) &^ y has the high bit of y's lowest zero byte set (a borrow can
// only mark bytes above it); likewise (x - 0x20·ones) &^ x marks the lowest
// byte below 0x20, and x's own high bits mark non-ASCII bytes. So the lowest
// mark is exactly the first stop.
func Plain(b []byte, i int) int {
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		q := x ^ ('"' * ones)
		s := x ^ ('\\' * ones)
		m := ((q-ones)&^q | (s-ones)&^s | (x-0x20*ones)&^x | x) & highs
		if m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' {
			return i
		}
	}
	return i
}
