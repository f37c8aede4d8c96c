#!/usr/bin/env bash
# Small load generator for the compose stack (and usable against the native one):
# every ${LOADGEN_INTERVAL:-1} s one transaction that inserts an order with items, updates a random
# order, and now and then deletes one. Stops after ${LOADGEN_MAX_TX:-0} transactions (0 = forever).
# Connection from the usual libpq variables: PGHOST PGPORT PGUSER PGPASSWORD PGDATABASE.
set -euo pipefail
interval=${LOADGEN_INTERVAL:-1}
max=${LOADGEN_MAX_TX:-0}
until pg_isready -q; do sleep 1; done
n=0
while [ "$max" = 0 ] || [ "$n" -lt "$max" ]; do
  n=$((n + 1))
  psql -X -q -v ON_ERROR_STOP=1 <<SQL
BEGIN;
WITH o AS (
  INSERT INTO public.orders (id, order_uuid, customer_id, status, amount, placed_at, delivery_date, paid,
                             item_ids, labels, attrs)
  SELECT GREATEST(COALESCE(max(id), 0), 10000) + 1, gen_random_uuid(), 1 + floor(random() * 3)::int, 'new',
         round((random() * 1000)::numeric, 2), now(), current_date + 3, false,
         ARRAY[floor(random() * 100)::int], ARRAY['loadgen'], jsonb_build_object('n', $n)
  FROM public.orders
  RETURNING id)
INSERT INTO public.order_items (order_id, line_no, sku, quantity, unit_price)
SELECT o.id, g, 'SKU-' || g, g, round((random() * 50)::numeric, 2) FROM o, generate_series(1, 2) g;
UPDATE public.orders SET status = 'paid', paid = true, amount = amount + 0.01
 WHERE id = (SELECT id FROM public.orders ORDER BY random() LIMIT 1);
COMMIT;
SQL
  if [ $((n % 10)) = 0 ]; then
    psql -X -q -v ON_ERROR_STOP=1 -c "DELETE FROM public.orders WHERE id = (SELECT id FROM public.orders WHERE id > 10000 ORDER BY random() LIMIT 1)"
  fi
  sleep "$interval"
done
