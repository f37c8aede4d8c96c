package parquetio

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
	"github.com/apache/arrow-go/v18/arrow"

	"github.com/cdcsink/cdc-sink/delta/schema"
)

// FuzzReadParquet: corrupt files must produce errors, never panics.
func FuzzReadParquet(f *testing.F) {
	st := mustSchema(f, allTypesSchema)
	rec := buildRecord(f, schema.ToArrow(st), 0, 20)
	var buf bytes.Buffer
	if _, err := WriteFile(context.Background(), &buf, st, []arrow.RecordBatch{rec}, WriteOptions{}); err != nil {
		f.Fatal(err)
	}
	rec.Release()
	f.Add(buf.Bytes(), uint16(0), byte(0))
	for _, g := range []string{"parquet-all-types-legacy-format", "kernel-timestamp-INT96", "data-reader-map", "type-widening", "type-widening-nested"} {
		files, _ := filepath.Glob(filepath.Join(goldenDir, g, "*.parquet"))
		files2, _ := filepath.Glob(filepath.Join(goldenDir, g, "*", "*.parquet"))
		for _, p := range append(files, files2...)[:1] {
			b, err := os.ReadFile(p)
			if err == nil {
				f.Add(b, uint16(0), byte(0))
			}
		}
	}
	schemas := fuzzSchemas(f)
	f.Fuzz(func(t *testing.T, data []byte, pos uint16, xor byte) {
		// Mutate one byte at a chosen position too (helps reach page data).
		if len(data) > 0 && xor != 0 {
			data = bytes.Clone(data)
			data[int(pos)%len(data)] ^= xor
		}
		for _, sch := range schemas {
			recs, err := ReadAll(context.Background(), bytes.NewReader(data), int64(len(data)), sch, ReadOptions{Deleted: roaring64.BitmapOf(1, 3), WithRowIndex: true, Name: "fuzz.parquet"})
			var pe *PanicError
			if errors.As(err, &pe) {
				// Recovered arrow-go panic: acceptable (it is an error), but log it.
				t.Logf("recovered: %v", pe.Value)
			}
			for _, r := range recs {
				r.Release()
			}
		}
	})
}

// fuzzSchemas are the read schemas FuzzReadParquet reads every input with;
// the widened ones read narrow files as wide types (type widening).
func fuzzSchemas(tb testing.TB) []*schema.StructType {
	return []*schema.StructType{mustSchema(tb, allTypesSchema), loadGolden(tb, "parquet-all-types").Schema, loadGolden(tb, "data-reader-map").Schema,
		loadGolden(tb, "type-widening").Schema, loadGolden(tb, "type-widening-nested").Schema}
}

// TestChunkOutsideFile: a footer whose column chunk has a negative length
// (FuzzReadParquet's crasher a31cf22370c057dc: arrow-go panicked in a
// struct field's reader goroutine and the process died) is an error naming
// the file, row group and column, not a recovered panic.
func TestChunkOutsideFile(t *testing.T) {
	b, err := os.ReadFile("testdata/fuzz/FuzzReadParquet/a31cf22370c057dc")
	if err != nil {
		t.Fatal(err)
	}
	// The corpus format: a header line, then one Go literal per argument.
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 4 {
		t.Fatalf("corpus file: %d lines", len(lines))
	}
	raw, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
	if err != nil {
		t.Fatal(err)
	}
	pos, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(lines[2], "uint16("), ")"))
	if err != nil {
		t.Fatal(err)
	}
	x, _, _, err := strconv.UnquoteChar(strings.TrimSuffix(strings.TrimPrefix(lines[3], "byte('"), "')"), '\'')
	if err != nil {
		t.Fatal(err)
	}
	data := []byte(raw)
	data[pos%len(data)] ^= byte(x)
	outside := 0
	for _, sch := range fuzzSchemas(t) {
		recs, err := ReadAll(context.Background(), bytes.NewReader(data), int64(len(data)), sch, ReadOptions{Name: "bad.parquet"})
		for _, r := range recs {
			r.Release()
		}
		var pe *PanicError
		if errors.As(err, &pe) {
			t.Errorf("recovered panic, want a checked error: %v", pe.Value)
		}
		if err != nil && strings.Contains(err.Error(), "lies outside the file") {
			if !strings.Contains(err.Error(), "bad.parquet") || !strings.Contains(err.Error(), "row group 0") {
				t.Errorf("error does not name the file and row group: %v", err)
			}
			outside++
		}
	}
	if outside == 0 {
		t.Fatal("no read refused the chunk outside the file")
	}
}

// TestCorruptFilesNoPanic flips bytes throughout real files (ours and
// Spark's): every read must end in data or an error, never a crash.
func TestCorruptFilesNoPanic(t *testing.T) {
	ctx := context.Background()
	st := mustSchema(t, allTypesSchema)
	rec := buildRecord(t, schema.ToArrow(st), 0, 20)
	var buf bytes.Buffer
	if _, err := WriteFile(ctx, &buf, st, []arrow.RecordBatch{rec}, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.Release()
	type input struct {
		data []byte
		sch  *schema.StructType
	}
	inputs := []input{{buf.Bytes(), st}}
	for _, g := range []string{"parquet-all-types-legacy-format", "decimal-various-scale-precision", "data-reader-map"} {
		gt := loadGolden(t, g)
		b, err := os.ReadFile(filepath.Join(gt.Root, gt.Files[0].Path))
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, input{b, gt.Schema})
	}
	stride := 13
	if testing.Short() {
		stride = 97
	}
	var reads, errs, panics int
	for _, in := range inputs {
		for pos := 0; pos < len(in.data); pos += stride {
			d := bytes.Clone(in.data)
			d[pos] ^= 0x5a
			recs, err := ReadAll(ctx, bytes.NewReader(d), int64(len(d)), in.sch, ReadOptions{Deleted: roaring64.BitmapOf(1), WithRowIndex: true})
			for _, r := range recs {
				r.Release()
			}
			reads++
			var pe *PanicError
			if errors.As(err, &pe) {
				panics++
			} else if err != nil {
				errs++
			}
		}
	}
	t.Logf("%d corrupted reads: %d errors (%d of them recovered arrow-go panics), rest decoded", reads, errs+panics, panics)
}
