#!/usr/bin/env bash
# Runs CI (or another command) as a newcomer's machine would: in a fresh Debian 12 minbase root made
# with mmdebstrap (no compiler, no CMake, no Node.js, no CUDA), on a clone of this checkout's HEAD,
# as root with CI=true. What the set-up forgets to install fails here, not on someone else's machine.
#
#   scripts/fresh_check.sh [--keep] [--root DIR] [-- COMMAND...]
#
#   COMMAND   what to run in the clone (default: bash .ci/run); e.g. -- scripts/setup.sh --no-build
#   --root    where to make the root (default: a new directory under /var/tmp); removed at the end
#   --keep    keep the root afterwards (to rerun or look around)
# Prints how long the root, the command and the whole check took; exits with the command's status.
# Needs root (chroot, mounts, network namespaces inside) and the Debian mirror; installs mmdebstrap.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROOT=""
KEEP=0
COMMAND=(bash .ci/run)
while [[ $# -gt 0 ]]; do
  case "$1" in
    --keep) KEEP=1; shift ;;
    --root) ROOT="$2"; shift 2 ;;
    --) shift; COMMAND=("$@"); break ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "fresh_check: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ $(id -u) -eq 0 ]] || { echo "fresh_check: needs root (chroot and mounts)" >&2; exit 2; }
command -v mmdebstrap >/dev/null 2>&1 || {
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends mmdebstrap
}
[[ -n "$ROOT" ]] || ROOT="$(mktemp -d /var/tmp/tpserve-fresh.XXXXXX)"

MOUNTS=(proc sys dev dev/pts)
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  local m
  for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do
    m="$ROOT/${MOUNTS[i]}"
    mountpoint -q "$m" && umount -l "$m"
  done
  # Namespaces the tests made inside the root leave bind mounts under its /run/netns.
  for m in "$ROOT"/run/netns/*; do [[ -e "$m" ]] && umount -l "$m" 2>/dev/null; done
  if [[ $KEEP == 0 ]]; then rm -rf --one-file-system "$ROOT"; else echo "fresh_check: kept $ROOT"; fi
}
trap cleanup EXIT

start=$SECONDS
echo "== fresh_check: Debian 12 minbase root in $ROOT =="
if [[ ! -x "$ROOT/usr/bin/apt-get" ]]; then
  rm -rf "$ROOT"
  mmdebstrap --variant=minbase --mode=root bookworm "$ROOT" \
    "deb http://deb.debian.org/debian bookworm main" \
    "deb http://deb.debian.org/debian bookworm-updates main" \
    "deb http://deb.debian.org/debian-security bookworm-security main"
fi
root_seconds=$((SECONDS - start))

# CI's layout: a fresh clone of the committed tree, with a read-only copy of shared/ beside it.
rm -rf "$ROOT/work"
mkdir -p "$ROOT/work"
git clone -q "$REPO" "$ROOT/work/main"
if [[ -d "$REPO/../shared" ]]; then
  cp -r "$REPO/../shared" "$ROOT/work/shared"
  chmod -R a-w "$ROOT/work/shared"
fi
# This machine's network settings come along: its resolver, the CA certificates it added (a proxy's,
# say; the set-up's ca-certificates package adds them to the bundle) and npm's global config.
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  mkdir -p "$ROOT/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$ROOT/usr/local/share/ca-certificates/"
fi
[[ -f /etc/npmrc ]] && cp /etc/npmrc "$ROOT/etc/npmrc"
for m in "${MOUNTS[@]}"; do
  mkdir -p "$ROOT/$m"
  mount --bind "/$m" "$ROOT/$m"
done

echo "== fresh_check: ${COMMAND[*]} =="
command_start=$SECONDS
status=0
chroot "$ROOT" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  LANG=C.UTF-8 CI=true bash -c 'cd /work/main && "$@"' fresh_check "${COMMAND[@]}" || status=$?
command_seconds=$((SECONDS - command_start))
echo "fresh_check: root ${root_seconds} s, '${COMMAND[*]}' ${command_seconds} s (exit ${status}), total $((SECONDS - start)) s"
exit "$status"
