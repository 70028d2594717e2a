#!/bin/sh
# docs/PILOT.md, "Validation": 100 simulated pilots from the shared 8x H100 traces, with a known
# injected effect (+10 % on 1-minute energy blocks) and with none; writes the coverage and the
# false-positive rate to OUT (default build/pilot-validation.json) and checks them: coverage
# >= 0.90, false positives <= 0.10 (0.05 + 2.3 binomial sd at 100). Exit 77 (skipped) without
# the data (../shared/power-data next to the checkout, or $HEADROOM_POWER_DATA).
# Usage: scripts/pilot_validation.sh HEADROOM_BINARY [OUT]
set -eu
headroom=${1:?usage: pilot_validation.sh HEADROOM_BINARY [OUT]}
here=$(cd "$(dirname "$0")/.." && pwd)
out=${2:-$here/build/pilot-validation.json}
data=${HEADROOM_POWER_DATA:-$here/../shared/power-data}/h100-8gpu-training-traces
if ! ls "$data"/*.csv >/dev/null 2>&1; then
  echo "pilot_validation: no traces in $data: skipped"
  exit 77
fi
mkdir -p "$(dirname "$out")"
"$headroom" pilot validate --baseline "$data"/*.csv --effect 10% --metric energy --block 60s \
  --pilots 100 --blocks-per-arm 10 --seed 1 --json >"$out.tmp"
mv "$out.tmp" "$out"
/usr/bin/python3 - "$out" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
print(f"coverage {j['coverage']:.2f} {j['coverage_ci']}, false positives "
      f"{j['false_positive_rate']:.2f} {j['false_positive_rate_ci']}, power {j['power']:.2f} "
      f"({j['pilots']} pilots of {j['blocks_per_arm']} blocks per arm)")
sys.exit(0 if j["coverage"] >= 0.90 and j["false_positive_rate"] <= 0.10 else 1)
PY
