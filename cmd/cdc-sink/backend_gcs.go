//go:build gcs

package main

// Built with -tags gcs: gs:// table locations use the Google Cloud Storage
// backend (delta/gcsstore registers itself for "gs").
import _ "github.com/cdcsink/cdc-sink/delta/gcsstore"
