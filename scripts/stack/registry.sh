# shellcheck shell=bash
# Schema registry of the native stack. Sourced by up.sh.
#
# The real Apicurio Registry server cannot be assembled from Maven Central as served to this
# project (README.md, "Schema registry"), so the native stack runs mini_registry.py: a stdlib-only
# stand-in serving the Apicurio v2 API subset the Apicurio AvroConverter uses and the
# Confluent-compatible /apis/ccompat/v7 subset decoders use. compose/docker-compose.yml runs the
# real Apicurio Registry 3.x image instead; both speak the same two APIs.
start_registry() {
  local pidfile=$RUN/registry.pid dir=$STACK_DIR/registry
  if pid_alive "$pidfile"; then log "registry already running on $REGISTRY_URL"; return 0; fi
  port_open "$REGISTRY_PORT" && die "port $REGISTRY_PORT is taken by another process (set CDC_SINK_REGISTRY_PORT)"
  command -v python3 >/dev/null || die "python3 not found"
  mkdir -p "$dir"
  log "starting schema registry (mini_registry.py) on $REGISTRY_URL"
  : >"$LOGS/registry.log"
  # -X pycache_prefix keeps __pycache__ out of the source tree; the marker arg tags the process as ours
  setsid nohup python3 -X pycache_prefix="$dir/pycache" "$STACK_SCRIPTS/mini_registry.py" \
    --host 127.0.0.1 --port "$REGISTRY_PORT" --state "$dir/state.json" --log-requests \
    -- cdc.sink.stack=registry >>"$LOGS/registry.log" 2>&1 </dev/null &
  echo $! >"$pidfile"
  WAIT_PIDFILE=$pidfile wait_until registry "$STACK_TIMEOUT" http_ok "$CCOMPAT_URL/subjects" \
    || { tail -20 "$LOGS/registry.log" >&2; die "registry not ready"; }
}
