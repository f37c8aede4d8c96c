package normalize

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/cdcsink/cdc-sink/envelope"
)

// DefaultUnavailablePlaceholder is Debezium's default
// unavailable.value.placeholder.
const DefaultUnavailablePlaceholder = "__debezium_unavailable_value"

// toast recognises Debezium's unavailable-TOAST placeholder in every form the
// PostgreSQL connector emits it.
type toast struct {
	str    string // text/varchar/json/xml/…; also the single element of text[]
	bytes  []byte // bytea, bytea[] element, and the int2/int4/int8[] byte values
	uuid   string // uuid[] element: UUID.nameUUIDFromBytes(bytes)
	hstore string // hstore in json mode: {"p":"p"}
}

func newToast(placeholder string) (*toast, error) {
	if placeholder == "" {
		placeholder = DefaultUnavailablePlaceholder
	}
	t := &toast{}
	if h, ok := strings.CutPrefix(placeholder, "hex:"); ok {
		b, err := hex.DecodeString(h)
		if err != nil {
			return nil, fmt.Errorf("normalize: unavailable placeholder %q: %w", placeholder, err)
		}
		t.bytes = b
	} else {
		t.bytes = []byte(placeholder)
	}
	t.str = string(t.bytes)
	// java.util.UUID.nameUUIDFromBytes: MD5, version 3, IETF variant.
	sum := md5.Sum(t.bytes)
	sum[6] = sum[6]&0x0f | 0x30
	sum[8] = sum[8]&0x3f | 0x80
	x := hex.EncodeToString(sum[:])
	t.uuid = x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
	k, _ := json.Marshal(t.str)
	t.hstore = "{" + string(k) + ":" + string(k) + "}"
	return t, nil
}

// is reports whether column value v is the placeholder.
func (t *toast) is(v any) bool {
	switch x := v.(type) {
	case string:
		return len(x) >= len(t.str) && (x == t.str || x == t.hstore || (len(x) > len(t.hstore) && len(x) <= len(t.hstore)+8 && t.isHstoreJSON(x)))
	case []byte:
		return bytes.Equal(x, t.bytes)
	case []any:
		if len(x) == 1 {
			switch e := x[0].(type) {
			case string:
				return e == t.str || e == t.uuid
			case []byte:
				return bytes.Equal(e, t.bytes)
			}
		}
		if len(x) == len(t.bytes) && len(x) > 1 {
			for i, e := range x {
				var b int64
				switch y := e.(type) {
				case int64:
					b = y
				case envelope.Number:
					n, err := strconv.ParseInt(string(y), 10, 64)
					if err != nil {
						return false
					}
					b = n
				case float64:
					b = int64(y)
					if float64(b) != y {
						return false
					}
				default:
					return false
				}
				if b != int64(t.bytes[i]) {
					return false
				}
			}
			return true
		}
	case map[string]any:
		if len(x) == 1 {
			s, ok := x[t.str].(string)
			return ok && s == t.str
		}
	case *envelope.Row: // schemaless hstore decoded as an object
		if x.Schema == nil && len(x.Names) == 1 && x.Names[0] == t.str {
			s, ok := x.Values[0].(string)
			return ok && s == t.str
		}
	}
	return false
}

// isHstoreJSON accepts the hstore JSON form with insignificant whitespace.
func (t *toast) isHstoreJSON(s string) bool {
	if s[0] != '{' {
		return false
	}
	var m map[string]string
	if json.Unmarshal([]byte(s), &m) != nil || len(m) != 1 {
		return false
	}
	return m[t.str] == t.str
}
