#!/usr/bin/env bash
# Fuzz smoke run: every Fuzz target of the module for FUZZTIME (default 10s) each, so a
# decoder or parser change that panics on inputs near the seed corpus fails CI. Targets are
# found by grep, so a new Fuzz function is included without editing this file. Long runs
# (≥ 10 minutes per target) are a separate, manual job: FUZZTIME=10m scripts/fuzz-smoke.sh.
#
# The time budget is spent in runs bounded by an execution count (-fuzztime Nx), never by a
# wall-clock -fuzztime: Go's fuzz coordinator applies a duration as a context deadline and,
# when the deadline fires while a worker is mid-call, can report "context deadline exceeded"
# as a failure that found nothing (CI run of 7d6aa42+: layout.FuzzParseBatchAndTracker, no
# input written; the suppression in internal/fuzz compares the parent's and the child's
# context errors, which a preempted cancel leaves unequal). A count has no deadline to race.
# Each target runs count-bounded chunks until its budget is used: the first chunk is small and
# measures the target's rate, the next ones are sized from it to the time left (at most 2 min
# each), so fast and slow targets both fuzz for about FUZZTIME. New inputs go to Go's fuzz
# cache, so a chunk continues where the previous one stopped; a crasher is written to
# testdata/fuzz/ of the package.
#
# Minimization is off by default: minimizing a new-coverage input is quadratic in its length,
# so one kilobyte-sized JSON seed stalls a worker for up to the 60 s default and the run makes
# no progress (22 execs in 4 s instead of ~30,000). A crasher is still written, just not
# minimized; set FUZZMINIMIZETIME=60s for long runs when a small reproducer is worth the time.
# FUZZPARALLEL sets the workers per target (default: GOMAXPROCS).
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-10s}
minimizetime=${FUZZMINIMIZETIME:-0}
parallel=()
[ -z "${FUZZPARALLEL:-}" ] || parallel=(-parallel "$FUZZPARALLEL")
seconds() { # seconds DURATION: 10s, 10m, 1h or a plain number of seconds
  case $1 in
    *h) echo $(( ${1%h} * 3600 )) ;; *m) echo $(( ${1%m} * 60 )) ;; *s) echo "${1%s}" ;;
    *[!0-9]* | '') echo "fuzz-smoke: FUZZTIME=$1: want a duration like 10s, 10m or 1h" >&2; exit 2 ;;
    *) echo "$1" ;;
  esac
}
secs=$(seconds "$fuzztime") # exits on a bad FUZZTIME (set -e)
budget_ms=$((secs * 1000))
chunk_max_ms=120000
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
targets=${FUZZTARGETS:-$(grep -rE --include='*_test.go' -o '^func Fuzz[A-Za-z0-9_]+' . | grep -v '/\.' | sed -E 's|^\./(.*)/[^/]+_test\.go:func (Fuzz.*)$|\1 \2|' | sort -u)}
[ -n "$targets" ] || { echo "fuzz-smoke: no Fuzz targets found" >&2; exit 1; }
n=0 failed=()
while read -r pkg target; do
  n=$((n + 1))
  log=$(mktemp)
  # A one-execution run first, outside the budget: it builds the coverage-instrumented test
  # binary and gathers the baseline coverage of the corpus, which the chunks then reuse.
  if ! go test -run '^$' -fuzz "^${target}\$" -fuzztime 1x -fuzzminimizetime "$minimizetime" "${parallel[@]}" "./$pkg" >"$log" 2>&1; then
    echo "fuzz-smoke: $pkg.$target FAILED on its corpus (build, seeds or cached inputs):" >&2
    tail -n 40 "$log" >&2; failed+=("$pkg.$target"); rm -f "$log"; continue
  fi
  start=$(now_ms) execs=0 chunks=0 count=2000 ok=1
  while :; do
    t0=$(now_ms)
    if ! go test -run '^$' -fuzz "^${target}\$" -fuzztime "${count}x" -fuzzminimizetime "$minimizetime" "${parallel[@]}" "./$pkg" >"$log" 2>&1; then
      ok=0; break
    fi
    took=$(( $(now_ms) - t0 ))
    last=$(grep -oE 'execs: [0-9]+' "$log" | tail -n1 | grep -oE '[0-9]+' || echo 0)
    execs=$((execs + last)) chunks=$((chunks + 1))
    left_ms=$(( budget_ms - ($(now_ms) - start) ))
    [ $left_ms -gt 0 ] || break
    # Size the next chunk from the rate Go reported at the end of this one, to about the time
    # left (each chunk also pays the go command and the baseline coverage of the corpus).
    rate=$(grep -oE '\([0-9]+/sec\)' "$log" | tail -n1 | grep -oE '[0-9]+' || echo 0)
    span_ms=$left_ms; [ $span_ms -le $chunk_max_ms ] || span_ms=$chunk_max_ms
    next=$(( rate * span_ms / 1000 ))
    if [ "$next" -gt "$count" ]; then count=$next; elif [ $took -lt $(( left_ms / 2 )) ]; then count=$((count * 2)); fi
  done
  elapsed=$(( ($(now_ms) - start) / 1000 ))
  if [ $ok = 1 ]; then
    printf 'fuzz-smoke: %-40s ok (execs: %d in %ds, %d/s, %d chunks)\n' "$pkg.$target" "$execs" "$elapsed" $(( execs / (elapsed > 0 ? elapsed : 1) )) "$chunks"
  else
    echo "fuzz-smoke: $pkg.$target FAILED after $execs execs in ${elapsed}s:" >&2
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
