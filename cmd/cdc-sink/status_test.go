package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/pipeline"
	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/cdcsink/cdc-sink/source"
	"github.com/cdcsink/cdc-sink/status"
	"github.com/cdcsink/cdc-sink/tablerows"
)

// `status --tables` reads version, rows and offsets from the tables.
func TestStatusTables(t *testing.T) {
	table, _ := quarantineFixture(t) // 2 live rows, offsets 0..4 of partition 0
	tb, err := tablerows.Open(context.Background(), table)
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "status", "--tables", table, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var st status.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if st.Sink != "items" || len(st.Tables) != 1 || st.Tables[0].Version != tb.Version() || st.Tables[0].Live != 2 || st.Tables[0].LastCommit.IsZero() {
		t.Fatalf("status %+v", st)
	}
	if len(st.Partitions) != 1 || st.Partitions[0] != (status.Partition{Topic: "dbz.public.items", Partition: 0, Offset: 5, Lag: -1, Table: tb.Dir}) {
		t.Fatalf("partitions %+v", st.Partitions)
	}
	code, out, _ = runCLI(t, "status", "--tables", table, table)
	if code != 0 || strings.Count(out, tb.Dir) != 2 || !strings.Contains(out, "dbz.public.items  0          5            -") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	for _, args := range [][]string{{"status"}, {"status", "--url", "http://x", "--tables", table}, {"status", table}} {
		if code, _, _ := runCLI(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	if code, _, errOut := runCLI(t, "status", "--tables", t.TempDir()); code != 1 || !strings.Contains(errOut, "not a Delta table") {
		t.Errorf("not a table: exit %d: %s", code, errOut)
	}
}

// `status --url` prints what a sink's /status.json says.
func TestStatusURL(t *testing.T) {
	rec := status.NewRecorder("live", status.Options{})
	rec.SetReady(true)
	rec.BatchDone(&pipeline.Report{Records: 42, DurationMs: 12, Tables: []pipeline.TableReport{
		{Table: "/lake/orders", Result: &merge.Result{Committed: true, Version: 9, BatchID: 4, Inserted: 40}}}})
	rec.SetRows("/lake/orders", 40, 2)
	rec.SetOffset("/lake/orders", "loja.public.orders", 1, 77)
	rec.SetLag("loja.public.orders", 1, 3)
	rec.Quarantined([]quarantine.Entry{{Record: &source.Record{Topic: "loja.public.orders", Partition: 1, Offset: 3}, Reason: quarantine.RuleViolation, Rule: "positive_amount", Message: "amount -1"},
		{Record: &source.Record{Topic: "loja.public.orders", Partition: 1, Offset: 5}, Reason: quarantine.MalformedJSON, Message: "bad"}})
	rec.Failed(errors.New("commit failed: timeout"))
	srv := httptest.NewServer(rec.Handler())
	defer srv.Close()
	code, out, errOut := runCLI(t, "status", "--url", srv.URL)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"sink live: retrying (1 consecutive failures)",
		"commit failed: timeout",
		"totals: 42 records, 1 batches, 40 inserted",
		"/lake/orders  9        4      40    2",
		"loja.public.orders  1          77           3",
		"quarantined since start: malformed_json 1, rule_violation 1",
		"rule violations by rule: positive_amount 1",
		"loja.public.orders/1@5  bad",
		"rule_violation (positive_amount)  loja.public.orders/1@3  amount -1",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = runCLI(t, "status", "--url", srv.URL, "--json")
	var st status.Status
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.Totals.Records != 42 || st.Tables[0].Live != 40 || st.Quarantine.ByRule["positive_amount"] != 1 {
		t.Fatalf("--json: exit %d: %s", code, out)
	}
	if code, _, errOut := runCLI(t, "status", "--url", srv.URL+"/nope"); code != 1 || !strings.Contains(errOut, "HTTP 404") {
		t.Fatalf("wrong URL: exit %d: %s", code, errOut)
	}
}
