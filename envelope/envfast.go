package envelope

import (
	"fmt"
	"slices"
	"strconv"
	"unsafe"
)

// The envelope's source and transaction blocks are more than half of the
// values of a JSON change record (16 of ≈ 40 in a Postgres event), and every
// one of them was boxed into an interface (an allocation each) only for
// interpretEnvelope to unbox it again. When the record is known to be read as
// an envelope, the scanner decodes these two blocks straight into
// Event.Source and Event.Tx and leaves nil in the transient Row; the Row never
// leaves the package, and interpretEnvelope skips a nil block.
//
// The result must be exactly the one interpretEnvelope gives for the boxed
// values (TestEnvelopeFastPathMatches, FuzzEnvelopeFastPath): the schemaless
// path takes only the forms it can decide alone (the expected JSON kind, or
// null) and on anything else rewinds and decodes the block the ordinary way;
// the schema'd path is planned per schema and mirrors structVal's rules
// (last duplicate wins, null clears).

// srcField is a Source field the fast path fills.
type srcField uint8

const (
	sfNone srcField = iota // not a Source field: decoded and dropped
	sfVersion
	sfConnector
	sfName
	sfDB
	sfSchema
	sfTable
	sfSnapshot
	sfSequence
	sfTsMs // first integer field
	sfTsUs
	sfTsNs
	sfLSN
	sfTxID
	// transaction block
	tfID
	tfTotal // first integer field of the transaction block
	tfDataColl
)

func (f srcField) isInt() bool { return (f >= sfTsMs && f <= sfTxID) || f >= tfTotal }

func sourceFieldOf(k []byte) srcField {
	switch string(k) {
	case "version":
		return sfVersion
	case "connector":
		return sfConnector
	case "name":
		return sfName
	case "db":
		return sfDB
	case "schema":
		return sfSchema
	case "table":
		return sfTable
	case "snapshot":
		return sfSnapshot
	case "sequence":
		return sfSequence
	case "ts_ms":
		return sfTsMs
	case "ts_us":
		return sfTsUs
	case "ts_ns":
		return sfTsNs
	case "lsn":
		return sfLSN
	case "txId":
		return sfTxID
	}
	return sfNone
}

func txFieldOf(k []byte) srcField {
	switch string(k) {
	case "id":
		return tfID
	case "total_order":
		return tfTotal
	case "data_collection_order":
		return tfDataColl
	}
	return sfNone
}

// setStr and setInt assign a decoded value; clear resets a field as a null
// in a schema'd block does (the field stays unset).
func setStr(src *Source, tx *TxInfo, f srcField, v string) {
	switch f {
	case sfVersion:
		src.Version = v
	case sfConnector:
		src.Connector = v
	case sfName:
		src.Name = v
	case sfDB:
		src.DB = v
	case sfSchema:
		src.Schema = v
	case sfTable:
		src.Table = v
	case sfSnapshot:
		src.Snapshot = v
	case sfSequence:
		src.Sequence = v
	case tfID:
		tx.ID = v
	}
}

func setInt(src *Source, tx *TxInfo, f srcField, v int64) {
	switch f {
	case sfTsMs:
		src.TsMs = v
	case sfTsUs:
		src.TsUs = v
	case sfTsNs:
		src.TsNs = v
	case sfLSN:
		src.LSN, src.HasLSN = v, true
	case sfTxID:
		src.TxID, src.HasTxID = v, true
	case tfTotal:
		tx.TotalOrder = v
	case tfDataColl:
		tx.DataCollectionOrder = v
	}
}

func clearField(src *Source, tx *TxInfo, f srcField) {
	switch {
	case f == sfNone:
	case f == sfLSN:
		src.LSN, src.HasLSN = 0, false
	case f == sfTxID:
		src.TxID, src.HasTxID = 0, false
	case f.isInt():
		setInt(src, tx, f, 0)
	default:
		setStr(src, tx, f, "")
	}
}

// ---- schemaless ----

// plainBlock decodes a schemaless source (tx nil) or transaction block
// (src nil) whose '{' is next. It reports false, with the scanner state
// undefined, for anything it does not decide alone: the caller rewinds and
// decodes the block as a Row.
//
// Source follows fillSource: nulls are skipped, strings must be strings and
// integers integers. The transaction block follows interpretEnvelope: a null
// or missing member leaves the field zero.
func (s *scanner) plainBlock(src *Source, tx *TxInfo) bool {
	if s.push() != nil {
		return false
	}
	empty, err := s.objStart()
	if err != nil {
		return false
	}
	var scratch [64]byte
	for !empty {
		k, err := s.objKey(&scratch)
		if err != nil {
			return false
		}
		var f srcField
		if tx != nil {
			f = txFieldOf(k)
		} else {
			f = sourceFieldOf(k)
		}
		switch c := s.peek(); {
		case c == 'n':
			if !s.literal("null") {
				return false
			}
			if tx != nil {
				clearField(src, tx, f)
			}
		case c == '"':
			v, err := s.str()
			if err != nil || (f != sfNone && f.isInt()) {
				return false
			}
			setStr(src, tx, f, v)
		case c == '-' || ('0' <= c && c <= '9'):
			tok, isInt, err := s.numToken()
			if err != nil || (f != sfNone && !f.isInt()) {
				return false
			}
			if f != sfNone {
				if !isInt {
					return false
				}
				v, perr := strconv.ParseInt(unsafe.String(&tok[0], len(tok)), 10, 64)
				if perr != nil {
					return false
				}
				setInt(src, tx, f, v)
			}
		case c == 't' || c == 'f':
			if f != sfNone || !(s.literal("true") || s.literal("false")) {
				return false
			}
		default: // objects, arrays, syntax errors: the ordinary path decides
			return false
		}
		more, err := s.objNext()
		if err != nil {
			return false
		}
		if !more {
			break
		}
	}
	s.depth--
	return true
}

// plainEnvelopeMember is called by anyObject for each member of the
// top-level object of a schemaless value. It decodes a first source or
// transaction block into s.env and reports true (the member's value is then
// nil); otherwise the scanner is where it was.
func (s *scanner) plainEnvelopeMember(name string) bool {
	var bit uint8
	switch name {
	case "source":
		bit = 1
	case "transaction":
		bit = 2
	default:
		return false
	}
	if s.envSeen&bit != 0 || s.peek() != '{' {
		s.envSeen |= bit
		return false
	}
	s.envSeen |= bit
	pos, depth, arena := s.pos, s.depth, len(s.arena)
	if bit == 1 {
		src := s.env.Source
		if s.plainBlock(&src, nil) {
			s.env.Source = src
			s.envUsed = true
			return true
		}
	} else {
		tx := &TxInfo{}
		if s.plainBlock(nil, tx) {
			s.env.Tx = tx
			s.envUsed = true
			return true
		}
	}
	s.pos, s.depth, s.arena = pos, depth, s.arena[:arena]
	return false
}

// ---- schema'd ----

// envPlan is the fast path of a top-level struct that interpret reads as an
// envelope (it has op and source fields and is no heartbeat or transaction
// metadata value): the field indexes of source and transaction (-1: decoded
// the ordinary way) and their members' Source fields.
type envPlan struct {
	src, tx       int
	srcMap, txMap []srcField
}

// planEnvelope builds n's envPlan, or nil.
func planEnvelope(n *node) *envPlan {
	name := n.s.Name
	if name == NameHeartbeat || name == NameTxValue || hasSuffix(name, ".TransactionMetadataValue") {
		return nil
	}
	if _, ok := n.index["op"]; !ok {
		return nil
	}
	si, ok := n.index["source"]
	if !ok {
		return nil
	}
	p := &envPlan{src: -1, tx: -1}
	if m := planBlock(n.fields[si], sourceFieldOf); m != nil {
		p.src, p.srcMap = si, m
	}
	if ti, ok := n.index["transaction"]; ok {
		if m := planBlock(n.fields[ti], txFieldOf); m != nil {
			p.tx, p.txMap = ti, m
		}
	}
	if p.src < 0 && p.tx < 0 {
		return nil
	}
	return p
}

// planBlock maps a struct's fields to Source/TxInfo fields, or returns nil
// when one of them has a type the fast path does not take (a boolean
// snapshot flag of old connectors): then interpretEnvelope converts it.
func planBlock(n *node, of func([]byte) srcField) []srcField {
	if n.kind != kStruct {
		return nil
	}
	m := make([]srcField, len(n.fields))
	for i, name := range n.names {
		f := of([]byte(name))
		k := n.fields[i].kind
		switch {
		case f == sfNone:
		case f.isInt() && k >= kInt8 && k <= kInt64:
		case !f.isInt() && k == kString:
		default:
			return nil
		}
		m[i] = f
	}
	return m
}

func hasSuffix(s, suf string) bool { return len(s) >= len(suf) && s[len(s)-len(suf):] == suf }

// typedBlock decodes a schema'd source (tx nil) or transaction block as
// structVal would and fills the fields structVal's Row would give
// fillSource / interpretEnvelope: the block starts zero, a later duplicate
// member wins, a null leaves the field unset. Errors are structVal's.
func (s *scanner) typedBlock(n *node, m []srcField, src *Source, tx *TxInfo) *decodeErr {
	if err := s.push(); err != nil {
		return err
	}
	empty, err := s.objStart()
	if err != nil {
		return err
	}
	if empty {
		s.depth--
		return nil
	}
	var scratch [64]byte
	next := 0
	for {
		k, err := s.objKey(&scratch)
		if err != nil {
			return err
		}
		idx := n.fieldIndex(k, next)
		if idx < 0 {
			if err := s.skip(); err != nil {
				return err
			}
		} else {
			f, fn := m[idx], n.fields[idx]
			c := s.peek()
			switch {
			case f != sfNone && f.isInt() && (c == '-' || ('0' <= c && c <= '9')):
				v, err := s.int64Val(fn.lo, fn.hi)
				if err != nil {
					return err.at(n.names[idx])
				}
				setInt(src, tx, f, v)
			case f != sfNone && !f.isInt() && c == '"':
				v, err := s.str()
				if err != nil {
					return err.at(n.names[idx])
				}
				setStr(src, tx, f, v)
			default:
				// null, a mismatch, or a member that is no Source field:
				// typedVal validates it and gives nil for a null
				if _, err := s.typedVal(fn); err != nil {
					return err.at(n.names[idx])
				}
				clearField(src, tx, f)
			}
			next = idx + 1
		}
		more, err := s.objNext()
		if err != nil {
			return err
		}
		if !more {
			s.depth--
			return nil
		}
	}
}

// typedEnvelopeMember is called by structVal for field idx of a top-level
// struct with plan p. It reports whether it decoded the value (the Row's
// value then stays nil). A null or repeated block resets what an earlier one
// set, as the Row's last value would.
func (s *scanner) typedEnvelopeMember(p *envPlan, n *node, idx int) (bool, *decodeErr) {
	if idx != p.src && idx != p.tx {
		return false, nil
	}
	if s.peek() != '{' {
		if idx == p.src {
			s.env.Source = Source{}
		} else {
			s.env.Tx = nil
		}
		return false, nil
	}
	if idx == p.src {
		var src Source
		if err := s.typedBlock(n.fields[idx], p.srcMap, &src, nil); err != nil {
			return true, err
		}
		s.env.Source = src
		return true, nil
	}
	tx := &TxInfo{}
	if err := s.typedBlock(n.fields[idx], p.txMap, nil, tx); err != nil {
		return true, err
	}
	s.env.Tx = tx
	return true, nil
}

// ---- Avro ----

// avroEnvPlan is envPlan for a compiled Avro value schema whose root
// record has op and source fields: the root's source and transaction
// fields (-1: read the ordinary way) and their fields' Source fields.
type avroEnvPlan struct {
	src, tx       int
	srcMap, txMap []srcField
}

// planAvroEnvelope builds root's avroEnvPlan, or nil.
func planAvroEnvelope(root *aNode) *avroEnvPlan {
	if root.kind != aRecord || root.s == nil {
		return nil
	}
	if name := root.s.Name; name == NameHeartbeat || name == NameTxValue || hasSuffix(name, ".TransactionMetadataValue") {
		return nil
	}
	p := &avroEnvPlan{src: -1, tx: -1}
	hasOp := false
	for i, name := range root.rec.names {
		switch name {
		case "op":
			hasOp = true
		case "source":
			if m := planAvroBlock(root.rec.fields[i], sourceFieldOf); m != nil {
				p.src, p.srcMap = i, m
			}
		case "transaction":
			if m := planAvroBlock(root.rec.fields[i], txFieldOf); m != nil {
				p.tx, p.txMap = i, m
			}
		}
	}
	if !hasOp || !slices.Contains(root.rec.names, "source") || (p.src < 0 && p.tx < 0) {
		return nil
	}
	return p
}

// planAvroBlock maps a record's (or optional record's) fields to Source /
// TxInfo fields, or returns nil when a mapped field is not a string, long or
// int (optional or not).
func planAvroBlock(n *aNode, of func([]byte) srcField) []srcField {
	if n.kind == aUnion && n.nonNull >= 0 && len(n.branch) == 2 {
		n = n.branch[n.nonNull]
	}
	if n.kind != aRecord {
		return nil
	}
	m := make([]srcField, len(n.rec.fields))
	for i, name := range n.rec.names {
		f := of([]byte(name))
		v := n.rec.fields[i]
		if v.kind == aUnion && v.nonNull >= 0 && len(v.branch) == 2 {
			v = v.branch[v.nonNull]
		}
		switch {
		case f == sfNone:
		case f.isInt() && (v.kind == aLong || v.kind == aInt):
		case !f.isInt() && v.kind == aString:
		default:
			return nil
		}
		m[i] = f
	}
	return m
}

// readEnvelope reads the root record n as read does, decoding the planned
// blocks into ev instead of into the Row (their Row values stay nil).
func (r *avroReader) readEnvelope(n *aNode, p *avroEnvPlan, ev *Event) (any, int, error) {
	row := r.bx.row()
	row.Schema, row.Names, row.Values = n.s, n.rec.names, r.bx.values(len(n.rec.fields))
	pos := 0
	var err error
	for i, f := range n.rec.fields {
		switch i {
		case p.src:
			var src Source
			var present bool
			if pos, present, err = r.block(f, p.srcMap, &src, nil, pos); err != nil {
				return nil, pos, err
			}
			if present {
				ev.Source = src
			}
		case p.tx:
			tx := &TxInfo{}
			var present bool
			if pos, present, err = r.block(f, p.txMap, nil, tx, pos); err != nil {
				return nil, pos, err
			}
			if present {
				ev.Tx = tx
			}
		default:
			if row.Values[i], pos, err = r.read(f, pos, 1); err != nil {
				return nil, pos, err
			}
		}
	}
	return row, pos, nil
}

// union reads a union's branch index as read does and returns the branch.
func (r *avroReader) union(n *aNode, pos int) (*aNode, int, error) {
	i, p, err := r.varint(pos)
	if err != nil {
		return nil, p, err
	}
	if i < 0 || i >= int64(len(n.branch)) {
		return nil, p, fmt.Errorf("union index %d out of range at offset %d", i, pos)
	}
	return n.branch[i], p, nil
}

// block reads a source or transaction field f (a record, or an optional
// record) at depth 1 into src or tx; present is false for a null.
func (r *avroReader) block(f *aNode, m []srcField, src *Source, tx *TxInfo, pos int) (int, bool, error) {
	var err error
	if f.kind == aUnion {
		if f, pos, err = r.union(f, pos); err != nil {
			return pos, false, err
		}
		if f.kind == aNull {
			return pos, false, nil
		}
	}
	for i, v := range f.rec.fields {
		sf := m[i]
		if sf == sfNone {
			if _, pos, err = r.read(v, pos, 2); err != nil {
				return pos, false, err
			}
			continue
		}
		if v.kind == aUnion {
			if v, pos, err = r.union(v, pos); err != nil {
				return pos, false, err
			}
		}
		switch v.kind {
		case aNull: // fillSource skips a null; a transaction field stays zero
		case aString:
			from, to, err := r.span(pos)
			if err != nil {
				return from, false, err
			}
			setStr(src, tx, sf, r.str(from, to))
			pos = to
		case aLong, aInt:
			x, p, err := r.varint(pos)
			if err != nil {
				return p, false, err
			}
			if v.kind == aInt {
				x = int64(int32(x)) // as read
			}
			setInt(src, tx, sf, x)
			pos = p
		}
	}
	return pos, true, nil
}
