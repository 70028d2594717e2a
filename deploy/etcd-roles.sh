#!/usr/bin/env bash
# etcd users and roles for one site (docs/SITE.md, "etcd with TLS and auth"). Each role holds
# exactly the permissions of the table below, which is docs/SITE.md's "Who reads and writes
# each key" row for row: the coordinator reads the site's prefix and writes the leader, ledger
# and target keys and the grants; each agent reads and writes only its own member key, writes its
# duplicate keys (the prefix members/<job>@) and its ack key, and reads only its own grant — so
# an agent's credentials cannot forge another job's grant or member, the ledger or the target.
# Idempotent: run it again to add agents (an existing user keeps its password); a role made
# earlier is brought to the table (a permission the table lacks is revoked).
#
#   deploy/etcd-roles.sh --endpoints URL[,URL...] --site SITE --root-password-file FILE \
#       --coordinator USER:PASSWORD_FILE [--agent USER:JOB:PASSWORD_FILE]...
#       [--diloco USER:RUN:PASSWORD_FILE]... [--enable-auth]
#
# A DiLoCo worker (headroom-diloco --run RUN) reads and writes its run's keys alone; one that
# also joins a site as an opportunistic job takes an agent's role for that job too (the same
# USER given to --agent and --diloco holds both roles).
#
# Passwords are read from files (first line), never taken as arguments. TLS to etcd: etcdctl's
# own environment (ETCDCTL_CACERT, ETCDCTL_CERT, ETCDCTL_KEY). --enable-auth turns etcd's auth
# on (after making root); once it is on, root's password is needed for every later run.
set -euo pipefail

# Who may do what: daemon, permission (read, write, readwrite), "key" or "prefix", the key.
# <site>, <job> and <run> (a DiLoCo run's name) are filled in. Keep it equal to docs/SITE.md's table (etcd_roles_test
# checks that they agree, and that etcd's roles equal it after a run).
readonly PERMISSIONS="
coordinator read prefix /headroom/<site>/
coordinator write key /headroom/<site>/leader
coordinator write key /headroom/<site>/ledger
coordinator write key /headroom/<site>/target
coordinator write prefix /headroom/<site>/grants/
agent readwrite key /headroom/<site>/members/<job>
agent write prefix /headroom/<site>/members/<job>@
agent write key /headroom/<site>/acks/<job>
agent read key /headroom/<site>/grants/<job>
diloco readwrite prefix /headroom-diloco/<run>/
"

usage() {
  echo "usage: $0 --endpoints URL[,URL...] --site SITE --root-password-file FILE" \
       "--coordinator USER:PASSWORD_FILE [--agent USER:JOB:PASSWORD_FILE]..." \
       "[--diloco USER:RUN:PASSWORD_FILE]... [--enable-auth]" >&2
  exit 2
}
fail() { echo "etcd-roles: $*" >&2; exit "${2:-1}"; }

endpoints="" site="" root_file="" coordinator="" enable=0
agents=() dilocos=()
while [ $# -gt 0 ]; do
  case "$1" in
    --endpoints) [ $# -ge 2 ] || usage; endpoints=$2; shift 2 ;;
    --site) [ $# -ge 2 ] || usage; site=$2; shift 2 ;;
    --root-password-file) [ $# -ge 2 ] || usage; root_file=$2; shift 2 ;;
    --coordinator) [ $# -ge 2 ] || usage; coordinator=$2; shift 2 ;;
    --agent) [ $# -ge 2 ] || usage; agents+=("$2"); shift 2 ;;
    --diloco) [ $# -ge 2 ] || usage; dilocos+=("$2"); shift 2 ;;
    --enable-auth) enable=1; shift ;;
    *) usage ;;
  esac
done
[ -n "$endpoints" ] && [ -n "$site" ] && [ -n "$root_file" ] && [ -n "$coordinator" ] || usage

# Names never hold '@' (coord::CheckName): so members/<job>@ is no other job's prefix.
name_ok() { [[ "$1" =~ ^[A-Za-z0-9._-]{1,64}$ ]]; }
name_ok "$site" || fail "--site '$site': expected 1 to 64 of [A-Za-z0-9._-]" 2
password_of() {
  [ -r "$1" ] || fail "$1: cannot read (a password file)"
  local p
  p=$(head -n 1 "$1" | tr -d '\r')
  [ -n "$p" ] || fail "$1:1: the password is empty"
  printf '%s' "$p"
}
# Every argument checked before etcd is touched: nothing half-done on a typo.
IFS=: read -r coord_user coord_file extra <<< "$coordinator"
[ -z "${extra:-}" ] && name_ok "$coord_user" && [ -n "$coord_file" ] ||
  fail "--coordinator '$coordinator': expected USER:PASSWORD_FILE" 2
for agent in "${agents[@]}"; do
  IFS=: read -r user job file extra <<< "$agent"
  [ -z "${extra:-}" ] && name_ok "$user" && name_ok "$job" && [ -n "$file" ] ||
    fail "--agent '$agent': expected USER:JOB:PASSWORD_FILE" 2
  password_of "$file" > /dev/null
done
for worker in "${dilocos[@]}"; do
  IFS=: read -r user run file extra <<< "$worker"
  [ -z "${extra:-}" ] && name_ok "$user" && name_ok "$run" && [ -n "$file" ] ||
    fail "--diloco '$worker': expected USER:RUN:PASSWORD_FILE" 2
  password_of "$file" > /dev/null
done
root_password=$(password_of "$root_file")
coord_password=$(password_of "$coord_file")

ctl() { ETCDCTL_API=3 etcdctl --endpoints "$endpoints" "$@"; }
# With auth on, every call is root's (by the environment: not in ps).
if ctl user list > /dev/null 2>&1; then
  auth_on=0
else
  auth_on=1
  export ETCDCTL_USER="root:$root_password"
  ctl user list > /dev/null || fail "etcd at $endpoints: root cannot sign in (--root-password-file)"
fi

ensure_user() {  # USER PASSWORD
  if ! ctl user get "$1" > /dev/null 2>&1; then
    printf '%s\n' "$2" | ctl user add "$1" --interactive=false > /dev/null
  fi
}
ensure_role() {  # ROLE
  ctl role get "$1" > /dev/null 2>&1 || ctl role add "$1" > /dev/null
}

# etcd's end of a prefix's range: its last byte plus one (etcdctl's --prefix).
prefix_end() {
  local last=${1: -1}
  printf '%s%b' "${1%?}" "\\$(printf '%03o' $(($(printf '%d' "'$last") + 1)))"
}

# The permissions a role holds, one a line: TYPE<tab>KEY<tab>RANGE_END ("" for one key).
role_permissions() {  # ROLE
  ctl role get "$1" -w fields |
    sed -n -e 's/^"PermType" : *\([A-Z]*\)$/\1/p' -e 's/^"Key" : "\(.*\)"$/\1/p' \
           -e 's/^"RangeEnd" : "\(.*\)"$/\1/p' | paste - - -
}

# The role DAEMON's rows of the table, for SITE and JOB, granted, and nothing else kept.
grant_table() {  # ROLE DAEMON JOB (a DiLoCo worker's: its RUN)
  local role=$1 daemon=$2 job=$3 who may range key end wanted=""
  while read -r who may range key; do
    [ "$who" = "$daemon" ] || continue
    key=${key//<site>/$site}
    key=${key//<job>/$job}
    key=${key//<run>/$job}
    if [ "$range" = prefix ]; then
      ctl role grant-permission "$role" "$may" "$key" --prefix=true > /dev/null
      end=$(prefix_end "$key")
    else
      ctl role grant-permission "$role" "$may" "$key" > /dev/null
      end=""
    fi
    wanted+="$key"$'\t'"$end"$'\n'
  done <<< "$PERMISSIONS"
  local type held
  held=$(role_permissions "$role")
  while IFS=$'\t' read -r type key end; do
    [ -n "$type" ] || continue
    grep -qxF "$key"$'\t'"$end" <<< "$wanted" && continue
    [[ "$key$end" != *\\* ]] ||
      fail "role $role: a permission on '$key' (escaped by etcdctl): revoke it by hand"
    if [ -n "$end" ]; then
      ctl role revoke-permission "$role" "$key" "$end" > /dev/null
    else
      ctl role revoke-permission "$role" "$key" > /dev/null
    fi
    echo "etcd-roles: $role: revoked $type on $key${end:+ up to $end} (not in the table)"
  done <<< "$held"
}

ensure_role root
ensure_user root "$root_password"
ctl user grant-role root root > /dev/null

# USER holds ROLE, made of DAEMON's rows of the table for NAME (a job, a run) and nothing else.
user_with_role() {  # USER PASSWORD ROLE DAEMON NAME
  ensure_user "$1" "$2"
  ensure_role "$3"
  grant_table "$3" "$4" "$5"
  ctl user grant-role "$1" "$3" > /dev/null
}

user_with_role "$coord_user" "$coord_password" "headroom-$site-coordinator" coordinator ""
echo "etcd-roles: $coord_user: reads /headroom/$site/; writes leader, ledger, target, grants/"

for agent in "${agents[@]}"; do
  IFS=: read -r user job file extra <<< "$agent"
  user_with_role "$user" "$(password_of "$file")" "headroom-$site-agent-$job" agent "$job"
  echo "etcd-roles: $user: job $job (members/$job, members/$job@..., acks/$job; reads grants/$job)"
done

for worker in "${dilocos[@]}"; do
  IFS=: read -r user run file extra <<< "$worker"
  user_with_role "$user" "$(password_of "$file")" "headroom-diloco-$run" diloco "$run"
  echo "etcd-roles: $user: DiLoCo run $run (reads and writes /headroom-diloco/$run/)"
done

if [ "$enable" = 1 ] && [ "$auth_on" = 0 ]; then
  ctl auth enable > /dev/null
  echo "etcd-roles: auth enabled"
fi
