// Writing Parquet data files with their statistics, and deletion vectors, as add actions.

package delta

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
	"github.com/apache/arrow-go/v18/arrow"

	"github.com/cdcsink/cdc-sink/delta/dv"
	"github.com/cdcsink/cdc-sink/delta/parquetio"
	"github.com/cdcsink/cdc-sink/delta/schema"
)

// WriteDataFile writes recs as a new Parquet data file (unique name, never
// overwriting) under the table, in the Hive partition directory given by
// partitionValues (keyed by logical column name), and returns the add action
// to commit (with stats). In column-mapped tables the file's columns, its
// stats and the add's partitionValues use physical names, as the protocol
// requires.
// The file is invisible to readers until the add is committed.
func (s *Snapshot) WriteDataFile(ctx context.Context, recs []arrow.RecordBatch, partitionValues map[string]*string) (Add, error) {
	sch, err := s.Schema()
	if err != nil {
		return Add{}, err
	}
	var buf bytes.Buffer
	st, err := parquetio.WriteFile(ctx, &buf, sch, recs, parquetio.WriteOptions{PartitionColumns: s.metadata.PartitionColumns})
	if err != nil {
		return Add{}, fmt.Errorf("write data file: %w", err)
	}
	// Column-mapped tables key partition values (and name partition
	// directories) by physical name; callers pass logical names.
	partKey := make(map[string]string, len(s.metadata.PartitionColumns))
	for _, c := range s.metadata.PartitionColumns {
		partKey[c] = c
		if f, _ := sch.Field(c); f != nil {
			if p, ok := f.Metadata[schema.ColumnMappingPhysicalNameKey].(string); ok && p != "" {
				partKey[c] = p
			}
		}
	}
	value := func(c string) *string {
		if v, ok := partitionValues[c]; ok {
			return v
		}
		return partitionValues[partKey[c]]
	}
	dir := ""
	for _, c := range s.metadata.PartitionColumns {
		v := "__HIVE_DEFAULT_PARTITION__"
		if p := value(c); p != nil && *p != "" {
			v = hiveEscape(*p)
		}
		dir += hiveEscape(partKey[c]) + "=" + v + "/"
	}
	rel := dir + "part-00000-" + newUUID() + "-c000.snappy.parquet"
	if err := s.table.store.PutIfAbsent(ctx, s.table.Key(rel), buf.Bytes()); err != nil {
		return Add{}, fmt.Errorf("write data file %s: %w", rel, err)
	}
	pv := map[string]*string{}
	for _, c := range s.metadata.PartitionColumns {
		pv[partKey[c]] = value(c)
	}
	return Add{Path: (&url.URL{Path: rel}).EscapedPath(), PartitionValues: pv, Size: int64(buf.Len()),
		ModificationTime: time.Now().UnixMilli(), DataChange: true, Stats: st.StatsJSON}, nil
}

// hiveEscape escapes partition directory names like Hive/Spark do.
func hiveEscape(s string) string {
	var b []byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c == 0x7f || bytes.IndexByte([]byte("\"#%'*/:=?\\{[]^"), c) >= 0 {
			b = append(b, fmt.Sprintf("%%%02X", c)...)
			continue
		}
		b = append(b, c)
	}
	return string(b)
}

// PutDataFile stores data (an encoded Parquet file, e.g. from parquetio) as
// a new data file with a unique name, never overwriting, in the Hive
// partition directory of partitionValues (partitionColumns order), and
// returns its add action (dataChange=true, modificationTime now): the one
// place data files are named for writers that encode on their own
// (streaming, or a schema not committed yet). Column names are as they go
// in the log (physical names in column-mapped tables).
func (t *Table) PutDataFile(ctx context.Context, data []byte, statsJSON string, partitionColumns []string, partitionValues map[string]*string) (Add, error) {
	dir := ""
	for _, c := range partitionColumns {
		v := "__HIVE_DEFAULT_PARTITION__"
		if p := partitionValues[c]; p != nil && *p != "" {
			v = hiveEscape(*p)
		}
		dir += hiveEscape(c) + "=" + v + "/"
	}
	rel := dir + "part-00000-" + newUUID() + "-c000.snappy.parquet"
	if err := t.store.PutIfAbsent(ctx, t.Key(rel), data); err != nil {
		return Add{}, fmt.Errorf("write data file %s: %w", rel, err)
	}
	pv := map[string]*string{}
	for _, c := range partitionColumns {
		pv[c] = partitionValues[c]
	}
	return Add{Path: (&url.URL{Path: rel}).EscapedPath(), PartitionValues: pv, Size: int64(len(data)),
		ModificationTime: time.Now().UnixMilli(), DataChange: true, Stats: statsJSON}, nil
}

// WriteDeletionVector writes bm (deleted physical row indexes, which must
// include any rows deleted by the file's current DV) as a new DV file and
// returns its descriptor. To apply it, commit
// Remove{old add incl. old DV} + Add{same path, DeletionVector: desc}.
func (t *Table) WriteDeletionVector(ctx context.Context, bm *roaring64.Bitmap) (*DeletionVector, error) {
	desc, _, err := t.writeDV(ctx, bm)
	return desc, err
}

// writeDV stores bm as a new DV file.
func (t *Table) writeDV(ctx context.Context, bm *roaring64.Bitmap) (*DeletionVector, int64, error) {
	descs, n, err := t.writeDVs(ctx, []*roaring64.Bitmap{bm})
	if err != nil {
		return nil, 0, err
	}
	return &descs[0], n, nil
}

// writeDVs stores bms in one new DV file (a new file past MaxDVFileBytes;
// a bitmap larger than that gets a file of its own) and returns their
// descriptors, in order, and the bytes written. A batch that hides rows in
// many data files stores one object instead of one per file: a put each
// was 25 file syncs per 10k-change batch at 10M rows on local disk, and as
// many requests on an object store.
func (t *Table) writeDVs(ctx context.Context, bms []*roaring64.Bitmap) ([]DeletionVector, int64, error) {
	descs := make([]DeletionVector, 0, len(bms))
	var written int64
	for lo := 0; lo < len(bms); {
		hi, size := lo+1, bms[lo].GetSerializedSizeInBytes()
		for hi < len(bms) {
			next := bms[hi].GetSerializedSizeInBytes()
			if size+next > MaxDVFileBytes {
				break
			}
			size += next
			hi++
		}
		data, ds, err := dv.WriteMany(bms[lo:hi])
		if err != nil {
			return nil, 0, fmt.Errorf("write deletion vectors: %w", err)
		}
		rel, err := ds[0].RelativePath()
		if err != nil {
			return nil, 0, err
		}
		if err := t.store.PutIfAbsent(ctx, t.Key(rel), data); err != nil {
			return nil, 0, fmt.Errorf("write deletion vectors %s: %w", rel, err)
		}
		written += int64(len(data))
		descs = append(descs, ds...)
		lo = hi
	}
	return descs, written, nil
}

// ReplaceDeletionVector writes bm (which must include the rows already
// deleted by add's current DV) as a new DV file and returns the pair that
// swaps it in: Remove{add with its old DV} and Add{same file, new DV}, plus
// the DV file's size. The file's min/max still bound its live rows but are
// no longer tight, so the stats say so (as Spark does).
func (t *Table) ReplaceDeletionVector(ctx context.Context, add Add, bm *roaring64.Bitmap, now time.Time) (Add, Remove, int64, error) {
	nas, rms, n, err := t.ReplaceDeletionVectors(ctx, []Add{add}, []*roaring64.Bitmap{bm}, now)
	if err != nil {
		return Add{}, Remove{}, 0, err
	}
	return nas[0], rms[0], n, nil
}

// ReplaceDeletionVectors is ReplaceDeletionVector for many files at once:
// bms[i] for adds[i], all in one DV file (writeDVs). It returns the pairs in
// the order of adds and the bytes written.
func (t *Table) ReplaceDeletionVectors(ctx context.Context, adds []Add, bms []*roaring64.Bitmap, now time.Time) ([]Add, []Remove, int64, error) {
	if len(adds) != len(bms) {
		return nil, nil, 0, fmt.Errorf("replace deletion vectors: %d files, %d bitmaps", len(adds), len(bms))
	}
	descs, written, err := t.writeDVs(ctx, bms)
	if err != nil {
		return nil, nil, 0, err
	}
	nas := make([]Add, len(adds))
	rms := make([]Remove, len(adds))
	for i, a := range adds {
		rms[i] = RemoveFile(a, now)
		nas[i] = a
		nas[i].DeletionVector = &descs[i]
		nas[i].DataChange = true
		nas[i].Stats = strings.Replace(a.Stats, `"tightBounds":true`, `"tightBounds":false`, 1)
	}
	return nas, rms, written, nil
}

// MaxDVFileBytes is the size past which ReplaceDeletionVectors starts
// another DV file: readers fetch a shared file whole (dvCache), so it
// stays far below the format's 2 GiB and within what the cache keeps.
const MaxDVFileBytes = 8 << 20

// ReadDeletionVector loads the deleted-row bitmap of an add (empty when none).
func (t *Table) ReadDeletionVector(ctx context.Context, d *DeletionVector) (*roaring64.Bitmap, error) {
	return dv.Read(ctx, t.dvFS(), t.path, d)
}

// dvFS reads DV files through the table's cache.
func (t *Table) dvFS() dv.FS {
	return dv.FSFunc(func(ctx context.Context, key string) ([]byte, error) {
		if b, ok := t.dvs.get(key); ok {
			return b, nil
		}
		b, err := t.store.Get(ctx, key)
		if err == nil {
			t.dvs.put(key, b)
		}
		return b, err
	})
}

// dvCache keeps recently read DV files. One file holds the DVs of every
// data file one batch touched (ReplaceDeletionVectors): loading a table
// reads each of them, and without the cache would fetch the same object
// once per data file. DV files never change (new name for every write),
// so an entry is never stale; the cache holds at most dvCacheBytes.
type dvCache struct {
	mu    sync.Mutex
	files map[string][]byte
	bytes int
}

const dvCacheBytes = 32 << 20

func (c *dvCache) get(key string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.files[key]
	return b, ok
}

func (c *dvCache) put(key string, b []byte) {
	if len(b) > dvCacheBytes/2 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bytes+len(b) > dvCacheBytes {
		// dropped whole: the files a load reads together were written
		// together, so the ones just read are the ones still wanted
		c.files, c.bytes = nil, 0
	}
	if c.files == nil {
		c.files = map[string][]byte{}
	}
	if _, ok := c.files[key]; !ok {
		c.files[key] = b
		c.bytes += len(b)
	}
}
