// Reading classic and V2 checkpoints (Parquet) into a snapshot's actions.

package delta

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/cdcsink/cdc-sink/delta/parquetio"
)

// cpSink receives the actions of a checkpoint file. Pointers passed to it
// are only valid during the call (the reader reuses them).
type cpSink interface {
	grow(rows int64) // capacity hint: rows in the file
	add(a *Add)
	remove(r *Remove)
	txn(t Txn)
	metadata(m *Metadata)
	protocol(p *Protocol)
	domain(d DomainMetadata)
	sidecar(path string)
}

// checkpointColumns are the top-level checkpoint columns we read; others
// (and add.stats_parsed / partitionValues_parsed) are skipped at the leaf level.
var checkpointColumns = map[string]bool{
	"add": true, "remove": true, "txn": true, "metaData": true,
	"protocol": true, "domainMetadata": true, "sidecar": true,
}

// maxCheckpointBytes bounds what we are willing to open (fuzzing guard).
const maxCheckpointBytes = 16 << 30

// readCheckpointParquet streams one checkpoint (or sidecar) parquet file
// into sink. It never panics: arrow-go panics on some corrupt inputs, which
// we turn into ErrCorruptLog.
func readCheckpointParquet(ctx context.Context, store Storage, key string, sink cpSink) (err error) {
	r, size, err := store.Open(ctx, key)
	if err != nil {
		return fmt.Errorf("open checkpoint %s: %w", key, err)
	}
	defer r.Close()
	return readCheckpointFrom(ctx, key, r, size, sink)
}

// checkpointErr classifies a failure while decoding a checkpoint: the
// storage's transient errors (a reset during a ranged read) and cancellation
// keep their class, so the caller retries instead of treating a healthy
// checkpoint as corrupt; anything else is ErrCorruptLog.
func checkpointErr(name string, err error) error {
	if IsTransient(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("read checkpoint %s: %w", name, err)
	}
	return fmt.Errorf("%w: checkpoint %s: %v", ErrCorruptLog, name, err)
}

func readCheckpointFrom(ctx context.Context, name string, r parquet.ReaderAtSeeker, size int64, sink cpSink) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: checkpoint %s: parquet decoder panic: %v", ErrCorruptLog, name, p)
		}
	}()
	if size < 12 || size > maxCheckpointBytes {
		return fmt.Errorf("%w: checkpoint %s: implausible size %d", ErrCorruptLog, name, size)
	}
	props := parquet.NewReaderProperties(memory.DefaultAllocator)
	props.BufferedStreamEnabled = true
	props.BufferSize = 1 << 20
	pr, err := file.NewParquetReader(r, file.WithReadProps(props))
	if err != nil {
		return checkpointErr(name, err)
	}
	defer pr.Close()
	sch := pr.MetaData().Schema
	var leaves []int
	for i := 0; i < sch.NumColumns(); i++ {
		cp := sch.Column(i).ColumnPath()
		if len(cp) == 0 || !checkpointColumns[cp[0]] {
			continue
		}
		if len(cp) > 1 && cp[0] == "add" && (cp[1] == "stats_parsed" || cp[1] == "partitionValues_parsed") {
			continue
		}
		leaves = append(leaves, i)
	}
	if len(leaves) == 0 {
		return fmt.Errorf("%w: checkpoint %s has none of the action columns", ErrCorruptLog, name)
	}
	if err := parquetio.CheckChunks(pr.MetaData(), leaves, size); err != nil {
		return checkpointErr(name, err)
	}
	fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{BatchSize: 64 << 10}, memory.DefaultAllocator)
	if err != nil {
		return checkpointErr(name, err)
	}
	sink.grow(pr.NumRows())
	rr, err := fr.GetRecordReader(ctx, leaves, nil)
	if err != nil {
		return checkpointErr(name, err)
	}
	defer rr.Release()
	for {
		rec, err := rr.Read()
		if rec != nil && rec.NumRows() > 0 {
			if derr := decodeCheckpointBatch(rec.Schema().Fields(), rec.Columns(), int(rec.NumRows()), sink); derr != nil {
				return checkpointErr(name, derr)
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return checkpointErr(name, err)
		}
		if rec == nil {
			break
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
	}
	return nil
}

func decodeCheckpointBatch(fields []arrow.Field, cols []arrow.Array, n int, sink cpSink) error {
	var add, rem, txn, meta, proto, dom, side *array.Struct
	for i, f := range fields {
		s, ok := cols[i].(*array.Struct)
		if !ok {
			continue
		}
		switch f.Name {
		case "add":
			add = s
		case "remove":
			rem = s
		case "txn":
			txn = s
		case "metaData":
			meta = s
		case "protocol":
			proto = s
		case "domainMetadata":
			dom = s
		case "sidecar":
			side = s
		}
	}
	if add != nil {
		path, pv, size, mt, dc := strCol(add, "path"), mapCol(add, "partitionValues"), intCol(add, "size"), intCol(add, "modificationTime"), boolCol(add, "dataChange")
		stats, tags, dv := strCol(add, "stats"), strMapCol(add, "tags"), dvCol(add, "deletionVector")
		brid, drcv, clus := intCol(add, "baseRowId"), intCol(add, "defaultRowCommitVersion"), strCol(add, "clusteringProvider")
		var a Add
		for i := 0; i < n; i++ {
			if add.IsNull(i) {
				continue
			}
			p, ok := path(i)
			if !ok || p == "" {
				return fmt.Errorf("row %d: add without path", i)
			}
			a = Add{Path: p, PartitionValues: pv(i), Tags: tags(i), DeletionVector: dv(i)}
			a.Size, _ = size(i)
			a.ModificationTime, _ = mt(i)
			a.DataChange, _ = dc(i)
			a.Stats, _ = stats(i)
			a.BaseRowID = optInt(brid(i))
			a.DefaultRowCommitVersion = optInt(drcv(i))
			a.ClusteringProvider, _ = clus(i)
			sink.add(&a)
		}
	}
	if rem != nil {
		path, ts, dc, efm := strCol(rem, "path"), intCol(rem, "deletionTimestamp"), boolCol(rem, "dataChange"), boolCol(rem, "extendedFileMetadata")
		pv, size, dv := mapCol(rem, "partitionValues"), intCol(rem, "size"), dvCol(rem, "deletionVector")
		brid, drcv := intCol(rem, "baseRowId"), intCol(rem, "defaultRowCommitVersion")
		for i := 0; i < n; i++ {
			if rem.IsNull(i) {
				continue
			}
			p, ok := path(i)
			if !ok || p == "" {
				return fmt.Errorf("row %d: remove without path", i)
			}
			r := Remove{Path: p, DeletionTimestamp: optInt(ts(i)), PartitionValues: pv(i), Size: optInt(size(i)), DeletionVector: dv(i),
				BaseRowID: optInt(brid(i)), DefaultRowCommitVersion: optInt(drcv(i))}
			r.DataChange, _ = dc(i)
			if b, ok := efm(i); ok {
				r.ExtendedFileMetadata = &b
			}
			sink.remove(&r)
		}
	}
	if txn != nil {
		app, ver, lu := strCol(txn, "appId"), intCol(txn, "version"), intCol(txn, "lastUpdated")
		for i := 0; i < n; i++ {
			if txn.IsNull(i) {
				continue
			}
			id, ok := app(i)
			if !ok {
				return fmt.Errorf("row %d: txn without appId", i)
			}
			v, _ := ver(i)
			sink.txn(Txn{AppID: id, Version: v, LastUpdated: optInt(lu(i))})
		}
	}
	if meta != nil {
		id, name, desc, ss := strCol(meta, "id"), strCol(meta, "name"), strCol(meta, "description"), strCol(meta, "schemaString")
		pc, conf, ct := listCol(meta, "partitionColumns"), strMapCol(meta, "configuration"), intCol(meta, "createdTime")
		format := childStruct(meta, "format")
		prov, opts := strCol(format, "provider"), strMapCol(format, "options")
		for i := 0; i < n; i++ {
			if meta.IsNull(i) {
				continue
			}
			m := Metadata{Configuration: conf(i), CreatedTime: optInt(ct(i))}
			m.ID, _ = id(i)
			m.Name, _ = name(i)
			m.Description, _ = desc(i)
			m.SchemaString, _ = ss(i)
			m.PartitionColumns, _ = pc(i)
			if format != nil && !format.IsNull(i) {
				m.Format.Provider, _ = prov(i)
				m.Format.Options = opts(i)
			}
			sink.metadata(&m)
		}
	}
	if proto != nil {
		rv, wv, rf, wf := intCol(proto, "minReaderVersion"), intCol(proto, "minWriterVersion"), listCol(proto, "readerFeatures"), listCol(proto, "writerFeatures")
		for i := 0; i < n; i++ {
			if proto.IsNull(i) {
				continue
			}
			r, ok1 := rv(i)
			w, ok2 := wv(i)
			if !ok1 || !ok2 || r <= 0 || w <= 0 {
				return fmt.Errorf("row %d: protocol without versions", i)
			}
			p := Protocol{MinReaderVersion: int32(r), MinWriterVersion: int32(w)}
			p.ReaderFeatures, _ = rf(i)
			p.WriterFeatures, _ = wf(i)
			sink.protocol(&p)
		}
	}
	if dom != nil {
		d, c, r := strCol(dom, "domain"), strCol(dom, "configuration"), boolCol(dom, "removed")
		for i := 0; i < n; i++ {
			if dom.IsNull(i) {
				continue
			}
			var dm DomainMetadata
			var ok bool
			if dm.Domain, ok = d(i); !ok {
				return fmt.Errorf("row %d: domainMetadata without domain", i)
			}
			dm.Configuration, _ = c(i)
			dm.Removed, _ = r(i)
			sink.domain(dm)
		}
	}
	if side != nil {
		p := strCol(side, "path")
		for i := 0; i < n; i++ {
			if side.IsNull(i) {
				continue
			}
			if s, ok := p(i); ok {
				sink.sidecar(s)
			}
		}
	}
	return nil
}
