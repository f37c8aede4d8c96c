package dbzgen

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/cdcsink/cdc-sink/source"
)

// Avro streams: the same records in Confluent Avro framing, as Debezium
// writes them with the AvroConverter. The Avro schemas are derived from the
// Connect schemas of KeySchema/EnvelopeSchema the way Confluent's AvroData
// does (optional → ["null", T] with default null, int8/int16 with
// connect.type, Decimal/Date/Time/Timestamp as logical types, every other
// semantic name as connect.name), and each record is transcoded from its
// schemaless JSON form. Generate with Format JSONPlain (or UnwrapPlain for
// the flattened form) and pass the records through AvroCodec.Record.

// cschema is a Connect schema as JsonConverter writes it.
type cschema struct {
	Type       string            `json:"type"`
	Name       string            `json:"name"`
	Optional   bool              `json:"optional"`
	Version    int               `json:"version"`
	Parameters map[string]string `json:"parameters"`
	Default    any               `json:"default"`
	Field      string            `json:"field"`
	Fields     []*cschema        `json:"fields"`
	Items      *cschema          `json:"items"`
	Keys       *cschema          `json:"keys"`
	Values     *cschema          `json:"values"`
}

// AvroCodec transcodes schemaless-JSON records of one stream into
// Confluent-framed Avro with the given registry ids.
type AvroCodec struct {
	KeySchema, ValueSchema string // Avro schema JSON (register these)
	keyID, valID           int
	key, val               *cschema
}

// NewAvroCodec derives the Avro schemas of cfg's key and value (cfg.Format
// JSONPlain: the envelope; UnwrapPlain: the flattened row). Call SetIDs with
// the registry ids before Record.
func NewAvroCodec(cfg Config) (*AvroCodec, error) {
	c := cfg
	switch cfg.Format {
	case JSONPlain, JSONSchema:
		c.Format = JSONSchema
	case UnwrapPlain, Unwrap:
		c.Format = Unwrap
	}
	a := &AvroCodec{}
	for _, p := range []struct {
		js  string
		dst **cschema
		out *string
	}{{KeySchema(c), &a.key, &a.KeySchema}, {EnvelopeSchema(c), &a.val, &a.ValueSchema}} {
		var s cschema
		if err := json.Unmarshal([]byte(p.js), &s); err != nil {
			return nil, fmt.Errorf("avro: connect schema: %w", err)
		}
		av, err := json.Marshal(avroOf(&s, map[string]bool{}, new(int)))
		if err != nil {
			return nil, err
		}
		*p.dst, *p.out = &s, string(av)
	}
	return a, nil
}

// SetIDs sets the registry ids the records are framed with.
func (a *AvroCodec) SetIDs(keyID, valueID int) { a.keyID, a.valID = keyID, valueID }

func avroType(s *cschema, named map[string]bool, anon *int) any {
	m := map[string]any{}
	switch s.Type {
	case "int8", "int16":
		m["type"], m["connect.type"] = "int", s.Type
	case "int32":
		m["type"] = "int"
		switch s.Name {
		case "org.apache.kafka.connect.data.Date":
			m["logicalType"] = "date"
		case "org.apache.kafka.connect.data.Time":
			m["logicalType"] = "time-millis"
		}
	case "int64":
		m["type"] = "long"
		if s.Name == "org.apache.kafka.connect.data.Timestamp" {
			m["logicalType"] = "timestamp-millis"
		}
	case "float32":
		m["type"] = "float"
	case "float64":
		m["type"] = "double"
	case "boolean", "string", "bytes":
		m["type"] = s.Type
		if s.Name == "org.apache.kafka.connect.data.Decimal" {
			m["logicalType"] = "decimal"
			sc, _ := strconv.Atoi(s.Parameters["scale"])
			m["scale"] = sc
			if p, err := strconv.Atoi(s.Parameters["connect.decimal.precision"]); err == nil {
				m["precision"] = p
			}
		}
	case "array":
		m["type"], m["items"] = "array", avroOf(s.Items, named, anon)
	case "map":
		m["type"], m["values"] = "map", avroOf(s.Values, named, anon)
	case "struct":
		name := s.Name
		if name == "" {
			*anon++
			name = "io.confluent.connect.avro.ConnectDefault" + strconv.Itoa(*anon)
		}
		if named[name] {
			return name // defined earlier (before/after share the row record)
		}
		named[name] = true
		fields := make([]any, len(s.Fields))
		for i, f := range s.Fields {
			fd := map[string]any{"name": f.Field, "type": avroOf(f, named, anon)}
			if f.Optional {
				fd["default"] = nil
			}
			fields[i] = fd
		}
		m["type"], m["name"], m["fields"] = "record", name, fields
	}
	if s.Name != "" {
		m["connect.name"] = s.Name
	}
	if s.Version != 0 {
		m["connect.version"] = s.Version
	}
	if len(s.Parameters) > 0 {
		m["connect.parameters"] = s.Parameters
	}
	if s.Default != nil && s.Type != "struct" {
		m["connect.default"] = s.Default
	}
	return m
}

func avroOf(s *cschema, named map[string]bool, anon *int) any {
	t := avroType(s, named, anon)
	if s.Optional {
		return []any{"null", t}
	}
	return t
}

// Record returns rec with key and value transcoded from schemaless JSON to
// Confluent Avro (a tombstone stays a tombstone). A value that is not valid
// JSON for the schema (a malformed record of the stream) becomes a truncated
// Avro body, so it is still a malformed record.
func (a *AvroCodec) Record(rec *source.Record) (*source.Record, error) {
	out := *rec
	if rec.Key != nil {
		k, err := a.encode(a.keyID, a.key, rec.Key)
		if err != nil {
			return nil, fmt.Errorf("avro: key %s: %w", rec.Key, err)
		}
		out.Key = k
	}
	if rec.Value != nil {
		v, err := a.encode(a.valID, a.val, rec.Value)
		if err != nil {
			v = frameAvro(a.valID, []byte{0x02}) // union branch 1, then nothing
		}
		out.Value = v
	}
	return &out, nil
}

func frameAvro(id int, body []byte) []byte {
	b := make([]byte, 5, 5+len(body))
	binary.BigEndian.PutUint32(b[1:], uint32(id))
	return append(b, body...)
}

func (a *AvroCodec) encode(id int, s *cschema, js []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	b := make([]byte, 5, 5+len(js))
	binary.BigEndian.PutUint32(b[1:], uint32(id))
	return appendAvro(b, s, v)
}

func appendLong(b []byte, v int64) []byte {
	return binary.AppendUvarint(b, uint64(v<<1)^uint64(v>>63))
}

func appendAvro(b []byte, s *cschema, v any) ([]byte, error) {
	if s.Optional {
		if v == nil {
			return append(b, 0), nil
		}
		b = append(b, 2) // branch 1
	} else if v == nil {
		return nil, fmt.Errorf("null for required %s %q", s.Type, s.Field)
	}
	switch s.Type {
	case "int8", "int16", "int32", "int64":
		n, ok := v.(json.Number)
		if !ok {
			return nil, fmt.Errorf("%q: %T for %s", s.Field, v, s.Type)
		}
		i, err := n.Int64()
		if err != nil {
			return nil, fmt.Errorf("%q: %w", s.Field, err)
		}
		return appendLong(b, i), nil
	case "float32", "float64":
		n, ok := v.(json.Number)
		if !ok {
			return nil, fmt.Errorf("%q: %T for %s", s.Field, v, s.Type)
		}
		f, err := n.Float64()
		if err != nil {
			return nil, fmt.Errorf("%q: %w", s.Field, err)
		}
		if s.Type == "float32" {
			return binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(f))), nil
		}
		return binary.LittleEndian.AppendUint64(b, math.Float64bits(f)), nil
	case "boolean":
		t, ok := v.(bool)
		if !ok {
			return nil, fmt.Errorf("%q: %T for boolean", s.Field, v)
		}
		if t {
			return append(b, 1), nil
		}
		return append(b, 0), nil
	case "string":
		str, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%q: %T for string", s.Field, v)
		}
		return append(appendLong(b, int64(len(str))), str...), nil
	case "bytes":
		str, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%q: %T for bytes", s.Field, v)
		}
		raw, err := base64.StdEncoding.DecodeString(str)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", s.Field, err)
		}
		return append(appendLong(b, int64(len(raw))), raw...), nil
	case "array":
		l, ok := v.([]any)
		if !ok {
			return nil, fmt.Errorf("%q: %T for array", s.Field, v)
		}
		if len(l) > 0 {
			b = appendLong(b, int64(len(l)))
			for _, x := range l {
				var err error
				if b, err = appendAvro(b, s.Items, x); err != nil {
					return nil, err
				}
			}
		}
		return append(b, 0), nil
	case "map":
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%q: %T for map", s.Field, v)
		}
		if len(m) > 0 {
			b = appendLong(b, int64(len(m)))
			for k, x := range m {
				b = append(appendLong(b, int64(len(k))), k...)
				var err error
				if b, err = appendAvro(b, s.Values, x); err != nil {
					return nil, err
				}
			}
		}
		return append(b, 0), nil
	case "struct":
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%q: %T for struct", s.Field, v)
		}
		for _, f := range s.Fields {
			var err error
			if b, err = appendAvro(b, f, m[f.Field]); err != nil {
				return nil, err
			}
		}
		return b, nil
	}
	return nil, fmt.Errorf("%q: unsupported Connect type %q", s.Field, s.Type)
}
