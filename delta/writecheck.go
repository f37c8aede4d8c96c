// CheckWritable: whether commits to a table are supported, before any data file is written.

package delta

// CheckWritable reports whether commits to this snapshot's table are
// supported (protocol versions, table features, invariants, constraints),
// the same check Transaction.Commit makes. Callers that write data files
// before committing use it to refuse a table up front instead of after
// the files are written.
func (s *Snapshot) CheckWritable() error {
	return checkWriteSupported(&s.protocol, &s.metadata)
}
