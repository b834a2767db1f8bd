#!/usr/bin/env bash
# README command (2): set up a fresh Debian 12 machine and run the whole test suite.
#   1. the unit tests built with AddressSanitizer + UndefinedBehaviorSanitizer (clang-16),
#   2. every test (unit, integration) of the release build; its ctest summary is the last line.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"

TPSERVE_CMAKE_ARGS="-DTPSERVE_WERROR=ON ${TPSERVE_CMAKE_ARGS:-}" scripts/setup.sh --sanitizers

echo "== unit tests under ASan + UBSan (clang-16) =="
CC=clang-16 CXX=clang++-16 cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTPSERVE_SANITIZE=address,undefined -DTPSERVE_CUDA=OFF -DTPSERVE_GRPC=OFF -DTPSERVE_MPI=OFF \
  -DTPSERVE_WERROR=ON
cmake --build build-asan
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan -L unit --output-on-failure -j2

echo "== all tests (release build) =="
ctest --test-dir build --output-on-failure -j2
