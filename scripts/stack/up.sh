#!/usr/bin/env bash
# Starts the native stack (no Docker): PostgreSQL (Debian packages), a Kafka KRaft combined
# broker+controller, a schema registry with the Confluent-compatible API, and a Kafka Connect
# distributed worker with the Debezium PostgreSQL connector. Everything listens on 127.0.0.1 only.
# Idempotent: a service that is already up is left alone. Waits for readiness by polling.
# Settings: see scripts/stack/common.sh. Usage: scripts/stack/up.sh  (or `make stack-up`)
source "$(dirname "$0")/common.sh"

T0=$(now_s)
mkdir -p "$STACK_DIR" "$LOGS" "$RUN"

ensure_java() {
  command -v "$JAVA" >/dev/null || die "java not found (Java 17+ needed; apt-get install -y openjdk-17-jre-headless)"
}

# ---------------------------------------------------------------- PostgreSQL
start_postgres() {
  local bin data sock pidfile=$RUN/postgres.pid
  bin=$(pg_bin || true)
  if [ -z "$bin" ]; then
    log "PostgreSQL server not installed: apt-get install -y postgresql"
    [ "$(id -u)" = 0 ] || die "need root to install postgresql"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >"$LOGS/apt-postgresql.log" 2>&1 \
      || { apt-get update -q >>"$LOGS/apt-postgresql.log" 2>&1 \
           && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >>"$LOGS/apt-postgresql.log" 2>&1; } \
      || die "apt-get install postgresql failed: see $LOGS/apt-postgresql.log"
    bin=$(pg_bin) || die "postgresql installed but no server binaries found"
  fi
  data=$(pg_data_dir)
  sock=$(dirname "$data")/pg-socket
  ln -sfn "$data/postmaster.pid" "$pidfile"
  if pid_alive "$pidfile" && "$bin/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT"; then
    log "postgres already running on 127.0.0.1:$PG_PORT ($data)"
    return 0
  fi
  port_open "$PG_PORT" && die "port $PG_PORT is taken by another process (set CDC_SINK_PG_PORT)"
  # The server refuses to run as root: everything below runs as the `postgres` OS user.
  mkdir -p "$(dirname "$data")" "$sock"
  chown postgres:postgres "$sock"
  if [ ! -f "$data/PG_VERSION" ]; then
    log "initdb $data"
    mkdir -p "$data"; chown postgres:postgres "$data"; chmod 700 "$data"
    runuser -u postgres -- "$bin/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 \
      >"$LOGS/initdb.log" 2>&1 || { cat "$LOGS/initdb.log" >&2; die "initdb failed"; }
    cat >>"$data/postgresql.conf" <<EOF

# --- cdc-sink native stack ---
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$sock'
wal_level = logical
max_replication_slots = 10
max_wal_senders = 10
max_connections = 50
shared_buffers = 64MB
fsync = off
# on (the default): Debezium snapshots a pre-created slot at pg_current_wal_lsn(), the WAL write
# position; with asynchronous commit, transactions committed just before the snapshot can lie
# beyond it and are streamed again after the snapshot. fsync = off keeps commits cheap.
synchronous_commit = on
full_page_writes = off
timezone = 'UTC'
log_timezone = 'UTC'
EOF
    cat >"$data/pg_hba.conf" <<EOF
# cdc-sink native stack: loopback only, trust (test stack, never expose)
local   all          all                    trust
host    all          all          127.0.0.1/32  trust
host    replication  all          127.0.0.1/32  trust
EOF
  fi
  # the port may have been changed between runs; data dirs made before synchronous_commit = on
  sed -i -e "s/^port = .*/port = $PG_PORT/" -e "s/^synchronous_commit = off$/synchronous_commit = on/" "$data/postgresql.conf"
  log "starting postgres on 127.0.0.1:$PG_PORT"
  # the log must be writable by the postgres user: next to the data dir when that is elsewhere
  local pglog=$LOGS/postgres.log
  case $data in "$STACK_DIR"/*) ;; *) pglog=$(dirname "$data")/postgres.log; ln -sfn "$pglog" "$LOGS/postgres.log" ;; esac
  touch "$pglog"; chown postgres:postgres "$pglog"
  runuser -u postgres -- "$bin/pg_ctl" -D "$data" -l "$pglog" -w -t "$STACK_TIMEOUT" start >/dev/null \
    || { tail -20 "$pglog" >&2; die "postgres did not start"; }
  wait_until postgres "$STACK_TIMEOUT" "$bin/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" || die "postgres not ready"
  local psql=("$bin/psql" -h 127.0.0.1 -p "$PG_PORT" -v ON_ERROR_STOP=1 -qAt)
  if [ "$("${psql[@]}" -U postgres -d postgres -c "SELECT 1 FROM pg_roles WHERE rolname='$PG_USER'")" != 1 ]; then
    "${psql[@]}" -U postgres -d postgres -c "CREATE ROLE $PG_USER LOGIN SUPERUSER REPLICATION PASSWORD '$PG_PASSWORD'"
  fi
  if [ "$("${psql[@]}" -U postgres -d postgres -c "SELECT 1 FROM pg_database WHERE datname='$PG_DB'")" != 1 ]; then
    "${psql[@]}" -U postgres -d postgres -c "CREATE DATABASE $PG_DB OWNER $PG_USER"
    "${psql[@]}" -U "$PG_USER" -d "$PG_DB" -f "$STACK_ROOT/compose/sql/init.sql" >/dev/null
    log "created database $PG_DB with the sample schema (compose/sql/init.sql)"
  fi
}

# ---------------------------------------------------------------- Kafka (KRaft)
start_kafka() {
  local pidfile=$RUN/kafka.pid dir=$STACK_DIR/kafka conf
  if pid_alive "$pidfile"; then
    log "kafka already running on $KAFKA_BOOTSTRAP"
    if tls_enabled && ! grep -q '^listeners=.*SASL_SSL://' "$dir/server.properties" 2>/dev/null; then
      log "WARNING: this kafka was started without the TLS listeners; restart it (down.sh, up.sh) to get them"
    fi
    return 0
  fi
  port_open "$KAFKA_PORT" && die "port $KAFKA_PORT is taken by another process (set CDC_SINK_KAFKA_PORT)"
  port_open "$KAFKA_CONTROLLER_PORT" && die "port $KAFKA_CONTROLLER_PORT is taken (set CDC_SINK_KAFKA_CONTROLLER_PORT)"
  ensure_java
  mkdir -p "$dir/data"
  conf=$dir/server.properties
  local listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT protomap=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
  if tls_enabled; then
    port_open "$KAFKA_SASL_PORT" && die "port $KAFKA_SASL_PORT is taken (set CDC_SINK_KAFKA_SASL_PORT, or CDC_SINK_STACK_TLS=0)"
    port_open "$KAFKA_SSL_PORT" && die "port $KAFKA_SSL_PORT is taken (set CDC_SINK_KAFKA_SSL_PORT, or CDC_SINK_STACK_TLS=0)"
    tls_certs
    listeners+=,SASL_SSL://127.0.0.1:$KAFKA_SASL_PORT,SSL://127.0.0.1:$KAFKA_SSL_PORT
    protomap+=,SASL_SSL:SASL_SSL,SSL:SSL
  fi
  cat >"$conf" <<EOF
# generated by scripts/stack/up.sh
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=$listeners,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT
advertised.listeners=$listeners
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=$protomap
log.dirs=$dir/data
num.partitions=1
default.replication.factor=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
log.retention.hours=-1
log.segment.bytes=67108864
EOF
  if tls_enabled; then tls_kafka_props >>"$conf"; fi
  write_log4j2 "$dir/log4j2.properties"
  local cp; cp=$(java_cp "$KAFKA_LIBS")
  if [ ! -f "$dir/data/meta.properties" ]; then
    local cluster_id
    # a KRaft cluster id is a UUID in URL-safe base64 without padding (what `random-uuid` prints)
    # (one not starting with '-', which the command line would take for an option, as Kafka's own does)
    cluster_id=-
    while [ "${cluster_id:0:1}" = - ]; do
      cluster_id=$(head -c16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')
    done
    log "formatting KRaft storage $dir/data (cluster id $cluster_id)"
    "$JAVA" -Xmx256m -Dlog4j2.configurationFile="$dir/log4j2.properties" -cp "$cp" \
      kafka.tools.StorageTool format -t "$cluster_id" -c "$conf" >"$LOGS/kafka-format.log" 2>&1 \
      || { cat "$LOGS/kafka-format.log" >&2; die "kafka storage format failed"; }
  fi
  log "starting kafka on $KAFKA_BOOTSTRAP"
  : >"$LOGS/kafka.log"
  setsid nohup "$JAVA" -Xms128m -Xmx512m -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
    -Dcdc.sink.stack=kafka -Dlog4j2.configurationFile="$dir/log4j2.properties" -Dkafka.logs.dir="$LOGS" \
    -cp "$cp" kafka.Kafka "$conf" >>"$LOGS/kafka.log" 2>&1 </dev/null &
  echo $! >"$pidfile"
  WAIT_PIDFILE=$pidfile wait_until kafka "$STACK_TIMEOUT" kafka_ready \
    || { tail -30 "$LOGS/kafka.log" >&2; die "kafka not ready"; }
  if tls_enabled; then tls_scram_user; fi
}

kafka_ready() { port_open "$KAFKA_PORT" && grep -q 'Kafka Server started' "$LOGS/kafka.log"; }

write_log4j2() {
  cat >"$1" <<'EOF'
# generated by scripts/stack/up.sh: INFO to stdout (redirected to the service log), noisy loggers quiet
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d{ISO8601}] %p %m (%c{1})%n
rootLogger.level = info
rootLogger.appenderRef.stdout.ref = STDOUT
logger.kafka.name = kafka
logger.kafka.level = info
logger.state.name = state.change.logger
logger.state.level = warn
logger.clients.name = org.apache.kafka.clients
logger.clients.level = warn
logger.reflections.name = org.reflections
logger.reflections.level = error
logger.jetty.name = org.eclipse.jetty
logger.jetty.level = warn
EOF
}

# ---------------------------------------------------------------- schema registry
# shellcheck source=registry.sh
source "$STACK_SCRIPTS/registry.sh"

# ---------------------------------------------------------------- Kafka Connect
start_connect() {
  local pidfile=$RUN/connect.pid dir=$STACK_DIR/connect conf plugins
  if pid_alive "$pidfile"; then log "kafka connect already running on $CONNECT_URL"; return 0; fi
  port_open "$CONNECT_PORT" && die "port $CONNECT_PORT is taken by another process (set CDC_SINK_CONNECT_PORT)"
  ensure_java
  mkdir -p "$dir"
  # plugin.path: one dir per plugin (symlinks into the jar cache)
  plugins=$dir/plugins
  rm -rf "$plugins"; mkdir -p "$plugins"
  ln -s "$DEBEZIUM_LIBS" "$plugins/debezium-connector-postgres"
  ln -s "$APICURIO_CONVERTER_LIBS" "$plugins/apicurio-converter"
  conf=$dir/worker.properties
  cat >"$conf" <<EOF
# generated by scripts/stack/up.sh: distributed worker (configs/offsets/status in Kafka topics)
bootstrap.servers=$KAFKA_BOOTSTRAP
group.id=cdc-sink-stack-connect
config.storage.topic=_connect-configs
offset.storage.topic=_connect-offsets
status.storage.topic=_connect-status
config.storage.replication.factor=1
offset.storage.replication.factor=1
status.storage.replication.factor=1
offset.storage.partitions=1
status.storage.partitions=1
offset.flush.interval.ms=1000
key.converter=org.apache.kafka.connect.json.JsonConverter
value.converter=org.apache.kafka.connect.json.JsonConverter
key.converter.schemas.enable=true
value.converter.schemas.enable=true
listeners=http://127.0.0.1:$CONNECT_PORT
rest.advertised.host.name=127.0.0.1
rest.advertised.port=$CONNECT_PORT
plugin.path=$plugins
plugin.discovery=hybrid_warn
topic.creation.enable=true
scheduled.rebalance.max.delay.ms=0
EOF
  write_log4j2 "$dir/log4j2.properties"
  log "starting kafka connect on $CONNECT_URL"
  : >"$LOGS/connect.log"
  setsid nohup "$JAVA" -Xms128m -Xmx512m -XX:+UseG1GC -Djava.awt.headless=true \
    -Dcdc.sink.stack=connect -Dlog4j2.configurationFile="$dir/log4j2.properties" \
    -cp "$(java_cp "$KAFKA_LIBS")" org.apache.kafka.connect.cli.ConnectDistributed "$conf" \
    >>"$LOGS/connect.log" 2>&1 </dev/null &
  echo $! >"$pidfile"
  WAIT_PIDFILE=$pidfile wait_until connect "$STACK_TIMEOUT" connect_ready \
    || { tail -30 "$LOGS/connect.log" >&2; die "kafka connect not ready"; }
}

# Ready = REST up, Debezium plugin loaded, and the worker joined its group (GET /connectors answers 200).
connect_ready() {
  curl -fsS --max-time 5 "$CONNECT_URL/connector-plugins" | grep -q 'io.debezium.connector.postgresql.PostgresConnector' \
    && http_ok "$CONNECT_URL/connectors"
}

# ---------------------------------------------------------------- main
components=()
service_enabled kafka && components+=(kafka)
service_enabled connect && components+=(kafka debezium apicurio-converter)
service_enabled registry && [ "$REGISTRY_IMPL" = apicurio ] && components+=(apicurio-registry)
if [ ${#components[@]} -gt 0 ]; then
  # shellcheck disable=SC2046  # one word per component
  eval "$("$STACK_SCRIPTS/fetch.sh" $(printf '%s\n' "${components[@]}" | sort -u))"
fi

service_enabled postgres && start_postgres
# the registry needs nothing else: start it alongside Kafka and Connect
reg_job=
if service_enabled registry; then start_registry & reg_job=$!; fi
service_enabled kafka && start_kafka
service_enabled connect && start_connect
if [ -n "$reg_job" ]; then wait "$reg_job" || die "registry did not start (see $LOGS/registry.log)"; fi
if service_enabled registry && tls_enabled; then tls_certs; start_registry_tls; fi

log "stack up in $(( $(now_s) - T0 ))s:"
"$STACK_SCRIPTS/status.sh" >&2 || true
