#!/usr/bin/env bash
# Creates (or refreshes) the project's Python venv with the independent Delta
# readers and Kafka/Avro clients used by tests and benchmarks. Idempotent:
# a warm venv whose requirements did not change is left alone.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${CDC_SINK_VENV:-$root/.venv}
req=$root/scripts/requirements.txt
stamp=$venv/.req-stamp
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && cmp -s "$req" "$stamp"; then
  exit 0
fi
python3 -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip
"$venv/bin/pip" install -q -r "$req"
cp "$req" "$stamp"
