package normalize

import (
	"encoding/binary"
	"math"
	"math/big"

	"github.com/shopspring/decimal"

	"github.com/cdcsink/cdc-sink/versioning"
)

// AssignVersion sets c.Version from t, in partition order: deletes remember
// their key so the bare tombstone that follows gets the same version.
func AssignVersion(t *versioning.Tracker, c *Change) {
	switch {
	case c.Tombstone:
		c.Version = t.AssignTombstone(c.Coord.Topic, c.Coord.Partition, c.Coord.Offset, KeyID(c.Key))
	case c.Op == OpDelete:
		c.Version = t.AssignDelete(c.Coord.Topic, c.Coord.Partition, c.Coord.Offset, c.Position, KeyID(c.Key))
	default:
		c.Version = t.Assign(c.Coord.Topic, c.Coord.Partition, c.Coord.Offset, c.Position)
	}
}

// KeyID is a stable, injective byte encoding of a key tuple (type-tagged,
// length-prefixed), usable as a map key (string(KeyID(k))).
func KeyID(key []any) []byte {
	b := make([]byte, 0, 16*len(key))
	for _, v := range key {
		b = appendKeyValue(b, v)
	}
	return b
}

func appendKeyValue(b []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(b, 0)
	case bool:
		if x {
			return append(b, 1, 1)
		}
		return append(b, 1, 0)
	case int8:
		return binary.BigEndian.AppendUint64(append(b, 2), uint64(x))
	case int16:
		return binary.BigEndian.AppendUint64(append(b, 2), uint64(x))
	case int32:
		return binary.BigEndian.AppendUint64(append(b, 2), uint64(x))
	case int64:
		return binary.BigEndian.AppendUint64(append(b, 2), uint64(x))
	case float32:
		return binary.BigEndian.AppendUint64(append(b, 3), math.Float64bits(float64(x)))
	case float64:
		return binary.BigEndian.AppendUint64(append(b, 3), math.Float64bits(x))
	case string:
		b = binary.AppendUvarint(append(b, 4), uint64(len(x)))
		return append(b, x...)
	case []byte:
		b = binary.AppendUvarint(append(b, 5), uint64(len(x)))
		return append(b, x...)
	case decimal.Decimal:
		// value-equal decimals (1.0 == 1.00) get the same id
		s := x.String()
		b = binary.AppendUvarint(append(b, 6), uint64(len(s)))
		return append(b, s...)
	case *big.Int:
		s := x.String()
		b = binary.AppendUvarint(append(b, 6), uint64(len(s)))
		return append(b, s...)
	case []any:
		b = binary.AppendUvarint(append(b, 7), uint64(len(x)))
		for _, e := range x {
			b = appendKeyValue(b, e)
		}
		return b
	case []MapEntry:
		b = binary.AppendUvarint(append(b, 8), uint64(len(x)))
		for _, e := range x {
			b = appendKeyValue(appendKeyValue(b, e.Key), e.Value)
		}
		return b
	}
	s := []byte(short(v))
	b = binary.AppendUvarint(append(b, 9), uint64(len(s)))
	return append(b, s...)
}
