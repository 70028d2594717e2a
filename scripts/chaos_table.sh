#!/usr/bin/env bash
# `make chaos`: tests/site/chaos.py with N faults, its table written into docs/SITE.md between
# <!-- chaos:begin --> and <!-- chaos:end -->. Usage: chaos_table.sh HEADROOM_BINARY FAULTS [SEED]
# [LONG]: LONG long faults more (agent_partition, agent_frozen_past_ttl: about 2 minutes each,
# until the ledger forgets the job), one per 100 faults by default, at least 2.
set -euo pipefail
headroom="$1"
faults="$2"
seed="${3:-1}"
long="${4:-$(( faults / 100 > 2 ? faults / 100 : 2 ))}"
root="$(cd "$(dirname "$0")/.." && pwd)"
table="$(mktemp)"
trap 'rm -f "$table"' EXIT
set +e
python3 "$root/tests/site/chaos.py" --headroom "$headroom" --source-dir "$root" \
  --faults "$faults" --long-faults "$long" --seed "$seed" --markdown >"$table"
rc=$?
set -e
{
  echo "<!-- chaos:begin -->"
  echo "\`python3 tests/site/chaos.py --headroom build/bin/headroom --faults $faults --long-faults $long --seed $seed\`"
  echo "($(date -u +%Y-%m-%d), $(nproc) cores; exit status $rc)"
  echo
  cat "$table"
  echo "<!-- chaos:end -->"
} >"$table.block"
python3 - "$root/docs/SITE.md" "$table.block" <<'PY'
import sys, re
doc, block = sys.argv[1], open(sys.argv[2]).read()
text = open(doc).read()
new = re.sub(r"<!-- chaos:begin -->.*?<!-- chaos:end -->\n?", block, text, flags=re.S)
if new == text and "<!-- chaos:begin -->" not in text:
    new = text.rstrip("\n") + "\n\n" + block
open(doc, "w").write(new)
PY
rm -f "$table.block"
cat "$table"
exit "$rc"
