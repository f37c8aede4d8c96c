#!/usr/bin/env bash
# Registers / inspects / removes the Debezium PostgreSQL connectors of the native stack (and of
# compose/docker-compose.yml, with CDC_SINK_CONNECT_PORT / CDC_SINK_PG_HOST set accordingly).
#
# Usage:
#   scripts/stack/connector.sh register json|avro   create (or update) the connector, wait until RUNNING
#   scripts/stack/connector.sh status   json|avro   print the connector's status JSON
#   scripts/stack/connector.sh delete   json|avro   remove it and drop its replication slot
#   scripts/stack/connector.sh config   json|avro   print the config that `register` would send
#
# Modes (both can run together: distinct name, topic prefix, slot and publication):
#   json  name cdc-sink-json  topics loja.public.<table>       JsonConverter, schemas.enable=true
#                             slot cdc_sink_json, publication cdc_sink_json
#   avro  name cdc-sink-avro  topics loja_avro.public.<table>  Apicurio AvroConverter, Confluent framing
#                             (magic 0 + 4-byte schema id), schemas under $CCOMPAT_URL
#                             slot cdc_sink_avro, publication cdc_sink_avro
# Both: pgoutput, snapshot.mode=initial, provide.transaction.metadata=true (topic <prefix>.transaction),
# tombstones.on.delete=true, skipped.operations=none (TRUNCATE events too), heartbeats every 10 s
# (topic __debezium-heartbeat.<prefix>), logical decoding messages on <prefix>.message.
#
# Env: CDC_SINK_PG_HOST / CDC_SINK_PG_CONNECT_PORT (the database as Connect sees it; default
# 127.0.0.1 and $CDC_SINK_PG_PORT), CDC_SINK_REGISTRY_CONNECT_URL (the registry as Connect sees it),
# CDC_SINK_CONNECTOR_TABLES (table.include.list), CDC_SINK_STACK_TIMEOUT,
# CDC_SINK_AVRO_CONVERTER=apicurio2 (native stack: Apicurio 2.6 converter, registry v2 API; default)
# or apicurio3 (docker-compose: the Apicurio 3.x converter in quay.io/debezium/connect, v3 API).
source "$(dirname "$0")/common.sh"

cmd=${1:-}; mode=${2:-}
case $mode in json|avro) ;; *) sed -n '2,28p' "$0" >&2; exit 2 ;; esac

name=cdc-sink-$mode
PG_HOST_FOR_CONNECT=${CDC_SINK_PG_HOST:-127.0.0.1}
PG_PORT_FOR_CONNECT=${CDC_SINK_PG_CONNECT_PORT:-$PG_PORT}
REGISTRY_FOR_CONNECT=${CDC_SINK_REGISTRY_CONNECT_URL:-$REGISTRY_URL}
TABLES=${CDC_SINK_CONNECTOR_TABLES:-public.customers,public.orders,public.order_items,public.products}
AVRO_CONVERTER=${CDC_SINK_AVRO_CONVERTER:-apicurio2}

config_json() {
  local prefix=loja slot=cdc_sink_json
  [ "$mode" = avro ] && { prefix=loja_avro; slot=cdc_sink_avro; }
  MODE=$mode PREFIX=$prefix SLOT=$slot PGH=$PG_HOST_FOR_CONNECT PGP=$PG_PORT_FOR_CONNECT \
  DB=$PG_DB USER_=$PG_USER PASS=$PG_PASSWORD TABLES=$TABLES REG=$REGISTRY_FOR_CONNECT CONV=$AVRO_CONVERTER python3 - <<'EOF'
import json, os
e = os.environ
c = {
    "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
    "tasks.max": "1",
    "database.hostname": e["PGH"],
    "database.port": e["PGP"],
    "database.user": e["USER_"],
    "database.password": e["PASS"],
    "database.dbname": e["DB"],
    "topic.prefix": e["PREFIX"],
    "plugin.name": "pgoutput",
    "slot.name": e["SLOT"],
    "publication.name": e["SLOT"],
    "publication.autocreate.mode": "filtered",
    "table.include.list": e["TABLES"],
    "snapshot.mode": "initial",
    "provide.transaction.metadata": "true",
    "tombstones.on.delete": "true",
    # emit TRUNCATE events too (op "t"; Debezium skips them by default)
    "skipped.operations": "none",
    "heartbeat.interval.ms": "10000",
    "topic.creation.default.replication.factor": "1",
    "topic.creation.default.partitions": "1",
}
if e["MODE"] == "json":
    c.update({
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "key.converter.schemas.enable": "true",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "true",
    })
elif e["CONV"] in ("apicurio2", "apicurio3"):
    # apicurio2: the Apicurio 2.6 converter (the newest whose dependencies Maven Central serves
    # here), registry v2 API, Confluent framing (magic byte 0 + 4-byte id + Avro) only with
    # as-confluent. apicurio3: the 3.x converter (what quay.io/debezium/connect:3.6 ships with
    # ENABLE_APICURIO_CONVERTERS=true), registry v3 API; its serde defaults already give Confluent
    # framing (Default4ByteIdHandler, use-id=contentId, headers.enabled=false): set explicitly.
    api = "v2" if e["CONV"] == "apicurio2" else "v3"
    c["schema.name.adjustment.mode"] = "avro"
    c["field.name.adjustment.mode"] = "avro"
    for side in ("key", "value"):
        p = side + ".converter"
        c.update({
            p: "io.apicurio.registry.utils.converter.AvroConverter",
            p + ".apicurio.registry.url": e["REG"] + "/apis/registry/" + api,
            p + ".apicurio.registry.auto-register": "true",
            p + ".apicurio.registry.find-latest": "true",
            p + ".apicurio.registry.use-id": "contentId",
            p + ".apicurio.registry.headers.enabled": "false",
        })
        if api == "v2":
            c[p + ".apicurio.registry.as-confluent"] = "true"
else:
    raise SystemExit("CDC_SINK_AVRO_CONVERTER must be apicurio2 or apicurio3")
print(json.dumps(c, indent=2, sort_keys=True))
EOF
}

state() { # prints "<connector state> <task states...>" or nothing
  curl -fsS --max-time 5 "$CONNECT_URL/connectors/$name/status" 2>/dev/null | python3 -c '
import json,sys
s=json.load(sys.stdin)
print(s["connector"]["state"], *[t["state"] for t in s.get("tasks",[])])' 2>/dev/null || true
}

running() { local s; s=$(state); [[ "$s" == "RUNNING RUNNING"* ]]; }

case $cmd in
  config) config_json ;;
  register)
    http_ok "$CONNECT_URL/connectors" || die "Kafka Connect is not up at $CONNECT_URL (make stack-up)"
    cfg=$(config_json)
    deadline=$(( $(now_s) + STACK_TIMEOUT ))
    # PUT /config creates or updates; retry while the worker is still rebalancing (409/5xx)
    until out=$(curl -sS --max-time 30 -o "$RUN/connector-$mode.out" -w '%{http_code}' -X PUT \
                  -H 'Content-Type: application/json' --data "$cfg" "$CONNECT_URL/connectors/$name/config") \
          && [[ "$out" == 20[01] ]]; do
      [ "$(now_s)" -lt "$deadline" ] || { cat "$RUN/connector-$mode.out" >&2; die "could not register $name (HTTP $out)"; }
      sleep 1
    done
    log "registered $name; waiting until RUNNING"
    if ! wait_until "$name" "$STACK_TIMEOUT" running; then
      curl -sS "$CONNECT_URL/connectors/$name/status" >&2 || true
      die "$name not RUNNING"
    fi
    log "$name RUNNING"
    ;;
  status) curl -fsS "$CONNECT_URL/connectors/$name/status"; echo ;;
  delete)
    curl -sS -o /dev/null -X DELETE "$CONNECT_URL/connectors/$name" || true
    slot=cdc_sink_$mode
    # the slot is released a moment after the task stops
    bin=$(pg_bin) && for _ in $(seq 1 20); do
      "$bin/psql" -h "${CDC_SINK_PG_HOST:-127.0.0.1}" -p "$PG_PORT_FOR_CONNECT" -U "$PG_USER" -d "$PG_DB" -qAt \
        -c "SELECT pg_drop_replication_slot('$slot') FROM pg_replication_slots WHERE slot_name='$slot' AND NOT active" \
        >/dev/null 2>&1 || true
      [ -z "$("$bin/psql" -h "${CDC_SINK_PG_HOST:-127.0.0.1}" -p "$PG_PORT_FOR_CONNECT" -U "$PG_USER" -d "$PG_DB" -qAt \
              -c "SELECT 1 FROM pg_replication_slots WHERE slot_name='$slot'" 2>/dev/null)" ] && break
      sleep 0.5
    done
    log "deleted $name (slot $slot dropped)"
    ;;
  *) sed -n '2,28p' "$0" >&2; exit 2 ;;
esac
