package pipeline

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cdcsink/cdc-sink/merge"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/cdcsink/cdc-sink/rules"
	"github.com/cdcsink/cdc-sink/source"
	"github.com/cdcsink/cdc-sink/versioning"
)

// keyRule: the change of key "bad" violates a rule with the given action.
type keyRule struct{ action rules.Action }

func (k keyRule) Check(c *normalize.Change) (rules.Verdict, error) {
	if c.Key[0] != "bad" {
		return rules.Verdict{}, nil
	}
	return rules.Verdict{Action: k.action, Violations: []rules.Violation{
		{Rule: "no_bad", Action: k.action, Message: "key is bad"},
		{Rule: "also", Action: rules.Warn, Message: "noted"}}}, nil
}

func TestProcessRuleActions(t *testing.T) {
	recs := []*source.Record{rec("t", 0, "a", "x"), rec("t", 1, "bad", "x"), rec("t", 2, "c", "x")}
	for _, tc := range []struct {
		action      rules.Action
		applied     []string // keys in the committed batch
		quarantined int
	}{
		{rules.Quarantine, []string{"a", "c"}, 1},
		{rules.Drop, []string{"a", "c"}, 0},
		{rules.Warn, []string{"a", "bad", "c"}, 0},
		{rules.Fail, nil, 0},
	} {
		t.Run(string(tc.action), func(t *testing.T) {
			p, tb, q := newTest(t)
			p.cfg.Rules = keyRule{tc.action}
			rep, err := p.Process(context.Background(), recs)
			if tc.action == rules.Fail {
				var rf *RuleFailure
				if !errors.As(err, &rf) || rf.Offset != 1 || !strings.Contains(err.Error(), "record t/0@1: rule no_bad (fail): key is bad") {
					t.Fatalf("err %v, want a RuleFailure naming t/0@1", err)
				}
				if quarantine.IsTransient(err) || len(tb.applied) != 0 || len(q.entries) != 0 {
					t.Fatalf("fail must stop without committing or quarantining: applied %d, quarantined %d", len(tb.applied), len(q.entries))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			b := tb.applied[0]
			var keys []string
			for _, c := range b.Changes {
				keys = append(keys, c.Key[0].(string))
			}
			if strings.Join(keys, ",") != strings.Join(tc.applied, ",") {
				t.Fatalf("applied %v, want %v", keys, tc.applied)
			}
			if b.Offsets[merge.TP{Topic: "t"}] != 3 {
				t.Fatalf("offsets %v: every record is done", b.Offsets)
			}
			if len(q.entries) != tc.quarantined {
				t.Fatalf("quarantined %d, want %d", len(q.entries), tc.quarantined)
			}
			if tc.quarantined > 0 {
				e := q.entries[0]
				v, err := versioning.ParseVersion(e.Version)
				if e.Reason != quarantine.RuleViolation || e.Rule != "no_bad" || e.BatchID != 7 || err != nil || v.LSN != 2 ||
					!strings.Contains(e.Message, "rule no_bad (quarantine): key is bad") {
					t.Fatalf("entry %+v (version %v)", e, err)
				}
			}
			if rep.RuleViolations[RuleCount{Table: "tbl", Rule: "no_bad", Action: tc.action}] != 1 ||
				rep.RuleViolations[RuleCount{Table: "tbl", Rule: "also", Action: rules.Warn}] != 1 {
				t.Fatalf("counts %v", rep.RuleViolations)
			}
		})
	}
}

// A redrive applies a change with the version it was first given, not the
// tracker's.
func TestProcessVersionOf(t *testing.T) {
	p, tb, _ := newTest(t)
	want := versioning.Version{Epoch: 3, Phase: versioning.PhaseStream, Commit: 9, LSN: 9}
	p.cfg.VersionOf = func(r *source.Record) (versioning.Version, bool) { return want, r.Offset == 1 }
	if _, err := p.Process(context.Background(), []*source.Record{rec("t", 0, "a", "x"), rec("t", 1, "b", "x")}); err != nil {
		t.Fatal(err)
	}
	cs := tb.applied[0].Changes
	if cs[0].Version.LSN != 1 || cs[1].Version != want {
		t.Fatalf("versions %v %v", cs[0].Version, cs[1].Version)
	}
}
