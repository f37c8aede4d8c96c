// The versioning tracker state in the table: one domain per partition, and the older single domain.

package merge

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"

	"github.com/cdcsink/cdc-sink/delta"
	"github.com/cdcsink/cdc-sink/layout"
	"github.com/cdcsink/cdc-sink/versioning"
)

var instanceIDRe = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// validInstanceID: the characters of sink names, so that layout's names
// parse back unambiguously.
func validInstanceID(id string) bool { return instanceIDRe.MatchString(id) }

// ReadTracker is sink's versioning tracker state in a table, from its
// domain metadata (domain → configuration): each partition's own domain
// (layout.TrackerPartitionDomain), over the single-domain layout of older
// tables (layout.TrackerDomain), which is read but no longer written.
// Sorted by topic and partition.
func ReadTracker(sink string, domains map[string]string) ([]versioning.PartitionState, error) {
	byTP := map[TP]versioning.PartitionState{}
	if cfg := domains[layout.TrackerDomain(sink)]; cfg != "" {
		var all []versioning.PartitionState
		if err := json.Unmarshal([]byte(cfg), &all); err != nil {
			return nil, fmt.Errorf("versioning state (domain %s): %w", layout.TrackerDomain(sink), err)
		}
		for _, s := range all {
			byTP[TP{s.Topic, s.Partition}] = s
		}
	}
	for d, cfg := range domains {
		topic, p, legacy, ok := layout.ParseTrackerDomain(sink, d)
		if !ok || legacy || cfg == "" {
			continue
		}
		var one []versioning.PartitionState
		if err := json.Unmarshal([]byte(cfg), &one); err != nil {
			return nil, fmt.Errorf("versioning state (domain %s): %w", d, err)
		}
		if len(one) != 1 || one[0].Topic != topic || one[0].Partition != p {
			return nil, fmt.Errorf("versioning state (domain %s): holds %d states, want the one of %s/%d", d, len(one), topic, p)
		}
		byTP[TP{topic, p}] = one[0]
	}
	if len(byTP) == 0 {
		return nil, nil
	}
	out := make([]versioning.PartitionState, 0, len(byTP))
	for _, s := range byTP {
		out = append(out, s)
	}
	sortStates(out)
	return out, nil
}

func sortStates(out []versioning.PartitionState) {
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
}

// trackerDomains are the domain metadata a batch writes: the tracker state
// of each partition it covers, in that partition's own domain. Instances
// own disjoint partitions, so their commits never write the same domain
// (one shared domain made every pair of concurrent commits conflict).
func trackerDomains(sink string, b *Batch) ([]delta.DomainMetadata, error) {
	var out []delta.DomainMetadata
	for _, s := range b.Tracker {
		if _, ours := b.Offsets[TP{s.Topic, s.Partition}]; !ours {
			continue // another instance's partition: its state is not ours to write
		}
		cfg, err := json.Marshal([]versioning.PartitionState{s})
		if err != nil {
			return nil, err
		}
		out = append(out, delta.DomainMetadata{Domain: layout.TrackerPartitionDomain(sink, s.Topic, s.Partition), Configuration: string(cfg)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Domain < out[j].Domain })
	return out, nil
}
