// Command cdc-sink applies Debezium change events from Kafka to Delta Lake
// tables that always equal the source's current state.
//
//	cdc-sink run --config FILE        the sidecar consumer
//	cdc-sink replay ...               bounded replay from files or Kafka into a table
//	cdc-sink demo                     embedded broker + generated stream, no services needed
//	cdc-sink table show|info|optimize|purge-tombstones|vacuum|cleanup-log|alter DIR
//	cdc-sink quarantine stats|list|show|export|redrive
//	cdc-sink diff TABLE_A TABLE_B
//	cdc-sink verify --pg DSN --source-table S --table DIR
//	cdc-sink slots --pg DSN
//	cdc-sink status --url URL | --tables DIR...
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/cdcsink/cdc-sink/delta"
)

// Version is set at build time with -ldflags "-X main.Version=…".
var Version = "dev"

// Every commit's commitInfo.engineInfo (and checkpoints' created_by) names
// the build that wrote it, so a table's history says which release did what.
func init() { delta.EngineVersion = Version }

type command struct {
	name  string
	usage string
	run   func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"run", "consume Kafka continuously into Delta tables (--config FILE)", cmdRun},
		{"replay", "apply a bounded set of records (files or Kafka) to a table, then stop", cmdReplay},
		{"demo", "run the embedded demo: in-process broker, generated Debezium stream, local table", cmdDemo},
		{"table", "inspect and maintain a Delta table: show, info, optimize, purge-tombstones, vacuum, cleanup-log, alter", cmdTable},
		{"quarantine", "audit and redrive quarantined records: stats, list, show, export, redrive", cmdQuarantine},
		{"rules", "check data-quality rules: compile them, count what they reject on a sample", cmdRules},
		{"diff", "compare the live rows of two tables (exit 1 on difference)", cmdDiff},
		{"verify", "compare a table with its Postgres source table (exit 1 on difference)", cmdVerify},
		{"consistent-versions", "print a consistency group's newest cut: each table's version at one source commit", cmdConsistentVersions},
		{"slots", "show Postgres replication slots and retained WAL", cmdSlots},
		{"status", "summary of a running sink (--url) or of tables (--tables DIR...), --json", cmdStatus},
		{"version", "print the version", func(_ context.Context, _ []string, out, _ io.Writer) error {
			_, err := fmt.Fprintln(out, "cdc-sink", Version)
			return err
		}},
	}
}

// exitError carries a specific exit code (diff/verify use 1 for "different").
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// CDC_SINK_CPUPROFILE=FILE: a CPU profile of the whole command (replay,
	// bench runs); a long-running sink has /debug/pprof (http.pprof).
	if f := os.Getenv("CDC_SINK_CPUPROFILE"); f != "" {
		if stopProf, err := startCPUProfile(f); err != nil {
			fmt.Fprintf(os.Stderr, "cdc-sink: CDC_SINK_CPUPROFILE: %v\n", err)
		} else {
			defer stopProf()
		}
	}
	code := realMain(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	// CDC_SINK_MEMPROFILE=FILE: the allocation profile of the whole command,
	// written when it ends (go tool pprof -sample_index=alloc_space).
	if f := os.Getenv("CDC_SINK_MEMPROFILE"); f != "" {
		if err := writeAllocProfile(f); err != nil {
			fmt.Fprintf(os.Stderr, "cdc-sink: CDC_SINK_MEMPROFILE: %v\n", err)
		}
	}
	if code != 0 {
		os.Exit(code)
	}
}

func startCPUProfile(file string) (func(), error) {
	f, err := os.Create(file)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

func writeAllocProfile(file string) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func realMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	so, err := storageFromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintf(stderr, "cdc-sink: %v\n", err)
		return 2
	}
	storageOpts = so
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], stdout, stderr)
		if err == nil {
			return 0
		}
		var ee *exitError
		if errors.As(err, &ee) {
			if ee.msg != "" {
				fmt.Fprintln(stderr, ee.msg)
			}
			return ee.code
		}
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "cdc-sink %s: %v\n", c.name, redactText(err.Error()))
		return 1
	}
	fmt.Fprintf(stderr, "cdc-sink: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: cdc-sink <command> [flags]")
	fmt.Fprintln(w)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-19s %s\n", c.name, c.usage)
	}
	fmt.Fprintln(w, "\nRun 'cdc-sink <command> -h' for the flags of a command.")
}

// newFlags returns a FlagSet that reports errors instead of exiting.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("cdc-sink "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// multiFlag collects a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return fmt.Sprint(*m) }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
