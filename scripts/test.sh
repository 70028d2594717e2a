#!/usr/bin/env bash
# make test, after the release build: every tier of the release build, the unit and integration
# tiers under ASan+UBSan, the tests labelled tsan under TSan, every source of src/ compiled on
# its own (clang, with its thread-safety analysis), then the fuzzers (Makefile).
#
# The site's chaos test (e2e, 50 faults, about four minutes that are mostly waiting for leases
# and elections) runs beside the others from the start, in its own process group, and is
# waited for after the ASan stage: it takes no longer than the rest of the release tests and
# the ASan build and tests together. Its output is printed when it ends; a failure fails
# `make test`. Sharing the machine is a fault of its own: its invariant and its audit do not
# depend on timing (docs/SITE.md, "Chaos").
set -euo pipefail
cd "$(dirname "$0")/.."
make_="${MAKE:-make}"
log=build/chaos.log

# The test's command as ctest has it (one definition, tests/CMakeLists.txt), run directly: a
# second ctest in the same tree would race the first on its discovery files and logs. Listing
# the tests first also discovers them, once.
mapfile -t command < <(ctest --test-dir build --show-only=json-v1 -R '^fleet_chaos$' |
  /usr/bin/python3 -c 'import json, sys; [print(a) for a in json.load(sys.stdin)["tests"][0]["command"]]')
setsid timeout 1200 "${command[@]}" > "$log" 2>&1 &
chaos=$!
cleanup() {
  if kill -0 "$chaos" 2>/dev/null; then kill -TERM -- "-$chaos" 2>/dev/null || true; fi
}
trap cleanup EXIT

start=$(date +%s)
"$make_" --no-print-directory test-release
"$make_" --no-print-directory test-asan
echo "test: waiting for the chaos test (started $(( $(date +%s) - start )) s ago; log: $log)"
rc=0
wait "$chaos" || rc=$?
cat "$log"
if [ "$rc" -eq 77 ]; then
  echo "test: the chaos test skipped itself (no etcd)"
elif [ "$rc" -ne 0 ]; then
  echo "test: the chaos test failed (exit $rc)"
  exit "$rc"
else
  echo "test: the chaos test passed"
fi
"$make_" --no-print-directory test-tsan
"$make_" --no-print-directory test-thread-safety
"$make_" --no-print-directory fuzz
echo "test: every stage passed in $(( $(date +%s) - start )) s after the release build"
