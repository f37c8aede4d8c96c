//go:build e2e

package integration

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The source table: every type the brief asks for, REPLICA IDENTITY DEFAULT (so an UPDATE that
// does not touch a TOASTed `note` streams Debezium's __debezium_unavailable_value placeholder).
const tableDDL = `CREATE TABLE public.%s (
    id        bigint        PRIMARY KEY,
    amount    numeric(12,2) NOT NULL,
    placed_at timestamptz   NOT NULL,
    due       date,
    attrs     jsonb,
    ref       uuid          NOT NULL,
    paid      boolean       NOT NULL DEFAULT false,
    note      text,
    item_ids  integer[],
    labels    text[],
    rev       integer       NOT NULL DEFAULT 0
)`

type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// workload generates rows and changes; ids are chosen from an approximate live set (an UPDATE of
// a row that is already gone is harmless: the check is always against Postgres itself).
type workload struct {
	table  string
	rng    *mrand.Rand
	live   []int64
	nextID int64
}

func newWorkload(table string, seed uint64) *workload {
	return &workload{table: table, rng: mrand.New(mrand.NewPCG(seed, 7)), nextID: 1}
}

// bigNote is random (incompressible) base64 text of ~12 KB: stored out of line (TOAST).
func bigNote() string {
	b := make([]byte, 9000)
	_, _ = rand.Read(b)
	return "big:" + base64.StdEncoding.EncodeToString(b)
}

func (w *workload) amount() string {
	switch w.rng.IntN(12) {
	case 0:
		return "9999999999.99" // numeric(12,2) max
	case 1:
		return "-0.01"
	case 2:
		return "0.00"
	}
	v := w.rng.Int64N(200000000) - 1000000
	sign := ""
	if v < 0 {
		sign, v = "-", -v
	}
	return fmt.Sprintf("%s%d.%02d", sign, v/100, v%100)
}

func (w *workload) row(id int64) []any {
	ts := time.Unix(946684800+w.rng.Int64N(1_000_000_000), w.rng.Int64N(1e6)*1000).UTC()
	var due any
	if w.rng.IntN(5) > 0 {
		due = time.Date(1990+w.rng.IntN(60), time.Month(1+w.rng.IntN(12)), 1+w.rng.IntN(28), 0, 0, 0, 0, time.UTC).Format("2006-01-02")
	}
	attrs, _ := json.Marshal(map[string]any{
		"k": id, "name": "ação ✓ \"q\" <b>", "nested": map[string]any{"a": []any{1, 2.5, nil, true}},
		"big": json.Number("12345678901234567890"), "s": strings.Repeat("x", w.rng.IntN(30)),
	})
	var u [16]byte
	_, _ = rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	ref := fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
	var note any = fmt.Sprintf("short note %d é", id)
	if id%10 == 0 {
		note = bigNote()
	} else if w.rng.IntN(10) == 0 {
		note = nil
	}
	items := fmt.Sprintf("{%d,%d,%d}", id, -w.rng.IntN(1000), w.rng.IntN(1<<30))
	var labels any = `{"a,b","say \"hi\"",NULL,"ü"}`
	if w.rng.IntN(4) == 0 {
		labels = "{}"
	}
	return []any{id, w.amount(), ts, due, string(attrs), ref, w.rng.IntN(3) == 0, note, items, labels}
}

func (w *workload) insert(ctx context.Context, x execer, id int64) error {
	_, err := x.Exec(ctx, fmt.Sprintf(`INSERT INTO public.%s (id, amount, placed_at, due, attrs, ref, paid, note, item_ids, labels)
		VALUES ($1, $2::text::numeric, $3, $4::text::date, $5::text::jsonb, $6::text::uuid, $7, $8, $9::text::int[], $10::text::text[])`, w.table),
		w.row(id)...)
	if err == nil {
		w.live = append(w.live, id)
	}
	return err
}

func (w *workload) newID() int64 {
	id := w.nextID
	w.nextID++
	return id
}

func (w *workload) pick() int64 {
	if len(w.live) == 0 {
		return 0
	}
	for range 5 {
		id := w.live[w.rng.IntN(len(w.live))]
		if id != 0 {
			return id
		}
	}
	return w.live[w.rng.IntN(len(w.live))]
}

func (w *workload) forget(id int64) {
	for i, v := range w.live {
		if v == id {
			w.live[i] = w.live[len(w.live)-1]
			w.live = w.live[:len(w.live)-1]
			return
		}
	}
}

func (w *workload) updateAmount(ctx context.Context, x execer, id int64) error {
	_, err := x.Exec(ctx, fmt.Sprintf(`UPDATE public.%s SET amount = $2::text::numeric, rev = rev + 1 WHERE id = $1`, w.table), id, w.amount())
	return err
}

func (w *workload) updateNote(ctx context.Context, x execer, id int64) error {
	_, err := x.Exec(ctx, fmt.Sprintf(`UPDATE public.%s SET note = $2, rev = rev + 1 WHERE id = $1`, w.table), id, bigNote())
	return err
}

func (w *workload) updateNulls(ctx context.Context, x execer, id int64) error {
	_, err := x.Exec(ctx, fmt.Sprintf(`UPDATE public.%s SET attrs = NULL, due = NULL, item_ids = NULL, labels = NULL, rev = rev + 1 WHERE id = $1`, w.table), id)
	return err
}

func (w *workload) delete(ctx context.Context, x execer, id int64) error {
	_, err := x.Exec(ctx, fmt.Sprintf(`DELETE FROM public.%s WHERE id = $1`, w.table), id)
	if err == nil {
		w.forget(id)
	}
	return err
}

func (w *workload) changeKey(ctx context.Context, x execer, from, to int64) error {
	_, err := x.Exec(ctx, fmt.Sprintf(`UPDATE public.%s SET id = $2, rev = rev + 1 WHERE id = $1`, w.table), from, to)
	if err == nil {
		w.forget(from)
		w.live = append(w.live, to)
	}
	return err
}

// marker bumps row 0: written last, so once the table has it, every change before it is applied
// (Debezium emits in commit order to one partition; the sink applies in partition order).
func (w *workload) marker(ctx context.Context, x execer) error {
	_, err := x.Exec(ctx, fmt.Sprintf(`UPDATE public.%s SET rev = rev + 1 WHERE id = 0`, w.table))
	return err
}

// randomTx runs one transaction of 2-6 random changes.
func (w *workload) randomTx(ctx context.Context, c *pgx.Conn) error {
	tx, err := c.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	n := 2 + w.rng.IntN(5)
	for range n {
		var err error
		switch r := w.rng.IntN(20); {
		case r < 10:
			err = w.updateAmount(ctx, tx, w.pick())
		case r < 14:
			err = w.insert(ctx, tx, w.newID())
		case r < 17:
			err = w.delete(ctx, tx, w.pick())
		case r < 18:
			err = w.updateNote(ctx, tx, w.pick())
		default:
			err = w.updateNulls(ctx, tx, w.pick())
		}
		if err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

// singleUpdates runs n autocommit single-row UPDATEs of existing rows (exactly one change
// event each) and returns how many it ran.
func (w *workload) singleUpdates(t testing.TB, c *pgx.Conn, n int) int {
	t.Helper()
	ctx := context.Background()
	rows, err := c.Query(ctx, fmt.Sprintf(`SELECT id FROM public.%s WHERE id > 0 ORDER BY random() LIMIT %d`, w.table, n))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if err := w.updateAmount(ctx, c, id); err != nil {
			t.Fatal(err)
		}
	}
	return len(ids)
}
