package layout

// History tables (docs/history.md): an append-only table per source table
// holding every change the sink accepted. Its key columns keep their source
// names; the images and the metadata use these names. Columns shared with
// current-state tables (ColOp, ColVersion, ColSourceTs, ColBatchID,
// ColIngestTs, ColTopic, ColPartition, ColOffset) keep their names.
const (
	HistBefore      = "before"                          // struct of the business columns: the row before the change (nil when unknown)
	HistAfter       = "after"                           // struct of the business columns: the row after the change (nil for deletes, truncates)
	HistOutcome     = "_cdc_outcome"                    // string: applied / stale / duplicate / ignored — what the current table did
	HistUnavailable = "_cdc_unavailable"                // array<string>: columns of the change's row image whose TOAST value was not sent (null in the image)
	HistOldKey      = "_cdc_old_key"                    // struct of the key columns: the previous key of a primary-key change's create half
	HistKeyMoved    = "_cdc_key_moved"                  // boolean: the delete half of a primary-key change
	HistTombstone   = "_cdc_tombstone"                  // boolean: a bare Kafka tombstone (null value)
	HistTxID        = "_cdc_tx_id"                      // long: source transaction id
	HistSourceDate  = "_cdc_source_date"                // date (UTC) of the source commit: the partition column
	ConfHistoryOf   = "cdcsink.historyOf"               // property of a history table: the source table id it records
	ConfHistExclude = "cdcsink.history.excludedColumns" // comma-separated columns left out of the images
	ConfHistHash    = "cdcsink.history.hashedColumns"   // comma-separated columns stored as salted SHA-256 hex
)
