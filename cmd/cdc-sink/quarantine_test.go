package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/cdcsink/cdc-sink/source"
)

// dbzField is a Kafka Connect schema field.
type dbzField struct {
	Name, Type string
	Logical    string            // Connect schema name (io.debezium.time.Date, ...), optional
	Params     map[string]string // schema parameters, optional
	Items      string            // element type of an array
}

// dbzRecord builds one kcat -J line with a Debezium JSON-with-schema value
// for table public.items (topic dbz.public.items). after nil = delete.
// key nil = a record without key.
func dbzRecord(offset int64, op string, lsn int64, fields []dbzField, before, after map[string]any, key map[string]any) string {
	var fs []map[string]any
	for _, f := range fields {
		m := map[string]any{"type": f.Type, "optional": f.Name != "id", "field": f.Name}
		if f.Logical != "" {
			m["name"] = f.Logical
			m["version"] = 1
		}
		if f.Params != nil {
			m["parameters"] = f.Params
		}
		if f.Items != "" {
			m["items"] = map[string]any{"type": f.Items, "optional": true}
		}
		fs = append(fs, m)
	}
	row := func(name string) map[string]any {
		return map[string]any{"type": "struct", "fields": fs, "optional": true, "name": "dbz.public.items.Value", "field": name}
	}
	src := map[string]any{"type": "struct", "optional": false, "name": "io.debezium.connector.postgresql.Source", "field": "source",
		"fields": []map[string]any{
			{"type": "string", "optional": false, "field": "version"},
			{"type": "string", "optional": false, "field": "connector"},
			{"type": "string", "optional": false, "field": "name"},
			{"type": "int64", "optional": false, "field": "ts_ms"},
			{"type": "string", "optional": true, "field": "snapshot"},
			{"type": "string", "optional": false, "field": "db"},
			{"type": "string", "optional": false, "field": "schema"},
			{"type": "string", "optional": false, "field": "table"},
			{"type": "int64", "optional": true, "field": "txId"},
			{"type": "int64", "optional": true, "field": "lsn"},
		}}
	value := map[string]any{
		"schema": map[string]any{"type": "struct", "optional": false, "name": "dbz.public.items.Envelope", "fields": []any{
			row("before"), row("after"), src,
			map[string]any{"type": "string", "optional": false, "field": "op"},
			map[string]any{"type": "int64", "optional": true, "field": "ts_ms"},
		}},
		"payload": map[string]any{"before": before, "after": after, "op": op, "ts_ms": 1700000000000 + lsn,
			"source": map[string]any{"version": "3.6.1.Final", "connector": "postgresql", "name": "dbz", "ts_ms": 1700000000000 + lsn,
				"snapshot": "false", "db": "app", "schema": "public", "table": "items", "txId": lsn, "lsn": lsn}},
	}
	vb, _ := json.Marshal(value)
	line := map[string]any{"topic": "dbz.public.items", "partition": 0, "offset": offset, "headers": []any{}, "payload": string(vb), "key": nil}
	if key != nil {
		kb, _ := json.Marshal(map[string]any{
			"schema":  map[string]any{"type": "struct", "optional": false, "name": "dbz.public.items.Key", "fields": []any{map[string]any{"type": "int64", "optional": false, "field": "id"}}},
			"payload": key,
		})
		line["key"] = string(kb)
	}
	b, _ := json.Marshal(line)
	return string(b)
}

var itemsInt = []dbzField{{Name: "id", Type: "int64"}, {Name: "qty", Type: "int32"}, {Name: "name", Type: "string"}}
var itemsStr = []dbzField{{Name: "id", Type: "int64"}, {Name: "qty", Type: "string"}, {Name: "name", Type: "string"}}

func writeKcatLines(t *testing.T, path string, lines ...string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// quarantineFixture replays a stream with two bad records into a table and
// returns the table dir and the quarantine file:
//
//	offset 0: id 1 qty 5     ok
//	offset 1: id 2 no key    missing_key
//	offset 2: id 3 qty "x"   schema_mismatch (qty is an integer column)
//	offset 3: not JSON       malformed_json
//	offset 4: id 4 qty 7     ok
func quarantineFixture(t *testing.T) (string, string) {
	t.Helper()
	tmp := t.TempDir()
	in := filepath.Join(tmp, "in.jsonl")
	writeKcatLines(t, in,
		dbzRecord(0, "c", 100, itemsInt, nil, map[string]any{"id": 1, "qty": 5, "name": "a"}, map[string]any{"id": 1}),
		dbzRecord(1, "c", 101, itemsInt, nil, map[string]any{"id": 2, "qty": 6, "name": "b"}, nil),
		dbzRecord(2, "c", 102, itemsStr, nil, map[string]any{"id": 3, "qty": "x", "name": "c"}, map[string]any{"id": 3}),
		`{"topic":"dbz.public.items","partition":0,"offset":3,"key":"{\"id\":9}","payload":"{not json"}`,
		dbzRecord(4, "c", 104, itemsInt, nil, map[string]any{"id": 4, "qty": 7, "name": "d"}, map[string]any{"id": 4}),
	)
	table := filepath.Join(tmp, "items")
	qfile := filepath.Join(tmp, "q.jsonl")
	code, out, errOut := runCLI(t, "replay", "--from-file", in, "--table", table, "--quarantine-file", qfile, "--sink-name", "items", "--quiet")
	if code != 0 {
		t.Fatalf("replay: exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "2 live rows") || !strings.Contains(out, "3 quarantined") {
		t.Fatalf("replay: %s", out)
	}
	return table, qfile
}

func TestQuarantineAudit(t *testing.T) {
	table, qfile := quarantineFixture(t)
	_ = table
	tmp := t.TempDir()
	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     []string
		notWant  []string
	}{
		{"stats", []string{"quarantine", "stats", "--file", qfile}, 0,
			[]string{"total: 3", "by reason:", "  malformed_json   1", "  missing_key      1", "  schema_mismatch  1", "by source topic:", "  dbz.public.items  3", "by hour (UTC):"}, nil},
		{"list all", []string{"quarantine", "list", "--file", qfile}, 0,
			[]string{qfile + ":1\t", "missing_key\tdbz.public.items/0@1\titems", "schema_mismatch\tdbz.public.items/0@2", "malformed_json\tdbz.public.items/0@3", "(3 entries)"}, nil},
		{"list by reason", []string{"quarantine", "list", "--file", qfile, "--reason", "missing_key,malformed_json"}, 0,
			[]string{"missing_key", "malformed_json", "(2 entries)"}, []string{"schema_mismatch"}},
		{"list by offsets", []string{"quarantine", "list", "--file", qfile, "--offsets", "dbz.public.items:0:2-4"}, 0,
			[]string{"@2", "@3", "(2 entries)"}, []string{"@1\t"}},
		{"list by offsets any partition", []string{"quarantine", "list", "--file", qfile, "--offsets", "dbz.public.items:*:3"}, 0,
			[]string{"@3", "(1 entries)"}, nil},
		{"list by source topic", []string{"quarantine", "list", "--file", qfile, "--source-topic", "other"}, 0, []string{"(0 entries)"}, nil},
		{"list since future", []string{"quarantine", "list", "--file", qfile, "--since", "2999-01-01T00:00:00Z"}, 0, []string{"(0 entries)"}, nil},
		{"list until", []string{"quarantine", "list", "--file", qfile, "--until", "-1h"}, 0, []string{"(3 entries)"}, nil},
		{"bad reason", []string{"quarantine", "list", "--file", qfile, "--reason", "nope"}, 2, nil, nil},
		{"bad offsets", []string{"quarantine", "list", "--file", qfile, "--offsets", "x"}, 2, nil, nil},
		{"no source", []string{"quarantine", "stats"}, 2, nil, nil},
		{"show by line", []string{"quarantine", "show", "--file", qfile, "--at", "2"}, 0,
			[]string{"reason:      malformed_json", "original:    topic dbz.public.items partition 0 offset 3", "key (text, 8 bytes):\n  {\"id\":9}", "value (text, 9 bytes):\n  {not json", "sink:        items"}, nil},
		{"show full id", []string{"quarantine", "show", "--file", qfile, "--at", qfile + ":1"}, 0,
			[]string{"reason:      missing_key", "key:         null", "JSON shown indented"}, nil},
		{"show missing", []string{"quarantine", "show", "--file", qfile, "--at", "99"}, 1, nil, nil},
		{"export", []string{"quarantine", "export", "--file", qfile, "--reason", "malformed_json", "--out", filepath.Join(tmp, "exp.jsonl")}, 0,
			[]string{"exported 1 records"}, nil},
		{"export refuses existing", []string{"quarantine", "export", "--file", qfile, "--out", qfile}, 2, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, tc.args...)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.wantCode, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(out, w) {
					t.Errorf("output has %q:\n%s", w, out)
				}
			}
		})
	}
	// The export is the original record, as a kcat line without "error".
	exp, err := os.ReadFile(filepath.Join(tmp, "exp.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if string(exp) != `{"topic":"dbz.public.items","partition":0,"offset":3,"broker":-1,"key":"{\"id\":9}","payload":"{not json"}`+"\n" {
		t.Errorf("export = %s", exp)
	}
}

// Export then replay --from-file applies the exported records like the originals.
func TestQuarantineExportReplay(t *testing.T) {
	_, qfile := quarantineFixture(t)
	tmp := t.TempDir()
	exp := filepath.Join(tmp, "exp.jsonl")
	if code, out, errOut := runCLI(t, "quarantine", "export", "--file", qfile, "--reason", "missing_key", "--out", exp); code != 0 {
		t.Fatalf("export: %d %s %s", code, out, errOut)
	}
	table := filepath.Join(tmp, "t")
	code, out, errOut := runCLI(t, "replay", "--from-file", exp, "--table", table, "--sink-name", "x",
		"--key-columns", "dbz.public.items=id", "--quiet")
	if code != 0 || !strings.Contains(out, "1 live rows") {
		t.Fatalf("replay of export: %d %s %s", code, out, errOut)
	}
}

func TestQuarantineRedrive(t *testing.T) {
	table, qfile := quarantineFixture(t)
	orig, err := os.ReadFile(qfile)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	rq := func(n int) string { return filepath.Join(tmp, fmt.Sprintf("requarantine-%d.jsonl", n)) }
	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     []string
		// requarantined: the reasons of the entries written to the requarantine file
		requarantined []string
		check         func(t *testing.T)
	}{
		{"requarantine required", []string{"--table", table}, 2, nil, nil, nil},
		{"refuses to rewrite the input", []string{"--table", table, "--requarantine", qfile}, 2, nil, nil, nil},
		{"everything fails again without a fix",
			[]string{"--table", table, "--requarantine", rq(1)}, 1,
			[]string{"redrive of 3 records (3 entries)", "as sink items-redrive", "applied:      0", "failed again: 3",
				"dbz.public.items/0@1  missing_key", "dbz.public.items/0@2  schema_mismatch: ", "column qty: table has integer, change has string", "dbz.public.items/0@3  malformed_json"},
			[]string{"missing_key", "schema_mismatch", "malformed_json"}, nil},
		{"missing_key fixed by --key-columns",
			[]string{"--table", table, "--requarantine", rq(2), "--reason", "missing_key", "--key-columns", "dbz.public.items=id"}, 0,
			[]string{"applied:      1 (1 inserted", "failed again: 0"}, nil,
			func(t *testing.T) {
				_, out, _ := runCLI(t, "table", "show", table, "--columns", "id,qty")
				if sortedLines(out) != `{"id":1,"qty":5}`+"\n"+`{"id":2,"qty":6}`+"\n"+`{"id":4,"qty":7}`+"\n" {
					t.Errorf("table after redrive:\n%s", out)
				}
				// The live sink's progress is untouched; the redrive has its own txns.
				_, info, _ := runCLI(t, "table", "info", table)
				if !strings.Contains(info, "  items/dbz.public.items/0  5") || !strings.Contains(info, "  items-redrive/dbz.public.items/0  4") {
					t.Errorf("info after redrive:\n%s", info)
				}
			}},
		{"idempotent: already applied is a duplicate",
			[]string{"--table", table, "--requarantine", rq(3), "--reason", "missing_key", "--key-columns", "dbz.public.items=id"}, 0,
			[]string{"applied:      0", "already done: 1 (0 stale, 1 duplicate)"}, nil, nil},
		{"schema_mismatch still fails on the old table",
			[]string{"--table", table, "--requarantine", rq(4), "--offsets", "dbz.public.items:0:2"}, 1,
			[]string{"failed again: 1"}, []string{"schema_mismatch"}, nil},
		{"schema_mismatch fixed by a table with the right types",
			[]string{"--table", filepath.Join(tmp, "items_v2"), "--sink-name", "items-v2", "--requarantine", rq(5), "--reason", "schema_mismatch"}, 0,
			[]string{"applied:      1 (1 inserted", "failed again: 0"}, nil,
			func(t *testing.T) {
				_, out, _ := runCLI(t, "table", "show", filepath.Join(tmp, "items_v2"), "--columns", "id,qty,name")
				if out != `{"id":3,"qty":"x","name":"c"}`+"\n" {
					t.Errorf("new table:\n%s", out)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"quarantine", "redrive", "--file", qfile}, tc.args...)
			code, out, errOut := runCLI(t, args...)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.wantCode, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if tc.requarantined != nil {
				var path string
				for i, a := range tc.args {
					if a == "--requarantine" {
						path = tc.args[i+1]
					}
				}
				code, out, errOut := runCLI(t, "quarantine", "list", "--file", path)
				if code != 0 {
					t.Fatalf("list requarantine: %s", errOut)
				}
				for _, r := range tc.requarantined {
					if !strings.Contains(out, "\t"+r+"\t") {
						t.Errorf("requarantine file lacks %s:\n%s", r, out)
					}
				}
				if !strings.Contains(out, fmt.Sprintf("(%d entries)", len(tc.requarantined))) {
					t.Errorf("requarantine file:\n%s", out)
				}
			}
			if tc.check != nil {
				tc.check(t)
			}
			// The originals are never touched.
			now, err := os.ReadFile(qfile)
			if err != nil || !bytes.Equal(now, orig) {
				t.Fatalf("quarantine file changed (err %v)", err)
			}
		})
	}
}

// The same audit and redrive over a quarantine topic (in-process broker):
// the entries of the fixture's file are written to the topic with the
// quarantine Kafka writer.
func TestQuarantineKafkaTopic(t *testing.T) {
	table, qfile := quarantineFixture(t)
	es, err := quarantine.ReadFile(qfile, quarantine.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "items.quarantine"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := strings.Join(c.ListenAddrs(), ",")
	w, err := quarantine.NewKafkaWriter(quarantine.KafkaConfig{Brokers: c.ListenAddrs(), Topic: "items.quarantine",
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.Write(ctx, es); err != nil {
		t.Fatal(err)
	}
	w.Close()
	src := []string{"--brokers", brokers, "--topic", "items.quarantine"}
	rq := filepath.Join(t.TempDir(), "rq.jsonl")
	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     []string
	}{
		{"stats", []string{"stats"}, 0, []string{"total: 3", "  missing_key      1", "  dbz.public.items  3"}},
		{"list", []string{"list", "--reason", "missing_key"}, 0, []string{"items.quarantine/0@0\t", "dbz.public.items/0@1", "(1 entries)"}},
		{"show by partition@offset", []string{"show", "--at", "0@0"}, 0, []string{"reason:      missing_key", "id:          items.quarantine/0@0"}},
		{"topic required", []string{"stats", "--brokers", brokers}, 2, nil},
		{"redrive from the topic", []string{"redrive", "--table", table, "--requarantine", rq, "--reason", "missing_key",
			"--key-columns", "dbz.public.items=id"}, 0, []string{"applied:      1 (1 inserted"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"quarantine"}, tc.args...)
			if tc.name != "topic required" {
				args = append(args, src...)
			}
			code, out, errOut := runCLI(t, args...)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.wantCode, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
	// The topic still has all three entries.
	got, err := quarantine.ReadKafka(ctx, quarantine.KafkaConfig{Brokers: c.ListenAddrs(), Topic: "items.quarantine"}, quarantine.Filter{})
	if err != nil || len(got) != 3 {
		t.Fatalf("topic after redrive: %d entries, %v", len(got), err)
	}
}

// show prints binary keys/values (Avro) as a hex dump and headers inline.
func TestQuarantineShowBinary(t *testing.T) {
	var out bytes.Buffer
	e := &quarantine.Entry{At: "q.jsonl:7", Reason: quarantine.MalformedAvro, Message: "bad magic byte",
		Record: &source.Record{Topic: "t", Partition: 2, Offset: 9, Key: []byte{0, 0, 0, 0, 1, 2}, Value: []byte("plain"),
			Headers: []source.Header{{Key: "h1", Value: []byte("v")}, {Key: "h2", Value: []byte{0xff}}, {Key: "h3"}}}}
	if err := printEntry(&out, e); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"original:    topic t partition 2 offset 9",
		"  h1: \"v\"\n  h2: hex:ff\n  h3: null\n",
		"key (binary, 6 bytes, hex):\n  00000000  00 00 00 00 01 02",
		"value (text, 5 bytes):\n  plain\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("lacks %q:\n%s", want, out.String())
		}
	}
}
