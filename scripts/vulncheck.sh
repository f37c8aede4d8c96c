#!/usr/bin/env bash
# govulncheck over the module (with the gcs build tag, so the GCS SDK is scanned too), against a
# vulnerability database built locally from the golang.org/x/vulndb module.
#
# Why not govulncheck's default database: vuln.go.dev is not reachable from every build machine
# (CI's reaches only the Go module proxy), while the same OSV reports are published in the
# golang.org/x/vulndb module (data/osv/GO-*.json) on the proxy; its own cmd/indexdb turns them into
# the v1 database govulncheck reads with -db file://. The module version is pinned so a new report
# cannot fail CI at random: bump VULNDB_VERSION (VULNDB_VERSION=latest for the newest reports,
# e.g. in a scheduled job) and fix what it finds.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=${GOTOOLCHAIN:-auto} GOFLAGS=${GOFLAGS:-}
GOVULNCHECK_VERSION=${GOVULNCHECK_VERSION:-v1.9.0}
VULNDB_VERSION=${VULNDB_VERSION:-v0.0.0-20261105234957-e22db6528018}
if [ "$VULNDB_VERSION" = latest ]; then
  VULNDB_VERSION=$(go list -m -json golang.org/x/vulndb@latest | sed -n 's/^\t"Version": "\(.*\)",$/\1/p')
fi
db=${VULNDB_CACHE:-.cache/vulndb}/$VULNDB_VERSION
if [ ! -f "$db/index/db.json" ]; then
  src=$(go mod download -json "golang.org/x/vulndb@$VULNDB_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [ -d "$src/data/osv" ] || { echo "vulncheck: golang.org/x/vulndb@$VULNDB_VERSION has no data/osv" >&2; exit 1; }
  rm -rf "$db.tmp"
  go run "golang.org/x/vulndb/cmd/indexdb@$VULNDB_VERSION" -vulns "$src/data/osv" -out "$db.tmp"
  mv "$db.tmp" "$db"
fi
echo "vulncheck: govulncheck $GOVULNCHECK_VERSION, database golang.org/x/vulndb@$VULNDB_VERSION ($(ls "$db/ID" | grep -c "\.json$") reports), $(go version)"
go run "golang.org/x/vuln/cmd/govulncheck@$GOVULNCHECK_VERSION" -db "file://$PWD/$db" -tags gcs ./...
