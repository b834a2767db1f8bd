#!/usr/bin/env bash
# Prints the Debian packages that provide the shared libraries the given programs load, one a line:
# the runtime stage installs exactly these, so a library added to the build needs no edit here.
# Libraries outside any package (the CUDA toolkit's, when it comes from elsewhere) are left out.
#
#   deploy/docker/runtime_packages.sh PROGRAM...
set -euo pipefail
[[ $# -gt 0 ]] || { echo "usage: $0 PROGRAM..." >&2; exit 2; }
ldd "$@" | awk '/=> \// {print $3}' | sort -u | while read -r library; do
  # dpkg knows the path the package installed, which may be the unresolved (/lib) or resolved one.
  dpkg-query -S "$library" 2>/dev/null || dpkg-query -S "$(readlink -f "$library")" 2>/dev/null || true
done | cut -d: -f1 | sort -u
