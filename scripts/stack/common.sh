# shellcheck shell=bash disable=SC2034  # settings are used by the scripts that source this file
# Shared settings and helpers for the native (Docker-free) stack scripts in scripts/stack/.
# Sourced, never run. Every setting can be overridden from the environment:
#
#   CDC_SINK_STACK_DIR        work dir: data, logs, pid files, generated configs   (default <repo>/.stack)
#   CDC_SINK_STACK_CACHE      downloaded jars, reused across stacks                 (default ~/.cache/cdc-sink-stack)
#   CDC_SINK_PG_PORT          PostgreSQL port on 127.0.0.1                           (default 55432)
#   CDC_SINK_KAFKA_PORT       Kafka broker (PLAINTEXT) port on 127.0.0.1             (default 9092)
#   CDC_SINK_KAFKA_CONTROLLER_PORT  KRaft controller port                            (default 9093)
#   CDC_SINK_CONNECT_PORT     Kafka Connect REST port                                (default 8083)
#   CDC_SINK_REGISTRY_PORT    schema registry port (Confluent-compatible API)        (default 8080)
#   CDC_SINK_STACK_SERVICES   which services stack-up starts                         (default "postgres kafka registry connect")
#   CDC_SINK_STACK_TIMEOUT    seconds to wait for each service to become ready      (default 180)
#   CDC_SINK_STACK_TLS        1: also the secure endpoints below (tls.sh), 0: plaintext only (default 1)
#   CDC_SINK_KAFKA_SASL_PORT  Kafka SASL_SSL (SCRAM-SHA-512) listener port          (default 9094)
#   CDC_SINK_KAFKA_SSL_PORT   Kafka SSL listener requiring client certificates      (default 9095)
#   CDC_SINK_REGISTRY_TLS_PORT  registry over HTTPS with basic auth (proxy)         (default 8443)
#   CDC_SINK_REGISTRY_MTLS_PORT registry over HTTPS with mutual TLS (same proxy)    (default 8444)
#   CDC_SINK_REGISTRY_IMPL    apicurio (Apicurio Registry 2.4.2 built from Central jars) or mini
#                             (scripts/stack/mini_registry.py, stdlib Python)        (default apicurio)
#   JAVA                      java binary (default: java on PATH; needs Java 17+)

set -euo pipefail

STACK_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
STACK_SCRIPTS=$STACK_ROOT/scripts/stack
STACK_DIR=${CDC_SINK_STACK_DIR:-$STACK_ROOT/.stack}
STACK_CACHE=${CDC_SINK_STACK_CACHE:-${HOME:-/root}/.cache/cdc-sink-stack}
PG_PORT=${CDC_SINK_PG_PORT:-55432}
KAFKA_PORT=${CDC_SINK_KAFKA_PORT:-9092}
KAFKA_CONTROLLER_PORT=${CDC_SINK_KAFKA_CONTROLLER_PORT:-9093}
CONNECT_PORT=${CDC_SINK_CONNECT_PORT:-8083}
REGISTRY_PORT=${CDC_SINK_REGISTRY_PORT:-8080}
STACK_SERVICES=${CDC_SINK_STACK_SERVICES:-postgres kafka registry connect}
STACK_TIMEOUT=${CDC_SINK_STACK_TIMEOUT:-180}
REGISTRY_IMPL=${CDC_SINK_REGISTRY_IMPL:-apicurio}
STACK_TLS=${CDC_SINK_STACK_TLS:-1}
KAFKA_SASL_PORT=${CDC_SINK_KAFKA_SASL_PORT:-9094}
KAFKA_SSL_PORT=${CDC_SINK_KAFKA_SSL_PORT:-9095}
REGISTRY_TLS_PORT=${CDC_SINK_REGISTRY_TLS_PORT:-8443}
REGISTRY_MTLS_PORT=${CDC_SINK_REGISTRY_MTLS_PORT:-8444}
JAVA=${JAVA:-java}

KAFKA_BOOTSTRAP=127.0.0.1:$KAFKA_PORT
CONNECT_URL=http://127.0.0.1:$CONNECT_PORT
REGISTRY_URL=http://127.0.0.1:$REGISTRY_PORT
CCOMPAT_URL=$REGISTRY_URL/apis/ccompat/v7
KAFKA_SASL_BOOTSTRAP=127.0.0.1:$KAFKA_SASL_PORT
KAFKA_SSL_BOOTSTRAP=127.0.0.1:$KAFKA_SSL_PORT
REGISTRY_TLS_URL=https://127.0.0.1:$REGISTRY_TLS_PORT
REGISTRY_MTLS_URL=https://127.0.0.1:$REGISTRY_MTLS_PORT

# Database created by stack-up (sample schema from compose/sql/init.sql).
PG_DB=loja
PG_USER=dbz
PG_PASSWORD=dbz

# Versions: change them in scripts/stack/poms/*.xml (the cache is keyed by the pom contents).
LOGS=$STACK_DIR/logs
RUN=$STACK_DIR/run

log() { printf '[stack %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# now_s: seconds since epoch (integer).
now_s() { date +%s; }

# port_open PORT: true when something accepts TCP connections on 127.0.0.1:PORT.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# wait_until DESCRIPTION TIMEOUT_S COMMAND...: polls COMMAND every 0.5 s until it succeeds.
# Fails (returning 1) after TIMEOUT_S seconds, or early when $WAIT_PIDFILE names a dead process.
wait_until() {
  local what=$1 timeout=$2; shift 2
  local deadline=$(( $(now_s) + timeout ))
  while ! "$@" >/dev/null 2>&1; do
    # kill -0 only: right after `cmd &` the child may not have exec'd java yet (so its command line
    # is still the script's, which pid_alive would reject)
    if [ -n "${WAIT_PIDFILE:-}" ] && ! kill -0 "$(head -n1 "$WAIT_PIDFILE" 2>/dev/null || echo 0)" 2>/dev/null; then
      log "$what: process exited while waiting (see its log)"
      return 1
    fi
    if [ "$(now_s)" -ge "$deadline" ]; then
      log "$what: not ready after ${timeout}s"
      return 1
    fi
    sleep 0.5
  done
}

# pid_alive PIDFILE: true when the pid file names a live process that is ours
# (its command line carries the -Dcdc.sink.stack marker, or it is a postgres we started).
pid_alive() {
  local f=$1 pid
  [ -s "$f" ] || return 1
  pid=$(head -n1 "$f")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  # guard against a recycled pid: the process must still look like ours
  tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -qE 'cdc\.sink\.stack|postgres' || return 1
}

# stop_pidfile NAME PIDFILE: SIGTERM, wait up to 30 s, then SIGKILL.
stop_pidfile() {
  local name=$1 f=$2 pid i
  if ! pid_alive "$f"; then rm -f "$f"; return 0; fi
  pid=$(head -n1 "$f")
  log "stopping $name (pid $pid)"
  kill "$pid" 2>/dev/null || true
  for i in $(seq 1 60); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "$name did not stop in 30s: SIGKILL"
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

# http_ok URL: true on a 2xx answer.
http_ok() { curl -fsS -o /dev/null --max-time 5 "$1"; }

# service_enabled NAME: true when NAME is in $STACK_SERVICES.
service_enabled() { case " $STACK_SERVICES " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

# pg_bin: directory of the newest installed PostgreSQL server binaries (Debian layout).
pg_bin() {
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1 || true)
  [ -n "$d" ] && [ -x "$d/postgres" ] && echo "$d"
}

# Data dir of the PostgreSQL cluster. The server runs as the `postgres` user (it refuses root), so
# its data dir must be reachable by that user; when $STACK_DIR is not (e.g. under a 0700 home),
# fall back to a per-port dir under /var/tmp.
pg_data_dir() {
  if [ -n "${CDC_SINK_PG_DATA:-}" ]; then echo "$CDC_SINK_PG_DATA"; return; fi
  mkdir -p "$STACK_DIR"
  if id postgres >/dev/null 2>&1 && runuser -u postgres -- test -x "$STACK_DIR" 2>/dev/null; then
    echo "$STACK_DIR/pg"
  else
    echo "/var/tmp/cdc-sink-stack-$PG_PORT/pg"
  fi
}

java_cp() { printf '%s/*' "$1"; }

# shellcheck source=tls.sh
source "$STACK_SCRIPTS/tls.sh"
