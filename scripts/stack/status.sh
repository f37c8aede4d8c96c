#!/usr/bin/env bash
# Prints the state of each native-stack service (and the registered connectors).
# Exit status 0 when every service in $CDC_SINK_STACK_SERVICES is up, 1 otherwise.
# Usage: scripts/stack/status.sh   (or `make stack-status`)
source "$(dirname "$0")/common.sh"

rc=0
line() { printf '  %-9s %-5s %s\n' "$1" "$2" "$3"; }
check() { # NAME PIDFILE READY-COMMAND... ; prints one line
  local name=$1 pidfile=$2; shift 2
  if ! service_enabled "${NAME:-$name}"; then line "$name" "-" "(not in CDC_SINK_STACK_SERVICES)"; return; fi
  if "$@" >/dev/null 2>&1; then
    line "$name" up "$ADDR  pid $(head -n1 "$pidfile" 2>/dev/null || echo ?)"
  elif pid_alive "$pidfile"; then
    line "$name" start "$ADDR  (process running, not ready yet)"; rc=1
  else
    line "$name" down "$ADDR"; rc=1
  fi
}
pg_up() { local b; b=$(pg_bin) && "$b/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT"; }
echo "cdc-sink native stack ($STACK_DIR)"
ADDR="postgresql://$PG_USER@127.0.0.1:$PG_PORT/$PG_DB" check postgres "$(pg_data_dir)/postmaster.pid" pg_up
ADDR="$KAFKA_BOOTSTRAP" check kafka "$RUN/kafka.pid" port_open "$KAFKA_PORT"
ADDR="$CCOMPAT_URL" check registry "$RUN/registry.pid" http_ok "$CCOMPAT_URL/subjects"
if tls_enabled; then
  tls_listening() { port_open "$KAFKA_SASL_PORT" && port_open "$KAFKA_SSL_PORT"; }
  ADDR="SASL_SSL $KAFKA_SASL_BOOTSTRAP, SSL (mTLS) $KAFKA_SSL_BOOTSTRAP" NAME=kafka check kafka-tls "$RUN/kafka.pid" tls_listening
  ADDR="$REGISTRY_TLS_URL (basic auth; CA $TLS_DIR/ca.pem)" NAME=registry check registry-tls "$RUN/registry-tls.pid" registry_tls_ok
fi
ADDR="$CONNECT_URL" check connect "$RUN/connect.pid" http_ok "$CONNECT_URL/connectors"
if service_enabled connect && http_ok "$CONNECT_URL/connectors"; then
  curl -fsS --max-time 5 "$CONNECT_URL/connectors?expand=status" | python3 -c '
import json,sys
d=json.load(sys.stdin)
for n,v in sorted(d.items()):
    s=v["status"]; t=",".join(x["state"] for x in s.get("tasks",[])) or "no tasks"
    print("  connector %-16s %s (tasks: %s)" % (n, s["connector"]["state"], t))
' 2>/dev/null || true
fi
exit $rc
