package main

import (
	"context"
	"errors"
	"io"

	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/internal/redact"
)

var errTODO = errors.New("not implemented yet")

func cmdDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error { return errTODO }

func redactText(s string) string { return redact.String(s) }

func newRegistry(url string) envelope.Registry { return envelope.NewSRClientRegistry(url) }
