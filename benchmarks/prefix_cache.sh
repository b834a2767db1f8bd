#!/usr/bin/env bash
# Automatic prefix caching measured on the default model (`small`, dummy weights, CPU), the cache
# on against off in the same run (a benchmark, not a test; issue 32):
#   1. TTFT of short user turns after a 2,000-token shared system prompt (loadgen --concurrency 1,
#      one warm-up request that fills the cache); goal: with the cache <= 15% of without.
#   2. Output throughput of a shared-prefix workload (4 groups of 512-token prefixes, 4 clients).
#   3. The cost on a workload with no sharing (random prompts): throughput with the cache against
#      without, alternating on/off runs, medians; goal: within 2%.
#
#   benchmarks/prefix_cache.sh [BUILD_DIR] [ROUNDS]      (defaults: build, 3)
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$REPO/build}"
ROUNDS="${2:-3}"
TPSERVE="$BUILD/server/tpserve"
WORK="$(mktemp -d)"
# shellcheck source=scripts/serve_background.sh
source "$REPO/scripts/serve_background.sh"
trap 'stop_server; rm -rf "$WORK"' EXIT

# loadgen against a fresh server with --prefix-caching $1, the rest of the arguments loadgen's.
measure() {
  local caching="$1" out="$2"
  shift 2
  start_server "$WORK/serve.log" "$TPSERVE" --model small --load-format dummy --device cpu --prefix-caching "$caching"
  "$TPSERVE" loadgen --server "$TARGET" "$@" --json >"$out" 2>/dev/null
  stop_server
}

echo "prefix_cache: $(date -u +%Y-%m-%dT%H:%MZ), small model (dummy weights), $(nproc) cores," \
  "$(lscpu | sed -n 's/^Model name: *//p')" >&2
SYSTEM=(--concurrency 1 --warmup 1 --requests 4 --shared-prefix-tokens 2000 --prefix-groups 1 --prompt-tokens 16
  --output-tokens 4 --seed 3)
SHARED=(--concurrency 4 --warmup 4 --requests 24 --shared-prefix-tokens 512 --prefix-groups 4
  --prompt-tokens 32-64 --output-tokens 32 --seed 5)
UNSHARED=(--concurrency 4 --requests 24 --prompt-tokens 128-256 --output-tokens 32 --seed 9)
for caching in on off; do
  measure "$caching" "$WORK/system_$caching.json" "${SYSTEM[@]}"
  measure "$caching" "$WORK/shared_$caching.json" "${SHARED[@]}"
done
for round in $(seq 1 "$ROUNDS"); do
  for caching in on off; do measure "$caching" "$WORK/unshared_${caching}_$round.json" "${UNSHARED[@]}"; done
done

python3 - "$WORK" "$ROUNDS" <<'PY'
import json, os, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
load = lambda name: json.load(open(os.path.join(work, name)))
def run(doc):
    return doc["runs"][0] if "runs" in doc else doc
on, off = run(load("system_on.json")), run(load("system_off.json"))
ratio = on["ttft_ms"]["p50"] / off["ttft_ms"]["p50"]
print(f"1. 2,000-token shared system prompt, 16-token turns: TTFT p50 {on['ttft_ms']['p50']:.1f} ms with the cache, "
      f"{off['ttft_ms']['p50']:.1f} ms without: {100 * ratio:.1f}% (goal <= 15%)")
on, off = run(load("shared_on.json")), run(load("shared_off.json"))
print(f"2. shared-prefix workload (4 groups x 512 tokens + 32-64 own, 4 clients): "
      f"{on['output_token_throughput']:.1f} tok/s with the cache, {off['output_token_throughput']:.1f} without "
      f"({on['output_token_throughput'] / off['output_token_throughput']:.2f}x); TTFT p50 {on['ttft_ms']['p50']:.1f} / "
      f"{off['ttft_ms']['p50']:.1f} ms")
with_cache = [run(load(f"unshared_on_{r}.json"))["output_token_throughput"] for r in range(1, rounds + 1)]
without = [run(load(f"unshared_off_{r}.json"))["output_token_throughput"] for r in range(1, rounds + 1)]
cost = statistics.median(with_cache) / statistics.median(without) - 1
print(f"3. no sharing (random 128-256-token prompts, 4 clients), {rounds} alternating rounds: median "
      f"{statistics.median(with_cache):.1f} tok/s with the cache, {statistics.median(without):.1f} without: "
      f"{100 * cost:+.1f}% (goal: within 2%); runs on {[round(x, 1) for x in with_cache]}, "
      f"off {[round(x, 1) for x in without]}")
PY
