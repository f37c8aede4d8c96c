package dbzgen

// Lab returns the article's lab stream (topic loja.public.orders, JSON with
// schemas, tombstones on, one change per transaction with the transaction
// block):
//
//	tx1  insert 101 (CRIADO, 150.00)
//	tx2  insert 102 (CRIADO, 89.90)
//	tx3  update 101 → PAGO (paid)
//	tx4  insert 103 (CRIADO, 42.00)
//	tx5  delete 102 (+ tombstone)
//	tx6  update 101 → ENVIADO
//
// Final state: 101 ENVIADO, 102 deleted, 103 CRIADO.
func Lab() *Stream {
	return LabWith(Config{Tombstones: true, TxSize: 1})
}

// LabWith is Lab with the wire settings of cfg (Seed, Prefix, DB, Schema,
// Table, Partitions, Format, Tombstones, TxSize). The other fields are
// ignored.
func LabWith(cfg Config) *Stream {
	cfg = withDefaults(Config{Seed: cfg.Seed, Prefix: cfg.Prefix, DB: cfg.DB, Schema: cfg.Schema, Table: cfg.Table,
		Partitions: cfg.Partitions, Format: cfg.Format, Tombstones: cfg.Tombstones, TxSize: cfg.TxSize, Keys: 103})
	g := &gen{
		cfg:      cfg,
		rng:      newRand(cfg.Seed, 1),
		wal:      initialWAL,
		clockUs:  baseClockUs + 10*3600*1_000_000,
		nextXid:  731,
		keys:     make([]keyState, cfg.Keys+1),
		live:     newIDSet(cfg.Keys),
		free:     newIDSet(cfg.Keys),
		resnapAt: -1,
	}
	g.procNs = g.clockUs * 1000
	for id := cfg.Keys; id >= 1; id-- {
		g.free.add(int64(id))
	}
	row := func(id int64, customer int32, amount int64, uuid, sku string) *rowState {
		return &rowState{
			id: id, customerID: customer, status: 0, amount: amount,
			createdAt: g.clockUs, updatedAt: g.clockUs, shipNil: true,
			payload: `{"items": [{"qty": 1, "sku": "` + sku + `"}], "channel": "web"}`,
			tags:    []string{"lab"}, note: "pedido do lab " + uuid[:8], uuid: uuid, fillerNil: true,
		}
	}
	step := func(f func(t *tx)) {
		g.tick(500_000, 2_000_000)
		t := g.begin(1)
		g.open = append(g.open, t)
		f(t)
		g.commit(t)
	}
	g.walWrite(4096)
	step(func(t *tx) { g.insert(t, row(101, 1, 15000, "6f1c2a4e-5b7d-4c1e-9a3b-101000000101", "SKU-1")) })
	step(func(t *tx) { g.insert(t, row(102, 2, 8990, "7a2d3b5f-6c8e-4d2f-8b4c-102000000102", "SKU-2")) })
	step(func(t *tx) {
		r := *g.keys[101].row
		r.status, r.paid, r.updatedAt = 1, true, g.clockUs
		g.update(t, &r, false)
	})
	step(func(t *tx) { g.insert(t, row(103, 3, 4200, "8b3e4c6a-7d9f-4e3a-9c5d-103000000103", "SKU-3")) })
	step(func(t *tx) { g.remove(t, 102) })
	step(func(t *tx) {
		r := *g.keys[101].row
		r.status, r.updatedAt = 2, g.clockUs
		g.update(t, &r, false)
	})
	return g.finish()
}
