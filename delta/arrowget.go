// Typed, allocation-light accessors over the Arrow columns of a checkpoint batch.

package delta

import (
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// Typed accessors over arrow columns of a checkpoint batch. Each getter is
// built once per batch so per-row access is a closure call, and string data
// is copied once per batch (one allocation) instead of once per value.

type strGetter func(i int) (string, bool)
type intGetter func(i int) (int64, bool)
type boolGetter func(i int) (bool, bool)

func child(s *array.Struct, name string) arrow.Array {
	if s == nil {
		return nil
	}
	st, ok := s.DataType().(*arrow.StructType)
	if !ok {
		return nil
	}
	idx, ok := st.FieldIdx(name)
	if !ok || idx >= s.NumField() {
		return nil
	}
	return s.Field(idx)
}

func childStruct(s *array.Struct, name string) *array.Struct {
	c, _ := child(s, name).(*array.Struct)
	return c
}

func nullStr(int) (string, bool) { return "", false }
func nullInt(int) (int64, bool)  { return 0, false }
func nullBool(int) (bool, bool)  { return false, false }

// strings returned alias one private copy of the column's value buffer.
func stringsOf(a arrow.Array) strGetter {
	var offs []int32
	var data []byte
	switch c := a.(type) {
	case *array.String:
		offs, data = c.ValueOffsets(), c.ValueBytes()
	case *array.Binary:
		offs, data = c.ValueOffsets(), c.ValueBytes()
	default:
		return nullStr
	}
	if len(offs) == 0 {
		return nullStr
	}
	buf := make([]byte, len(data))
	copy(buf, data)
	base := offs[0]
	return func(i int) (string, bool) {
		if a.IsNull(i) {
			return "", false
		}
		s, e := offs[i]-base, offs[i+1]-base
		if s == e {
			return "", true
		}
		return unsafe.String(&buf[s], int(e-s)), true
	}
}

func strCol(s *array.Struct, name string) strGetter { return stringsOf(child(s, name)) }

func intCol(s *array.Struct, name string) intGetter {
	switch c := child(s, name).(type) {
	case *array.Int64:
		return func(i int) (int64, bool) {
			if c.IsNull(i) {
				return 0, false
			}
			return c.Value(i), true
		}
	case *array.Int32:
		return func(i int) (int64, bool) {
			if c.IsNull(i) {
				return 0, false
			}
			return int64(c.Value(i)), true
		}
	case *array.Int16:
		return func(i int) (int64, bool) {
			if c.IsNull(i) {
				return 0, false
			}
			return int64(c.Value(i)), true
		}
	case *array.Int8:
		return func(i int) (int64, bool) {
			if c.IsNull(i) {
				return 0, false
			}
			return int64(c.Value(i)), true
		}
	}
	return nullInt
}

func boolCol(s *array.Struct, name string) boolGetter {
	if c, ok := child(s, name).(*array.Boolean); ok {
		return func(i int) (bool, bool) {
			if c.IsNull(i) {
				return false, false
			}
			return c.Value(i), true
		}
	}
	return nullBool
}

// mapCol reads a map<string,string> column; nil for null or empty maps
// unless keepEmpty.
func mapCol(s *array.Struct, name string) func(i int) map[string]*string {
	m, ok := child(s, name).(*array.Map)
	if !ok {
		return func(int) map[string]*string { return nil }
	}
	keys, items := stringsOf(m.Keys()), stringsOf(m.Items())
	return func(i int) map[string]*string {
		if m.IsNull(i) {
			return nil
		}
		st, en := m.ValueOffsets(i)
		if en <= st {
			return nil // empty: writers normalise nil to {}
		}
		out := make(map[string]*string, en-st)
		for j := int(st); j < int(en); j++ {
			k, _ := keys(j)
			if v, ok := items(j); ok {
				out[k] = &v
			} else {
				out[k] = nil
			}
		}
		return out
	}
}

func strMapCol(s *array.Struct, name string) func(i int) map[string]string {
	g := mapCol(s, name)
	return func(i int) map[string]string {
		m := g(i)
		if m == nil {
			return nil
		}
		out := make(map[string]string, len(m))
		for k, v := range m {
			if v != nil {
				out[k] = *v
			}
		}
		return out
	}
}

func listCol(s *array.Struct, name string) func(i int) ([]string, bool) {
	l, ok := child(s, name).(*array.List)
	if !ok {
		return func(int) ([]string, bool) { return nil, false }
	}
	vals := stringsOf(l.ListValues())
	return func(i int) ([]string, bool) {
		if l.IsNull(i) {
			return nil, false
		}
		st, en := l.ValueOffsets(i)
		out := make([]string, 0, en-st)
		for j := int(st); j < int(en); j++ {
			v, _ := vals(j)
			out = append(out, v)
		}
		return out, true
	}
}

func dvCol(s *array.Struct, name string) func(i int) *DeletionVector {
	d := childStruct(s, name)
	if d == nil {
		return func(int) *DeletionVector { return nil }
	}
	st, p := strCol(d, "storageType"), strCol(d, "pathOrInlineDv")
	off, size, card, maxRow := intCol(d, "offset"), intCol(d, "sizeInBytes"), intCol(d, "cardinality"), intCol(d, "maxRowIndex")
	return func(i int) *DeletionVector {
		if d.IsNull(i) {
			return nil
		}
		t, ok := st(i)
		if !ok {
			return nil
		}
		dv := &DeletionVector{StorageType: t}
		dv.PathOrInlineDv, _ = p(i)
		if o, ok := off(i); ok {
			o32 := int32(o)
			dv.Offset = &o32
		}
		sz, _ := size(i)
		dv.SizeInBytes = int32(sz)
		dv.Cardinality, _ = card(i)
		if m, ok := maxRow(i); ok {
			dv.MaxRowIndex = &m
		}
		return dv
	}
}

// optInt allocates only for present values (nulls are the common case).
func optInt(v int64, ok bool) *int64 {
	if !ok {
		return nil
	}
	p := new(int64)
	*p = v
	return p
}
