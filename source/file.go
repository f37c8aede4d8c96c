package source

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"time"
)

// DefaultMaxLineBytes bounds one line of a kcat -J file (FileOptions.MaxLineBytes).
const DefaultMaxLineBytes = 64 << 20

// FileOptions configures a FileReader.
type FileOptions struct {
	// DefaultTopic is the topic of lines without "topic" (the CLI's --topic flag). Lines
	// without "partition" get partition 0 and lines without "offset" get the 0-based line
	// index (line number − 1) as their offset.
	DefaultTopic string
	// MaxLineBytes bounds the memory one line may take; a longer line is a fatal error.
	// 0 means DefaultMaxLineBytes.
	MaxLineBytes int
}

// LineError is a fatal error about one line of a kcat -J file: the line is not a Kafka record,
// so it cannot be quarantined, and reading stops. Its text is "file:line: cause".
type LineError struct {
	File string
	Line int // 1-based
	Err  error
}

// Error returns "file:line: cause".
func (e *LineError) Error() string { return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err) }

// Unwrap returns the cause.
func (e *LineError) Unwrap() error { return e.Err }

// pollBytes bounds the line bytes one Poll gathers (beyond its first line) before parsing
// them.
const pollBytes = 16 << 20

// parallelLines is the fewest lines per goroutine worth parsing apart.
const parallelLines = 64

// FileReader streams Records from a kcat -J file in bounded memory. Empty (whitespace-only)
// lines are skipped. It is not safe for concurrent use.
type FileReader struct {
	name   string
	closer io.Closer
	sc     *bufio.Scanner
	opts   FileOptions
	line   int
	err    error

	// Poll's lines, back to back, and where each ends (reused: records never alias them).
	// Poll gathers its lines first and parses them on up to workers goroutines: line
	// parsing is the reader's whole cost, and the runtime's reading goroutine is the longer
	// stage of a file replay (bench/README.md).
	lines   []byte
	spans   []lineSpan
	workers int
	// known is the topic of the last line parsed: the lines after it that name
	// the same topic share its string.
	known string
}

type lineSpan struct{ end, line int }

// OpenFile opens path for reading as a kcat -J file.
func OpenFile(path string, opts FileOptions) (*FileReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	r := NewFileReader(f, path, opts)
	r.closer = f
	return r, nil
}

// NewFileReader reads kcat -J lines from r; name is used in error messages (e.g. "<stdin>").
func NewFileReader(r io.Reader, name string, opts FileOptions) *FileReader {
	if opts.MaxLineBytes <= 0 {
		opts.MaxLineBytes = DefaultMaxLineBytes
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, min(64<<10, opts.MaxLineBytes)), opts.MaxLineBytes)
	return &FileReader{name: name, sc: sc, opts: opts, workers: runtime.GOMAXPROCS(0)}
}

// Line returns the number of the last line read (1-based; 0 before the first).
func (r *FileReader) Line() int { return r.line }

// Next returns the next record, io.EOF at the end of the file, or a *LineError (fatal: every
// later call returns it again).
func (r *FileReader) Next() (*Record, error) {
	b, err := r.scan()
	if err != nil {
		return nil, err
	}
	return r.parse(b, r.line)
}

// scan returns the next non-blank line (valid until the next scan) or the sticky error: io.EOF
// at the end, a *LineError for a line too long or a failed read.
func (r *FileReader) scan() ([]byte, error) {
	if r.err != nil {
		return nil, r.err
	}
	for r.sc.Scan() {
		r.line++
		if b := r.sc.Bytes(); !isBlank(b) {
			return b, nil
		}
	}
	if err := r.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			err = fmt.Errorf("line longer than %d bytes", r.opts.MaxLineBytes)
		}
		r.err = &LineError{File: r.name, Line: r.line + 1, Err: err}
		return nil, r.err
	}
	r.err = io.EOF
	return nil, io.EOF
}

// parse parses line number n; a bad line is a sticky *LineError.
func (r *FileReader) parse(b []byte, n int) (*Record, error) {
	rec, err := ParseLine(b, LineDefaults{Topic: r.opts.DefaultTopic, Offset: int64(n - 1), known: r.known})
	if err != nil {
		r.err = &LineError{File: r.name, Line: n, Err: err}
		return nil, r.err
	}
	r.known = rec.Topic
	return rec, nil
}

// Poll returns up to max records, mirroring Consumer.Poll so the runtime can treat a file as a
// source. maxWait is ignored (a file never waits); a poll may return fewer than max records
// (it gathers at most pollBytes of lines). At the end it returns the last records with a nil
// error, then (nil, io.EOF); a *LineError likewise comes after the records before it.
func (r *FileReader) Poll(ctx context.Context, max int, maxWait time.Duration) ([]*Record, error) {
	if max <= 0 {
		max = 1
	}
	if r.err != nil {
		return nil, r.err
	}
	if cap(r.lines) > 4*pollBytes {
		r.lines = nil // one huge line is not kept for the rest of the file
	}
	r.lines, r.spans = r.lines[:0], r.spans[:0]
	var ctxErr error
	for len(r.spans) < max && len(r.lines) < pollBytes {
		if ctxErr = ctx.Err(); ctxErr != nil {
			break
		}
		b, err := r.scan()
		if err != nil {
			break // sticky: returned after the records gathered
		}
		r.lines = append(r.lines, b...)
		r.spans = append(r.spans, lineSpan{end: len(r.lines), line: r.line})
	}
	out := r.parseAll()
	switch {
	case len(out) > 0:
		return out, nil
	case r.err != nil:
		return nil, r.err
	default:
		return nil, ctxErr
	}
}

// parseAll parses the gathered lines, on several goroutines when there are many, and returns
// the records before the first bad line (whose error becomes the sticky one: it comes before
// any end of the file found after it).
func (r *FileReader) parseAll() []*Record {
	n := len(r.spans)
	out := make([]*Record, n)
	w := min(r.workers, n/parallelLines)
	if w < 2 {
		start := 0
		for i, sp := range r.spans {
			rec, err := r.parse(r.lines[start:sp.end], sp.line)
			if err != nil {
				return out[:i]
			}
			out[i], start = rec, sp.end
		}
		return out
	}
	bad := make([]int, w) // per goroutine: the index of its first bad line, or n
	errs := make([]error, w)
	per := (n + w - 1) / w
	var wg sync.WaitGroup
	for g := range w {
		lo, hi := g*per, min((g+1)*per, n)
		bad[g] = n
		wg.Go(func() {
			start := 0
			if lo > 0 {
				start = r.spans[lo-1].end
			}
			known := r.known
			for i := lo; i < hi; i++ {
				sp := r.spans[i]
				rec, err := ParseLine(r.lines[start:sp.end], LineDefaults{Topic: r.opts.DefaultTopic, Offset: int64(sp.line - 1), known: known})
				if err != nil {
					bad[g], errs[g] = i, err
					return
				}
				out[i], start, known = rec, sp.end, rec.Topic
			}
		})
	}
	wg.Wait()
	if last := out[n-1]; last != nil {
		r.known = last.Topic
	}
	for g := range w {
		if i := bad[g]; i < n {
			r.err = &LineError{File: r.name, Line: r.spans[i].line, Err: errs[g]}
			return out[:i]
		}
	}
	return out
}

// ReadFile reads every record of a kcat -J file (small files: fixtures,
// caches). Errors are those of OpenFile and Next.
func ReadFile(path string, opts FileOptions) ([]*Record, error) {
	r, err := OpenFile(path, opts)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out []*Record
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
}

// Close closes the underlying file if OpenFile opened it.
func (r *FileReader) Close() error {
	if r.closer != nil {
		c := r.closer
		r.closer = nil
		return c.Close()
	}
	return nil
}

func isBlank(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\t' && c != '\r' {
			return false
		}
	}
	return true
}
