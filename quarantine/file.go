package quarantine

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/cdcsink/cdc-sink/source"
)

// File format: one entry per line, the kcat -J line of the original record (source.Encode,
// with key_b64/payload_b64/headers_b64 for bytes that are not UTF-8) plus
//
//	"error":{"class":"malformed_json","message":"...","sink":"orders","batch":17,"time":"2026-01-02T03:04:05.123456789Z"}
//
// with "rule":"<name>" and "version":"<source version>" after "time" when a
// quality rule rejected the record.

type fileError struct {
	Class   *string `json:"class"`
	Message string  `json:"message"`
	Sink    string  `json:"sink"`
	Batch   int64   `json:"batch"`
	Time    string  `json:"time"`
	Rule    string  `json:"rule"`
	Version string  `json:"version"`
}

// AppendLine appends e as one quarantine file line (with its trailing newline) to dst.
func AppendLine(dst []byte, e *Entry) []byte {
	dst = append(dst, '{')
	dst = source.AppendJSONFields(dst, e.Record)
	dst = append(dst, `,"error":{"class":`...)
	dst = appendJSONString(dst, string(e.Reason))
	dst = append(dst, `,"message":`...)
	dst = appendJSONString(dst, e.Message)
	dst = append(dst, `,"sink":`...)
	dst = appendJSONString(dst, e.Sink)
	dst = append(dst, `,"batch":`...)
	dst = strconv.AppendInt(dst, e.BatchID, 10)
	dst = append(dst, `,"time":`...)
	dst = appendJSONString(dst, formatTime(e.Time))
	if e.Rule != "" {
		dst = append(dst, `,"rule":`...)
		dst = appendJSONString(dst, e.Rule)
	}
	if e.Version != "" {
		dst = append(dst, `,"version":`...)
		dst = appendJSONString(dst, e.Version)
	}
	return append(dst, "}}\n"...)
}

func appendJSONString(dst []byte, s string) []byte {
	b, _ := json.Marshal(s) // cannot fail for a string; invalid UTF-8 becomes U+FFFD
	return append(dst, b...)
}

// ParseLine decodes one quarantine file line (without its newline).
func ParseLine(line []byte) (Entry, error) {
	rec, err := source.ParseLine(line, source.LineDefaults{})
	if err != nil {
		return Entry{}, err
	}
	var l struct {
		Error *fileError `json:"error"`
	}
	if err := json.Unmarshal(line, &l); err != nil {
		return Entry{}, err
	}
	if l.Error == nil || l.Error.Class == nil {
		return Entry{}, errors.New(`not a quarantine line: no "error" object with a "class"`)
	}
	e := Entry{Record: rec, Reason: Reason(*l.Error.Class), Message: l.Error.Message,
		Sink: l.Error.Sink, BatchID: l.Error.Batch, Rule: l.Error.Rule, Version: l.Error.Version}
	if e.Time, err = parseTime(l.Error.Time); err != nil {
		return Entry{}, fmt.Errorf("error.time: %w", err)
	}
	return e, nil
}

// FileWriter appends entries to a quarantine file. Safe for concurrent use.
type FileWriter struct {
	mu   sync.Mutex
	f    *os.File
	path string
}

// NewFileWriter opens (creating with mode 0640 if needed) path for appending.
func NewFileWriter(path string) (*FileWriter, error) {
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("quarantine: %w", err)
	}
	if errors.Is(statErr, os.ErrNotExist) {
		// Make the new file's directory entry durable too, and the mode exact despite umask.
		_ = f.Chmod(0o640)
		if d, err := os.Open(filepath.Dir(path)); err == nil {
			_ = d.Sync()
			d.Close()
		}
	}
	return &FileWriter{f: f, path: path}, nil
}

// Write appends one line per entry in a single write and fsyncs. If the write or the fsync
// fails, the file is truncated back to its previous size (no partial line is left) and a
// transient error is returned.
func (w *FileWriter) Write(ctx context.Context, entries []Entry) error {
	if len(entries) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return Transient(err)
	}
	var buf []byte
	now := time.Now()
	for i := range entries {
		e := entries[i] // a copy: the caller's slice is not modified
		if e.Record == nil {
			return fmt.Errorf("quarantine: entry %d has no record", i)
		}
		if e.Time.IsZero() {
			e.Time = now
		}
		buf = AppendLine(buf, &e)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return errors.New("quarantine: file writer closed")
	}
	st, err := w.f.Stat()
	if err != nil {
		return Transient(fmt.Errorf("quarantine: %w", err))
	}
	if _, err = w.f.Write(buf); err == nil {
		err = w.f.Sync()
	}
	if err != nil {
		_ = w.f.Truncate(st.Size())
		return Transient(fmt.Errorf("quarantine: writing %s: %w", w.path, err))
	}
	return nil
}

// Close closes the file.
func (w *FileWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return nil
	}
	err := w.f.Close()
	w.f = nil
	return err
}

// ScanFile calls fn for every entry of a quarantine file, in file order, with Entry.At set to
// "path:line". A malformed line stops the scan with a *source.LineError; an error from fn stops
// it and is returned.
func ScanFile(path string, fn func(Entry) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("quarantine: %w", err)
	}
	defer f.Close()
	return scanLines(f, path, fn)
}

func scanLines(r io.Reader, name string, fn func(Entry) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), source.DefaultMaxLineBytes)
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(trimSpace(b)) == 0 {
			continue
		}
		e, err := ParseLine(b)
		if err != nil {
			return &source.LineError{File: name, Line: line, Err: err}
		}
		e.At = name + ":" + strconv.Itoa(line)
		if err := fn(e); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return &source.LineError{File: name, Line: line + 1, Err: err}
	}
	return nil
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}

// ReadFile returns the entries of a quarantine file that match f.
func ReadFile(path string, f Filter) ([]Entry, error) {
	var out []Entry
	err := ScanFile(path, func(e Entry) error {
		if f.Match(&e) {
			out = append(out, e)
		}
		return nil
	})
	return out, err
}
