package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/cdcsink/cdc-sink/internal/deltacheck"
)

// The dashboard and the alerts use only metrics this binary exports, every
// alert links to an entry of docs/runbook.md and has a promtool test that
// fires and one that stays quiet, and promtool accepts the rules, the
// tests and every dashboard query. Without promtool (Debian prometheus)
// that last part is skipped locally and fails under CI=true.
func TestMonitoringAssets(t *testing.T) {
	root := deltacheck.RepoRoot()
	read := func(rel string) []byte {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// Metrics registered in metrics.go (f.counter("cdcsink_…", …) etc.).
	exported := map[string]string{} // name → kind
	for _, m := range regexp.MustCompile(`f\.(\w+)\("(cdcsink_\w+)"`).FindAllStringSubmatch(string(read("cmd/cdc-sink/metrics.go")), -1) {
		exported[m[2]] = m[1]
	}
	if len(exported) < 10 {
		t.Fatalf("found only %d metrics in metrics.go: the pattern is stale", len(exported))
	}
	metricRe := regexp.MustCompile(`cdcsink_\w+`)
	checkExpr := func(where, expr string) {
		for _, name := range metricRe.FindAllString(expr, -1) {
			base := name
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(name, suf); ok && exported[b] == "histogram" {
					base = b
				}
			}
			if _, ok := exported[base]; !ok {
				t.Errorf("%s uses %s, which cdc-sink does not export", where, name)
			}
		}
	}

	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(read("deploy/prometheus/alerts.yaml"), &rules); err != nil {
		t.Fatal(err)
	}
	runbook := string(read("docs/runbook.md"))
	var alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			checkExpr("alert "+r.Alert, r.Expr)
			u, err := url.Parse(r.Annotations["runbook_url"])
			if err != nil || u.Fragment == "" || !strings.HasSuffix(u.Path, "/docs/runbook.md") {
				t.Errorf("alert %s: runbook_url %q is not a docs/runbook.md#entry link", r.Alert, r.Annotations["runbook_url"])
			} else if !strings.Contains(runbook, fmt.Sprintf(`<a id="%s"></a>`, u.Fragment)) {
				t.Errorf("alert %s: docs/runbook.md has no entry <a id=%q></a>", r.Alert, u.Fragment)
			}
		}
	}
	want := []string{"CdcSinkBatchDurationHigh", "CdcSinkFreshnessHigh", "CdcSinkKafkaUnreachable", "CdcSinkLagGrowing", "CdcSinkQuarantineRateHigh", "CdcSinkStuckRetrying", "CdcSinkTableVersionStalled"}
	sort.Strings(alerts)
	if strings.Join(alerts, ",") != strings.Join(want, ",") {
		t.Errorf("alerts %v, want %v", alerts, want)
	}

	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(read("deploy/prometheus/alerts_test.yaml"), &tests); err != nil {
		t.Fatal(err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for _, a := range alerts {
		if !fires[a] || !quiet[a] {
			t.Errorf("alert %s: alerts_test.yaml needs a case where it fires (%v) and one where it does not (%v)", a, fires[a], quiet[a])
		}
	}

	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(read("deploy/grafana/cdc-sink.json"), &dash); err != nil {
		t.Fatal(err)
	}
	// The dashboard's queries as recording rules, so promtool parses them.
	var rec strings.Builder
	rec.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	grafanaVars := strings.NewReplacer("$__rate_interval", "5m", "$instance", ".*")
	n := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			checkExpr("panel "+p.Title, tg.Expr)
			n++
			b, _ := json.Marshal(grafanaVars.Replace(tg.Expr))
			fmt.Fprintf(&rec, "      - record: dashboard:q%d\n        expr: %s\n", n, b)
		}
	}
	if n < 10 {
		t.Fatalf("dashboard has %d queries", n)
	}

	t.Run("promtool", func(t *testing.T) {
		promtool, err := exec.LookPath("promtool")
		if err != nil {
			msg := "promtool not installed (apt-get install -y --no-install-recommends prometheus)"
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
		dashRules := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
		if err := os.WriteFile(dashRules, []byte(rec.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(root, "deploy", "prometheus")
		for _, args := range [][]string{
			{"check", "rules", "alerts.yaml"},
			{"test", "rules", "alerts_test.yaml"},
			{"check", "rules", dashRules},
		} {
			cmd := exec.Command(promtool, args...)
			cmd.Dir = dir
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
	})
}
