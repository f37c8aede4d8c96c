package main

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cdcsink/cdc-sink/internal/azurite"
	"github.com/cdcsink/cdc-sink/internal/deltacheck"
)

// azureLoad is a Debezium load with inserts, updates and deletes over 120
// keys, in several micro-batches.
func azureLoad(t *testing.T, path string) (live int) {
	t.Helper()
	var lines []string
	off := int64(0)
	add := func(op string, lsn int64, before, after map[string]any, id int) {
		lines = append(lines, dbzRecord(off, op, lsn, itemsInt, before, after, map[string]any{"id": id}))
		off++
	}
	row := func(id, qty int) map[string]any {
		return map[string]any{"id": id, "qty": qty, "name": fmt.Sprintf("item-%03d", id)}
	}
	lsn := int64(100)
	for id := 1; id <= 120; id++ {
		lsn++
		add("c", lsn, nil, row(id, id), id)
	}
	for id := 1; id <= 120; id += 3 {
		lsn++
		add("u", lsn, row(id, id), row(id, id*10), id)
	}
	deleted := 0
	for id := 5; id <= 120; id += 7 {
		lsn++
		add("d", lsn, row(id, id), nil, id)
		deleted++
	}
	writeKcatLines(t, path, lines...)
	return 120 - deleted
}

// TestAzureReplayShowDiff: cdc-sink replay into az:// and abfss:// tables on
// Azurite (through the storage.azure.endpoint override and the shared key in
// AZURE_STORAGE_ACCOUNT/AZURE_STORAGE_KEY), then table show and diff against
// the same load replayed into a local table: equal. A second replay resumes
// from the offsets stored in the Azure table (nothing applied twice), and
// delta-rs reads the Azure table back.
func TestAzureReplayShowDiff(t *testing.T) {
	srv := azurite.Start(t)
	srv.CreateContainer(t, "lake")
	srv.Env(t)
	tmp := t.TempDir()
	in := filepath.Join(tmp, "items.jsonl")
	live := azureLoad(t, in)

	local := filepath.Join(tmp, "items")
	az := "az://lake/lake/items"
	abfss := "abfss://lake@" + azurite.Account + ".dfs.core.windows.net/lake/items-abfss"
	wantSummary := fmt.Sprintf(": %d live rows, %d tombstones;", live, 120-live)
	for _, table := range []string{local, az, abfss} {
		code, out, errOut := runCLI(t, "replay", "--from-file", in, "--table", table, "--sink-name", "items",
			"--batch-records", "50", "--quiet")
		if code != 0 || !strings.Contains(out, wantSummary) {
			t.Fatalf("replay into %s: exit %d, want %q\n%s\n%s", table, code, wantSummary, out, errOut)
		}
		t.Logf("replay: %s", strings.TrimSpace(out))
	}
	show := func(table string) string {
		t.Helper()
		code, out, errOut := runCLI(t, "table", "show", table, "--columns", "id,qty,name")
		if code != 0 {
			t.Fatalf("table show %s: exit %d\n%s", table, code, errOut)
		}
		return sortedLines(out)
	}
	want := show(local)
	if n := strings.Count(want, "\n"); n != live {
		t.Fatalf("local table shows %d rows, want %d", n, live)
	}
	for _, table := range []string{az, abfss} {
		if got := show(table); got != want {
			t.Errorf("table show %s differs from the local table:\n%s\nwant\n%s", table, got, want)
		}
	}
	for _, pair := range [][2]string{{local, az}, {az, abfss}} {
		code, out, errOut := runCLI(t, "diff", pair[0], pair[1])
		if code != 0 || !strings.Contains(out, fmt.Sprintf("tables are equal: %d live rows", live)) {
			t.Errorf("diff %s %s: exit %d\n%s\n%s", pair[0], pair[1], code, out, errOut)
		}
	}

	// A restart resumes from the Azure table's offsets: no new commit.
	_, before, _ := runCLI(t, "table", "info", az)
	code, out, errOut := runCLI(t, "replay", "--from-file", in, "--table", az, "--sink-name", "items", "--quiet")
	if code != 0 || !strings.Contains(out, wantSummary) {
		t.Fatalf("second replay: exit %d\n%s\n%s", code, out, errOut)
	}
	_, after, _ := runCLI(t, "table", "info", az)
	version := regexp.MustCompile(`(?m)^version:?\s+(\d+)`)
	if vb, va := version.FindString(before), version.FindString(after); vb == "" || vb != va {
		t.Errorf("second replay changed the table: %q -> %q\n%s", vb, va, after)
	}
}

// TestAzureReadByDeltaRS: delta-rs (python deltalake, object_store's Azure
// client) reads the table cdc-sink replayed into Azurite: same rows.
func TestAzureReadByDeltaRS(t *testing.T) {
	srv := azurite.Start(t)
	srv.CreateContainer(t, "lake")
	srv.Env(t)
	tmp := t.TempDir()
	in := filepath.Join(tmp, "items.jsonl")
	live := azureLoad(t, in)
	az := "az://lake/lake/items"
	if code, out, errOut := runCLI(t, "replay", "--from-file", in, "--table", az, "--sink-name", "items", "--batch-records", "50", "--quiet"); code != 0 {
		t.Fatalf("replay: exit %d\n%s\n%s", code, out, errOut)
	}
	t.Setenv("AZURITE_BLOB_STORAGE_URL", fmt.Sprintf("http://127.0.0.1:%d", srv.Port))
	t.Setenv("CDC_SINK_DELTARS_STORAGE_OPTIONS", fmt.Sprintf(`{"azure_storage_account_name":%q,"azure_storage_account_key":%q,"azure_storage_use_emulator":"true"}`, azurite.Account, azurite.Key))
	tb := deltacheck.ReadDeltaRS(t, az, "NOT _cdc_deleted")
	if len(tb.Rows) != live || tb.Version != 4 {
		t.Fatalf("delta-rs read %d rows at version %d, want %d at 4", len(tb.Rows), tb.Version, live)
	}
	_, out, _ := runCLI(t, "table", "show", az, "--columns", "id,qty,name")
	var ours []string
	for _, r := range deltacheck.Decode(t, tb.Rows) {
		ours = append(ours, fmt.Sprintf(`{"id":%v,"qty":%v,"name":%q}`, r["id"], r["qty"], r["name"]))
	}
	if got := sortedLines(strings.Join(ours, "\n") + "\n"); got != sortedLines(out) {
		t.Errorf("delta-rs rows differ from table show:\n%s\nwant\n%s", got, sortedLines(out))
	}
}
