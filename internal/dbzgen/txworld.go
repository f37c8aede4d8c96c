// Multi-table transactions with Debezium's transaction metadata, for the
// tests of consistency: transaction.

package dbzgen

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/cdcsink/cdc-sink/source"
	"github.com/cdcsink/cdc-sink/tablerows"
)

// TxWorld is a generated history of two tables written by multi-table
// transactions, as Debezium publishes it with provide.transaction.metadata:
// schemaless JSON data records per partition (key id, column v = the
// transaction that last wrote the row), the transaction topic's END
// records, and each table's state after every transaction.
type TxWorld struct {
	Data    map[source.TopicPartition][]*source.Record
	Tx      []*source.Record              // <prefix>.transaction, one partition
	Commits []int64                       // commit LSN of transaction i, ascending
	States  map[string][]map[int64]string // table → state after transactions [0, i) (index i)
	// Emits are the records of each transaction as sent (re-sent copies
	// included), in the order sent: its data records, then its END.
	Emits [][]*source.Record
}

// TxTables are the tables of a TxWorld, on topics shop.public.<table>.
var TxTables = []string{"orders", "items"}

// TxTopic is a TxWorld table's topic.
func TxTopic(table string) string { return "shop.public." + table }

// GenerateTx generates txs transactions over tables of parts partitions
// (keyed by id mod parts); one in eight is large (15-35 rows), and now and
// then the connector "restarts" and re-sends the last few transactions
// (data and ENDs: copies at new offsets).
func GenerateTx(rng *rand.Rand, txs, parts int) *TxWorld {
	w := &TxWorld{Data: map[source.TopicPartition][]*source.Record{}, States: map[string][]map[int64]string{}}
	cur := map[string]map[int64]string{}
	for _, tb := range TxTables {
		cur[tb] = map[int64]string{}
		w.States[tb] = []map[int64]string{{}}
	}
	type ev struct {
		table string
		key   int64
		order int64
		lsn   int64
	}
	emit := func(xid int, prev int64, commit int64, evs []ev, counts map[string]int64) {
		var sent []*source.Record
		for i, e := range evs {
			tp := source.TopicPartition{Topic: TxTopic(e.table), Partition: int32(e.key % int64(parts))}
			seq := "null"
			if prev >= 0 {
				seq = fmt.Sprintf(`"%d"`, prev)
			}
			val := fmt.Sprintf(`{"before":null,"after":{"id":%d,"v":"tx%d"},"source":{"connector":"postgresql","name":"shop","db":"shop","schema":"public","table":"%s","lsn":%d,"txId":%d,"sequence":"[%s,\"%d\"]","snapshot":"false","ts_ms":1},"op":"u","ts_ms":1,"transaction":{"id":"%d:%d","total_order":%d,"data_collection_order":%d}}`,
				e.key, xid, e.table, e.lsn, xid, strings.ReplaceAll(seq, `"`, `\"`), e.lsn, xid, e.lsn, i+1, e.order)
			recs := w.Data[tp]
			r := &source.Record{Topic: tp.Topic, Partition: tp.Partition, Offset: int64(len(recs)),
				Key: fmt.Appendf(nil, `{"id":%d}`, e.key), Value: []byte(val)}
			w.Data[tp] = append(recs, r)
			sent = append(sent, r)
		}
		var dcs []string
		for _, tb := range TxTables {
			if counts[tb] > 0 {
				dcs = append(dcs, fmt.Sprintf(`{"data_collection":"public.%s","event_count":%d}`, tb, counts[tb]))
			}
		}
		end := fmt.Sprintf(`{"status":"END","id":"%d:%d","event_count":%d,"data_collections":[%s],"ts_ms":1}`,
			xid, commit, len(evs), strings.Join(dcs, ","))
		r := &source.Record{Topic: "shop.transaction", Offset: int64(len(w.Tx)),
			Key: fmt.Appendf(nil, `{"id":"%d:%d"}`, xid, commit), Value: []byte(end)}
		w.Tx = append(w.Tx, r)
		w.Emits = append(w.Emits, append(sent, r))
	}
	type sent struct {
		xid          int
		prev, commit int64
		evs          []ev
		counts       map[string]int64
	}
	var history []sent
	lsn, prev := int64(1000), int64(-1)
	for x := 0; x < txs; x++ {
		n := 1 + rng.IntN(6)
		if rng.IntN(8) == 0 {
			n = 15 + rng.IntN(20) // a large one
		}
		var evs []ev
		counts := map[string]int64{}
		for range n {
			tb := TxTables[rng.IntN(2)]
			counts[tb]++
			lsn += 8
			k := int64(rng.IntN(40))
			evs = append(evs, ev{table: tb, key: k, order: counts[tb], lsn: lsn})
			cur[tb][k] = fmt.Sprintf("tx%d", 500+x)
		}
		lsn += 8
		commit := lsn
		emit(500+x, prev, commit, evs, counts)
		history = append(history, sent{500 + x, prev, commit, evs, counts})
		w.Commits = append(w.Commits, commit)
		for _, tb := range TxTables {
			w.States[tb] = append(w.States[tb], maps.Clone(cur[tb]))
		}
		prev = commit
		if x > 3 && rng.IntN(12) == 0 {
			// the connector restarts: the last few transactions are sent again
			for _, h := range history[len(history)-1-rng.IntN(3):] {
				emit(h.xid, h.prev, h.commit, h.evs, h.counts)
			}
		}
	}
	return w
}

// IsPrefix reports whether rows (id → v) is the state of table after the
// transactions up to one whose commit LSN lies in [through, last] (or
// before any, when through is -1): whole transactions only.
func (w *TxWorld) IsPrefix(table string, rows map[int64]string, through, last int64) bool {
	for i := 0; i <= len(w.Commits); i++ {
		c := int64(-1)
		if i > 0 {
			c = w.Commits[i-1]
		}
		if c < through || (i > 0 && c > max(last, through)) {
			continue
		}
		if maps.Equal(rows, w.States[table][i]) {
			return true
		}
	}
	return false
}

// TxRows reads a TxWorld table's live rows (id → v) at tb's version.
func TxRows(ctx context.Context, tb *tablerows.Table) (map[int64]string, error) {
	out := map[int64]string{}
	err := tb.Scan(ctx, tablerows.ScanOptions{Columns: []string{"id", "v"}}, func(r tablerows.Row) error {
		id, err := strconv.ParseInt(r[0], 10, 64)
		if err != nil {
			return fmt.Errorf("id %q: %w", r[0], err)
		}
		out[id] = strings.Trim(r[1], `"`)
		return nil
	})
	return out, err
}
