#!/usr/bin/env bash
# Stops the native stack started by scripts/stack/up.sh (Connect, registry, Kafka, PostgreSQL,
# in that order). WIPE=1 also deletes all data (Kafka logs, the PostgreSQL cluster, generated
# configs); the jar cache ($CDC_SINK_STACK_CACHE) is always kept.
# Usage: scripts/stack/down.sh   |   WIPE=1 scripts/stack/down.sh   (or `make stack-down [WIPE=1]`)
source "$(dirname "$0")/common.sh"

[ -d "$STACK_DIR" ] || { log "nothing to stop ($STACK_DIR does not exist)"; exit 0; }

stop_pidfile connect "$RUN/connect.pid"
stop_pidfile registry-tls "$RUN/registry-tls.pid"
stop_pidfile registry "$RUN/registry.pid"
stop_pidfile kafka "$RUN/kafka.pid"

data=$(pg_data_dir)
if [ -f "$data/postmaster.pid" ] && bin=$(pg_bin); then
  log "stopping postgres ($data)"
  runuser -u postgres -- "$bin/pg_ctl" -D "$data" -m fast -w -t 60 stop >/dev/null 2>&1 \
    || stop_pidfile postgres "$data/postmaster.pid"
fi
rm -f "$RUN/postgres.pid"

if [ "${WIPE:-0}" = 1 ]; then
  log "wiping $STACK_DIR (data, logs, configs)"
  rm -rf "$STACK_DIR/kafka" "$STACK_DIR/connect" "$STACK_DIR/registry" "$STACK_DIR/tls" "$STACK_DIR/logs" "$STACK_DIR/run" "$data" \
    "$(dirname "$data")/pg-socket"
  case $data in /var/tmp/cdc-sink-stack-*) rm -rf "$(dirname "$data")" ;; esac
  rmdir "$STACK_DIR" 2>/dev/null || true
fi
log "stack down"
