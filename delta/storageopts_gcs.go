// Options of the Google Cloud Storage backend.

package delta

// GCSOptions configures the Google Cloud Storage (gs://) backend beyond the SDK's standard
// configuration chain. The zero value uses the SDK defaults.
type GCSOptions struct {
	// Endpoint overrides the service endpoint (an emulator or a compatible
	// store); empty: the SDK's resolution.
	Endpoint string
}
