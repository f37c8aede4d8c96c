package dv

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"github.com/cdcsink/cdc-sink/internal/golden"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
	"github.com/google/uuid"
)

var goldenDir = golden.Dir()

func TestZ85Vectors(t *testing.T) {
	cases := []struct {
		enc, prefix, uuid string
	}{
		{"0X9F0q2<2yJ-f)Gm2!e0", "", "0229ec3d-5100-44e1-8e53-702d448da8da"},
		{"ab^-aqEH.-t@S}K{vb[*k^", "ab", "d2c639aa-8816-431a-aaf6-d3fe2512ff61"},
	}
	for _, c := range cases {
		d := Descriptor{StorageType: "u", PathOrInlineDv: c.enc}
		p, id, err := d.UUID()
		if err != nil || p != c.prefix || id.String() != c.uuid {
			t.Errorf("%s: got %q %s %v", c.enc, p, id, err)
		}
		if got := Z85Encode(id[:]); c.prefix+got != c.enc {
			t.Errorf("encode %s = %s", c.uuid, got)
		}
		rel, _ := d.RelativePath()
		want := "deletion_vector_" + c.uuid + ".bin"
		if c.prefix != "" {
			want = c.prefix + "/" + want
		}
		if rel != want {
			t.Errorf("RelativePath = %s", rel)
		}
	}
	// ZeroMQ reference vector.
	if got := Z85Encode([]byte{0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B}); got != "HelloWorld" {
		t.Errorf("HelloWorld: %s", got)
	}
	for _, bad := range []string{"abcd", "Hello World", "\"\"\"\"\"", "%nSc1"} {
		if _, err := Z85Decode(bad); !errors.Is(err, ErrZ85) {
			t.Errorf("Z85Decode(%q) = %v", bad, err)
		}
	}
	// padded
	for n := 0; n < 10; n++ {
		b := bytes.Repeat([]byte{0xAB}, n)
		s := Z85Encode(b)
		got, err := Z85DecodeLen(s, n)
		if err != nil || !bytes.Equal(got, b) {
			t.Errorf("len %d: %x %v", n, got, err)
		}
	}
}

func TestDescriptorJSONAndPaths(t *testing.T) {
	in := `{"storageType":"u","pathOrInlineDv":"0X9F0q2<2yJ-f)Gm2!e0","offset":1,"sizeInBytes":34,"cardinality":1}`
	var d Descriptor
	if err := json.Unmarshal([]byte(in), &d); err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(d)
	if strings.ReplaceAll(string(out), `\u003c`, "<") != in {
		t.Errorf("marshal: %s", out)
	}
	if d.UniqueID() != "u0X9F0q2<2yJ-f)Gm2!e0@1" {
		t.Errorf("UniqueID %s", d.UniqueID())
	}
	p, err := d.AbsolutePath("s3://bucket/tbl/")
	if err != nil || p != "s3://bucket/tbl/deletion_vector_0229ec3d-5100-44e1-8e53-702d448da8da.bin" {
		t.Errorf("AbsolutePath %s %v", p, err)
	}
	inl := Descriptor{StorageType: "i", PathOrInlineDv: "abc", SizeInBytes: 4}
	if inl.UniqueID() != "iabc" {
		t.Error(inl.UniqueID())
	}
	if _, err := inl.AbsolutePath("/t"); err == nil {
		t.Error("inline has no path")
	}
	abs := Descriptor{StorageType: "p", PathOrInlineDv: "file:/x/y.bin"}
	if p, _ := abs.AbsolutePath("/t"); p != "file:/x/y.bin" {
		t.Error(p)
	}
}

func osFS() FS {
	return FSFunc(func(_ context.Context, p string) ([]byte, error) { return os.ReadFile(p) })
}

type goldenDV struct {
	table string
	desc  Descriptor
}

func goldenDVs(t *testing.T) []goldenDV {
	var out []goldenDV
	seen := map[string]bool{}
	for _, tbl := range []string{"dv-partitioned-with-checkpoint", "dv-with-columnmapping", "log-replay-dv-key-cases"} {
		files, _ := filepath.Glob(filepath.Join(goldenDir, tbl, "_delta_log", "*.json"))
		for _, fn := range files {
			f, err := os.Open(fn)
			if err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(f)
			sc.Buffer(nil, 1<<24)
			for sc.Scan() {
				var a struct {
					Add, Remove *struct {
						DeletionVector *Descriptor `json:"deletionVector"`
					}
				}
				if json.Unmarshal(sc.Bytes(), &a) != nil {
					continue
				}
				for _, x := range []*struct {
					DeletionVector *Descriptor `json:"deletionVector"`
				}{a.Add, a.Remove} {
					if x != nil && x.DeletionVector != nil && !seen[tbl+x.DeletionVector.UniqueID()] {
						seen[tbl+x.DeletionVector.UniqueID()] = true
						out = append(out, goldenDV{tbl, *x.DeletionVector})
					}
				}
			}
			f.Close()
		}
	}
	if len(out) < 10 {
		t.Fatalf("only %d golden DVs", len(out))
	}
	return out
}

func TestGoldenDVsByteExact(t *testing.T) {
	ctx := context.Background()
	for _, g := range goldenDVs(t) {
		root := filepath.Join(goldenDir, g.table)
		bm, err := Read(ctx, osFS(), root, &g.desc)
		if err != nil {
			t.Errorf("%s %s: %v", g.table, g.desc.UniqueID(), err)
			continue
		}
		if g.desc.StorageType != StorageUUID {
			continue
		}
		p, _ := g.desc.AbsolutePath(root)
		file, _ := os.ReadFile(p)
		data, err := SerializeBitmap(bm.Clone())
		if err != nil {
			t.Fatal(err)
		}
		off := g.desc.OffsetOrZero()
		want := file[off+4 : off+4+int64(g.desc.SizeInBytes)]
		if !bytes.Equal(data, want) {
			t.Errorf("%s: re-serialized %x, file has %x", p, data, want)
		}
		if off == 1 && len(file) == 1+4+len(data)+4 && !bytes.Equal(EncodeFile(data), file) {
			t.Errorf("%s: EncodeFile differs", p)
		}
		// RangeFS path gives the same result.
		bm2, err := Read(ctx, rangeFS{}, root, &g.desc)
		if err != nil || !bm2.Equals(bm) {
			t.Errorf("%s: range read %v", p, err)
		}
	}
	// The documented golden vector.
	d := Descriptor{StorageType: "u", PathOrInlineDv: "0X9F0q2<2yJ-f)Gm2!e0", Offset: ptr32(1), SizeInBytes: 34, Cardinality: 1}
	bm, err := Read(ctx, osFS(), filepath.Join(goldenDir, "dv-partitioned-with-checkpoint"), &d)
	if err != nil || bm.GetCardinality() != 1 || !bm.Contains(0) {
		t.Fatalf("golden DV: %v %v", bm, err)
	}
}

type rangeFS struct{}

func (rangeFS) ReadFile(_ context.Context, p string) ([]byte, error) { panic("ReadFile used") }
func (rangeFS) ReadRange(_ context.Context, p string, off, n int64) ([]byte, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	if off > int64(len(b)) {
		return nil, nil
	}
	end := min(off+n, int64(len(b)))
	return b[off:end], nil
}

func ptr32(v int32) *int32 { return &v }

func memFS(files map[string][]byte) FS {
	return FSFunc(func(_ context.Context, p string) ([]byte, error) {
		b, ok := files[p]
		if !ok {
			return nil, os.ErrNotExist
		}
		return b, nil
	})
}

func TestWriteReadRoundTrip(t *testing.T) {
	ctx := context.Background()
	sets := [][]uint64{
		{}, {0}, {1, 2, 3, 1000000}, {1 << 32, 1<<32 + 5, 7 << 40},
	}
	big := make([]uint64, 0, 200000)
	for i := uint64(0); i < 200000; i += 1 + i%3 {
		big = append(big, i)
	}
	sets = append(sets, big)
	for _, s := range sets {
		bm := roaring64.BitmapOf(s...)
		file, desc, err := Write(bm.Clone())
		if err != nil {
			t.Fatal(err)
		}
		if desc.StorageType != "u" || *desc.Offset != 1 || desc.Cardinality != int64(len(s)) || len(desc.PathOrInlineDv) != 20 {
			t.Fatalf("desc %+v", desc)
		}
		p, _ := desc.AbsolutePath("/tbl")
		got, err := Read(ctx, memFS(map[string][]byte{p: file}), "/tbl", &desc)
		if err != nil || !got.Equals(bm) {
			t.Fatalf("round trip %d values: %v", len(s), err)
		}
		inl, err := Inline(bm.Clone())
		if err != nil {
			t.Fatal(err)
		}
		got, err = Read(ctx, nil, "", &inl)
		if err != nil || !got.Equals(bm) {
			t.Fatalf("inline round trip: %v", err)
		}
	}
	// Two DVs in one file at different offsets.
	d1, _ := SerializeBitmap(roaring64.BitmapOf(1, 2))
	d2, _ := SerializeBitmap(roaring64.BitmapOf(9))
	file := EncodeFile(d1)
	off2 := int32(len(file))
	file = append(file, EncodeFile(d2)[1:]...)
	id := uuid.New()
	desc := Descriptor{StorageType: "u", PathOrInlineDv: "xy" + Z85Encode(id[:]), Offset: &off2, SizeInBytes: int32(len(d2)), Cardinality: 1}
	p, _ := desc.AbsolutePath("/t")
	if !strings.HasPrefix(p, "/t/xy/deletion_vector_") {
		t.Fatal(p)
	}
	got, err := Read(ctx, memFS(map[string][]byte{p: file}), "/t", &desc)
	if err != nil || !got.Equals(roaring64.BitmapOf(9)) {
		t.Fatalf("second DV: %v", err)
	}
}

func TestLegacyNativeFormat(t *testing.T) {
	// native: magic 1681511376, int32 count, then one 32-bit roaring per high key.
	var buf bytes.Buffer
	binary.Write(&buf, binary.LittleEndian, uint32(magicNative))
	binary.Write(&buf, binary.LittleEndian, uint32(3))
	b0 := roaring64.BitmapOf(3, 5)
	_ = b0
	for _, vals := range [][]uint32{{3, 5}, {}, {7}} {
		r := newBitmap32()
		r.AddMany(vals)
		r.WriteTo(&buf)
	}
	bm, err := DeserializeBitmap(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if !bm.Equals(roaring64.BitmapOf(3, 5, 2<<32|7)) {
		t.Fatalf("got %v", bm.ToArray())
	}
}

func TestHostileInputs(t *testing.T) {
	ctx := context.Background()
	good, _ := SerializeBitmap(roaring64.BitmapOf(1, 2, 3))
	file := EncodeFile(good)
	id := uuid.New()
	mk := func(size int32, card int64) *Descriptor {
		return &Descriptor{StorageType: "u", PathOrInlineDv: Z85Encode(id[:]), Offset: ptr32(1), SizeInBytes: size, Cardinality: card}
	}
	path, _ := mk(0, 0).AbsolutePath("/t")
	flip := func(i int) []byte { b := bytes.Clone(file); b[i] ^= 0x40; return b }
	hugeSize := bytes.Clone(file)
	binary.BigEndian.PutUint32(hugeSize[1:], 0xFFFFFFF0)
	hugeBuckets := bytes.Clone(good)
	binary.LittleEndian.PutUint64(hugeBuckets[4:], 1<<62)
	cases := map[string]struct {
		file []byte
		d    *Descriptor
	}{
		"bad crc":         {flip(len(file) - 1), mk(int32(len(good)), 3)},
		"bad data":        {flip(10), mk(int32(len(good)), 3)},
		"truncated":       {file[:len(file)-3], mk(int32(len(good)), 3)},
		"huge size":       {hugeSize, mk(int32(len(good)), 3)},
		"size mismatch":   {file, mk(int32(len(good))+1, 3)},
		"card mismatch":   {file, mk(int32(len(good)), 4)},
		"bad version":     {flip(0), mk(int32(len(good)), 3)},
		"empty":           {nil, mk(int32(len(good)), 3)},
		"huge buckets":    {EncodeFile(hugeBuckets), mk(int32(len(hugeBuckets)), 3)},
		"offset too big":  {file, &Descriptor{StorageType: "u", PathOrInlineDv: Z85Encode(id[:]), Offset: ptr32(1000), SizeInBytes: int32(len(good)), Cardinality: 3}},
		"negative offset": {file, &Descriptor{StorageType: "u", PathOrInlineDv: Z85Encode(id[:]), Offset: ptr32(-5), SizeInBytes: int32(len(good)), Cardinality: 3}},
	}
	for name, c := range cases {
		if _, err := Read(ctx, memFS(map[string][]byte{path: c.file}), "/t", c.d); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	for _, s := range []string{"", "x", "0X9F0q2<2yJ-f)Gm2!e", "0X9F0q2<2yJ-f)Gm2!e\x00"} {
		d := &Descriptor{StorageType: "u", PathOrInlineDv: s}
		if _, err := d.AbsolutePath("/t"); err == nil {
			t.Errorf("path %q accepted", s)
		}
	}
	if _, err := Read(ctx, nil, "", &Descriptor{StorageType: "q"}); err == nil {
		t.Error("unknown storage type accepted")
	}
	// crc helper sanity
	if crc32.ChecksumIEEE(good) != binary.BigEndian.Uint32(file[len(file)-4:]) {
		t.Error("crc")
	}
}

func FuzzZ85(f *testing.F) {
	f.Add([]byte("0X9F0q2<2yJ-f)Gm2!e0"))
	f.Add([]byte{0, 1, 2, 3, 255})
	f.Fuzz(func(t *testing.T, b []byte) {
		s := Z85Encode(b)
		got, err := Z85DecodeLen(s, len(b))
		if err != nil || !bytes.Equal(got, b) {
			t.Fatalf("round trip %x: %x %v", b, got, err)
		}
		if d, err := Z85Decode(string(b)); err == nil {
			if Z85Encode(d) != string(b) {
				t.Fatalf("decode/encode of %q not stable", b)
			}
		}
	})
}

func FuzzReadDV(f *testing.F) {
	for _, fn := range must(filepath.Glob(filepath.Join(goldenDir, "dv-partitioned-with-checkpoint", "*.bin"))) {
		b, _ := os.ReadFile(fn)
		f.Add(b, int32(1), int32(len(b)-9), int64(1))
	}
	d, _ := SerializeBitmap(roaring64.BitmapOf(1, 1<<33, 1<<40+9))
	f.Add(EncodeFile(d), int32(1), int32(len(d)), int64(3))
	f.Fuzz(func(t *testing.T, file []byte, off, size int32, card int64) {
		id := uuid.UUID{1, 2, 3}
		desc := &Descriptor{StorageType: "u", PathOrInlineDv: Z85Encode(id[:]), Offset: &off, SizeInBytes: size, Cardinality: card}
		p, _ := desc.AbsolutePath("/t")
		bm, err := Read(context.Background(), memFS(map[string][]byte{p: file}), "/t", desc)
		if err == nil && int64(bm.GetCardinality()) != card {
			t.Fatal("cardinality not checked")
		}
		// raw bitmap parser on the same bytes
		if bm, err := DeserializeBitmap(file); err == nil {
			_ = bm.GetCardinality()
			if _, err := SerializeBitmap(bm); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// WriteMany stores every bitmap in one file, each at its own offset, and
// each reads back from it, whole or by range.
func TestWriteMany(t *testing.T) {
	ctx := context.Background()
	sets := [][]uint64{{}, {0}, {5, 6, 7}, {1 << 33}, nil}
	for i := uint64(0); i < 50000; i += 2 {
		sets[4] = append(sets[4], i)
	}
	bms := make([]*roaring64.Bitmap, len(sets))
	for i, s := range sets {
		bms[i] = roaring64.BitmapOf(s...)
	}
	file, descs, err := WriteMany(bms)
	if err != nil {
		t.Fatal(err)
	}
	if len(descs) != len(sets) {
		t.Fatalf("%d descriptors for %d bitmaps", len(descs), len(sets))
	}
	dir := t.TempDir()
	p, _ := descs[0].AbsolutePath(dir)
	if err := os.WriteFile(p, file, 0o644); err != nil {
		t.Fatal(err)
	}
	prev := int32(0)
	for i, d := range descs {
		if d.PathOrInlineDv != descs[0].PathOrInlineDv || d.StorageType != StorageUUID {
			t.Fatalf("descriptor %d in another file: %+v", i, d)
		}
		if *d.Offset <= prev || d.Cardinality != int64(len(sets[i])) {
			t.Fatalf("descriptor %d: %+v (previous offset %d)", i, d, prev)
		}
		prev = *d.Offset
		for _, fsys := range []FS{memFS(map[string][]byte{p: file}), rangeFS{}} {
			got, err := Read(ctx, fsys, dir, &d)
			if err != nil || !got.Equals(roaring64.BitmapOf(sets[i]...)) {
				t.Fatalf("DV %d via %T: %v %v", i, fsys, got, err)
			}
		}
	}
	// the single-bitmap form is the same file layout
	one, d, err := Write(roaring64.BitmapOf(5, 6, 7))
	if err != nil || *d.Offset != 1 || len(one) != 1+4+int(d.SizeInBytes)+4 {
		t.Fatalf("Write: %d bytes, %+v, %v", len(one), d, err)
	}
}
