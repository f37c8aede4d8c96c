// Options of the Azure Blob Storage backend.

package delta

// AzureOptions configures the Azure Blob Storage / ADLS Gen2 (abfss://, az://) backend beyond the SDK's standard
// configuration chain. The zero value uses the SDK defaults.
type AzureOptions struct {
	// Endpoint overrides the service endpoint (an emulator or a compatible
	// store); empty: the SDK's resolution.
	Endpoint string
	// Account is the storage account of az:// locations (abfss:// names it
	// in the host); empty: AZURE_STORAGE_ACCOUNT, then the connection string's.
	Account string
}
