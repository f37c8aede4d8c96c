// Change Data Feed: change data files (_change_data/, `cdc` actions) and the table setting that asks for them.

package delta

import (
	"context"
	"fmt"
	"net/url"
	"strings"
)

// Change Data Feed names from the protocol ("Change Data Files", "Add CDC File").
const (
	// FeatureChangeDataFeed is the writer feature of tables (writer version
	// 7) whose writers must honour ConfEnableChangeDataFeed.
	FeatureChangeDataFeed = "changeDataFeed"
	// ConfEnableChangeDataFeed is the table property: "true" makes every
	// data-changing commit carry change data files.
	ConfEnableChangeDataFeed = "delta.enableChangeDataFeed"
	// ChangeTypeColumn is the column of change data files saying what
	// happened to the row: ChangeInsert, ChangeUpdatePreimage,
	// ChangeUpdatePostimage or ChangeDelete.
	ChangeTypeColumn = "_change_type"
	// ChangeDataDir is the directory (at the table root) of change data files.
	ChangeDataDir = "_change_data"
)

// The values of ChangeTypeColumn.
const (
	ChangeInsert          = "insert"
	ChangeUpdatePreimage  = "update_preimage"
	ChangeUpdatePostimage = "update_postimage"
	ChangeDelete          = "delete"
)

// ChangeDataFeedEnabled reports whether writers of a table with this
// protocol and metadata must produce change data files: the property is
// true and, on writer version 7, the protocol lists the changeDataFeed
// writer feature (versions 4 to 6 imply it; we refuse to write those).
func ChangeDataFeedEnabled(p *Protocol, m *Metadata) bool {
	if !strings.EqualFold(m.Configuration[ConfEnableChangeDataFeed], "true") {
		return false
	}
	if p.MinWriterVersion == MaxWriterVersion {
		return p.HasFeature(FeatureChangeDataFeed)
	}
	return p.MinWriterVersion >= 4
}

// ChangeDataFeedEnabled reports whether commits to this table must carry
// change data files (see the package function).
func (s *Snapshot) ChangeDataFeedEnabled() bool {
	return ChangeDataFeedEnabled(&s.protocol, &s.metadata)
}

// PutChangeDataFile stores data (a Parquet file with the table's columns
// plus ChangeTypeColumn, encoded by the caller) as a new change data file
// of an unpartitioned table, named as Spark names them
// (_change_data/cdc-00000-<uuid>.c000.snappy.parquet), never overwriting,
// and returns its `cdc` action (dataChange=false, as the protocol requires).
// The file is invisible to change readers until the action is committed.
func (t *Table) PutChangeDataFile(ctx context.Context, data []byte) (CDC, error) {
	rel := ChangeDataDir + "/cdc-00000-" + newUUID() + ".c000.snappy.parquet"
	if err := t.store.PutIfAbsent(ctx, t.Key(rel), data); err != nil {
		return CDC{}, fmt.Errorf("write change data file %s: %w", rel, err)
	}
	return CDC{Path: (&url.URL{Path: rel}).EscapedPath(), PartitionValues: map[string]*string{}, Size: int64(len(data))}, nil
}

// AddCDC appends `cdc` actions (change data files of this commit). When a
// version has cdc actions, change readers read its changes from them only.
func (tx *Transaction) AddCDC(cdcs ...CDC) *Transaction {
	tx.cdcs = append(tx.cdcs, cdcs...)
	return tx
}

// checkChangeData enforces the writer side of Change Data Feed: with the
// feed enabled, a commit that removes data (dataChange=true) must say in
// cdc actions what changed, otherwise change readers would take every row
// of the removed files as deleted and every row of the added ones as
// inserted. Commits that only add files (inserts) may go without, as the
// protocol allows.
func (tx *Transaction) checkChangeData(p *Protocol, m *Metadata) error {
	for i := range tx.cdcs {
		c := &tx.cdcs[i]
		if c.Path == "" {
			return fmt.Errorf("cdc #%d: empty path", i)
		}
		if c.DataChange {
			return fmt.Errorf("cdc %s: dataChange must be false", c.Path)
		}
	}
	if !ChangeDataFeedEnabled(p, m) || len(tx.cdcs) > 0 {
		return nil
	}
	for i := range tx.removes {
		if tx.removes[i].DataChange {
			return fmt.Errorf("table has %s=true: a commit removing %s (dataChange=true) must carry its change data (cdc actions)",
				ConfEnableChangeDataFeed, tx.removes[i].Path)
		}
	}
	return nil
}
