#!/usr/bin/env bash
# make fuzz's runs: each libFuzzer target of BUILD_DIR on a copy of its corpus for SECONDS, with
# libFuzzer's seed SEED (0: random), as many at a time as the machine has cores. Every target's
# output goes to BUILD_DIR/fuzz-<target>.log; a crash, a leak or undefined behaviour fails it
# (its log printed), and any failure fails the script after every target has run.
#
#   scripts/fuzz.sh BUILD_DIR SECONDS SEED
set -euo pipefail
build="${1:?usage: fuzz.sh BUILD_DIR SECONDS SEED}"
seconds="${2:-15}"
seed="${3:-1}"
root="$(cd "$(dirname "$0")/.." && pwd)"

# target  corpus-directory  max_len  extra libFuzzer flags
targets=(
  "trace_reader_fuzz corpus 4096"
  "scenario_fuzz scenario_corpus 8192 -timeout=10"
  "policy_fuzz policy_corpus 16384 -timeout=10"
  "http_fuzz http_corpus 8192 -timeout=10"
  "contribution_fuzz contribution_corpus 4096 -timeout=10"
  "etcd_wire_fuzz etcd_wire_corpus 4096 -timeout=10"
)

run_one() {
  local target="$1" corpus="$2" max_len="$3"
  shift 3
  mkdir -p "$build/$corpus"
  cp "$root/tests/fuzz/$corpus/"* "$build/$corpus/"
  if "$build/bin/$target" -seed="$seed" -max_total_time="$seconds" -max_len="$max_len" "$@" \
      -print_final_stats=1 "$build/$corpus" > "$build/fuzz-$target.log" 2>&1; then
    echo "fuzz: $target: $(grep -m1 'stat::number_of_executed_units' "$build/fuzz-$target.log" \
      | awk '{print $2}') inputs in ${seconds} s, clean"
  else
    cat "$build/fuzz-$target.log"
    echo "fuzz: $target FAILED (log: $build/fuzz-$target.log)"
    return 1
  fi
}
export -f run_one
export build seconds seed root

printf '%s\n' "${targets[@]}" | xargs -P "$(nproc)" -I{} bash -c 'run_one {}'
