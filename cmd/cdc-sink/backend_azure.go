package main

// The Azure Blob Storage / ADLS Gen2 backend (abfss://, az://).
import _ "github.com/cdcsink/cdc-sink/delta/azstore"
