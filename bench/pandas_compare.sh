#!/usr/bin/env bash
# headroom against the peer people use today (pandas), and DuckDB (bench/duckdb/, the
# @duckdb/node-api that scripts/setup.sh installs; one thread), side by side, on one core.
#
# Both compute, from the same 20-million-sample long-format CSV (8 GPUs x 2.5 M samples at
# 10 Hz, from `headroom synth`), the violation fractions and window maxima of 0.5 s, 30 s and
# 5 min windows by the definitions of docs/METRICS.md. The script checks that the numbers agree,
# then reports the median wall time of REPS runs of each, pinned to one core, and the ratio; and
# headroom's --threads 2 pinned to two cores (reading and analysis at once) beside them.
# It also reports headroom's peak memory on a 2 M- and a 20 M-sample trace (streaming: equal).
#
# Usage: bench/pandas_compare.sh        (env: HEADROOM, BENCH_DIR, REPS, CORE)
set -euo pipefail
cd "$(dirname "$0")/.."
headroom="${HEADROOM:-build/bin/headroom}"
dir="${BENCH_DIR:-build/bench-data}"
reps="${REPS:-5}"
core="${CORE:-0}"
budget_w=330.0007  # off the 0.01 W grid of the data: no window mean ties with the budget
python=/usr/bin/python3

mkdir -p "$dir"
big="$dir/long20m.csv"
small="$dir/long2m.csv"
if [ ! -f "$big" ]; then
  echo "generating $big (20,000,000 samples)..."
  "$headroom" synth --minimal --gpus 8 --duration-s 249999.95 --interval-s 0.1 --seed 11 --out "$big"
fi
if [ ! -f "$small" ]; then
  "$headroom" synth --minimal --gpus 8 --duration-s 24999.95 --interval-s 0.1 --seed 11 --out "$small"
fi
rows=$(($(wc -l < "$big") - 1))
echo "trace: $big ($rows samples, $(du -m "$big" | cut -f1) MB)"


time_of() {  # prints wall seconds of one run of "$@" pinned to one core; output to $out
  # Both read the file from memory: warm it again before every run (the other subject's run,
  # or the kernel's proactive reclaim on a VM, may have evicted part of it).
  cat "$big" > /dev/null
  /usr/bin/time -f "%e %M" -o "$dir/time.txt" taskset -c "$core" "$@" > "$out"
  cat "$dir/time.txt"
}

duck="bench/duckdb/duckdb_windows.mjs"
have_duck=0
if [ -d bench/duckdb/node_modules/@duckdb/node-api ] && command -v node > /dev/null; then
  have_duck=1
else
  echo "DuckDB: bench/duckdb/node_modules missing (scripts/setup.sh installs it); left out"
fi
# Two cores for the second headroom run: CORE and the next one, where the machine has it.
cores2=""
if [ "$(nproc)" -ge 2 ]; then cores2="$core,$(( (core + 1) % $(nproc) ))"; fi
h_times=()
h2_times=()
p_times=()
d_times=()
d2_times=()
for i in $(seq "$reps"); do
  out="$dir/headroom.json"
  read -r t m < <(time_of "$headroom" analyze "$big" --json --budget-w "$budget_w" --windows 0.5s,30s,5min --threads 1)
  h_times+=("$t")
  if [ -n "$cores2" ]; then  # reading and analysis at once, on two cores (--threads 2)
    out="$dir/headroom2.json"
    read -r t m < <(core="$cores2" time_of "$headroom" analyze "$big" --json --budget-w "$budget_w" --windows 0.5s,30s,5min --threads 2)
    h2_times+=("$t")
    cmp -s "$dir/headroom.json" "$dir/headroom2.json" || { echo "--threads 2 gave other numbers"; exit 1; }
  fi
  h_mem_big="$m"
  out="$dir/pandas.json"
  read -r t m < <(time_of "$python" bench/pandas_windows.py "$big" "$budget_w" 0.5 30 300)
  p_times+=("$t")
  p_mem="$m"
  if [ "$have_duck" = 1 ]; then
    out="$dir/duckdb.json"
    read -r t m < <(DUCKDB_THREADS=1 time_of node "$duck" "$big" "$budget_w" 0.5 30 300)
    d_times+=("$t")
    d_mem="$m"
    if [ -n "$cores2" ]; then
      out="$dir/duckdb2.json"
      read -r t m < <(core="$cores2" DUCKDB_THREADS=2 time_of node "$duck" "$big" "$budget_w" 0.5 30 300)
      d2_times+=("$t")
    fi
  fi
  echo "run $i: headroom ${h_times[-1]} s${h2_times:+ (two cores ${h2_times[-1]} s)}, pandas ${p_times[-1]} s${d_times:+, duckdb ${d_times[-1]} s}"
done
out="$dir/headroom_small.json"
read -r _ h_mem_small < <(time_of "$headroom" analyze "$small" --json --budget-w "$budget_w")

peers=("$dir/pandas.json")
[ "$have_duck" = 1 ] && peers+=("$dir/duckdb.json")
for peer in "${peers[@]}"; do
echo "headroom against $(basename "$peer" .json):"
"$python" - "$dir/headroom.json" "$peer" <<'PY'
import json, math, sys
h = json.load(open(sys.argv[1])); p = json.load(open(sys.argv[2]))
ok = math.isclose(h["dt_s"], p["dt_s"], rel_tol=1e-12)
for hw, pw in zip(h["windows"], p["windows"]):
    same = (hw["windows_counted"] == pw["windows_counted"]
            and math.isclose(hw["violation_fraction"], pw["violation_fraction"], rel_tol=1e-12)
            and math.isclose(hw["max_window_power_w"], pw["max_window_power_w"], rel_tol=1e-9))
    ok &= same
    print(f"  {hw['label']:>5}: counted {hw['windows_counted']} vs {pw['windows_counted']}, "
          f"violations {hw['violation_fraction']:.9f} vs {pw['violation_fraction']:.9f}, "
          f"max {hw['max_window_power_w']:.6f} vs {pw['max_window_power_w']:.6f} W "
          f"-> {'same' if same else 'DIFFERENT'}")
print("numbers agree" if ok else "NUMBERS DIFFER")
sys.exit(0 if ok else 1)
PY
done

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", a / b}'; }
h_med=$(median "${h_times[@]}")
p_med=$(median "${p_times[@]}")
echo
echo "headroom analyze: median $h_med s of $reps (${h_times[*]}), peak RSS ${h_mem_big} KB"
echo "pandas:           median $p_med s of $reps (${p_times[*]}), peak RSS ${p_mem} KB"
echo "ratio (pandas / headroom): $(ratio "$p_med" "$h_med")x"
[ -n "$cores2" ] && h2_med=$(median "${h2_times[@]}") &&
  echo "headroom analyze --threads 2 on cores $cores2: median $h2_med s of $reps (${h2_times[*]})" &&
  echo "ratio (pandas on one core / headroom on two): $(ratio "$p_med" "$h2_med")x"
if [ "$have_duck" = 1 ]; then
  d_med=$(median "${d_times[@]}")
  echo "duckdb (1 thread): median $d_med s of $reps (${d_times[*]}), peak RSS ${d_mem} KB"
  echo "ratio (duckdb / headroom): $(ratio "$d_med" "$h_med")x"
  [ -n "$cores2" ] && d2_med=$(median "${d2_times[@]}") &&
    echo "duckdb (2 threads, cores $cores2): median $d2_med s of $reps (${d2_times[*]})" &&
    echo "ratio (duckdb / headroom, both on two cores): $(ratio "$d2_med" "$h2_med")x"
fi
echo "headroom peak RSS: 2 M samples ${h_mem_small} KB, 20 M samples ${h_mem_big} KB"
