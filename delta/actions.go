// The Delta log actions (protocol, metaData, add, remove, txn, domainMetadata, commitInfo) and their JSON form.

package delta

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/cdcsink/cdc-sink/delta/dv"
)

// Protocol is the `protocol` action: reader/writer versions and table features.
type Protocol struct {
	MinReaderVersion int32    `json:"minReaderVersion"`
	MinWriterVersion int32    `json:"minWriterVersion"`
	ReaderFeatures   []string `json:"readerFeatures,omitempty"`
	WriterFeatures   []string `json:"writerFeatures,omitempty"`
}

// Format is metaData.format.
type Format struct {
	Provider string            `json:"provider"`
	Options  map[string]string `json:"options"`
}

// Metadata is the `metaData` action. SchemaString is kept raw (Spark JSON);
// Snapshot.Schema parses it.
type Metadata struct {
	ID               string            `json:"id"`
	Name             string            `json:"name,omitempty"`
	Description      string            `json:"description,omitempty"`
	Format           Format            `json:"format"`
	SchemaString     string            `json:"schemaString"`
	PartitionColumns []string          `json:"partitionColumns"`
	Configuration    map[string]string `json:"configuration"`
	CreatedTime      *int64            `json:"createdTime,omitempty"`
}

// DeletionVector is the deletion-vector descriptor carried by add/remove
// (delta/dv reads and writes the bitmaps). UniqueID() gives the DV half of
// a logical file key.
type DeletionVector = dv.Descriptor

// Add is the `add` action: a data file (plus optional DV) becomes part of the table.
type Add struct {
	Path                    string             `json:"path"`
	PartitionValues         map[string]*string `json:"partitionValues"`
	Size                    int64              `json:"size"`
	ModificationTime        int64              `json:"modificationTime"`
	DataChange              bool               `json:"dataChange"`
	Stats                   string             `json:"stats,omitempty"`
	Tags                    map[string]string  `json:"tags,omitempty"`
	DeletionVector          *DeletionVector    `json:"deletionVector,omitempty"`
	BaseRowID               *int64             `json:"baseRowId,omitempty"`
	DefaultRowCommitVersion *int64             `json:"defaultRowCommitVersion,omitempty"`
	ClusteringProvider      string             `json:"clusteringProvider,omitempty"`
}

// Remove is the `remove` action: a logical file leaves the table (tombstone).
type Remove struct {
	Path                    string             `json:"path"`
	DeletionTimestamp       *int64             `json:"deletionTimestamp,omitempty"`
	DataChange              bool               `json:"dataChange"`
	ExtendedFileMetadata    *bool              `json:"extendedFileMetadata,omitempty"`
	PartitionValues         map[string]*string `json:"partitionValues,omitempty"`
	Size                    *int64             `json:"size,omitempty"`
	Stats                   string             `json:"stats,omitempty"`
	Tags                    map[string]string  `json:"tags,omitempty"`
	DeletionVector          *DeletionVector    `json:"deletionVector,omitempty"`
	BaseRowID               *int64             `json:"baseRowId,omitempty"`
	DefaultRowCommitVersion *int64             `json:"defaultRowCommitVersion,omitempty"`
}

// Txn is the `txn` (SetTransaction) action: the last batch version an
// application committed, used for idempotent writes.
type Txn struct {
	AppID       string `json:"appId"`
	Version     int64  `json:"version"`
	LastUpdated *int64 `json:"lastUpdated,omitempty"`
}

// DomainMetadata is the `domainMetadata` action.
type DomainMetadata struct {
	Domain        string `json:"domain"`
	Configuration string `json:"configuration"`
	Removed       bool   `json:"removed"`
}

// CDC is the `cdc` action (a change data file of one version, for Change
// Data Feed readers). Not part of any snapshot: replay ignores it.
type CDC struct {
	Path            string             `json:"path"`
	PartitionValues map[string]*string `json:"partitionValues"`
	Size            int64              `json:"size"`
	DataChange      bool               `json:"dataChange"`
	Tags            map[string]string  `json:"tags,omitempty"`
}

// Action is one line of a commit file; exactly one field is set for known
// actions. Unknown action keys leave all fields nil and are ignored by replay.
type Action struct {
	CommitInfo     map[string]any  `json:"commitInfo,omitempty"`
	Protocol       *Protocol       `json:"protocol,omitempty"`
	Metadata       *Metadata       `json:"metaData,omitempty"`
	Add            *Add            `json:"add,omitempty"`
	Remove         *Remove         `json:"remove,omitempty"`
	Txn            *Txn            `json:"txn,omitempty"`
	DomainMetadata *DomainMetadata `json:"domainMetadata,omitempty"`
	CDC            *CDC            `json:"cdc,omitempty"`
	// v2 checkpoint actions, kept raw.
	CheckpointMetadata json.RawMessage `json:"checkpointMetadata,omitempty"`
	Sidecar            json.RawMessage `json:"sidecar,omitempty"`
}

// Stats is the parsed form of add.stats.
type Stats struct {
	NumRecords  int64          `json:"numRecords"`
	MinValues   map[string]any `json:"minValues,omitempty"`
	MaxValues   map[string]any `json:"maxValues,omitempty"`
	NullCount   map[string]any `json:"nullCount,omitempty"`
	TightBounds *bool          `json:"tightBounds,omitempty"`
}

// ParseStats parses add.stats; an empty string gives (nil, nil): stats are optional.
func ParseStats(s string) (*Stats, error) {
	if s == "" {
		return nil, nil
	}
	var st Stats
	d := json.NewDecoder(bytes.NewReader([]byte(s)))
	d.UseNumber()
	if err := d.Decode(&st); err != nil {
		return nil, fmt.Errorf("parse stats: %w", err)
	}
	return &st, nil
}

// ParsedStats parses a.Stats (nil when absent).
func (a *Add) ParsedStats() (*Stats, error) { return ParseStats(a.Stats) }

// Key is the logical-file key used for reconciliation: path + DV unique id.
func (a *Add) Key() string { return fileKey(a.Path, a.DeletionVector) }

// Key is the logical-file key used for reconciliation: path + DV unique id.
func (r *Remove) Key() string { return fileKey(r.Path, r.DeletionVector) }

func fileKey(path string, dv *DeletionVector) string {
	if dv == nil {
		return path
	}
	return path + "\x00" + dv.UniqueID()
}

// maxLineBytes bounds one action line; a larger line is treated as corrupt
// rather than allocating without limit.
const maxLineBytes = 64 << 20

// ParseCommit parses one newline-delimited JSON commit file. name is used in
// errors only. It never panics; corrupt, truncated or semantically invalid
// lines give an error wrapping ErrCorruptLog with the file name and line number.
func ParseCommit(name string, data []byte) ([]Action, error) {
	var out []Action
	line := 0
	for len(data) > 0 {
		line++
		var ln []byte
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			ln, data = data[:i], data[i+1:]
		} else {
			ln, data = data, nil
		}
		ln = bytes.TrimSpace(ln)
		if len(ln) == 0 {
			continue
		}
		if len(ln) > maxLineBytes {
			return nil, fmt.Errorf("%w: %s line %d: action larger than %d bytes", ErrCorruptLog, name, line, maxLineBytes)
		}
		var a Action
		if err := json.Unmarshal(ln, &a); err != nil {
			return nil, fmt.Errorf("%w: %s line %d: %v", ErrCorruptLog, name, line, err)
		}
		if err := a.validate(); err != nil {
			return nil, fmt.Errorf("%w: %s line %d: %v", ErrCorruptLog, name, line, err)
		}
		out = append(out, a)
	}
	return out, nil
}

func (a *Action) validate() error {
	switch {
	case a.Add != nil:
		if a.Add.Path == "" {
			return fmt.Errorf("add without path")
		}
		if a.Add.DeletionVector != nil && a.Add.DeletionVector.StorageType == "" {
			return fmt.Errorf("add %s: deletionVector without storageType", a.Add.Path)
		}
	case a.Remove != nil:
		if a.Remove.Path == "" {
			return fmt.Errorf("remove without path")
		}
	case a.Txn != nil:
		if a.Txn.AppID == "" {
			return fmt.Errorf("txn without appId")
		}
	case a.Protocol != nil:
		if a.Protocol.MinReaderVersion <= 0 || a.Protocol.MinWriterVersion <= 0 {
			return fmt.Errorf("protocol without minReaderVersion/minWriterVersion")
		}
	case a.DomainMetadata != nil:
		if a.DomainMetadata.Domain == "" {
			return fmt.Errorf("domainMetadata without domain")
		}
	}
	return nil
}

// MarshalCommit renders actions as a commit file (one JSON object per line).
func MarshalCommit(actions []Action) ([]byte, error) {
	var buf bytes.Buffer
	for i := range actions {
		a := actions[i]
		if a.Metadata != nil {
			m := *a.Metadata
			if m.PartitionColumns == nil {
				m.PartitionColumns = []string{}
			}
			if m.Configuration == nil {
				m.Configuration = map[string]string{}
			}
			if m.Format.Provider == "" {
				m.Format.Provider = "parquet"
			}
			if m.Format.Options == nil {
				m.Format.Options = map[string]string{}
			}
			a.Metadata = &m
		}
		if a.Add != nil && a.Add.PartitionValues == nil {
			ad := *a.Add
			ad.PartitionValues = map[string]*string{}
			a.Add = &ad
		}
		b, err := json.Marshal(&a)
		if err != nil {
			return nil, fmt.Errorf("marshal action %d: %w", i, err)
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	return buf.Bytes(), nil
}
