package envelope

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/cdcsink/cdc-sink/source"
)

// TestSchemalessShapesConcurrent: goroutines decoding schemaless rows of
// many shapes at once (more than maxShapes, so the cache fills) each get
// their own field names back (the flattened form without its meta names),
// and equal rows share one Names slice while the cache has room.
func TestSchemalessShapesConcurrent(t *testing.T) {
	d := NewDecoder(Options{})
	ctx := context.Background()
	rec := func(shape int, flat bool) (*source.Record, []string) {
		names := []string{fmt.Sprintf("a%d", shape), "b", fmt.Sprintf("c%d", shape%7)}
		v := fmt.Sprintf(`{"op":"c","after":{%q:1,%q:2,%q:3}}`, names[0], names[1], names[2])
		if flat {
			v = fmt.Sprintf(`{%q:1,"__op":"u",%q:2,%q:3,"__deleted":"false"}`, names[0], names[1], names[2])
		}
		return &source.Record{Topic: "t", Key: []byte(`{"id":1}`), Value: []byte(v)}, names
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 1500; i++ {
				r, want := rec((i*8+g)%(maxShapes+300), g%2 == 1)
				ev, err := d.Decode(ctx, r)
				if err != nil {
					errs <- err
					return
				}
				if !slices.Equal(ev.After.Names, want) {
					errs <- fmt.Errorf("names %v, want %v", ev.After.Names, want)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// sharing, on a decoder whose cache has room
	d2 := NewDecoder(Options{})
	a, _ := rec(3, false)
	b, _ := rec(3, false)
	ea, eb := mustDecode(t, d2, a), mustDecode(t, d2, b)
	if &ea.After.Names[0] != &eb.After.Names[0] {
		t.Error("equal schemaless rows do not share Names")
	}
	if &ea.Key.Names[0] != &eb.Key.Names[0] {
		t.Error("equal schemaless keys do not share Names")
	}
}

// TestSchemalessShapePrediction: objects that share their first field name
// but not the rest (a column added, dropped, renamed or reordered, fewer or
// more fields than the prediction) decode to their own names in any order,
// including after the relearning budget is spent.
func TestSchemalessShapePrediction(t *testing.T) {
	shapes := [][]string{
		{"id", "a", "b"},
		{"id", "a", "b", "c"},
		{"id", "a"},
		{"id"},
		{"id", "b", "a"},
		{"id", "a", "x"},
		{"id", "a\u00e9", "b"}, // a name on the interner's slow path
	}
	d := NewDecoder(Options{})
	ctx := context.Background()
	for i := 0; i < 3*maxRelearn; i++ {
		names := shapes[(i*5+i/7)%len(shapes)]
		var b strings.Builder
		b.WriteString(`{"op":"c","after":{`)
		for j, n := range names {
			if j > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%q:%d", n, j)
		}
		b.WriteString(`}}`)
		ev, err := d.Decode(ctx, &source.Record{Topic: "t", Key: []byte(`{"id":1}`), Value: []byte(b.String())})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ev.After.Names, names) {
			t.Fatalf("record %d: names %v, want %v", i, ev.After.Names, names)
		}
		for j := range names {
			if got, _ := ev.After.Get(names[j]); got != Number(strconv.Itoa(j)) {
				t.Fatalf("record %d: %s = %v, want %d", i, names[j], got, j)
			}
		}
	}
	if n := d.names.relearn.Load(); n != maxRelearn {
		t.Errorf("relearned %d times, want the budget %d to be used up", n, maxRelearn)
	}
}

// TestSchemalessSizeHint: a decoder sizes a schemaless record's chunks by
// the previous record of the same side; whatever the previous record was
// (narrower, wider, nested deeper, over a chunk, empty), each record
// decodes exactly as on a fresh decoder, and the hint it leaves is the
// record's own count of values and rows.
func TestSchemalessSizeHint(t *testing.T) {
	wide := func(n int) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"c%d":%d`, i, i)
		}
		return b.String()
	}
	values := []string{
		`{"op":"c","after":{"id":1}}`,
		`{"op":"u","before":{"id":1,"tags":[1,2,3]},"after":{"id":1,"tags":[1,2,3,4,5,6,7,8,9,10],"o":{"p":{"q":[{"r":1},{"s":[2,3]}]}}},"source":{"lsn":5,"ts_ms":7}}`,
		`{"op":"c","after":{` + wide(40) + `}}`,
		`{"op":"c","after":{` + wide(1500) + `},"source":{"lsn":9}}`,
		`{"op":"c","after":{}}`,
		`{"op":"c","after":{"id":2,"tags":[]}}`,
	}
	keys := []string{`{"id":1}`, `{"id":1,"k2":"x","k3":{"n":[1,2]}}`, `{}`}
	count := func(v any) (vals, rows int) {
		var walk func(any)
		walk = func(v any) {
			switch x := v.(type) {
			case *Row:
				rows++
				if len(x.Values) <= chunk {
					vals += len(x.Values)
				}
				for _, e := range x.Values {
					walk(e)
				}
			case []any:
				if len(x) <= chunk {
					vals += len(x)
				}
				for _, e := range x {
					walk(e)
				}
			}
		}
		walk(v)
		return vals, rows
	}
	ctx := context.Background()
	for _, order := range [][]int{{0, 1, 2, 3, 4, 5}, {5, 4, 3, 2, 1, 0}, {3, 0, 3, 1, 1, 2, 4, 2}} {
		d := NewDecoder(Options{})
		var hint [2]uint64 // an empty object leaves the hint alone
		for i, vi := range order {
			rec := &source.Record{Topic: "t", Key: []byte(keys[i%len(keys)]), Value: []byte(values[vi])}
			got, want := mustDecode(t, d, rec), mustDecode(t, NewDecoder(Options{}), rec)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("order %v, record %d: decoded %+v, a fresh decoder %+v", order, i, got, want)
			}
			for side, b := range map[int][]byte{0: rec.Key, 1: rec.Value} {
				which := [2]string{"key", "value"}[side]
				sd, err := d.decodeSide(ctx, "t", which, b, nil)
				if err != nil {
					t.Fatal(err)
				}
				if vals, rows := count(sd.row); string(b) != "{}" {
					hint[side] = uint64(min(vals, 1024))<<32 | uint64(min(rows, 64))
				}
				if h := d.plain[side].v.Load(); h != hint[side] {
					t.Errorf("order %v, record %d, %s: hint %d values %d rows, want %d and %d",
						order, i, which, h>>32, uint32(h), hint[side]>>32, uint32(hint[side]))
				}
			}
		}
	}
}
