package versioning

import "errors"

// VersionStringLen is the length of Version.String().
const VersionStringLen = 8 + 1 + 1 + 1 + 16 + 1 + 16 + 1 + 16

const hexDigits = "0123456789abcdef"

// String renders v as fixed-width lowercase hex,
// eeeeeeee-p-cccccccccccccccc-llllllllllllllll-ssssssssssssssss
// (Epoch, Phase, Commit, LSN, Seq), so that byte-wise string order equals
// Compare order. This is the value of the Delta column _cdc_source_version.
func (v Version) String() string {
	var b [VersionStringLen]byte
	v.appendTo(b[:0])
	return string(b[:])
}

// AppendText appends String() to b.
func (v Version) AppendText(b []byte) ([]byte, error) { return v.appendTo(b), nil }

// MarshalText implements encoding.TextMarshaler (JSON renders the string form).
func (v Version) MarshalText() ([]byte, error) {
	return v.appendTo(make([]byte, 0, VersionStringLen)), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (v *Version) UnmarshalText(b []byte) error {
	p, err := ParseVersion(string(b))
	if err != nil {
		return err
	}
	*v = p
	return nil
}

func (v Version) appendTo(b []byte) []byte {
	b = appendHex(b, uint64(v.Epoch), 8)
	b = append(b, '-', hexDigits[v.Phase&0xf], '-')
	b = appendHex(b, v.Commit, 16)
	b = append(b, '-')
	b = appendHex(b, v.LSN, 16)
	b = append(b, '-')
	return appendHex(b, v.Seq, 16)
}

func appendHex(b []byte, x uint64, width int) []byte {
	for i := width - 1; i >= 0; i-- {
		b = append(b, hexDigits[(x>>(uint(i)*4))&0xf])
	}
	return b
}

var errVersion = errors.New("malformed source version (want eeeeeeee-p-cccccccccccccccc-llllllllllllllll-ssssssssssssssss, lowercase hex)")

// ParseVersion parses the String() form. It accepts only the exact canonical
// form (fixed width, lowercase), so Parse(String(v)) == v and
// String(Parse(s)) == s.
func ParseVersion(s string) (Version, error) {
	var v Version
	if len(s) != VersionStringLen || s[8] != '-' || s[10] != '-' || s[27] != '-' || s[44] != '-' {
		return v, errVersion
	}
	e, ok := parseHex(s[0:8])
	if !ok {
		return v, errVersion
	}
	p, ok := parseHex(s[9:10])
	if !ok || p > 0xf {
		return v, errVersion
	}
	c, ok1 := parseHex(s[11:27])
	l, ok2 := parseHex(s[28:44])
	q, ok3 := parseHex(s[45:61])
	if !ok1 || !ok2 || !ok3 {
		return v, errVersion
	}
	return Version{Epoch: uint32(e), Phase: Phase(p), Commit: c, LSN: l, Seq: q}, nil
}

func parseHex(s string) (uint64, bool) {
	var x uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			x = x<<4 | uint64(c-'0')
		case c >= 'a' && c <= 'f':
			x = x<<4 | uint64(c-'a'+10)
		default:
			return 0, false
		}
	}
	return x, true
}
