package versioning

import "errors"

var errSequence = errors.New("malformed source.sequence")

// ParseSequence parses Debezium's source.sequence, a JSON array string
// `["<lastCommitLsn>","<lsn>"]` whose elements are decimal uint64 strings or
// null (e.g. `[null,"24023128"]`). Bare numbers are accepted too. It does not
// allocate and does not use encoding/json.
//
// The result carries HasCommit/Commit from element 0 and HasLSN/LSN from
// element 1; Snapshot is left empty.
func ParseSequence(s string) (Position, error) {
	var p Position
	i := skipWS(s, 0)
	if i >= len(s) || s[i] != '[' {
		return p, errSequence
	}
	i = skipWS(s, i+1)
	v, ok, i, err := seqElem(s, i)
	if err != nil {
		return p, err
	}
	p.Commit, p.HasCommit = v, ok
	i = skipWS(s, i)
	if i >= len(s) || s[i] != ',' {
		return p, errSequence
	}
	i = skipWS(s, i+1)
	v, ok, i, err = seqElem(s, i)
	if err != nil {
		return p, err
	}
	p.LSN, p.HasLSN = v, ok
	i = skipWS(s, i)
	if i >= len(s) || s[i] != ']' {
		return p, errSequence
	}
	if skipWS(s, i+1) != len(s) {
		return p, errSequence
	}
	return p, nil
}

func skipWS(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// seqElem parses null, "digits" or digits at s[i:].
func seqElem(s string, i int) (v uint64, ok bool, next int, err error) {
	if i+4 <= len(s) && s[i:i+4] == "null" {
		return 0, false, i + 4, nil
	}
	quoted := i < len(s) && s[i] == '"'
	if quoted {
		i++
	}
	start := i
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		d := uint64(s[i] - '0')
		if v > (^uint64(0)-d)/10 {
			return 0, false, i, errSequence // overflow
		}
		v = v*10 + d
		i++
	}
	if i == start {
		return 0, false, i, errSequence
	}
	if quoted {
		if i >= len(s) || s[i] != '"' {
			return 0, false, i, errSequence
		}
		i++
	}
	return v, true, i, nil
}
