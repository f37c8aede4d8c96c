package main

// The S3 backend (s3://, s3a://) registers itself with delta.RegisterBackend.
import _ "github.com/cdcsink/cdc-sink/delta/s3store"
