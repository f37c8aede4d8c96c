// Privacy controls of history tables: columns left out of the images, and columns stored as salted SHA-256.

package history

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/shopspring/decimal"

	"github.com/cdcsink/cdc-sink/normalize"
)

// Privacy says which business columns a history keeps readable. Entries are
// a column name (every table) or TABLE.COLUMN / SCHEMA.TABLE.COLUMN (one
// source table). Key columns cannot be excluded or hashed: they identify
// the row in history queries and rebuilds.
type Privacy struct {
	ExcludeColumns []string
	HashColumns    []string
	// Salt prefixes every hashed value (required with HashColumns): without
	// it a digest of a low-entropy value (an e-mail, a phone number) is
	// reversed by hashing candidates.
	Salt string
}

// Validate checks the settings before anything is written.
func (p Privacy) Validate() error {
	if len(p.HashColumns) > 0 && p.Salt == "" {
		return fmt.Errorf("history.hash_columns needs a salt (history.hash_salt, or the environment variable it names)")
	}
	for _, list := range [][]string{p.ExcludeColumns, p.HashColumns} {
		for _, e := range list {
			if e == "" || strings.HasPrefix(e, ".") || strings.HasSuffix(e, ".") {
				return fmt.Errorf("history column %q: want COLUMN, TABLE.COLUMN or SCHEMA.TABLE.COLUMN", e)
			}
		}
	}
	return nil
}

// tablePrivacy is Privacy resolved for one source table.
type tablePrivacy struct {
	exclude, hashCols map[string]bool
	salt              string
}

func (p Privacy) forTable(id normalize.TableID) *tablePrivacy {
	tp := &tablePrivacy{exclude: map[string]bool{}, hashCols: map[string]bool{}, salt: p.Salt}
	add := func(m map[string]bool, e string) {
		i := strings.LastIndexByte(e, '.')
		if i < 0 {
			m[e] = true
			return
		}
		scope, col := e[:i], e[i+1:]
		if scope == id.Table || scope == id.Schema+"."+id.Table {
			m[col] = true
		}
	}
	for _, e := range p.ExcludeColumns {
		add(tp.exclude, e)
	}
	for _, e := range p.HashColumns {
		add(tp.hashCols, e)
	}
	return tp
}

func (p *tablePrivacy) excluded(col string) bool { return p != nil && p.exclude[col] }
func (p *tablePrivacy) hashed(col string) bool   { return p != nil && !p.exclude[col] && p.hashCols[col] }

// checkKeys refuses privacy settings on key columns.
func (p *tablePrivacy) checkKeys(keys []string) error {
	for _, k := range keys {
		if p.exclude[k] {
			return fmt.Errorf("history.exclude_columns: %s is a key column: keys identify rows in the history and cannot be left out", k)
		}
		if p.hashCols[k] {
			return fmt.Errorf("history.hash_columns: %s is a key column: keys identify rows in the history and cannot be hashed", k)
		}
	}
	return nil
}

func (p *tablePrivacy) list(m map[string]bool) string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// hash is the lowercase hex SHA-256 of salt, a NUL byte and the value's
// canonical text (HashValue).
func (p *tablePrivacy) hash(v any) string { return HashValue(p.salt, v) }

// HashValue is what a hashed history column holds for v: hex(SHA-256(salt ||
// 0x00 || text)), where text is a string's or binary's bytes, a number's
// shortest decimal text (decimals without trailing zeros), true/false,
// dates and timestamps as their integer (days, microseconds), and other
// values as Go formats them. Equal values hash equally across rows, so
// joins and counts on the column still work; the salt keeps the digest
// from being reversed by hashing guesses.
func HashValue(salt string, v any) string {
	h := sha256.New()
	h.Write([]byte(salt))
	h.Write([]byte{0})
	h.Write(canonText(v))
	return hex.EncodeToString(h.Sum(nil))
}

func canonText(v any) []byte {
	switch x := v.(type) {
	case string:
		return []byte(x)
	case []byte:
		return x
	case bool:
		return strconv.AppendBool(nil, x)
	case float32:
		return strconv.AppendFloat(nil, float64(x), 'g', -1, 32)
	case float64:
		if math.IsNaN(x) {
			return []byte("NaN")
		}
		return strconv.AppendFloat(nil, x, 'g', -1, 64)
	case decimal.Decimal:
		return []byte(x.String())
	}
	if i, ok := normalize.IntValue(v); ok {
		return strconv.AppendInt(nil, i, 10)
	}
	return fmt.Appendf(nil, "%v", v)
}
