package parquetio

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	pqschema "github.com/apache/arrow-go/v18/parquet/schema"
)

func toInt96(us int64) parquet.Int96 {
	day := floorDiv(us, 86_400_000_000)
	nanos := (us - day*86_400_000_000) * 1000
	var v parquet.Int96
	binary.LittleEndian.PutUint64(v[:8], uint64(nanos))
	binary.LittleEndian.PutUint32(v[8:], uint32(day+julianUnixEpoch))
	return v
}

// TestInt96FarDates: INT96 values outside the nanosecond range (years 0001
// and 9999, as Spark writes them) read exactly, across row groups.
func TestInt96FarDates(t *testing.T) {
	ts, _ := pqschema.NewPrimitiveNode("ts", parquet.Repetitions.Optional, parquet.Types.Int96, -1, -1)
	id, _ := pqschema.NewPrimitiveNode("id", parquet.Repetitions.Required, parquet.Types.Int32, -1, -1)
	root, _ := pqschema.NewGroupNode("spark_schema", parquet.Repetitions.Required, pqschema.FieldList{ts, id}, -1)
	var buf bytes.Buffer
	pw := file.NewParquetWriter(&buf, root)
	values := []int64{farPast, farFuture, pre1970, 0, -1, 1_700_000_000_123_456}
	var want []int64
	for rg := 0; rg < 3; rg++ {
		rgw, err := pw.AppendRowGroupChecked()
		if err != nil {
			t.Fatal(err)
		}
		var vals []parquet.Int96
		var defs []int16
		var ids []int32
		for i, v := range values {
			ids = append(ids, int32(rg*10+i))
			if i == 3 && rg == 1 {
				defs = append(defs, 0)
				want = append(want, -999)
				continue
			}
			defs = append(defs, 1)
			vals = append(vals, toInt96(v))
			want = append(want, v)
		}
		cw, _ := rgw.NextColumn()
		if _, err := cw.(*file.Int96ColumnChunkWriter).WriteBatch(vals, defs, nil); err != nil {
			t.Fatal(err)
		}
		cw.Close()
		cw, _ = rgw.NextColumn()
		if _, err := cw.(*file.Int32ColumnChunkWriter).WriteBatch(ids, nil, nil); err != nil {
			t.Fatal(err)
		}
		cw.Close()
		rgw.Close()
	}
	if err := pw.Close(); err != nil {
		t.Fatal(err)
	}
	sch := mustSchema(t, `{"type":"struct","fields":[{"name":"id","type":"integer","nullable":false,"metadata":{}},{"name":"ts","type":"timestamp","nullable":true,"metadata":{}}]}`)
	recs, err := ReadAll(context.Background(), bytes.NewReader(buf.Bytes()), int64(buf.Len()), sch, ReadOptions{BatchSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	rows := canonRows(t, recs)
	if len(rows) != len(want) {
		t.Fatalf("%d rows", len(rows))
	}
	for i, r := range rows {
		if want[i] == -999 {
			if r["ts"] != nil {
				t.Errorf("row %d: want null, got %v", i, r["ts"])
			}
			continue
		}
		if jsonString(r["ts"]) != jsonString(want[i]) {
			t.Errorf("row %d: %v want %d", i, r["ts"], want[i])
		}
	}
	path := filepath.Join(t.TempDir(), "int96.parquet")
	os.WriteFile(path, buf.Bytes(), 0o644)
	py := pyarrowRows(t, path)
	for i := range py {
		if jsonString(py[i]["ts"]) != jsonString(rows[i]["ts"]) {
			t.Errorf("row %d: pyarrow %v, ours %v", i, py[i]["ts"], rows[i]["ts"])
		}
	}
}
