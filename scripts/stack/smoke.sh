#!/usr/bin/env bash
# Smoke test of the native stack: starts it (idempotent), registers the json connector, inserts a
# row into loja.public.customers and waits until its change event is on loja.public.customers.
# Exit 0 when the whole path PostgreSQL → Debezium → Kafka works. Used by .ci/run.
source "$(dirname "$0")/common.sh"

t0=$(now_s)
"$STACK_SCRIPTS/up.sh"
"$STACK_SCRIPTS/connector.sh" register json

marker="smoke-$(date +%s)-$$"
"$(pg_bin)/psql" -X -q -h 127.0.0.1 -p "$PG_PORT" -U "$PG_USER" -d "$PG_DB" -v ON_ERROR_STOP=1 \
  -c "INSERT INTO public.customers (email, full_name) VALUES ('$marker@example.com', '$marker')"

topic=loja.public.customers
seen() {
  if command -v kcat >/dev/null; then
    kcat -b "$KAFKA_BOOTSTRAP" -C -e -q -o beginning -t "$topic" -f '%s\n' 2>/dev/null | grep -q "$marker"
  else
    "$STACK_ROOT/.venv/bin/python" "$STACK_SCRIPTS/dump_topic.py" --bootstrap "$KAFKA_BOOTSTRAP" "$topic" 2>/dev/null \
      | grep -q "$marker"
  fi
}
wait_until "change event for $marker on $topic" "$STACK_TIMEOUT" seen \
  || { "$STACK_SCRIPTS/status.sh" || true; tail -40 "$LOGS/connect.log" >&2; die "stack smoke test failed"; }
log "stack smoke test ok: insert → Debezium → $topic in $(( $(now_s) - t0 ))s"
