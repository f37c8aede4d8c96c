package dv

import (
	"errors"
	"fmt"
)

// Z85 (ZeroMQ base85) as used by Delta for deletion-vector UUIDs and inline
// bitmaps: every 4 bytes (big-endian uint32) become 5 characters.

const z85Alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"

var z85Decode [256]byte

func init() {
	for i := range z85Decode {
		z85Decode[i] = 0xFF
	}
	for i := 0; i < len(z85Alphabet); i++ {
		z85Decode[z85Alphabet[i]] = byte(i)
	}
}

// Z85Encode encodes b. If len(b) is not a multiple of 4, b is padded with
// zero bytes (as Delta's Base85Codec.encodeBytes does); the caller must keep
// the real length to decode (Z85DecodeLen).
func Z85Encode(b []byte) string {
	n := (len(b) + 3) / 4
	out := make([]byte, n*5)
	for i := 0; i < n; i++ {
		var v uint32
		for j := 0; j < 4; j++ {
			v <<= 8
			if k := i*4 + j; k < len(b) {
				v |= uint32(b[k])
			}
		}
		for j := 4; j >= 0; j-- {
			out[i*5+j] = z85Alphabet[v%85]
			v /= 85
		}
	}
	return string(out)
}

// ErrZ85 is wrapped by all Z85 decoding errors.
var ErrZ85 = errors.New("invalid Z85")

// Z85Decode decodes s, whose length must be a multiple of 5.
func Z85Decode(s string) ([]byte, error) {
	if len(s)%5 != 0 {
		return nil, fmt.Errorf("%w: length %d is not a multiple of 5", ErrZ85, len(s))
	}
	out := make([]byte, len(s)/5*4)
	for i := 0; i < len(s)/5; i++ {
		var v uint64
		for j := 0; j < 5; j++ {
			d := z85Decode[s[i*5+j]]
			if d == 0xFF {
				return nil, fmt.Errorf("%w: character %q at %d", ErrZ85, s[i*5+j], i*5+j)
			}
			v = v*85 + uint64(d)
		}
		if v > 0xFFFFFFFF {
			return nil, fmt.Errorf("%w: group %d overflows 32 bits", ErrZ85, i)
		}
		out[i*4] = byte(v >> 24)
		out[i*4+1] = byte(v >> 16)
		out[i*4+2] = byte(v >> 8)
		out[i*4+3] = byte(v)
	}
	return out, nil
}

// Z85DecodeLen decodes s and returns exactly n bytes (dropping the padding
// added by Z85Encode). It fails unless len(s) == ceil(n/4)*5. Padding
// bytes are ignored, as Delta does.
func Z85DecodeLen(s string, n int) ([]byte, error) {
	if n < 0 || (n+3)/4*5 != len(s) {
		return nil, fmt.Errorf("%w: %d characters cannot hold exactly %d bytes", ErrZ85, len(s), n)
	}
	b, err := Z85Decode(s)
	if err != nil {
		return nil, err
	}
	return b[:n], nil
}
