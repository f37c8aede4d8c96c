package parquetio

import (
	"bufio"
	"context"
	"encoding/json"
	"github.com/cdcsink/cdc-sink/internal/golden"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/cdcsink/cdc-sink/delta/dv"
	"github.com/cdcsink/cdc-sink/delta/schema"
)

var goldenDir = golden.Dir()

type goldenFile struct {
	Path            string // relative, decoded
	PartitionValues map[string]*string
	DV              *dv.Descriptor
	Stats           string
}

type goldenTable struct {
	Root       string
	Schema     *schema.StructType
	Partitions []string
	Files      []goldenFile
}

// loadGolden replays the JSON commits of a golden table (test-only mini log
// replay; the real one lives in package delta).
func loadGolden(t testing.TB, name string) *goldenTable {
	t.Helper()
	root := filepath.Join(goldenDir, name)
	commits, _ := filepath.Glob(filepath.Join(root, "_delta_log", "*.json"))
	if len(commits) == 0 {
		t.Fatalf("no commits in %s", root)
	}
	sort.Strings(commits)
	gt := &goldenTable{Root: root}
	live := map[string]goldenFile{}
	var order []string
	for _, c := range commits {
		f, err := os.Open(c)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<26)
		for sc.Scan() {
			var a struct {
				MetaData *struct {
					SchemaString     string   `json:"schemaString"`
					PartitionColumns []string `json:"partitionColumns"`
				} `json:"metaData"`
				Add *struct {
					Path            string             `json:"path"`
					PartitionValues map[string]*string `json:"partitionValues"`
					DeletionVector  *dv.Descriptor     `json:"deletionVector"`
					Stats           string             `json:"stats"`
				} `json:"add"`
				Remove *struct {
					Path           string         `json:"path"`
					DeletionVector *dv.Descriptor `json:"deletionVector"`
				} `json:"remove"`
			}
			if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
				t.Fatalf("%s: %v", c, err)
			}
			switch {
			case a.MetaData != nil:
				s, err := schema.Parse(a.MetaData.SchemaString)
				if err != nil {
					t.Fatal(err)
				}
				gt.Schema, gt.Partitions = s, a.MetaData.PartitionColumns
			case a.Add != nil:
				p, err := url.PathUnescape(a.Add.Path)
				if err != nil {
					t.Fatal(err)
				}
				key := p + "|" + a.Add.DeletionVector.UniqueID()
				if _, ok := live[key]; !ok {
					order = append(order, key)
				}
				live[key] = goldenFile{Path: p, PartitionValues: a.Add.PartitionValues, DV: a.Add.DeletionVector, Stats: a.Add.Stats}
			case a.Remove != nil:
				p, _ := url.PathUnescape(a.Remove.Path)
				delete(live, p+"|"+a.Remove.DeletionVector.UniqueID())
			}
		}
		f.Close()
	}
	for _, k := range order {
		if f, ok := live[k]; ok {
			gt.Files = append(gt.Files, f)
		}
	}
	return gt
}

func osDVFS() dv.FS {
	return dv.FSFunc(func(_ context.Context, p string) ([]byte, error) { return os.ReadFile(p) })
}

// expectedPartition converts a partition value string independently of
// ParsePartitionValue, for the golden tables' partition column types.
func expectedPartition(t *testing.T, v *string, typ schema.DataType) any {
	if v == nil || *v == "" || *v == HiveDefaultPartition {
		return nil
	}
	switch typ {
	case schema.Integer, schema.Long:
		n, err := strconv.ParseInt(*v, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return json.Number(strconv.FormatInt(n, 10))
	case schema.String:
		return *v
	case schema.Timestamp, schema.TimestampNTZ:
		for _, l := range []string{"2006-01-02 15:04:05", "2006-01-02 15:04:05.000", "2006-01-02 15:04:05.000000"} {
			if tm, err := time.Parse(l, *v); err == nil {
				return json.Number(strconv.FormatInt(tm.UnixMicro(), 10))
			}
		}
	}
	t.Fatalf("no expectation for partition value %q of type %s", *v, typ.TypeName())
	return nil
}

var goldenReadTables = []string{
	"parquet-all-types", "parquet-all-types-legacy-format", "decimal-various-scale-precision",
	"parquet-decimal-dictionaries", "parquet-decimal-dictionaries-v2", "parquet-decimal-type",
	"kernel-timestamp-INT96", "kernel-timestamp-TIMESTAMP_MICROS", "kernel-timestamp-TIMESTAMP_MILLIS",
	"data-reader-timestamp_ntz", "data-reader-array-primitives", "data-reader-map",
	"data-reader-nested-struct", "dv-partitioned-with-checkpoint",
}

func TestGoldenReadMatchesPyarrow(t *testing.T) {
	ctx := context.Background()
	for _, name := range goldenReadTables {
		t.Run(name, func(t *testing.T) {
			gt := loadGolden(t, name)
			if len(gt.Files) == 0 {
				t.Fatal("no live files")
			}
			part := map[string]bool{}
			for _, p := range gt.Partitions {
				part[p] = true
			}
			var total, deletedTotal int
			var paths []string
			for _, gf := range gt.Files {
				paths = append(paths, filepath.Join(gt.Root, gf.Path))
			}
			oracle := pyarrowRowsMany(t, paths)
			for _, gf := range gt.Files {
				path := filepath.Join(gt.Root, gf.Path)
				var deleted *roaring64.Bitmap
				if gf.DV != nil {
					bm, err := dv.Read(ctx, osDVFS(), gt.Root, gf.DV)
					if err != nil {
						t.Fatal(err)
					}
					deleted = bm
				}
				f, err := os.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				st, _ := f.Stat()
				recs, err := ReadAll(ctx, f, st.Size(), gt.Schema, ReadOptions{
					PartitionValues: gf.PartitionValues, Deleted: deleted, WithRowIndex: true, BatchSize: 7, Name: gf.Path,
				})
				f.Close()
				if err != nil {
					t.Fatalf("%s: %v", gf.Path, err)
				}
				var nrows int64
				for _, r := range recs {
					nrows += r.NumRows()
				}
				step := 1
				if !thorough() && nrows > 20000 {
					step = 101 // sample big files unless CDC_SINK_THOROUGH=1
				}
				got := canonRowsStep(t, recs, step)
				for _, r := range recs {
					r.Release()
				}
				want, ok := oracle[path]
				if !ok {
					t.Fatalf("no pyarrow rows for %s", path)
				}
				var wantKept []map[string]any
				for i, w := range want {
					if deleted != nil && deleted.Contains(uint64(i)) {
						deletedTotal++
						continue
					}
					w[RowIndexColumn] = json.Number(strconv.Itoa(i))
					for _, p := range gt.Partitions {
						pf, _ := gt.Schema.Field(p)
						w[p] = expectedPartition(t, gf.PartitionValues[p], pf.Type)
					}
					wantKept = append(wantKept, w)
				}
				if len(got) != len(wantKept) {
					t.Fatalf("%s: %d rows, pyarrow (minus DV) %d", gf.Path, len(got), len(wantKept))
				}
				for i := 0; i < len(got); i += step {
					if !reflect.DeepEqual(got[i], wantKept[i]) {
						t.Fatalf("%s row %d:\n go      %s\n pyarrow %s", gf.Path, i, jsonString(got[i]), jsonString(wantKept[i]))
					}
				}
				total += len(got)
			}
			t.Logf("%d files, %d rows equal to pyarrow (%d deleted by DVs)", len(gt.Files), total, deletedTotal)
			if name == "dv-partitioned-with-checkpoint" && deletedTotal == 0 {
				t.Fatal("expected DV deletions")
			}
		})
	}
}
