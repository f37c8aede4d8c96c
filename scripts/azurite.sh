#!/usr/bin/env bash
# Installs Azurite (the Azure Storage emulator, from npm) into the project's
# git-ignored .cache/azurite, for the Azure backend's tests (delta/azstore,
# cmd/cdc-sink). Idempotent: an installed copy of the pinned version is left
# alone. Prints the path of the azurite-blob executable.
# Tests find it through CDC_SINK_AZURITE (the executable), else this folder.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=${AZURITE_VERSION:-3.37.0}
dir=${CDC_SINK_AZURITE_DIR:-$root/.cache/azurite}
bin=$dir/node_modules/.bin/azurite-blob
stamp=$dir/.version
if [ -x "$bin" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$version" ]; then
  echo "$bin"
  exit 0
fi
command -v npm >/dev/null || { echo "azurite.sh: npm not found (Node.js 18+ is needed)" >&2; exit 1; }
mkdir -p "$dir"
[ -f "$dir/package.json" ] || echo '{"name":"cdc-sink-azurite","private":true}' >"$dir/package.json"
npm install --prefix "$dir" --no-audit --no-fund --silent "azurite@$version" >&2
echo "$version" >"$stamp"
echo "$bin"
