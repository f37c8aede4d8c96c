#!/usr/bin/env bash
# Prints the current multi-platform index digest of each base image the Dockerfile pins
# (ARG *_IMAGE=name:tag@sha256:...), or with --check exits 1 when a pin is no longer the tag's
# current digest. Needs the registries (Docker Hub, gcr.io) over HTTPS; the CI machine reaches
# none, so this is run by hand where they are reachable, and the Dockerfile bumped on purpose.
# Usage: scripts/docker-pins.sh [--check]
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
[ "${1:-}" != --check ] || check=1
accept='application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.list.v2+json'

token() { # token REGISTRY REPO: an anonymous pull token
  local url body
  case $1 in
    registry-1.docker.io) url="https://auth.docker.io/token?service=registry.docker.io&scope=repository:$2:pull" ;;
    *) url="https://$1/v2/token?scope=repository:$2:pull" ;;
  esac
  body=$(curl -fsS "$url") || return 1
  python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("token") or d.get("access_token") or "")' <<<"$body"
}

digest() { # digest IMAGE:TAG: the registry's Docker-Content-Digest for the tag
  local ref=$1 name tag reg repo tok
  name=${ref%%:*} tag=${ref#*:}
  case $name in
    */*.*/* | *.*/*) reg=${name%%/*} repo=${name#*/} ;;
    */*) reg=registry-1.docker.io repo=$name ;;
    *) reg=registry-1.docker.io repo=library/$name ;;
  esac
  tok=$(token "$reg" "$repo") || { echo "docker-pins: no token from $reg for $repo" >&2; return 1; }
  curl -fsSI -H "Accept: $accept" ${tok:+-H "Authorization: Bearer $tok"} "https://$reg/v2/$repo/manifests/$tag" \
    | tr -d '\r' | awk -F': ' 'tolower($1) == "docker-content-digest" { print $2 }'
}

stale=0
while IFS= read -r line; do
  arg=${line#ARG } arg=${arg%%=*} pinned=${line#*=}
  ref=${pinned%@*} have=${pinned#*@}
  want=$(digest "$ref") || { echo "docker-pins: cannot reach the registry for $ref" >&2; exit 2; }
  [ -n "$want" ] || { echo "docker-pins: no digest for $ref" >&2; exit 2; }
  if [ "$want" = "$have" ]; then
    echo "$arg: $ref is current ($have)"
  else
    stale=1
    echo "$arg: $ref is now $want (pinned: $have)"
    echo "  ARG $arg=$ref@$want"
  fi
done < <(grep -E '^ARG [A-Z_]+_IMAGE=[^ ]+@sha256:[0-9a-f]{64}$' Dockerfile)
[ $check = 0 ] || [ $stale = 0 ] || exit 1
