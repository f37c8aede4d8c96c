package envelope

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cdcsink/cdc-sink/quarantine"
)

// The reference Avro path: the decoder as it was before avrodec.go (a
// bounds-checking walk, goavro's NativeFromBinary, then a conversion of
// goavro's native maps into Rows). Kept as the oracle of the differential
// test and fuzz target: the direct decoder must produce equal Events and the
// same error class on every input.

// ---- the bounds-checking walk ----

var mapKeyNode = &aNode{kind: aString, gname: "string", minSize: 1}

type avroWalker struct {
	buf       []byte
	zeroItems int
}

func (w *avroWalker) varint(pos int) (int64, int, error) {
	var u uint64
	for shift := uint(0); shift < 70; shift += 7 {
		if pos >= len(w.buf) {
			return 0, pos, errAvroShort
		}
		b := w.buf[pos]
		pos++
		u |= uint64(b&0x7f) << shift
		if b < 0x80 {
			return int64(u>>1) ^ -int64(u&1), pos, nil
		}
	}
	return 0, pos, fmt.Errorf("varint longer than 10 bytes at offset %d", pos)
}

// walk checks that a value of n fits in buf from pos and returns its end.
func (w *avroWalker) walk(n *aNode, pos, depth int) (int, error) {
	if depth > maxSchemaDepth {
		return pos, fmt.Errorf("nesting deeper than %d", maxSchemaDepth)
	}
	switch n.kind {
	case aNull:
		return pos, nil
	case aBool:
		if pos >= len(w.buf) {
			return pos, errAvroShort
		}
		return pos + 1, nil
	case aInt, aLong:
		_, p, err := w.varint(pos)
		return p, err
	case aFloat, aDouble, aFixed:
		end := pos + n.minSize
		if end > len(w.buf) {
			return pos, errAvroShort
		}
		return end, nil
	case aBytes, aString:
		l, p, err := w.varint(pos)
		if err != nil {
			return p, err
		}
		if l < 0 || l > int64(len(w.buf)-p) {
			return p, fmt.Errorf("declared length %d exceeds the %d remaining bytes at offset %d", l, len(w.buf)-p, pos)
		}
		return p + int(l), nil
	case aEnum:
		i, p, err := w.varint(pos)
		if err != nil {
			return p, err
		}
		if i < 0 || i >= int64(n.nsym) {
			return p, fmt.Errorf("enum index %d out of range at offset %d", i, pos)
		}
		return p, nil
	case aUnion:
		i, p, err := w.varint(pos)
		if err != nil {
			return p, err
		}
		if i < 0 || i >= int64(len(n.branch)) {
			return p, fmt.Errorf("union index %d out of range at offset %d", i, pos)
		}
		return w.walk(n.branch[i], p, depth+1)
	case aRecord:
		var err error
		for _, f := range n.rec.fields {
			if pos, err = w.walk(f, pos, depth+1); err != nil {
				return pos, err
			}
		}
		return pos, nil
	case aArray, aMap:
		item := n.items
		minItem := 0
		if n.kind == aMap {
			item = n.values
			minItem = 1 // the key
		}
		minItem += item.minSize
		for {
			count, p, err := w.varint(pos)
			if err != nil {
				return p, err
			}
			pos = p
			if count == 0 {
				return pos, nil
			}
			if count < 0 {
				if count == -1<<63 {
					return pos, fmt.Errorf("invalid block count at offset %d", pos)
				}
				count = -count
				size, p, err := w.varint(pos)
				if err != nil {
					return p, err
				}
				if size < 0 || size > int64(len(w.buf)-p) {
					return p, fmt.Errorf("declared block size %d exceeds the remaining bytes at offset %d", size, pos)
				}
				pos = p
			}
			if minItem > 0 {
				if count > int64(len(w.buf)-pos)/int64(minItem) {
					return pos, fmt.Errorf("declared block count %d exceeds the remaining bytes at offset %d", count, pos)
				}
			} else {
				w.zeroItems += int(min(count, maxZeroSizeItems+1))
				if w.zeroItems > maxZeroSizeItems {
					return pos, fmt.Errorf("more than %d zero-size items", maxZeroSizeItems)
				}
			}
			for ; count > 0; count-- {
				if n.kind == aMap {
					if pos, err = w.walk(mapKeyNode, pos, depth+1); err != nil {
						return pos, err
					}
				}
				if pos, err = w.walk(item, pos, depth+1); err != nil {
					return pos, err
				}
			}
		}
	}
	return pos, fmt.Errorf("unsupported type")
}

// ---- native → Row values ----

func badNative(n *aNode, v any) error {
	return fmt.Errorf("unexpected goavro value %T for %s", v, n.gname)
}

// convert turns goavro's native value into the Row representation. Values
// goavro already boxed in the right Go type (bool, int64, float64, string)
// are passed on as they are.
func (c *avroCompiled) convert(bx *boxes, n *aNode, v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	switch n.kind {
	case aBool:
		if _, ok := v.(bool); ok {
			return v, nil
		}
	case aInt:
		if i, ok := v.(int32); ok {
			return bx.int64(int64(i)), nil
		}
	case aLong:
		if _, ok := v.(int64); ok {
			return v, nil
		}
	case aFloat:
		if f, ok := v.(float32); ok {
			return bx.float64(float64(f)), nil
		}
	case aDouble:
		if _, ok := v.(float64); ok {
			return v, nil
		}
	case aBytes, aFixed:
		if b, ok := v.([]byte); ok {
			return bx.bytes(bytes.Clone(b)), nil
		}
	case aString, aEnum:
		if _, ok := v.(string); ok {
			return v, nil
		}
	case aUnion:
		m, ok := v.(map[string]any)
		if !ok || len(m) != 1 {
			break
		}
		for _, x := range m {
			y, err := c.convert(bx, n.branch[n.nonNull], x)
			if row, ok := y.(*Row); ok {
				// a record reached through an optional union carries the
				// optional variant of its schema, as in JsonConverter output
				row.Schema = n.s
			}
			return y, err
		}
	case aArray:
		l, ok := v.([]any)
		if !ok {
			break
		}
		out := make([]any, len(l))
		for i, x := range l {
			y, err := c.convert(bx, n.items, x)
			if err != nil {
				return nil, err
			}
			out[i] = y
		}
		return out, nil
	case aMap:
		m, ok := v.(map[string]any)
		if !ok {
			break
		}
		out := make(map[string]any, len(m))
		for k, x := range m {
			y, err := c.convert(bx, n.values, x)
			if err != nil {
				return nil, err
			}
			out[k] = y
		}
		return out, nil
	case aRecord:
		m, ok := v.(map[string]any)
		if !ok {
			break
		}
		return c.record(bx, n, n.s, m)
	}
	return nil, badNative(n, v)
}

func (c *avroCompiled) record(bx *boxes, n *aNode, s *Schema, m map[string]any) (*Row, error) {
	r := bx.row()
	r.Schema, r.Names, r.Values = s, n.rec.names, bx.values(len(n.rec.fields))
	for i, f := range n.rec.fields {
		x, err := c.convert(bx, f, m[n.rec.names[i]])
		if err != nil {
			return nil, err
		}
		r.Values[i] = x
	}
	return r, nil
}

// decodeAvroRef is decodeAvro through goavro.
func (d *Decoder) decodeAvroRef(ctx context.Context, which string, b []byte, _ *Event) (side, error) {
	id := int(int32(binary.BigEndian.Uint32(b[1:5])))
	c, err := d.acache.get(ctx, id, d.prefix)
	if err != nil {
		if r, ok := quarantine.ReasonOf(err); ok {
			var qe *quarantine.Error
			if errors.As(err, &qe) {
				return side{}, &quarantine.Error{Reason: r, Msg: which + ": " + qe.Msg, Err: qe.Err}
			}
		}
		return side{}, err
	}
	body := b[5:]
	w := avroWalker{buf: body}
	end, werr := w.walk(c.root, 0, 0)
	if werr != nil {
		return side{}, quarantine.Wrap(quarantine.MalformedAvro, werr, "%s: schema id %d: body of %d bytes", which, id, len(body))
	}
	if end != len(body) {
		return side{}, quarantine.Errorf(quarantine.MalformedAvro, "%s: schema id %d: %d trailing bytes after the value", which, id, len(body)-end)
	}
	native, _, gerr := c.codec.NativeFromBinary(body)
	if gerr != nil {
		return side{}, quarantine.Wrap(quarantine.MalformedAvro, gerr, "%s: schema id %d", which, id)
	}
	var bx boxes
	v, cerr := c.convert(&bx, c.root, native)
	if cerr != nil {
		return side{}, quarantine.Wrap(quarantine.MalformedAvro, cerr, "%s: schema id %d", which, id)
	}
	out := side{format: FormatAvro, val: v}
	if r, ok := v.(*Row); ok {
		out.row = r
		out.flat = c.flat
	}
	return out, nil
}
