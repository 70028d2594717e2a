#!/usr/bin/env bash
# `make chaos`: tests/site/chaos.py with N faults, its table written into docs/SITE.md between
# <!-- chaos:begin --> and <!-- chaos:end -->; then tests/site/chaos_domains.py (the site with a
# domain layer) with DOMAIN_FAULTS faults, its table between <!-- chaos-domains:begin --> and
# <!-- chaos-domains:end -->. Usage: chaos_table.sh HEADROOM_BINARY FAULTS [SEED] [LONG]
# [DOMAIN_FAULTS]: LONG long faults more (agent_partition, agent_frozen_past_ttl: about 2 minutes
# each, until the ledger forgets the job), one per 100 faults by default, at least 2;
# DOMAIN_FAULTS 200 by default (about 5 s each; 0: the domain layer is not run). Both run even
# when the first fails; the exit status is the first non-zero of the two.
set -euo pipefail
headroom="$1"
faults="$2"
seed="${3:-1}"
long="${4:-$(( faults / 100 > 2 ? faults / 100 : 2 ))}"
domain_faults="${5:-200}"
root="$(cd "$(dirname "$0")/.." && pwd)"
table="$(mktemp)"
trap 'rm -f "$table" "$table.block"' EXIT

# write_block MARKER COMMAND RC: the table in $table, with the command that made it, between
# <!-- MARKER:begin --> and <!-- MARKER:end --> in docs/SITE.md (appended when they are not there).
write_block() {
  local marker="$1" command="$2" rc="$3"
  {
    echo "<!-- $marker:begin -->"
    echo "\`$command\`"
    echo "($(date -u +%Y-%m-%d), $(nproc) cores; exit status $rc)"
    echo
    cat "$table"
    echo "<!-- $marker:end -->"
  } >"$table.block"
  python3 - "$root/docs/SITE.md" "$table.block" "$marker" <<'PY'
import sys, re
doc, block, marker = sys.argv[1], open(sys.argv[2]).read(), sys.argv[3]
text = open(doc).read()
begin, end = f"<!-- {marker}:begin -->", f"<!-- {marker}:end -->"
new = re.sub(re.escape(begin) + r".*?" + re.escape(end) + r"\n?", lambda _: block, text, flags=re.S)
if new == text and begin not in text:
    new = text.rstrip("\n") + "\n\n" + block
open(doc, "w").write(new)
PY
  cat "$table"
}

set +e
python3 "$root/tests/site/chaos.py" --headroom "$headroom" --source-dir "$root" \
  --faults "$faults" --long-faults "$long" --seed "$seed" --markdown >"$table"
rc=$?
set -e
write_block chaos "python3 tests/site/chaos.py --headroom build/bin/headroom --faults $faults --long-faults $long --seed $seed" "$rc"

if [ "$domain_faults" -gt 0 ]; then
  set +e
  python3 "$root/tests/site/chaos_domains.py" --headroom "$headroom" --source-dir "$root" \
    --faults "$domain_faults" --seed "$seed" --markdown >"$table"
  domain_rc=$?
  set -e
  write_block chaos-domains "python3 tests/site/chaos_domains.py --headroom build/bin/headroom --faults $domain_faults --seed $seed" "$domain_rc"
  if [ "$rc" -eq 0 ]; then rc="$domain_rc"; fi
fi
exit "$rc"
