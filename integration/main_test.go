//go:build e2e

// Package integration holds the end-to-end tests of cdc-sink against the native stack
// (scripts/stack): Postgres → Debezium (Kafka Connect) → Kafka → cdc-sink → Delta, checked
// against Postgres with `cdc-sink verify`, delta-rs and Spark. See README.md.
package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cdcsink/cdc-sink/internal/deltacheck"
)

// suite-wide state, set by TestMain.
var (
	e2eOn    bool   // CDC_SINK_E2E is set
	binPath  string // the cdc-sink binary built once for the suite
	suiteDir string // table dirs, configs and logs of every test (kept on failure)
	stk      stack
)

// stack is the environment scripts/stack/env.sh exports.
type stack struct {
	DSN, Brokers, ConnectURL, RegistryURL, Scripts, Python string
	// Dir is the stack's work dir (pid files under run/): CDC_SINK_STACK_DIR or <repo>/.stack.
	Dir string
}

func TestMain(m *testing.M) {
	e2eOn = os.Getenv("CDC_SINK_E2E") != ""
	if !e2eOn {
		// Each test skips, saying why.
		os.Exit(m.Run())
	}
	stk = stack{
		DSN:         os.Getenv("CDC_SINK_PG_DSN"),
		Brokers:     os.Getenv("CDC_SINK_KAFKA_BROKERS"),
		ConnectURL:  os.Getenv("CDC_SINK_CONNECT_URL"),
		RegistryURL: os.Getenv("CDC_SINK_REGISTRY_URL"),
		Scripts:     os.Getenv("CDC_SINK_STACK_SCRIPTS"),
		Python:      os.Getenv("CDC_SINK_PYTHON"),
		Dir:         os.Getenv("CDC_SINK_STACK_DIR"),
	}
	root := deltacheck.RepoRoot()
	if stk.Scripts == "" {
		stk.Scripts = filepath.Join(root, "scripts", "stack")
	}
	if stk.Dir == "" {
		stk.Dir = filepath.Join(filepath.Dir(filepath.Dir(stk.Scripts)), ".stack")
	}
	var missing []string
	for k, v := range map[string]string{"CDC_SINK_PG_DSN": stk.DSN, "CDC_SINK_KAFKA_BROKERS": stk.Brokers,
		"CDC_SINK_CONNECT_URL": stk.ConnectURL, "CDC_SINK_REGISTRY_URL": stk.RegistryURL} {
		if v == "" {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		fmt.Fprintf(os.Stderr, "e2e: CDC_SINK_E2E is set but %s missing: eval \"$(scripts/stack/env.sh)\"\n", strings.Join(missing, ", "))
		os.Exit(2)
	}
	var err error
	suiteDir, err = os.MkdirTemp("", "cdc-sink-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	t0 := time.Now()
	if binPath = os.Getenv("CDC_SINK_E2E_BIN"); binPath != "" {
		// A prebuilt binary (e.g. an older build, to show a regression test fails without a fix).
		fmt.Printf("e2e: using CDC_SINK_E2E_BIN=%s; work dir %s\n", binPath, suiteDir)
	} else {
		binPath = filepath.Join(suiteDir, "cdc-sink")
		build := exec.Command("go", "build", "-o", binPath, "./cmd/cdc-sink")
		build.Dir = root
		build.Env = append(os.Environ(), "CGO_ENABLED=1")
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: go build ./cmd/cdc-sink: %v\n%s", err, out)
			os.Exit(2)
		}
		fmt.Printf("e2e: built %s in %s; work dir %s\n", binPath, time.Since(t0).Round(time.Millisecond), suiteDir)
	}
	code := m.Run()
	if code == 0 && os.Getenv("CDC_SINK_E2E_KEEP") == "" {
		os.RemoveAll(suiteDir)
	} else {
		fmt.Printf("e2e: kept %s (tables, sink configs and logs)\n", suiteDir)
	}
	os.Exit(code)
}

// needStack skips the test when the suite runs outside `make e2e`.
func needStack(t *testing.T) {
	t.Helper()
	if !e2eOn {
		t.Skip("CDC_SINK_E2E not set: run `make e2e` (starts the native stack and exports its endpoints)")
	}
}
