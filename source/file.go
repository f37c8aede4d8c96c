package source

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
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

// FileReader streams Records from a kcat -J file, one line at a time, in bounded memory.
// Empty (whitespace-only) lines are skipped. It is not safe for concurrent use.
type FileReader struct {
	name   string
	closer io.Closer
	sc     *bufio.Scanner
	opts   FileOptions
	line   int
	err    error
}

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
	return &FileReader{name: name, sc: sc, opts: opts}
}

// Line returns the number of the last line read (1-based; 0 before the first).
func (r *FileReader) Line() int { return r.line }

// Next returns the next record, io.EOF at the end of the file, or a *LineError (fatal: every
// later call returns it again).
func (r *FileReader) Next() (*Record, error) {
	if r.err != nil {
		return nil, r.err
	}
	for r.sc.Scan() {
		r.line++
		b := r.sc.Bytes()
		if isBlank(b) {
			continue
		}
		rec, err := ParseLine(b, LineDefaults{Topic: r.opts.DefaultTopic, Offset: int64(r.line - 1)})
		if err != nil {
			r.err = &LineError{File: r.name, Line: r.line, Err: err}
			return nil, r.err
		}
		return rec, nil
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

// Poll returns up to max records, mirroring Consumer.Poll so the runtime can treat a file as a
// source. maxWait is ignored (a file never waits). At the end it returns the last records with
// a nil error, then (nil, io.EOF); a *LineError likewise comes after the records before it.
func (r *FileReader) Poll(ctx context.Context, max int, maxWait time.Duration) ([]*Record, error) {
	if max <= 0 {
		max = 1
	}
	var out []*Record
	for len(out) < max {
		if err := ctx.Err(); err != nil {
			if len(out) > 0 {
				return out, nil
			}
			return nil, err
		}
		rec, err := r.Next()
		if err != nil {
			if len(out) > 0 {
				return out, nil // the error is sticky: the next call returns it
			}
			return nil, err
		}
		out = append(out, rec)
	}
	return out, nil
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
