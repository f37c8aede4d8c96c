package source

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// fileLines writes n random records as kcat lines, with blank lines and lines
// without coordinates among them, and returns the text and what Next reads
// from it one line at a time (the definition Poll must match).
func fileLines(t testing.TB, n int) (string, []*Record) {
	t.Helper()
	r := rand.New(rand.NewPCG(5, 6))
	var buf bytes.Buffer
	for i := range n {
		switch {
		case i%97 == 3:
			buf.WriteString(" \t\n") // blank: skipped, counted
		case i%31 == 7:
			fmt.Fprintf(&buf, `{"payload":"no coordinates %d"}`+"\n", i) // the line's defaults
		}
		if err := WriteJSONLine(&buf, randRecord(r, i)); err != nil {
			t.Fatal(err)
		}
	}
	fr := NewFileReader(strings.NewReader(buf.String()), "in", FileOptions{DefaultTopic: "dflt"})
	var want []*Record
	for {
		rec, err := fr.Next()
		if err == io.EOF {
			return buf.String(), want
		}
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, rec)
	}
}

// pollAll polls fr until it returns an error, checking every poll's size.
func pollAll(t *testing.T, fr *FileReader, max int) ([]*Record, error) {
	t.Helper()
	var got []*Record
	for {
		batch, err := fr.Poll(context.Background(), max, time.Second)
		if len(batch) > max {
			t.Fatalf("a poll of at most %d returned %d", max, len(batch))
		}
		if err != nil {
			if len(batch) > 0 {
				t.Fatalf("%d records returned with the error %v", len(batch), err)
			}
			return got, err
		}
		if len(batch) == 0 {
			t.Fatal("a poll returned neither records nor an error")
		}
		got = append(got, batch...)
	}
}

// Poll parses its lines on several goroutines: the records, their order and
// the line defaults are those of reading line by line, for any poll size and
// goroutine count, and records never alias the reader's reused line buffer
// (every poll's records are compared only after all polls are done).
func TestFileReaderPollParallelMatchesNext(t *testing.T) {
	text, want := fileLines(t, 3000)
	for _, workers := range []int{1, 2, 3, 8} {
		for _, max := range []int{1, 100, 129, 1000, 4096} {
			t.Run(fmt.Sprintf("workers=%d/max=%d", workers, max), func(t *testing.T) {
				fr := NewFileReader(strings.NewReader(text), "in", FileOptions{DefaultTopic: "dflt"})
				fr.workers = workers
				got, err := pollAll(t, fr, max)
				if err != io.EOF {
					t.Fatalf("end: %v", err)
				}
				if len(got) != len(want) {
					t.Fatalf("%d records, want %d", len(got), len(want))
				}
				for i := range want {
					equalRecords(t, want[i], got[i])
				}
			})
		}
	}
}

// A bad line: every record before it comes out (from whichever goroutine
// parsed it), then the error naming that line, sticky; with two bad lines in
// one poll, parsed by different goroutines, the first one is reported.
func TestFileReaderPollParallelBadLine(t *testing.T) {
	text, want := fileLines(t, 1000)
	lines := strings.SplitAfter(text, "\n")
	lineOf := func(rec int) int { // the 1-based line of record rec
		n := -1
		for i, l := range lines {
			if !isBlank([]byte(strings.TrimSuffix(l, "\n"))) {
				n++
			}
			if n == rec {
				return i + 1
			}
		}
		t.Fatalf("no record %d", rec)
		return 0
	}
	for _, tc := range []struct {
		name string
		bad  []int // records replaced by a bad line
	}{
		{"in the first goroutine's share", []int{10}},
		{"in the last goroutine's share", []int{900}},
		{"two, in different shares", []int{700, 300}},
		{"the very first line", []int{0}},
		{"the last line", []int{len(want) - 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			broken := append([]string(nil), lines...)
			first := len(want)
			for _, rec := range tc.bad {
				broken[lineOf(rec)-1] = `{"topic":"t","offset":-5}` + "\n"
				first = min(first, rec)
			}
			fr := NewFileReader(strings.NewReader(strings.Join(broken, "")), "dump.jsonl", FileOptions{DefaultTopic: "dflt"})
			fr.workers = 4
			got, err := pollAll(t, fr, 4096)
			var le *LineError
			if !errors.As(err, &le) || le.Line != lineOf(first) || le.File != "dump.jsonl" || !strings.Contains(err.Error(), "negative offset") {
				t.Fatalf("want the LineError of line %d, got %v", lineOf(first), err)
			}
			if len(got) != first {
				t.Fatalf("%d records before the bad one, want %d", len(got), first)
			}
			for i := range got {
				equalRecords(t, want[i], got[i])
			}
			if _, err2 := fr.Poll(context.Background(), 10, 0); err2 != err {
				t.Fatalf("error is not sticky: %v", err2)
			}
		})
	}
}

// A poll gathers at most pollBytes of lines (past its first), so a file of
// long lines is read in polls smaller than asked for, none lost.
func TestFileReaderPollBoundsBytes(t *testing.T) {
	var buf bytes.Buffer
	payload := strings.Repeat("x", 1<<20)
	const n = 40
	for i := range n {
		fmt.Fprintf(&buf, `{"topic":"t","offset":%d,"payload":"%s"}`+"\n", i, payload)
	}
	fr := NewFileReader(&buf, "big", FileOptions{})
	var polls, total int
	for {
		batch, err := fr.Poll(context.Background(), 4096, 0)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for i, rec := range batch {
			if rec.Offset != int64(total+i) || len(rec.Value) != len(payload) {
				t.Fatalf("record %d: offset %d, %d bytes", total+i, rec.Offset, len(rec.Value))
			}
		}
		if len(batch) > pollBytes>>20+1 {
			t.Fatalf("a poll of %d 1 MiB lines", len(batch))
		}
		polls++
		total += len(batch)
	}
	if total != n || polls < 3 {
		t.Fatalf("%d records in %d polls", total, polls)
	}
}

// A cancelled context: records already gathered come out, then the context's
// error, and the file can still be read on.
func TestFileReaderPollCancelled(t *testing.T) {
	text, want := fileLines(t, 200)
	fr := NewFileReader(strings.NewReader(text), "in", FileOptions{DefaultTopic: "dflt"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if recs, err := fr.Poll(ctx, 10, 0); len(recs) != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled poll: %d records, %v", len(recs), err)
	}
	got, err := pollAll(t, fr, 50)
	if err != io.EOF || len(got) != len(want) {
		t.Fatalf("after the cancelled poll: %d records, %v", len(got), err)
	}
}

// FuzzFileReaderPollMatchesNext: for any file, polls of any size parsed on
// several goroutines return what reading line by line does, the same error
// at the same line included.
func FuzzFileReaderPollMatchesNext(f *testing.F) {
	text, _ := fileLines(f, 40)
	f.Add(text, uint8(7), uint8(3))
	f.Add("{\"topic\":\"t\"}\n\n{\"topic\":\"t\",\"offset\":-1}\n{}\n", uint8(1), uint8(2))
	f.Add(strings.Repeat(`{"payload":"x"}`+"\n", 200)+"{\n", uint8(200), uint8(4))
	f.Fuzz(func(t *testing.T, text string, max, workers uint8) {
		opts := FileOptions{DefaultTopic: "dflt", MaxLineBytes: 1 << 12}
		seq := NewFileReader(strings.NewReader(text), "f", opts)
		var want []*Record
		var wantErr error
		for {
			rec, err := seq.Next()
			if err != nil {
				wantErr = err
				break
			}
			want = append(want, rec)
		}
		fr := NewFileReader(strings.NewReader(text), "f", opts)
		fr.workers = 1 + int(workers%6)
		var got []*Record
		var err error
		for {
			var batch []*Record
			batch, err = fr.Poll(context.Background(), 1+int(max), 0)
			if err != nil {
				break
			}
			got = append(got, batch...)
		}
		if err.Error() != wantErr.Error() || len(got) != len(want) {
			t.Fatalf("Poll: %d records then %v; Next: %d then %v", len(got), err, len(want), wantErr)
		}
		for i := range want {
			equalRecords(t, want[i], got[i])
		}
	})
}
