package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/internal/redact"
)

// redactText removes credentials from text printed to users.
func redactText(s string) string { return redact.String(s) }

func newRegistry(url string) envelope.Registry { return envelope.NewSRClientRegistry(url) }

// checkLocation refuses a table location that is malformed, has an unknown
// scheme or names an object store whose backend is not built yet, and
// returns its canonical form (delta.Location.String). Commands call it on
// their table arguments before anything is read or written, so that
// "s3://lake/t" never becomes a local directory "s3:/lake/t".
func checkLocation(location string) (string, error) {
	l, err := delta.ParseLocation(location)
	if err == nil {
		_, err = l.Storage(context.Background(), storageOpts)
	}
	if err != nil {
		var le *delta.LocationError
		if errors.As(err, &le) {
			le.Location = location
		}
		return "", err
	}
	return l.String(), nil
}

// canonLocation is the canonical form of a routed table location, so that
// one table has one name however it is spelled (tableSet opens each once).
// Locations were checked at config load; an invalid one is returned as is
// and opening it reports the error.
func canonLocation(location string) string {
	if l, err := delta.ParseLocation(location); err == nil {
		return l.String()
	}
	return location
}

// tableArg is checkLocation for a command's table argument: a refused
// location is a usage error (exit 2) naming the command.
func tableArg(cmd, location string) error {
	if _, err := checkLocation(location); err != nil {
		return &exitError{code: 2, msg: fmt.Sprintf("cdc-sink %s: %s", cmd, redactText(err.Error()))}
	}
	return nil
}

// subcommand is one verb of a command group (table, quarantine).
type subcommand struct {
	name, usage string
	run         func(context.Context, []string, io.Writer, io.Writer) error
}

// dispatch runs the subcommand named by args[0], or prints the group's usage.
func dispatch(ctx context.Context, group, usageLine string, subs []subcommand, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintf(stderr, "usage: cdc-sink %s %s\n", group, usageLine)
		for _, s := range subs {
			fmt.Fprintf(stderr, "  %-17s %s\n", s.name, s.usage)
		}
		if len(args) == 0 {
			return &exitError{code: 2}
		}
		return nil
	}
	names := make([]string, len(subs))
	for i, s := range subs {
		if s.name == args[0] {
			return s.run(ctx, args[1:], stdout, stderr)
		}
		names[i] = s.name
	}
	return &exitError{code: 2, msg: fmt.Sprintf("cdc-sink %s: unknown subcommand %q (%s)", group, args[0], strings.Join(names, ", "))}
}

// listKeys prints a titled count and the first limit keys.
func listKeys(w io.Writer, title string, keys []string, limit int) {
	fmt.Fprintf(w, "%s: %d\n", title, len(keys))
	for i, k := range keys {
		if i >= limit {
			fmt.Fprintf(w, "  ... %d more\n", len(keys)-i)
			break
		}
		fmt.Fprintf(w, "  %s\n", k)
	}
}
