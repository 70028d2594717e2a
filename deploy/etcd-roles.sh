#!/usr/bin/env bash
# etcd users and roles for one site (docs/FLEET.md, "etcd with TLS and auth"): the coordinator
# reads and writes the site's prefix; each agent writes only its own member and ack keys and
# reads only its own grant, so that an agent's credentials cannot forge another job's grant or
# the ledger. Idempotent: run it again to add agents (an existing user keeps its password).
#
#   deploy/etcd-roles.sh --endpoints URL[,URL...] --site SITE --root-password-file FILE \
#       --coordinator USER:PASSWORD_FILE [--agent USER:JOB:PASSWORD_FILE]... [--enable-auth]
#
# Passwords are read from files (first line), never taken as arguments. TLS to etcd: etcdctl's
# own environment (ETCDCTL_CACERT, ETCDCTL_CERT, ETCDCTL_KEY). --enable-auth turns etcd's auth
# on (after making root); once it is on, root's password is needed for every later run.
set -euo pipefail

usage() {
  echo "usage: $0 --endpoints URL[,URL...] --site SITE --root-password-file FILE" \
       "--coordinator USER:PASSWORD_FILE [--agent USER:JOB:PASSWORD_FILE]... [--enable-auth]" >&2
  exit 2
}
fail() { echo "etcd-roles: $*" >&2; exit "${2:-1}"; }

endpoints="" site="" root_file="" coordinator="" enable=0
agents=()
while [ $# -gt 0 ]; do
  case "$1" in
    --endpoints) [ $# -ge 2 ] || usage; endpoints=$2; shift 2 ;;
    --site) [ $# -ge 2 ] || usage; site=$2; shift 2 ;;
    --root-password-file) [ $# -ge 2 ] || usage; root_file=$2; shift 2 ;;
    --coordinator) [ $# -ge 2 ] || usage; coordinator=$2; shift 2 ;;
    --agent) [ $# -ge 2 ] || usage; agents+=("$2"); shift 2 ;;
    --enable-auth) enable=1; shift ;;
    *) usage ;;
  esac
done
[ -n "$endpoints" ] && [ -n "$site" ] && [ -n "$root_file" ] && [ -n "$coordinator" ] || usage

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

prefix="/headroom/$site/"
ensure_role root
ensure_user root "$root_password"
ctl user grant-role root root > /dev/null

coord_role="headroom-$site-coordinator"
ensure_user "$coord_user" "$coord_password"
ensure_role "$coord_role"
ctl role grant-permission "$coord_role" readwrite "$prefix" --prefix=true > /dev/null
ctl user grant-role "$coord_user" "$coord_role" > /dev/null
echo "etcd-roles: $coord_user: read and write $prefix"

for agent in "${agents[@]}"; do
  IFS=: read -r user job file extra <<< "$agent"
  role="headroom-$site-agent-$job"
  ensure_user "$user" "$(password_of "$file")"
  ensure_role "$role"
  ctl role grant-permission "$role" readwrite "${prefix}members/$job" > /dev/null
  ctl role grant-permission "$role" readwrite "${prefix}acks/$job" > /dev/null
  ctl role grant-permission "$role" read "${prefix}grants/$job" > /dev/null
  ctl user grant-role "$user" "$role" > /dev/null
  echo "etcd-roles: $user: job $job (its member and ack keys, its grant read-only)"
done

if [ "$enable" = 1 ] && [ "$auth_on" = 0 ]; then
  ctl auth enable > /dev/null
  echo "etcd-roles: auth enabled"
fi
