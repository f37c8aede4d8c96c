package main

import (
	"context"
	"errors"
	"io"

	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/internal/redact"
)

var errTODO = errors.New("not implemented yet")

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) error   { return errTODO }
func cmdDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error  { return errTODO }
func cmdTable(ctx context.Context, args []string, stdout, stderr io.Writer) error { return errTODO }
func cmdQuarantine(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errTODO
}
func cmdDiff(ctx context.Context, args []string, stdout, stderr io.Writer) error   { return errTODO }
func cmdVerify(ctx context.Context, args []string, stdout, stderr io.Writer) error { return errTODO }
func cmdSlots(ctx context.Context, args []string, stdout, stderr io.Writer) error  { return errTODO }

func redactText(s string) string { return redact.String(s) }

func newRegistry(url string) envelope.Registry { return envelope.NewSRClientRegistry(url) }
