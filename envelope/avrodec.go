package envelope

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unsafe"
)

// avroReader decodes an Avro binary body straight into Row values in one
// pass over the compiled aNode tree. It replaced goavro's NativeFromBinary on
// the hot path: goavro builds a map[string]any per record and another per
// non-null union value (every optional Debezium column), which was most of
// the time and bytes of an Avro decode (bench/README.md, "Decode"). The
// checks are those of the earlier walk + goavro pair, so the same inputs are
// rejected: lengths and block counts are bounded by the bytes left before
// anything is allocated, booleans are 0 or 1, map keys are unique.
//
// buf is the record's body: strings and bytes values are views into it, as
// in the JSON scanner (jsonscan.go), so a record costs no copy of itself.
type avroReader struct {
	buf       []byte
	zeroItems int
	bx        boxes
}

// maxZeroSizeItems bounds array/map items that take no bytes (empty records),
// which a block count could otherwise multiply at no cost to the sender.
const maxZeroSizeItems = 1 << 16

var errAvroShort = errors.New("truncated body")

func (r *avroReader) varint(pos int) (int64, int, error) {
	var u uint64
	for shift := uint(0); shift < 70; shift += 7 {
		if pos >= len(r.buf) {
			return 0, pos, errAvroShort
		}
		b := r.buf[pos]
		pos++
		u |= uint64(b&0x7f) << shift
		if b < 0x80 {
			return int64(u>>1) ^ -int64(u&1), pos, nil
		}
	}
	return 0, pos, fmt.Errorf("varint longer than 10 bytes at offset %d", pos)
}

// span reads a length-prefixed string/bytes and returns its bounds.
func (r *avroReader) span(pos int) (int, int, error) {
	l, p, err := r.varint(pos)
	if err != nil {
		return p, p, err
	}
	if l < 0 || l > int64(len(r.buf)-p) {
		return p, p, fmt.Errorf("declared length %d exceeds the %d remaining bytes at offset %d", l, len(r.buf)-p, pos)
	}
	return p, p + int(l), nil
}

func (r *avroReader) str(from, to int) string {
	if from == to {
		return ""
	}
	return unsafe.String(&r.buf[from], to-from)
}

// read decodes a value of n at pos and returns it and its end.
func (r *avroReader) read(n *aNode, pos, depth int) (any, int, error) {
	if depth > maxSchemaDepth {
		return nil, pos, fmt.Errorf("nesting deeper than %d", maxSchemaDepth)
	}
	switch n.kind {
	case aNull:
		return nil, pos, nil
	case aBool:
		if pos >= len(r.buf) {
			return nil, pos, errAvroShort
		}
		switch r.buf[pos] {
		case 0:
			return false, pos + 1, nil
		case 1:
			return true, pos + 1, nil
		}
		return nil, pos, fmt.Errorf("boolean byte %d at offset %d (want 0 or 1)", r.buf[pos], pos)
	case aInt:
		v, p, err := r.varint(pos)
		if err != nil {
			return nil, p, err
		}
		return r.bx.int64(int64(int32(v))), p, nil // as goavro: an over-long int keeps its low 32 bits
	case aLong:
		v, p, err := r.varint(pos)
		if err != nil {
			return nil, p, err
		}
		return r.bx.int64(v), p, nil
	case aFloat:
		if pos+4 > len(r.buf) {
			return nil, pos, errAvroShort
		}
		return r.bx.float64(float64(math.Float32frombits(binary.LittleEndian.Uint32(r.buf[pos:])))), pos + 4, nil
	case aDouble:
		if pos+8 > len(r.buf) {
			return nil, pos, errAvroShort
		}
		return r.bx.float64(math.Float64frombits(binary.LittleEndian.Uint64(r.buf[pos:]))), pos + 8, nil
	case aFixed:
		end := pos + n.size
		if end > len(r.buf) {
			return nil, pos, errAvroShort
		}
		return r.bx.bytes(r.buf[pos:end:end]), end, nil
	case aBytes:
		from, to, err := r.span(pos)
		if err != nil {
			return nil, from, err
		}
		return r.bx.bytes(r.buf[from:to:to]), to, nil
	case aString:
		from, to, err := r.span(pos)
		if err != nil {
			return nil, from, err
		}
		return r.str(from, to), to, nil
	case aEnum:
		i, p, err := r.varint(pos)
		if err != nil {
			return nil, p, err
		}
		if i < 0 || i >= int64(len(n.syms)) {
			return nil, p, fmt.Errorf("enum index %d out of range at offset %d", i, pos)
		}
		return n.syms[i], p, nil
	case aUnion:
		b, p, err := r.union(n, pos)
		if err != nil {
			return nil, p, err
		}
		v, p, err := r.read(b, p, depth+1)
		if row, ok := v.(*Row); ok {
			// a record reached through an optional union carries the
			// optional variant of its schema, as in JsonConverter output
			row.Schema = n.s
		}
		return v, p, err
	case aRecord:
		row := r.bx.row()
		row.Schema, row.Names, row.Values = n.s, n.rec.names, r.bx.values(len(n.rec.fields))
		var err error
		for i, f := range n.rec.fields {
			if row.Values[i], pos, err = r.read(f, pos, depth+1); err != nil {
				return nil, pos, err
			}
		}
		return row, pos, nil
	case aArray, aMap:
		return r.blocks(n, pos, depth)
	}
	return nil, pos, fmt.Errorf("unsupported type")
}

// blocks reads an array or map: blocks of items, each a count (negative:
// followed by the block's byte size), ended by a zero count.
func (r *avroReader) blocks(n *aNode, pos, depth int) (any, int, error) {
	item := n.items
	minItem := 0
	var list []any
	var m map[string]any
	if n.kind == aMap {
		item = n.values
		minItem = 1 // the key
	}
	minItem += item.minSize
	for first := true; ; first = false {
		count, p, err := r.varint(pos)
		if err != nil {
			return nil, p, err
		}
		pos = p
		if count < 0 {
			if count == -1<<63 {
				return nil, pos, fmt.Errorf("invalid block count at offset %d", pos)
			}
			count = -count
			size, p, err := r.varint(pos)
			if err != nil {
				return nil, p, err
			}
			if size < 0 || size > int64(len(r.buf)-p) {
				return nil, p, fmt.Errorf("declared block size %d exceeds the remaining bytes at offset %d", size, pos)
			}
			pos = p
		}
		if minItem > 0 {
			if count > int64(len(r.buf)-pos)/int64(minItem) {
				return nil, pos, fmt.Errorf("declared block count %d exceeds the remaining bytes at offset %d", count, pos)
			}
		} else {
			r.zeroItems += int(min(count, maxZeroSizeItems+1))
			if r.zeroItems > maxZeroSizeItems {
				return nil, pos, fmt.Errorf("more than %d zero-size items", maxZeroSizeItems)
			}
		}
		if first {
			// sized by the first block (most writers send one)
			if n.kind == aMap {
				m = make(map[string]any, count)
			} else {
				list = make([]any, 0, count)
			}
		}
		if count == 0 {
			if n.kind == aMap {
				return m, pos, nil
			}
			return list, pos, nil
		}
		for ; count > 0; count-- {
			var v any
			if n.kind == aMap {
				from, to, err := r.span(pos)
				if err != nil {
					return nil, from, err
				}
				k := r.str(from, to)
				if _, dup := m[k]; dup {
					return nil, from, fmt.Errorf("duplicate map key %q at offset %d", k, pos)
				}
				if v, pos, err = r.read(item, to, depth+1); err != nil {
					return nil, pos, err
				}
				m[k] = v
				continue
			}
			if v, pos, err = r.read(item, pos, depth+1); err != nil {
				return nil, pos, err
			}
			list = append(list, v)
		}
	}
}
