//go:build !gcs

package main

import (
	"context"

	"github.com/cdcsink/cdc-sink/delta"
)

// The Google Cloud Storage SDK (gRPC, OpenTelemetry…) is only linked into
// binaries built with -tags gcs (backend_gcs.go). Without it, gs:// is
// refused up front with how to get a binary that has it.
func init() { delta.RegisterBackend(gcsNotBuilt, "gs") }

const gcsNotBuiltReason = "this cdc-sink binary was built without Google Cloud Storage support; " +
	"build it with the gcs tag: go build -tags gcs ./cmd/cdc-sink"

func gcsNotBuilt(_ context.Context, l delta.Location, _ delta.StorageOptions) (delta.Storage, error) {
	return nil, &delta.LocationError{Location: l.String(), Scheme: l.Scheme, Reason: gcsNotBuiltReason, Err: delta.ErrBackendNotBuilt}
}
