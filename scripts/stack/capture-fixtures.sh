#!/usr/bin/env bash
# Produces the REAL Debezium fixtures in envelope/testdata/real/ (see its README.md):
# starts a private, fresh native stack (own dir and ports, so a running `make stack-up` stack is
# not touched), registers the json and avro connectors, waits for their snapshot of the seed rows
# in compose/sql/init.sql, runs scripts/stack/fixtures-workload.sql, waits for a heartbeat, then
# dumps every Debezium topic: JSON topics with `kcat -C -J`, Avro topics with dump_topic.py
# (kcat -J shape with key_b64/payload_b64), and the Avro schemas from the registry's ccompat API.
#
# Usage: scripts/stack/capture-fixtures.sh [OUTDIR]   (default envelope/testdata/real)
#        KEEP=1 leaves the private stack running afterwards (stop: CDC_SINK_STACK_DIR=.stack-fixtures ... down.sh)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$root/envelope/testdata/real}

export CDC_SINK_STACK_DIR=${CDC_SINK_FIXTURES_STACK_DIR:-$root/.stack-fixtures}
export CDC_SINK_PG_PORT=${CDC_SINK_FIXTURES_PG_PORT:-55439}
export CDC_SINK_KAFKA_PORT=${CDC_SINK_FIXTURES_KAFKA_PORT:-19092}
export CDC_SINK_KAFKA_CONTROLLER_PORT=${CDC_SINK_FIXTURES_KAFKA_CONTROLLER_PORT:-19093}
export CDC_SINK_CONNECT_PORT=${CDC_SINK_FIXTURES_CONNECT_PORT:-18083}
export CDC_SINK_REGISTRY_PORT=${CDC_SINK_FIXTURES_REGISTRY_PORT:-18080}
# the fixtures need no secure endpoints (and their default ports belong to the default stack)
export CDC_SINK_STACK_TLS=0
unset CDC_SINK_STACK_SERVICES
source "$here/common.sh"

command -v kcat >/dev/null || die "kcat not found (apt-get install -y kcat)"
py=$root/.venv/bin/python
[ -x "$py" ] || die "project venv missing: run scripts/venv.sh"

WIPE=1 "$here/down.sh"
"$here/up.sh"
[ "${KEEP:-0}" = 1 ] || trap 'WIPE=1 "$here/down.sh"' EXIT

"$here/connector.sh" register json
"$here/connector.sh" register avro

count() { kcat -b "$KAFKA_BOOTSTRAP" -C -e -q -o beginning -t "$1" -f 'x\n' 2>/dev/null | wc -l; }
# seed rows: customers 3, orders 2, order_items 3, products 3
snapshot_done() {
  local p
  for p in loja loja_avro; do
    [ "$(count $p.public.customers)" -ge 3 ] && [ "$(count $p.public.orders)" -ge 2 ] \
      && [ "$(count $p.public.order_items)" -ge 3 ] && [ "$(count $p.public.products)" -ge 3 ] || return 1
  done
}
wait_until "snapshot" "$STACK_TIMEOUT" snapshot_done || die "snapshot records did not arrive"
log "snapshot captured; running the workload"

psql=("$(pg_bin)/psql" -h 127.0.0.1 -p "$PG_PORT" -U "$PG_USER" -d "$PG_DB" -X)
"${psql[@]}" -f "$here/fixtures-workload.sql" >"$LOGS/workload.log" 2>&1 || { cat "$LOGS/workload.log" >&2; die "workload failed"; }

# The last workload row is order_items (1003,1,'SKU-4'); wait for it on both prefixes, plus a
# heartbeat record written after the workload (heartbeat.interval.ms=10000).
hb_before_json=$(count __debezium-heartbeat.loja)
hb_before_avro=$(count __debezium-heartbeat.loja_avro)
workload_done() {
  kcat -b "$KAFKA_BOOTSTRAP" -C -e -q -o -1 -t loja.public.order_items -f '%s\n' 2>/dev/null | grep -q 'SKU-4' \
    && [ "$(count loja_avro.public.order_items)" -ge 12 ] \
    && [ "$(count __debezium-heartbeat.loja)" -gt "$hb_before_json" ] \
    && [ "$(count __debezium-heartbeat.loja_avro)" -gt "$hb_before_avro" ] \
    && [ "$(count loja.transaction)" -gt 0 ] && [ "$(count loja_avro.transaction)" -gt 0 ]
}
wait_until "workload records" "$STACK_TIMEOUT" workload_done || die "workload records did not arrive"

topics=$(kcat -b "$KAFKA_BOOTSTRAP" -L -J | python3 -c '
import json,sys
for t in sorted(x["topic"] for x in json.load(sys.stdin)["topics"]):
    if t.startswith(("loja.", "loja_avro.", "__debezium-heartbeat.")):
        print(t)')

mkdir -p "$out/avro-schemas"
rm -f "$out"/*.jsonl "$out"/avro-schemas/*.avsc
for t in $topics; do
  case $t in
    loja_avro.*|*.loja_avro) "$py" "$here/dump_topic.py" --bootstrap "$KAFKA_BOOTSTRAP" --binary "$t" >"$out/$t.jsonl" ;;
    *) kcat -b "$KAFKA_BOOTSTRAP" -C -J -e -q -o beginning -t "$t" >"$out/$t.jsonl" ;;
  esac
  log "$(wc -l <"$out/$t.jsonl") records  $t"
done

# Avro schemas by id, as served by the ccompat API (ids = registry contentIds, the 4-byte frame id)
CCOMPAT=$CCOMPAT_URL python3 - "$out/avro-schemas" <<'EOF'
import json, os, sys, urllib.request
base, outdir = os.environ["CCOMPAT"], sys.argv[1]
get = lambda p: json.load(urllib.request.urlopen(base + p))
subjects = {}
for s in get("/subjects"):
    subjects[s] = []
    for v in get("/subjects/%s/versions" % s):
        sv = get("/subjects/%s/versions/%d" % (s, v))
        subjects[s].append({"version": v, "id": sv["id"]})
ids = sorted({x["id"] for vs in subjects.values() for x in vs})
for i in ids:
    schema = get("/schemas/ids/%d" % i)["schema"]
    with open(os.path.join(outdir, "%d.avsc" % i), "w") as f:
        f.write(json.dumps(json.loads(schema), indent=2) + "\n")
with open(os.path.join(outdir, "subjects.json"), "w") as f:
    json.dump(subjects, f, indent=2, sort_keys=True)
    f.write("\n")
print("saved %d schemas for %d subjects" % (len(ids), len(subjects)), file=sys.stderr)
EOF

# provenance
{
  echo "captured_at=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "kafka=$(curl -fsS "$CONNECT_URL/" | python3 -c 'import json,sys; print(json.load(sys.stdin)["version"])')"
  echo "debezium=$(curl -fsS "$CONNECT_URL/connector-plugins" | python3 -c 'import json,sys; print([p["version"] for p in json.load(sys.stdin) if "Postgres" in p["class"]][0])')"
  echo "postgres=$("${psql[@]}" -qAt -c 'SHOW server_version')"
  echo "registry=$(curl -fsS "$REGISTRY_URL/apis/registry/v2/system/info" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["name"], d["version"])')"
  # shellcheck disable=SC2010
  echo "apicurio_converter=$(ls "$STACK_DIR/connect/plugins/apicurio-converter/" | grep -o 'utils-converter-.*\.jar' | sed 's/utils-converter-//; s/\.jar//')"
  echo "kcat=$(kcat -V 2>&1 | grep -o 'kcat - .*\|Version .*' | head -n2 | tr '\n' ' ')"
} >"$out/VERSIONS"
"$here/connector.sh" config json >"$out/connector-json.json"
"$here/connector.sh" config avro >"$out/connector-avro.json"
cp "$LOGS/workload.log" "$out/workload.log"
log "fixtures written to $out"
