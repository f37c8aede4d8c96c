package main

import (
	"github.com/cdcsink/cdc-sink/envelope"
	"github.com/cdcsink/cdc-sink/internal/redact"
)

// redactText removes credentials from text printed to users.
func redactText(s string) string { return redact.String(s) }

func newRegistry(url string) envelope.Registry { return envelope.NewSRClientRegistry(url) }
