package parquetio

import (
	"encoding/binary"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
)

// int96Col reads a top-level INT96 timestamp column directly as
// microseconds. pqarrow converts INT96 to nanoseconds, which fails outside
// 1677..2262 (e.g. the 0001-01-01 / 9999-12-31 sentinels Spark writes fine).
type int96Col struct {
	pf     *file.Reader
	col    int
	maxDef int16
	rg     int
	cr     *file.Int96ColumnChunkReader
	left   int64
	vals   []parquet.Int96
	defs   []int16
}

const julianUnixEpoch = 2440588

// int96Micros converts an INT96 (nanos of day LE u64, Julian day LE u32) to
// microseconds since the Unix epoch.
func int96Micros(v parquet.Int96) (int64, error) {
	nanos := binary.LittleEndian.Uint64(v[:8])
	day := int64(binary.LittleEndian.Uint32(v[8:]))
	d := day - julianUnixEpoch
	if d > 106_000_000 || d < -106_000_000 || nanos >= 86_400_000_000_000*2 {
		return 0, fmt.Errorf("INT96 timestamp out of range (day %d, nanos %d)", day, nanos)
	}
	return d*86_400_000_000 + int64(nanos/1000), nil
}

func (c *int96Col) read(mem memory.Allocator, n int64, want arrow.DataType) (arrow.Array, error) {
	tt, ok := want.(*arrow.TimestampType)
	if !ok {
		return nil, fmt.Errorf("INT96 column cannot be read as %s", want)
	}
	out := &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: tt.TimeZone}
	b := array.NewTimestampBuilder(mem, out)
	defer b.Release()
	b.Reserve(int(n))
	var got int64
	for got < n {
		if c.cr == nil || c.left == 0 {
			if c.rg >= c.pf.NumRowGroups() {
				return nil, fmt.Errorf("INT96 column ended after %d rows", got)
			}
			rgr := c.pf.RowGroup(c.rg)
			c.rg++
			c.left = rgr.NumRows()
			ccr, err := rgr.Column(c.col)
			if err != nil {
				return nil, err
			}
			cr, ok := ccr.(*file.Int96ColumnChunkReader)
			if !ok {
				return nil, fmt.Errorf("column %d is not INT96", c.col)
			}
			c.cr = cr
			continue
		}
		want := min(n-got, c.left, 64*1024)
		if int64(len(c.vals)) < want {
			c.vals = make([]parquet.Int96, want)
			c.defs = make([]int16, want)
		}
		var defs []int16
		if c.maxDef > 0 {
			defs = c.defs[:want]
		}
		total, nv, err := c.cr.ReadBatch(want, c.vals[:want], defs, nil)
		if err != nil {
			return nil, err
		}
		if total == 0 {
			return nil, fmt.Errorf("INT96 column ended early (%d rows left in row group)", c.left)
		}
		k := 0
		for i := int64(0); i < total; i++ {
			if defs != nil && defs[i] < c.maxDef {
				b.UnsafeAppendBoolToBitmap(false)
				continue
			}
			if k >= nv {
				return nil, fmt.Errorf("INT96 column: definition levels and values disagree")
			}
			us, err := int96Micros(c.vals[k])
			if err != nil {
				return nil, err
			}
			k++
			b.UnsafeAppend(arrow.Timestamp(us))
		}
		got += total
		c.left -= total
	}
	return b.NewArray(), nil
}
