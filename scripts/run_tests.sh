#!/usr/bin/env bash
# README command (2): set up a fresh Debian 12 machine and run the whole test suite, in stages.
# Each test runs in the build where it finds the most, a few in both (tests/CMakeLists.txt says
# which and why; the ctest label is the stage), and each stage builds only what it runs:
#   asan     the tests labelled asan, built with AddressSanitizer + UndefinedBehaviorSanitizer
#            (clang-16, gRPC on, no CUDA module): the parsers, tokenizer, templates, comm,
#            scheduler, engine, the server and its clients; then every libFuzzer target for
#            TPSERVE_FUZZ_SECONDS each (label fuzz; 5 s here: the seeds and regressions run in
#            full, the search is short; set TPSERVE_FUZZ_SECONDS=300 for a real fuzzing run);
#   tsan     the comm, engine, scheduler and engine-loop tests under ThreadSanitizer (clang-16,
#            gRPC and Gloo off: Debian's builds of them are not instrumented);
#   release  the tests labelled release, in the build users run (gcc, CUDA module, MPI): the real
#            binary end to end (CLI, multi-process, soak, the npm client, the jinja2 differential),
#            the kernels and engine numerics, deploy/'s checks; the `slow` label only with
#            TPSERVE_SLOW=1. It also builds every benchmark program, and fails if any test has no
#            stage. Its ctest summary is the last line printed.
#   scripts/run_tests.sh [STAGE...]     (default: asan tsan release)
# To run every test in the release build instead (no clang needed): cmake --build build && ctest --test-dir build.
# Each stage checks that it ran at least the number of tests it expects, so a stage that silently
# ran nothing fails, and prints its ten slowest tests. At the end: each stage's wall time (build
# and tests) and test count, then the last ctest summary line again, so that it stays the last
# line printed.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
STAGES=("$@")
[[ ${#STAGES[@]} -eq 0 ]] && STAGES=(asan tsan release)

# Packages and assets only; each stage configures and builds its own tree.
scripts/setup.sh --sanitizers --no-build

SUMMARY=()        # one line per stage: name, seconds, tests
LAST_CTEST_LINE=""
STAGE_TESTS=0

# ctest with the given arguments; fails unless it ran at least MIN tests (and all passed). Prints
# the ten slowest tests of the run.
run_ctest() {
  local min="$1"; shift
  local log
  log="$(mktemp)"
  local status=0
  ctest "$@" 2>&1 | tee "$log" || status=$?
  local ran
  ran="$(sed -n 's/.*tests passed, [0-9]* tests failed out of \([0-9]*\).*/\1/p' "$log" | tail -1)"
  LAST_CTEST_LINE="$(grep -E 'tests passed, [0-9]+ tests failed out of' "$log" | tail -1)"
  echo "-- the ten slowest:"
  # awk takes the first ten itself: `head` would close the pipe early, and with pipefail the
  # SIGPIPE that sort then gets (exit 141) failed a green stage.
  sed -nE 's/.*Test +#[0-9]+: ([^ ]+) .* ([0-9.]+) sec$/\2 \1/p' "$log" | sort -rn |
    awk 'NR <= 10 {printf "   %8.2f s  %s\n", $1, $2}'
  rm -f "$log"
  if [[ $status -ne 0 ]]; then return "$status"; fi
  if [[ -z "$ran" || "$ran" -lt "$min" ]]; then
    echo "run_tests: expected at least $min tests, ran ${ran:-none}" >&2
    return 1
  fi
  STAGE_TESTS=$((STAGE_TESTS + ran))
}

# Fails when a test of the build tree DIR carries no stage label (it would run in no stage).
check_every_test_has_a_stage() {
  local orphans
  orphans="$(ctest --test-dir "$1" -N -LE 'asan|release|fuzz' -E _NOT_BUILT | sed -n 's/^ *Test *#[0-9]*: //p')"
  if [[ -n "$orphans" ]]; then
    echo "run_tests: these tests are in no stage (tests/CMakeLists.txt: STAGES / tpserve_test_stages):" >&2
    echo "$orphans" >&2
    return 1
  fi
}

sanitizer_build() {  # DIR SANITIZERS EXTRA-CMAKE-ARGS...
  local dir="$1" sanitizers="$2"; shift 2
  # Line tables are all a sanitizer's stack trace needs; full debug info would take gigabytes.
  CC=clang-16 CXX=clang++-16 cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only -DNDEBUG" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only -DNDEBUG" \
    -DTPSERVE_SANITIZE="$sanitizers" -DTPSERVE_CUDA=OFF -DTPSERVE_MPI=OFF -DTPSERVE_WERROR=ON \
    -DTPSERVE_BENCHMARK_PROGRAMS=OFF "$@"
}

for stage in "${STAGES[@]}"; do
  STAGE_START=$SECONDS
  STAGE_TESTS=0
  case "$stage" in
    asan)
      echo "== the asan tests under ASan + UBSan (clang-16), then the fuzz targets =="
      sanitizer_build build-asan address,undefined -DTPSERVE_GRPC=ON -DTPSERVE_FUZZ=ON \
        -DTPSERVE_FUZZ_SECONDS="${TPSERVE_FUZZ_SECONDS:-5}"
      cmake --build build-asan --target stage_asan
      check_every_test_has_a_stage build-asan
      # gRPC keeps process-lifetime singletons; no leak is reported from our code (suppressions:
      # scripts/lsan.supp names each one).
      export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1
      export LSAN_OPTIONS="suppressions=$REPO/scripts/lsan.supp:print_suppressions=0"
      run_ctest 300 --test-dir build-asan -L asan -LE "slow|fuzz" -E _NOT_BUILT --output-on-failure -j2
      run_ctest 10 --test-dir build-asan -L fuzz --output-on-failure -j2
      unset ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS
      ;;
    tsan)
      echo "== comm, engine, scheduler and engine-loop tests under ThreadSanitizer (clang-16) =="
      sanitizer_build build-tsan thread -DTPSERVE_GRPC=OFF -DCMAKE_DISABLE_FIND_PACKAGE_Gloo=ON
      cmake --build build-tsan --target comm_test decoder_test scheduler_test
      # Only those three test programs are built here; the others' placeholders are left out.
      TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1" \
        run_ctest 60 --test-dir build-tsan -L unit -E "_NOT_BUILT" --output-on-failure -j2
      ;;
    release)
      echo "== the release tests, in the build users run =="
      TPSERVE_CMAKE_ARGS="-DTPSERVE_WERROR=ON ${TPSERVE_CMAKE_ARGS:-}" scripts/setup.sh --target stage_release
      check_every_test_has_a_stage build
      not_slow=(-LE slow)
      [[ "${TPSERVE_SLOW:-0}" == 1 ]] && not_slow=()
      run_ctest 150 --test-dir build -L release "${not_slow[@]}" -E _NOT_BUILT --output-on-failure -j2
      ;;
    *) echo "run_tests: unknown stage '$stage' (asan, tsan, release)" >&2; exit 2 ;;
  esac
  SUMMARY+=("$(printf '%-8s %6d s  %4d tests' "$stage" $((SECONDS - STAGE_START)) "$STAGE_TESTS")")
done

echo "== stages (wall time, build included; $(nproc) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)) =="
printf '   %s\n' "${SUMMARY[@]}"
printf '   %-8s %6d s\n' total "$SECONDS"
# ctest's summary stays the last line.
[[ -n "$LAST_CTEST_LINE" ]] && echo "$LAST_CTEST_LINE"
