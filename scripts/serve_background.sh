# shellcheck shell=bash
# Sourced by the benchmark scripts that measure a real server (simulate_check.sh,
# benchmarks/prefix_cache.sh): `serve` in the background on loopback, stopped on exit.
#
#   start_server LOG TPSERVE_BINARY SERVE_FLAGS...   starts it, waits until ready; sets SERVER (pid)
#                                                   and TARGET (its gRPC host:port); exits on failure
#   stop_server                                     SIGTERM, then waits (a no-op when none runs)
SERVER=""
TARGET=""

start_server() {
  local log="$1" binary="$2"
  shift 2
  "$binary" serve --port 0 --metrics-port 0 "$@" 2>"$log" &
  SERVER=$!
  for _ in $(seq 1 600); do grep -q "tpserve ready:" "$log" && break; sleep 0.1; done
  TARGET="$(sed -n 's/.*tpserve ready: grpc \([0-9.:]*\) .*/\1/p' "$log")"
  [[ -n "$TARGET" ]] || { cat "$log" >&2; exit 1; }
}

stop_server() {
  if [[ -n "$SERVER" ]]; then
    kill -TERM "$SERVER" 2>/dev/null || true
    wait "$SERVER" 2>/dev/null || true
    SERVER=""
  fi
}
