// Options of the S3 backend.

package delta

import "time"

// S3Options configures the S3 (s3://, s3a://) backend beyond the AWS SDK's
// standard configuration chain (credentials, AWS_REGION, AWS_ENDPOINT_URL_S3 /
// AWS_ENDPOINT_URL, shared config and profiles, web identity). The zero
// value uses the SDK defaults.
type S3Options struct {
	// Endpoint overrides the S3 endpoint (SeaweedFS, MinIO, R2…); empty: the
	// SDK's resolution (AWS_ENDPOINT_URL_S3 included).
	Endpoint string
	// Region overrides the SDK's region resolution; empty: AWS_REGION etc.
	Region string
	// PathStyle addresses buckets as endpoint/bucket/key instead of
	// bucket.endpoint/key (needed by SeaweedFS/MinIO-style endpoints).
	PathStyle bool
	// ResponseTimeout bounds the wait for a response's headers once a
	// request is sent, so a store that went silent (a network partition)
	// becomes a transient timeout the pipeline retries, not a commit stuck
	// until TCP gives up; 0: 2 minutes (a 16 MiB part upload included).
	ResponseTimeout time.Duration
}
