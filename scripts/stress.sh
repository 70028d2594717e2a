#!/usr/bin/env bash
# make stress: the integration and e2e tiers of a build tree RUNS times, beside a CPU burner on
# every core (a loaded CI machine, or a developer's), and a list of every test that failed at
# least once, with how often. Exit 1 when any did. A flaky test is a bug: fix its wait.
#
#   scripts/stress.sh BUILD_DIR RUNS
#
# Each run's ctest log stays in BUILD_DIR/stress/run-N.log.
set -euo pipefail
build="${1:?usage: stress.sh BUILD_DIR RUNS}"
runs="${2:-5}"
out="$build/stress"
mkdir -p "$out"
rm -f "$out"/run-*.log "$out"/failed-*.txt

# The burner: one busy loop per core, stopped by PID when this script ends, pass or fail.
burners=()
stop_burners() {
  for pid in "${burners[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop_burners EXIT INT TERM
for _ in $(seq "$(nproc)"); do
  ( while :; do :; done ) &
  burners+=("$!")
done

start=$(date +%s)
for n in $(seq "$runs"); do
  echo "stress: run $n of $runs (integration and e2e, beside ${#burners[@]} busy loops)"
  if ctest --test-dir "$build" -L '^(integration|e2e)$' -j 2 --output-on-failure \
      > "$out/run-$n.log" 2>&1; then
    echo "stress: run $n: every test passed"
    : > "$out/failed-$n.txt"
  else
    # ctest's own list of what failed in the run.
    sed -n 's/^\t *[0-9]* - \(.*\) (\(Failed\|Timeout\|SEGFAULT\|Subprocess aborted\|Exception\|Child aborted\|Not Run\).*$/\1 (\2)/p' \
      "$out/run-$n.log" > "$out/failed-$n.txt" || true
    echo "stress: run $n: $(wc -l < "$out/failed-$n.txt") failed (log: $out/run-$n.log)"
  fi
done
elapsed=$(( $(date +%s) - start ))

failed=$(cat "$out"/failed-*.txt | sort | uniq -c | sort -rn || true)
if [ -n "$failed" ]; then
  echo "stress: $runs runs in ${elapsed} s; tests that failed at least once (times, test):"
  echo "$failed"
  exit 1
fi
echo "stress: $runs runs in ${elapsed} s; every integration and e2e test passed every time"
