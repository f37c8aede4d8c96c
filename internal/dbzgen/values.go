package dbzgen

import (
	"encoding/base64"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/shopspring/decimal"
)

// rowState is one version of a row. It is immutable once built: updates
// copy it.
type rowState struct {
	id          int64
	customerID  int32
	customerNil bool
	status      uint8
	amount      int64 // unscaled, scale 2
	createdAt   int64 // µs since epoch, UTC
	updatedAt   int64 // µs since epoch (wall clock)
	updatedNil  bool
	shipDate    int32 // days since epoch
	shipNil     bool
	payload     string // jsonb text
	payloadNil  bool
	tags        []string // tagNull marks a NULL element
	tagsNil     bool
	note        string
	noteNil     bool
	uuid        string
	paid        bool
	filler      string
	fillerNil   bool
}

const tagNull = "\x00"

// Limits of numeric(12,2).
const (
	maxAmount = 999999999999
	minAmount = -999999999999
)

// values returns the row in normalize's Go value model.
func (r *rowState) values() []any {
	v := make([]any, len(Columns))
	v[ColID] = r.id
	if !r.customerNil {
		v[ColCustomerID] = r.customerID
	}
	v[ColStatus] = Statuses[r.status]
	v[ColAmount] = decimal.New(r.amount, -2)
	v[ColCreatedAt] = r.createdAt
	if !r.updatedNil {
		v[ColUpdatedAt] = r.updatedAt
	}
	if !r.shipNil {
		v[ColShipDate] = r.shipDate
	}
	if !r.payloadNil {
		v[ColPayload] = r.payload
	}
	if !r.tagsNil {
		t := make([]any, len(r.tags))
		for i, s := range r.tags {
			if s != tagNull {
				t[i] = s
			}
		}
		v[ColTags] = t
	}
	if !r.noteNil {
		v[ColNote] = r.note
	}
	v[ColUUID] = r.uuid
	v[ColPaid] = r.paid
	if !r.fillerNil {
		v[ColFiller] = r.filler
	}
	return v
}

// ---- value generation ----

var (
	customerNames = []string{"Ana", "Bruno", "Célia", "Davi", "Érica", "Fábio", "Guilherme", "Helena"}
	channels      = []string{"web", "app", "loja", "telefone"}
	tagWords      = []string{"gift", "express", "fragile", "promo", "b2b", "retirada", "prioridade"}
	noteWords     = []string{"entregar na portaria", "ring the bell", "café ☕ incluído", `cliente pediu "urgente"`,
		"linha1\nlinha2", "tab\there", "barra \\ invertida", "emoji 🚚", "São Paulo – SP"}
)

// loremBase is the source of large notes and fillers.
var loremBase = func() string {
	const words = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore et dolore magna aliqua "
	b := make([]byte, 0, 8192)
	for len(b) < 8192 {
		b = append(b, words...)
	}
	return string(b[:8192])
}()

func (g *gen) uuid() string {
	var b [16]byte
	x, y := g.rng.Uint64(), g.rng.Uint64()
	for i := 0; i < 8; i++ {
		b[i] = byte(x >> (8 * i))
		b[8+i] = byte(y >> (8 * i))
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	const hx = "0123456789abcdef"
	out := make([]byte, 0, 36)
	for i, c := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out = append(out, '-')
		}
		out = append(out, hx[c>>4], hx[c&15])
	}
	return string(out)
}

func (g *gen) amount() int64 {
	switch n := g.rng.IntN(100); {
	case n < 1:
		return maxAmount
	case n < 2:
		return minAmount
	case n < 4:
		return 0
	case n < 12:
		return -g.rng.Int64N(5_000_00) - 1 // refunds / credits
	case n < 15:
		return g.rng.Int64N(maxAmount) // huge
	default:
		return g.rng.Int64N(20_000_00) + 1
	}
}

const usPerDay = 86400 * 1_000_000

func (g *gen) createdAt() int64 {
	switch n := g.rng.IntN(100); {
	case n < 3: // before 1970
		return -g.rng.Int64N(70*365*usPerDay) - 1
	case n < 5: // far future (up to 9999-12-31)
		return 4102444800_000000 + g.rng.Int64N(253402300799_000000-4102444800_000000)
	case n < 6:
		return 0
	default:
		return g.clockUs - g.rng.Int64N(365*usPerDay)
	}
}

func (g *gen) shipDate(r *rowState) {
	switch n := g.rng.IntN(100); {
	case n < 20:
		r.shipNil = true
	case n < 23:
		r.shipDate = -int32(g.rng.IntN(25000)) - 1 // 1901..1969
	case n < 25:
		r.shipDate = 2932896 - int32(g.rng.IntN(1000)) // close to 9999-12-31
	default:
		r.shipDate = int32(g.clockUs/usPerDay) + int32(g.rng.IntN(30))
	}
}

func (g *gen) payload(r *rowState) {
	if g.rng.IntN(10) == 0 {
		r.payloadNil = true
		return
	}
	// jsonb text form: ", " and ": " separators, keys ordered by length then bytes.
	b := make([]byte, 0, 96)
	b = append(b, `{"items": [`...)
	n := 1 + g.rng.IntN(3)
	for i := 0; i < n; i++ {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, `{"qty": `...)
		b = strconv.AppendInt(b, int64(1+g.rng.IntN(9)), 10)
		b = append(b, `, "sku": "SKU-`...)
		b = strconv.AppendInt(b, int64(g.rng.IntN(1000)), 10)
		b = append(b, `"}`...)
	}
	b = append(b, `], "coupon": `...)
	if g.rng.IntN(3) == 0 {
		b = append(b, `"BLACK10"`...)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `, "channel": "`...)
	b = append(b, channels[g.rng.IntN(len(channels))]...)
	b = append(b, `", "customer": "`...)
	b = append(b, customerNames[g.rng.IntN(len(customerNames))]...)
	b = append(b, `"}`...)
	r.payload, r.payloadNil = string(b), false
}

func (g *gen) tags(r *rowState) {
	switch n := g.rng.IntN(10); {
	case n == 0:
		r.tags, r.tagsNil = nil, true
	case n == 1:
		r.tags, r.tagsNil = []string{}, false
	case n == 2:
		r.tags, r.tagsNil = []string{tagWords[g.rng.IntN(len(tagWords))], tagNull}, false
	default:
		k := 1 + g.rng.IntN(3)
		t := make([]string, k)
		for i := range t {
			t[i] = tagWords[g.rng.IntN(len(tagWords))]
		}
		r.tags, r.tagsNil = t, false
	}
}

// note sets a new note value. With TOAST enabled notes are always large and
// non-null (out-of-line), so an update that leaves them alone yields the
// placeholder.
func (g *gen) note(r *rowState) {
	g.noteSeq++
	if g.cfg.ToastEvery > 0 {
		off := g.rng.IntN(len(loremBase) - 2600)
		n := 2100 + g.rng.IntN(400)
		r.note = "nota " + strconv.Itoa(g.noteSeq) + ": " + loremBase[off:off+n]
		r.noteNil = false
		return
	}
	if g.rng.IntN(5) == 0 {
		r.note, r.noteNil = "", true
		return
	}
	r.note = noteWords[g.rng.IntN(len(noteWords))] + " #" + strconv.Itoa(g.noteSeq)
	r.noteNil = false
}

func (g *gen) filler(r *rowState) {
	if g.cfg.RowWidth <= 0 {
		r.fillerNil = true
		return
	}
	w := g.cfg.RowWidth
	src := loremBase
	for len(src) < w+64 {
		src += loremBase
	}
	off := g.rng.IntN(64)
	r.filler = src[off : off+w]
}

func (g *gen) newRow(id int64) *rowState {
	r := &rowState{id: id}
	if g.rng.IntN(10) == 0 {
		r.customerNil = true
	} else {
		r.customerID = int32(1 + g.rng.IntN(5000))
	}
	r.amount = g.amount()
	r.createdAt = g.createdAt()
	if g.rng.IntN(10) == 0 {
		r.updatedNil = true
	} else {
		r.updatedAt = g.clockUs
	}
	g.shipDate(r)
	g.payload(r)
	g.tags(r)
	g.note(r)
	r.uuid = g.uuid()
	g.filler(r)
	return r
}

// mutate returns a copy of r changed by one update. keepNote leaves the note
// alone (TOAST-unchanged).
func (g *gen) mutate(r *rowState, keepNote bool) *rowState {
	n := *r
	switch {
	case n.status < 3 && g.rng.IntN(10) < 8:
		n.status++
	case g.rng.IntN(10) == 0:
		n.status = 4 // CANCELADO
	default:
		n.status = uint8(g.rng.IntN(len(Statuses)))
	}
	if n.status >= 1 {
		n.paid = true
	}
	if g.rng.IntN(3) == 0 {
		n.amount = g.amount()
	}
	n.updatedAt, n.updatedNil = g.clockUs, false
	if g.rng.IntN(4) == 0 {
		g.shipDate(&n)
	}
	if g.rng.IntN(4) == 0 {
		g.payload(&n)
	}
	if g.rng.IntN(4) == 0 {
		g.tags(&n)
	}
	if !keepNote && (g.cfg.ToastEvery > 0 || g.rng.IntN(3) == 0) {
		g.note(&n)
	}
	if g.rng.IntN(8) == 0 {
		g.filler(&n)
	}
	return &n
}

// ---- JSON encoding helpers ----

const zonedLayout = "2006-01-02T15:04:05.000000Z"

func appendZoned(dst []byte, us int64) []byte {
	dst = append(dst, '"')
	dst = time.UnixMicro(us).UTC().AppendFormat(dst, zonedLayout)
	return append(dst, '"')
}

// appendDecimal appends the base64 of the minimal big-endian two's-complement
// bytes of v (Java BigInteger.toByteArray), as JsonConverter writes a Decimal.
func appendDecimal(dst []byte, v int64) []byte {
	var b [8]byte
	n := 1
	for n < 8 {
		lo, hi := -(int64(1) << (8*n - 1)), int64(1)<<(8*n-1)-1
		if v >= lo && v <= hi {
			break
		}
		n++
	}
	for i := 0; i < n; i++ {
		b[n-1-i] = byte(v >> (8 * i))
	}
	dst = append(dst, '"')
	dst = base64.StdEncoding.AppendEncode(dst, b[:n])
	return append(dst, '"')
}

const hexDigits = "0123456789abcdef"

// appendString appends s as Jackson writes a JSON string: '"', '\\' and
// control characters escaped, everything else (non-ASCII included) raw.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&15])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// newRand returns the generator's deterministic RNG for seed.
func newRand(seed int64, stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15^stream))
}
