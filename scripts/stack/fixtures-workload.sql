-- Workload run by scripts/stack/capture-fixtures.sh after the connectors' initial snapshot of the
-- seed rows in compose/sql/init.sql. Each statement outside BEGIN/COMMIT is its own transaction.
-- The step numbers are echoed into the capture log and listed in envelope/testdata/real/README.md.
\set ON_ERROR_STOP 1

\echo step 1: single-row insert (autocommit): c on customers, BEGIN/END on <prefix>.transaction
INSERT INTO public.customers (id, email, full_name, birth_date, vip, tags, profile, notes, created_at)
VALUES (4, 'dora@example.com', 'Dóra Ñandú 🐧', '1969-12-31', false, ARRAY['a', NULL, 'c "quoted"'],
        '{"nested":{"k":[1,2.5,"x",null,true]},"empty":{}}', 'short note', '2026-03-01 23:59:59.999999+00');

\echo step 2: multi-table transaction: 3 inserts + 1 update in one tx
BEGIN;
INSERT INTO public.orders (id, order_uuid, customer_id, status, amount, discount_rate, placed_at, local_created,
                           delivery_date, delivery_slot, paid, item_ids, labels, attrs, receipt, note)
VALUES (1003, '00000000-0000-0000-0000-000000000000', 4, 'new', 9999999999.99, 1e-9,
        '1970-01-01 00:00:00+00', '1999-12-31 23:59:59.000001', '0001-01-01', '23:59:59.999999', false,
        ARRAY[10, NULL, -2147483648, 2147483647], ARRAY[]::text[], 'null', '\x', 'x');
INSERT INTO public.order_items (order_id, line_no, sku, quantity, unit_price) VALUES
  (1003, 1, 'SKU-1', 3, 12.50),
  (1003, 2, 'SKU-2', 1, 0.00);
UPDATE public.customers SET full_name = 'Bruno Lima Jr.', tags = ARRAY['upgraded'] WHERE id = 2;
COMMIT;

\echo step 3: plain updates: numeric/timestamptz/jsonb (REPLICA IDENTITY DEFAULT: before = null)
UPDATE public.orders SET amount = 0.00, status = 'refunded', placed_at = '2026-02-01 12:00:00.000001+00',
                         attrs = jsonb_set(attrs, '{refund}', '"full"'), discount_rate = NULL
 WHERE id = 1001;

\echo step 4: update on a REPLICA IDENTITY FULL table (before = whole old row)
UPDATE public.products SET price = 13.75, stock = stock - 1, updated_at = '2026-03-02 10:00:00+00' WHERE sku = 'SKU-1';

\echo step 5: TOAST: store >8 KB in customers.notes and orders.note (out-of-line), then update another column
UPDATE public.customers SET notes = (SELECT string_agg(md5(i::text), '') FROM generate_series(1, 600) i) WHERE id = 1;
UPDATE public.orders SET note = (SELECT string_agg(md5((i * 7)::text), '') FROM generate_series(1, 600) i) WHERE id = 1003;
\echo step 5b: update other columns: notes / note arrive as the unavailable-value placeholder
UPDATE public.customers SET vip = false WHERE id = 1;
UPDATE public.orders SET status = 'shipped', paid = true WHERE id = 1003;

\echo step 6: primary key changes: DEFAULT identity (composite key) and FULL identity
UPDATE public.order_items SET line_no = 9 WHERE order_id = 1002 AND line_no = 1;
UPDATE public.products SET sku = 'SKU-3B' WHERE sku = 'SKU-3';

\echo step 7: deletes: DEFAULT identity (before = key only), FULL identity, then tombstones
DELETE FROM public.order_items WHERE order_id = 1001 AND line_no = 2;
DELETE FROM public.customers WHERE id = 3;
DELETE FROM public.products WHERE sku = 'SKU-2';

\echo step 8: one transaction touching the same row several times (insert, update, delete, re-insert)
BEGIN;
INSERT INTO public.customers (id, email, full_name) VALUES (5, 'eva@example.com', 'Eva');
UPDATE public.customers SET full_name = 'Eva M.' WHERE id = 5;
DELETE FROM public.customers WHERE id = 5;
INSERT INTO public.customers (id, email, full_name, vip) VALUES (5, 'eva@example.com', 'Eva Again', true);
COMMIT;

\echo step 9: multi-row update in one statement
UPDATE public.orders SET paid = true WHERE id IN (1001, 1002);

\echo step 10: logical decoding message (transactional) and TRUNCATE
BEGIN;
SELECT pg_logical_emit_message(true, 'cdc-sink', '{"hello":"world"}');
INSERT INTO public.products (sku, title, price, stock) VALUES ('SKU-4', 'Adesivo', 1.99, 500);
COMMIT;
TRUNCATE public.order_items;

\echo step 11: rows after the truncate
INSERT INTO public.order_items (order_id, line_no, sku, quantity, unit_price) VALUES (1003, 1, 'SKU-4', 2, 1.99);
