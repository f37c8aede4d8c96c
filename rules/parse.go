package rules

import (
	"errors"
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

var ruleKeys = map[string]bool{"name": true, "table": true, "expr": true, "required": true, "ops": true, "action": true}

// UnmarshalYAML decodes one rule, refusing unknown keys (a misspelt
// `requird:` must not silently disable a check).
func (r *Rule) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: a rule is a mapping (name, table, expr, required, ops, action)", n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; !ruleKeys[k.Value] {
			return fmt.Errorf("line %d: unknown rule key %q (want name, table, expr, required, ops, action)", k.Line, k.Value)
		}
	}
	type plain Rule
	return n.Decode((*plain)(r))
}

// ErrNoRules: a YAML mapping without a rules: key.
var ErrNoRules = errors.New("no rules: key")

// Parse reads rules from YAML: either a list of rules or a mapping whose
// `rules:` key holds the list (so a `run` config file can be given as is;
// its other keys are ignored here). name is used in errors.
func Parse(b []byte, name string) ([]Rule, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("rules %s: %w", name, err)
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	n := doc.Content[0]
	if n.Kind == yaml.MappingNode {
		var list *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == "rules" {
				list = n.Content[i+1]
			}
		}
		if list == nil {
			return nil, fmt.Errorf("rules %s: %w", name, ErrNoRules)
		}
		n = list
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("rules %s line %d: want a list of rules", name, n.Line)
	}
	var rs []Rule
	if err := n.Decode(&rs); err != nil {
		return nil, fmt.Errorf("rules %s: %s", name, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	return rs, nil
}
