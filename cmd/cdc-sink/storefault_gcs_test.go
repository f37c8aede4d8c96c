//go:build gcs

package main

import (
	"io"
	"net/http"
	"testing"

	"github.com/fsouza/fake-gcs-server/fakestorage"
)

// TestGCSObjectStoreFaults is TestObjectStoreFaults on GCS (an in-process
// fake-gcs-server): the same faults, matched on the object named in the
// upload's query (POST /upload/storage/v1/b/BUCKET/o?name=…), the same end
// state (equal to the local replay, contiguous versions, nothing
// quarantined, every fault fired).
//
//	go test -race -tags gcs -run 'TestGCS' ./cmd/cdc-sink
func TestGCSObjectStoreFaults(t *testing.T) {
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{Scheme: "http", Host: "127.0.0.1", Writer: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: "lake"})
	t.Setenv("STORAGE_EMULATOR_HOST", "")
	objectStoreFaults(t, faultTarget{target: srv.URL(), remote: "gs://lake/lake/faulty", upload: http.MethodPost,
		point: func(t *testing.T, proxy string) { t.Setenv("CDC_SINK_STORAGE_GCS_ENDPOINT", proxy) }})
}
