package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/normalize"
	"github.com/cdcsink/cdc-sink/quarantine"
	"github.com/cdcsink/cdc-sink/rules"
	"github.com/cdcsink/cdc-sink/source"
)

// cmdRules dispatches `cdc-sink rules check`.
func cmdRules(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return dispatch(ctx, "rules", "<subcommand> --config FILE", []subcommand{
		{"check", "compile the rules of a config file and count, on a sample, what each would reject", rulesCheck},
	}, args, stdout, stderr)
}

func rulesCheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("rules check", stderr)
	file := fs.String("config", "", "YAML file holding a rules: list (a run config, or just the list)")
	var samples, keyCols multiFlag
	fs.Var(&samples, "from-file", "kcat -J JSON-lines sample to evaluate the rules on (repeatable)")
	fs.Var(&keyCols, "key-columns", "TABLE=col1,col2 key columns for records with a null key (repeatable)")
	registry := fs.String("registry", "", "Confluent-compatible schema registry URL (Avro samples)")
	topic := fs.String("topic", "", "topic for sample lines without one")
	if err := noPositional(fs, args); err != nil {
		return err
	}
	if *file == "" {
		return &exitError{code: 2, msg: "rules check: --config FILE is required"}
	}
	set, err := loadRulesFile(*file)
	if err != nil {
		return &exitError{code: 2, msg: "rules check: " + err.Error()}
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	fmt.Fprintf(w, "%d rules compiled from %s\n", set.Len(), *file)
	if len(samples) == 0 {
		for _, r := range set.Rules() {
			fmt.Fprintf(w, "  %-24s %-10s %s\n", r.Name, actionOf(r), describe(r))
		}
		return w.Flush()
	}
	kc, err := parseKeyColumns(keyCols)
	if err != nil {
		return err
	}
	var reg envelope.Registry
	if *registry != "" {
		reg = newRegistry(*registry)
	}
	dec := envelope.NewDecoder(envelope.Options{Registry: reg})
	norm, err := normalize.New(normalize.Options{KeyColumns: kc, KeepBefore: set.UsesBefore()})
	if err != nil {
		return err
	}
	var t rules.Tally
	records, undecodable := 0, map[quarantine.Reason]int{}
	for _, f := range samples {
		fr, err := source.OpenFile(f, source.FileOptions{DefaultTopic: *topic})
		if err != nil {
			return err
		}
		for {
			rec, err := fr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				fr.Close()
				return fmt.Errorf("sample %s: %w", f, err)
			}
			records++
			ev, err := dec.Decode(ctx, rec)
			if err == nil && ev.Kind != envelope.KindChange && ev.Kind != envelope.KindTombstone {
				continue
			}
			var c *normalize.Change
			if err == nil {
				c, err = norm.Normalize(ev, rec)
			}
			if err != nil {
				reason, ok := quarantine.ReasonOf(err)
				if !ok {
					reason = quarantine.MalformedEvent
				}
				undecodable[reason]++
				continue
			}
			if c == nil {
				continue
			}
			v, err := set.Check(c)
			if err != nil {
				fr.Close()
				return &exitError{code: 2, msg: fmt.Sprintf("rules check: record %s/%d@%d: %v", rec.Topic, rec.Partition, rec.Offset, err)}
			}
			t.Add(c, v)
		}
		fr.Close()
	}
	fmt.Fprintf(w, "sample: %d records, %d changes checked, %d would break a rule\n", records, t.Checked, t.Violating)
	for _, a := range []rules.Action{rules.Fail, rules.Quarantine, rules.Drop, rules.Warn} {
		if n := t.ByAction[a]; n > 0 {
			fmt.Fprintf(w, "  %-10s %d changes\n", a, n)
		}
	}
	fmt.Fprintf(w, "%-24s %-10s %10s  first violation\n", "rule", "action", "violations")
	for _, r := range set.Rules() {
		n := t.Violations[r.Name]
		first := ""
		if n > 0 {
			at := t.Examples[r.Name]
			first = fmt.Sprintf("%s/%d@%d: %s", at.Topic, at.Partition, at.Offset, t.First[r.Name])
		}
		fmt.Fprintf(w, "%-24s %-10s %10d  %s\n", r.Name, actionOf(r), n, first)
	}
	if len(undecodable) > 0 {
		fmt.Fprintln(w, "not checked (would be quarantined before the rules):")
		for _, reason := range quarantine.Reasons {
			if n := undecodable[reason]; n > 0 {
				fmt.Fprintf(w, "  %-20s %d\n", reason, n)
			}
		}
	}
	return w.Flush()
}

func actionOf(r rules.Rule) rules.Action {
	if r.Action == "" {
		return rules.Quarantine
	}
	return r.Action
}

func describe(r rules.Rule) string {
	s := ""
	if r.Table != "" {
		s = "table " + r.Table + ": "
	}
	switch {
	case r.Expr != "":
		s += r.Expr
	case len(r.Required) > 0:
		s += fmt.Sprintf("required %v", r.Required)
	default:
		s += fmt.Sprintf("ops %v", r.Ops)
	}
	return s
}
