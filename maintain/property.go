// Setting a table property that changes what writers must do: delta.enableChangeDataFeed.

package maintain

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/tablerows"
)

// OpSetProperties is the commitInfo operation of SetProperty (Spark's name).
const OpSetProperties = "SET TBLPROPERTIES"

// SettableProperties are the properties SetProperty changes, with what they
// do. Others are refused: cdc-sink's own properties (cdcsink.*) describe the
// table's contents and other delta.* properties ask for behaviour writers
// would have to implement.
var SettableProperties = map[string]string{
	delta.ConfEnableChangeDataFeed: "true|false: Change Data Feed (docs/history.md); the feed starts at the version that enables it",
}

// PropertyResult reports what SetProperty did.
type PropertyResult struct {
	ReadVersion int64
	Version     int64 // ReadVersion when nothing was committed (the value was already set)
	Committed   bool
	Protocol    delta.Protocol // after the commit
}

// SetProperty sets table property key to value in one metaData commit (and
// a protocol commit adding the writer feature enabling Change Data Feed
// needs). A sink writing the table concurrently conflicts with the commit,
// re-plans on the new metadata and writes change data from then on.
func SetProperty(ctx context.Context, dir, key, value string, so delta.StorageOptions) (*PropertyResult, error) {
	if _, ok := SettableProperties[key]; !ok {
		keys := slices.Sorted(maps.Keys(SettableProperties))
		return nil, fmt.Errorf("property %q cannot be set by cdc-sink (settable: %s)", key, strings.Join(keys, ", "))
	}
	v := strings.ToLower(strings.TrimSpace(value))
	if v != "true" && v != "false" {
		return nil, fmt.Errorf("property %s: value %q is not true or false", key, value)
	}
	t, err := tablerows.OpenWith(ctx, dir, so)
	if err != nil {
		return nil, err
	}
	res := &PropertyResult{ReadVersion: t.Snap.Version(), Version: t.Snap.Version(), Protocol: t.Snap.Protocol()}
	meta := t.Snap.Metadata()
	if strings.EqualFold(meta.Configuration[key], v) && (v == "false" || t.Snap.ChangeDataFeedEnabled()) {
		return res, nil
	}
	meta.Configuration = maps.Clone(meta.Configuration)
	if meta.Configuration == nil {
		meta.Configuration = map[string]string{}
	}
	meta.Configuration[key] = v
	tx := t.Snap.Begin().SetMetadata(meta)
	p := t.Snap.Protocol()
	if v == "true" && !p.HasFeature(delta.FeatureChangeDataFeed) {
		p = delta.WithWriterFeature(p, delta.FeatureChangeDataFeed)
		tx.SetProtocol(p)
	}
	ver, err := tx.Commit(ctx, OpSetProperties, map[string]any{"properties": map[string]string{key: v}})
	if err != nil {
		return nil, fmt.Errorf("set %s=%s on %s: %w", key, v, dir, err)
	}
	res.Version, res.Committed, res.Protocol = ver, true, p
	return res, nil
}
