package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/shopspring/decimal"

	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/internal/dbzgen"
	"github.com/cdcsink/cdc-sink/internal/deltacheck"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/cdcsink/cdc-sink/source"
)

const positiveAmountRules = `
rules:
  - name: positive_amount
    table: public.orders
    expr: row.amount > 0
  - name: known_status
    table: "public.*"
    expr: row.status in ['CRIADO', 'PAGO', 'ENVIADO', 'ENTREGUE', 'CANCELADO']
    action: warn
`

// writeStream writes the stream's records as a kcat -J file.
func writeStream(t *testing.T, path string, recs []*source.Record) {
	t.Helper()
	var b []byte
	for _, r := range recs {
		b = append(b, source.Encode(r)...)
		b = append(b, '\n')
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReplayRulesQuarantineThenRedrive: a stream whose generator emits
// negative amounts (violations) and valid changes for the same keys. With
// the rule, every violating change — and only those — is quarantined with
// the rule's name, the table never holds a non-positive amount, and later
// valid changes of a key still apply. Redriving the quarantine without the
// rule (relaxed) makes the table equal to the source, read by delta-rs.
func TestReplayRulesQuarantineThenRedrive(t *testing.T) {
	tmp := t.TempDir()
	// testStream's mix without unchanged-TOAST updates: a held-back change
	// that set a TOAST column followed by updates that do not carry it
	// cannot be restored by redriving it (docs/rules.md, TOAST).
	s := dbzgen.Generate(dbzgen.Config{Seed: 17, Prefix: "loja", Schema: "public", Table: "orders",
		Partitions: 3, Keys: 150 + 1200/4, Events: 1200, SnapshotRows: 150, Tombstones: true,
		TxSize: 4, InFlightAtSnapshot: true, Duplicates: 0.05, PKChangeEvery: 50})
	in := filepath.Join(tmp, "orders.jsonl")
	writeStream(t, in, s.Records)
	rulesFile := filepath.Join(tmp, "rules.yaml")
	writeFile(t, rulesFile, positiveAmountRules)
	table := filepath.Join(tmp, "orders")
	qfile := filepath.Join(tmp, "q.jsonl")

	// what the rule must catch, decided independently of the rules package
	dec := envelope.NewDecoder(envelope.Options{})
	norm, err := normalize.New(normalize.Options{})
	if err != nil {
		t.Fatal(err)
	}
	violating := map[string]bool{}
	for _, r := range s.Records {
		ev, err := dec.Decode(context.Background(), r)
		if err != nil || ev.Kind != envelope.KindChange {
			continue
		}
		c, err := norm.Normalize(ev, r)
		if err != nil || c == nil || c.Op != normalize.OpUpsert {
			continue
		}
		amt := c.Row[c.Schema.Index("amount")]
		if d, ok := amt.(decimal.Decimal); ok && d.Sign() <= 0 {
			violating[coords(r)] = true
		}
	}
	if len(violating) < 5 {
		t.Fatalf("the stream has only %d non-positive amounts: the test would prove nothing", len(violating))
	}

	code, out, errOut := runCLI(t, "replay", "--from-file", in, "--table", table, "--sink-name", "orders",
		"--config", rulesFile, "--quarantine-file", qfile, "--batch-records", "100", "--quiet")
	if code != 0 {
		t.Fatalf("replay: exit %d\n%s\n%s", code, out, errOut)
	}
	es, err := quarantine.ReadFile(qfile, quarantine.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, e := range es {
		if e.Reason != quarantine.RuleViolation || e.Rule != "positive_amount" || !strings.Contains(e.Message, "row.amount > 0") {
			t.Fatalf("entry %s: reason %s rule %q message %q", e.At, e.Reason, e.Rule, e.Message)
		}
		got[coords(e.Record)] = true
	}
	if len(got) != len(violating) {
		t.Fatalf("quarantined %d records, the stream has %d non-positive amounts", len(got), len(violating))
	}
	for k := range violating {
		if !got[k] {
			t.Fatalf("%s has a non-positive amount but was not quarantined", k)
		}
	}
	// No live row holds a non-positive amount (delta-rs reads the table).
	rs := deltacheck.ReadDeltaRS(t, table, "")
	live := 0
	for _, line := range rs.Rows {
		var row map[string]any
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatal(err)
		}
		if row["_cdc_deleted"] == true {
			continue
		}
		live++
		d, err := decimal.NewFromString(strings.Trim(jsonText(row["amount"]), `"`))
		if err != nil || d.Sign() <= 0 {
			t.Fatalf("live row with amount %v (%v): %s", row["amount"], err, line)
		}
	}
	if live == 0 {
		t.Fatal("no live rows")
	}
	// stats group by rule
	code, out, _ = runCLI(t, "quarantine", "stats", "--file", qfile)
	if code != 0 || !strings.Contains(out, "by rule:") || !strings.Contains(out, "positive_amount") {
		t.Fatalf("stats: exit %d\n%s", code, out)
	}
	// rules check on the same sample counts the same violations
	code, out, errOut = runCLI(t, "rules", "check", "--config", rulesFile, "--from-file", in)
	if code != 0 || !strings.Contains(out, "positive_amount") {
		t.Fatalf("rules check: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "positive_amount" && f[2] != strconv.Itoa(len(violating)) {
			t.Fatalf("rules check counts %s violations, want %d:\n%s", f[2], len(violating), out)
		}
	}

	// Relax the rule: redrive without it applies what was held back.
	rq := filepath.Join(tmp, "requarantine.jsonl")
	code, out, errOut = runCLI(t, "quarantine", "redrive", "--file", qfile, "--table", table, "--requarantine", rq)
	if code != 0 {
		t.Fatalf("redrive: exit %d\n%s\n%s", code, out, errOut)
	}
	checkTable(t, table, "orders", s)
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestReplayRulesRefusedOrFailing: a rule naming a column the table does not
// have stops the replay naming the rule before anything is committed; a
// rule with action fail stops at the first violating record, naming it, and
// leaves that record's batch uncommitted.
func TestReplayRulesRefusedOrFailing(t *testing.T) {
	tmp := t.TempDir()
	s := testStream(5, 400, 50, 1, 0)
	in := filepath.Join(tmp, "orders.jsonl")
	writeStream(t, in, s.Records)
	for _, tc := range []struct {
		name, rules, want string
	}{
		{"unknown column", "rules:\n  - name: typo\n    expr: row.amout > 0\n", `rule "typo": column "amout" is not a column of public.orders`},
		{"bad expression", "rules:\n  - name: broken\n    expr: row.amount >\n", `rule "broken": expr`},
		{"non-bool", "- name: nb\n  expr: row.amount + 1\n", "not bool"},
		{"unknown key", "- name: k\n  requird: [amount]\n", `unknown rule key "requird"`},
		{"fail action", "- name: stop_negative\n  expr: row.amount > 0\n  action: fail\n", "violates"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rf := filepath.Join(t.TempDir(), "r.yaml")
			writeFile(t, rf, tc.rules)
			table := filepath.Join(t.TempDir(), "orders")
			code, out, errOut := runCLI(t, "replay", "--from-file", in, "--table", table, "--sink-name", "orders",
				"--rules", rf, "--batch-records", "1000", "--quiet")
			msg := out + errOut
			if tc.want == "violates" {
				if code == 0 || !strings.Contains(msg, "rule stop_negative (fail)") || !strings.Contains(msg, "record loja.public.orders/0@") {
					t.Fatalf("exit %d, want a failure naming the record and rule:\n%s", code, msg)
				}
				offs, _ := tableProgress(t, table, "orders")
				if offs[0] >= int64(len(s.Records)) {
					t.Fatalf("the failing batch was committed: offsets %v", offs)
				}
				return
			}
			if code == 0 || !strings.Contains(msg, tc.want) {
				t.Fatalf("exit %d, want an error containing %q:\n%s", code, tc.want, msg)
			}
			if _, ver := tableProgress(t, table, "orders"); ver > 0 {
				t.Fatalf("table at version %d: something was committed", ver)
			}
		})
	}
}
