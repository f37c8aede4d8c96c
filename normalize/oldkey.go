package normalize

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"

	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/quarantine"
)

// Header names of a primary-key change (RelationalChangeRecordEmitter).
const (
	HeaderOldKey = "__debezium.oldkey"
	HeaderNewKey = "__debezium.newkey"
)

// parseKeyHeader decodes a __debezium.oldkey / newkey header value into field
// values: SimpleHeaderConverter's struct rendering {"id":2} (JSON-like), a
// JsonConverter header {"schema":…,"payload":{…}}, or Struct{id=2,…}.
func parseKeyHeader(b []byte) (map[string]any, bool) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil, false
	}
	if b[0] == '{' {
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		var m map[string]any
		if d.Decode(&m) != nil {
			return nil, false
		}
		if p, ok := m["payload"].(map[string]any); ok {
			if _, ok := m["schema"]; ok {
				m = p
			}
		}
		for k, v := range m {
			m[k] = fromJSON(v)
		}
		return m, true
	}
	s, ok := strings.CutPrefix(string(b), "Struct{")
	if !ok || !strings.HasSuffix(s, "}") {
		return nil, false
	}
	s = s[:len(s)-1]
	m := map[string]any{}
	if s == "" {
		return m, true
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, false
		}
		if isIntLiteral(v) || isFloatLiteral(v) {
			m[k] = envelope.Number(v)
		} else {
			m[k] = v
		}
	}
	return m, true
}

func isFloatLiteral(s string) bool {
	var f json.Number = json.Number(s)
	_, err := f.Float64()
	return err == nil && s != "" && (s[0] == '-' || (s[0] >= '0' && s[0] <= '9'))
}

func fromJSON(v any) any {
	switch x := v.(type) {
	case json.Number:
		return envelope.Number(x)
	case []any:
		for i := range x {
			x[i] = fromJSON(x[i])
		}
		return x
	case map[string]any:
		r := &envelope.Row{}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			r.Names = append(r.Names, k)
			r.Values = append(r.Values, fromJSON(x[k]))
		}
		return r
	}
	return v
}

// oldKey decodes the __debezium.oldkey header of the create half of a PK
// change into a key tuple aligned with c.KeyNames, typed like the key.
func (n *Normalizer) oldKey(c *Change, h []byte, kcp, cp *compiled, tkey TableID) ([]any, error) {
	m, ok := parseKeyHeader(h)
	if !ok {
		return nil, quarantine.Errorf(quarantine.MalformedEvent, "%s: header %s %s is neither {\"col\":value} nor Struct{col=value}", n.tableName(c.Table, c.Coord.Topic), HeaderOldKey, short(string(h)))
	}
	out := make([]any, len(c.KeyNames))
	for i, name := range c.KeyNames {
		v, ok := m[name]
		if !ok {
			return nil, quarantine.Errorf(quarantine.MalformedEvent, "%s: header %s %s lacks key column %q", n.tableName(c.Table, c.Coord.Topic), HeaderOldKey, short(string(h)), name)
		}
		var x any
		var e *cerr
		switch {
		case v == nil:
		case kcp != nil:
			x, e = n.coerce(&kcp.convs[i], v)
		default:
			x, e = n.schemalessKeyValue(name, v, cp, tkey)
		}
		if e != nil {
			return nil, n.colErr(c.Table, c.Coord.Topic, e.in("header "+HeaderOldKey+" column "+name))
		}
		out[i] = x
	}
	return out, nil
}
