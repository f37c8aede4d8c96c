#!/usr/bin/env bash
# Fuzz smoke run: every Fuzz target of the module for FUZZTIME (default 10s) each, so a
# decoder or parser change that panics on inputs near the seed corpus fails CI. Targets are
# found by grep, so a new Fuzz function is included without editing this file. Long runs
# (≥ 10 minutes per target) are a separate, manual job: FUZZTIME=10m scripts/fuzz-smoke.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-10s}
# Minimization is off by default: minimizing a new-coverage input is quadratic in its length,
# so one kilobyte-sized JSON seed stalls a worker for up to the 60 s default, the run makes no
# progress (22 execs in 4 s instead of ~30,000), and when -fuzztime expires mid-minimization Go
# reports "context deadline exceeded" as a failure with no failing input (CI run of a469af5).
# A crasher is still written to testdata/fuzz/, just not minimized; set FUZZMINIMIZETIME=60s
# for long runs when a small reproducer is worth the time.
minimizetime=${FUZZMINIMIZETIME:-0}
targets=$(grep -rE --include='*_test.go' -o '^func Fuzz[A-Za-z0-9_]+' . | grep -v '/\.' | sed -E 's|^\./(.*)/[^/]+_test\.go:func (Fuzz.*)$|\1 \2|' | sort -u)
[ -n "$targets" ] || { echo "fuzz-smoke: no Fuzz targets found" >&2; exit 1; }
n=0 failed=()
while read -r pkg target; do
  n=$((n + 1))
  log=$(mktemp)
  if go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -fuzzminimizetime "$minimizetime" "./$pkg" >"$log" 2>&1; then
    execs=$(grep -oE 'execs: [0-9]+' "$log" | tail -n1 || true)
    printf 'fuzz-smoke: %-40s ok (%s, %s)\n' "$pkg.$target" "${execs:-no exec count}" "$fuzztime"
  else
    echo "fuzz-smoke: $pkg.$target FAILED:" >&2
    tail -n 40 "$log" >&2
    failed+=("$pkg.$target")
  fi
  rm -f "$log"
done <<<"$targets"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz-smoke: ${#failed[@]} of $n targets failed: ${failed[*]} (the failing input is under testdata/fuzz/ of the package)" >&2
  exit 1
fi
echo "fuzz-smoke: $n targets, $fuzztime each, no failure"
