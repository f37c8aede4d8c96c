package parquetio

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"

	"github.com/cdcsink/cdc-sink/delta/schema"
)

const benchSchema = `{"type":"struct","fields":[
{"name":"id","type":"long","nullable":false,"metadata":{}},
{"name":"qty","type":"integer","nullable":true,"metadata":{}},
{"name":"price","type":"double","nullable":true,"metadata":{}},
{"name":"amount","type":"decimal(18,2)","nullable":true,"metadata":{}},
{"name":"status","type":"string","nullable":true,"metadata":{}},
{"name":"name","type":"string","nullable":true,"metadata":{}},
{"name":"updated_at","type":"timestamp","nullable":true,"metadata":{}},
{"name":"day","type":"date","nullable":true,"metadata":{}},
{"name":"_cdc_deleted","type":"boolean","nullable":false,"metadata":{}},
{"name":"_cdc_version","type":"long","nullable":false,"metadata":{}}
]}`

const benchRows = 1 << 20

func benchRecords(b *testing.B, st *schema.StructType) ([]arrow.RecordBatch, int64) {
	asch := schema.ToArrow(st)
	var recs []arrow.RecordBatch
	var bytesTotal int64
	statuses := []string{"new", "paid", "shipped", "cancelled"}
	const batch = 64 * 1024
	for start := 0; start < benchRows; start += batch {
		rb := array.NewRecordBuilder(memory.DefaultAllocator, asch)
		for r := start; r < start+batch; r++ {
			rb.Field(0).(*array.Int64Builder).Append(int64(r))
			if r%10 == 0 {
				rb.Field(1).(*array.Int32Builder).AppendNull()
			} else {
				rb.Field(1).(*array.Int32Builder).Append(int32(r % 1000))
			}
			rb.Field(2).(*array.Float64Builder).Append(float64(r%10000) * 0.37)
			rb.Field(3).(*array.Decimal128Builder).Append(decimal128.FromI64(int64(r*7919) % 100000000))
			rb.Field(4).(*array.StringBuilder).Append(statuses[r%4])
			rb.Field(5).(*array.StringBuilder).Append(fmt.Sprintf("customer-%08d", (r*2654435761)%100000000))
			rb.Field(6).(*array.TimestampBuilder).Append(arrow.Timestamp(1_700_000_000_000_000 + int64(r)*1_000_003))
			rb.Field(7).(*array.Date32Builder).Append(arrow.Date32(19000 + r%365))
			rb.Field(8).(*array.BooleanBuilder).Append(r%50 == 0)
			rb.Field(9).(*array.Int64Builder).Append(int64(r) << 8)
		}
		rec := rb.NewRecordBatch()
		rb.Release()
		for _, c := range rec.Columns() {
			for _, buf := range c.Data().Buffers() {
				if buf != nil {
					bytesTotal += int64(buf.Len())
				}
			}
		}
		recs = append(recs, rec)
	}
	return recs, bytesTotal
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// BenchmarkWriteParquet: 1Mi rows x 10 mixed columns, snappy, with stats.
// MB/s is of in-memory Arrow data.
func BenchmarkWriteParquet(b *testing.B) {
	st := mustSchema(b, benchSchema)
	recs, size := benchRecords(b, st)
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	for _, codec := range []string{Snappy, Zstd} {
		b.Run(codec, func(b *testing.B) {
			b.SetBytes(size)
			b.ReportAllocs()
			var out int64
			for i := 0; i < b.N; i++ {
				cw := &countWriter{}
				fs, err := WriteFile(context.Background(), cw, st, recs, WriteOptions{Compression: codec})
				if err != nil {
					b.Fatal(err)
				}
				if fs.NumRecords != benchRows || fs.StatsJSON == "" {
					b.Fatal("bad stats")
				}
				out = cw.n
			}
			b.ReportMetric(float64(benchRows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
			b.ReportMetric(float64(out)/(1<<20), "fileMB")
		})
	}
}

// BenchmarkScan: read back the 1Mi-row file (all columns + row index).
func BenchmarkScan(b *testing.B) {
	st := mustSchema(b, benchSchema)
	recs, _ := benchRecords(b, st)
	var buf bytes.Buffer
	if _, err := WriteFile(context.Background(), &buf, st, recs, WriteOptions{}); err != nil {
		b.Fatal(err)
	}
	for _, r := range recs {
		r.Release()
	}
	data := buf.Bytes()
	open := func(context.Context, string) (parquet.ReaderAtSeeker, int64, io.Closer, error) {
		return bytes.NewReader(data), int64(len(data)), nil, nil
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var n int64
		for rec, err := range ScanFiles(context.Background(), open, []File{{Path: "bench.parquet"}}, st, ScanOptions{WithRowIndex: true}) {
			if err != nil {
				b.Fatal(err)
			}
			n += rec.NumRows()
			rec.Release()
		}
		if n != benchRows {
			b.Fatalf("rows %d", n)
		}
	}
	b.ReportMetric(float64(benchRows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}
