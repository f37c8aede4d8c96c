// Building the key index on open: files read and decoded in parallel, their rows indexed in file order.

package merge

import (
	"context"
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cdcsink/cdc-sink/versioning"
)

// indexWorkers is how many files indexFiles reads at a time (tests set 1:
// the plain loop).
var indexWorkers = min(4, max(2, runtime.GOMAXPROCS(0)))

// A scanChunk holds up to scanChunkRows decoded live rows of one file, or
// about scanChunkBytes of their keys (vars for tests).
var (
	scanChunkRows  = 1 << 14
	scanChunkBytes = 4 << 20
)

type scanChunk struct {
	keys []byte // back to back
	ends []int  // of each key in keys
	rows []int32
	vers []versioning.Version
	del  []bool
}

func (c *scanChunk) add(key []byte, row int, v versioning.Version, deleted bool) {
	c.keys = append(c.keys, key...)
	c.ends = append(c.ends, len(c.keys))
	c.rows = append(c.rows, int32(row))
	c.vers = append(c.vers, v)
	c.del = append(c.del, deleted)
}

func (c *scanChunk) full() bool { return len(c.rows) >= scanChunkRows || len(c.keys) >= scanChunkBytes }

func (c *scanChunk) each(fn rowFunc) {
	start := 0
	for i, end := range c.ends {
		fn(c.keys[start:end], int(c.rows[i]), c.vers[i], c.del[i])
		start = end
	}
}

func (c *scanChunk) reset() {
	c.keys, c.ends, c.rows, c.vers, c.del = c.keys[:0], c.ends[:0], c.rows[:0], c.vers[:0], c.del[:0]
}

// indexFiles indexes every file of st as indexFile over them in order
// would, with the same result: up to indexWorkers goroutines read and
// decode the next files (scanFile) and stream their rows, in chunks, to
// this one, which indexes them in file order. The decoding (Parquet,
// keys, versions) so overlaps with the indexing, and with reads from
// object storage. Memory: the columns of the files being read, and a few
// chunks per file.
func (t *Table) indexFiles(ctx context.Context, st *state) error {
	st.index.Reserve(st.indexHint())
	n := len(st.files)
	workers := min(indexWorkers, n)
	if workers <= 1 {
		for id := range n {
			if err := t.indexFile(ctx, st, int32(id)); err != nil {
				return err
			}
		}
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	type chunkOrErr struct {
		c   *scanChunk
		err error
	}
	outs := make([]chan chunkOrErr, n) // closed when the file is done
	for i := range outs {
		outs[i] = make(chan chunkOrErr, 2)
	}
	free := make(chan *scanChunk, 4*workers)
	var next atomic.Int64
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := int(next.Add(1) - 1); id < n; id = int(next.Add(1) - 1) {
				out := outs[id]
				send := func(m chunkOrErr) bool {
					select {
					case out <- m:
						return true
					case <-ctx.Done():
						return false
					}
				}
				chunk := func() *scanChunk {
					select {
					case c := <-free:
						return c
					default:
						return &scanChunk{}
					}
				}
				c, stopped := chunk(), false
				err := t.ops.scanFile(ctx, st, st.files[id], func(key []byte, row int, v versioning.Version, deleted bool) {
					if stopped {
						return
					}
					if c.add(key, row, v, deleted); c.full() {
						stopped = !send(chunkOrErr{c: c})
						c = chunk()
					}
				})
				switch {
				case stopped:
				case err != nil:
					send(chunkOrErr{err: err})
				case len(c.rows) > 0:
					send(chunkOrErr{c: c})
				}
				close(out)
				if stopped || err != nil {
					return
				}
			}
		}()
	}
	for id := range n {
		fn := st.fileRows(int32(id))
		for m := range outs[id] {
			if m.err != nil {
				return m.err
			}
			m.c.each(fn)
			m.c.reset()
			select {
			case free <- m.c:
			default:
			}
		}
		// a worker that stopped early (canceled) closes its file unfinished
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// indexHint is how many keys indexing the files will add at most: the
// live rows (numRecords in the add's stats, less the deletion vector) of
// the files that go into the key index (fileRows). 0 when a file has no
// numRecords: then the index grows as it fills.
func (st *state) indexHint() int {
	var n int64
	for _, fs := range st.files {
		if st.located(fs) {
			continue
		}
		r, ok := numRecords(fs.add.Stats)
		if !ok || r > 64*max(fs.add.Size, 1) {
			return 0 // none, or not believable (a row takes more than 1/64 byte of a file)
		}
		if fs.dv != nil {
			r -= int64(fs.dv.GetCardinality())
		}
		n += max(r, 0)
	}
	return int(min(n, math.MaxInt32))
}

// numRecords reads "numRecords" from an add's stats JSON without parsing
// the rest (the column bounds): a hint, so a stats string it cannot read is
// no error, just no hint.
func numRecords(stats string) (int64, bool) {
	const field = `"numRecords":`
	i := strings.Index(stats, field)
	if i < 0 {
		return 0, false
	}
	s := strings.TrimLeft(stats[i+len(field):], " ")
	j := 0
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	v, err := strconv.ParseInt(s[:j], 10, 64)
	if err != nil {
		return 0, false
	}
	return v, true
}
