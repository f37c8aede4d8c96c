package delta

// AzureOptions configures the Azure Blob Storage / ADLS Gen2 (abfss://, az://) backend beyond the SDK's standard
// configuration chain. The zero value uses the SDK defaults.
type AzureOptions struct {
	// Endpoint overrides the service endpoint (an emulator or a compatible
	// store); empty: the SDK's resolution.
	Endpoint string
}
