#!/usr/bin/env bash
# `plan simulate` checked against the real server on this machine (a benchmark, not a pass/fail
# test; issue 31): calibrate a CPU profile on bench-decode and bench-comm, then for TP=1 and TP=2
# run loadgen against `serve` at open-loop rates from well below to above saturation, simulate the
# same flags, and print each figure's error.
#
#   scripts/simulate_check.sh [BUILD_DIR] [MODEL] [RATES] [REQUESTS]
#       (defaults: build, small, 1,2,4,8,16, 40)
#
# Goals (issue 31): median |error| <= 15% over TTFT p50 and TPOT p50 below saturation and
# throughput at every rate; the saturation rate (the highest whose output throughput is >= 95% of
# the offered load) predicted within one step of the rates tried.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$REPO/build}"
MODEL="${2:-small}"
RATES="${3:-1,2,4,8,16}"
REQUESTS="${4:-40}"
TPSERVE="$BUILD/server/tpserve"
WORK="$(mktemp -d)"
# shellcheck source=scripts/serve_background.sh
source "$REPO/scripts/serve_background.sh"
trap 'stop_server; rm -rf "$WORK"' EXIT
# The workload and the scheduler, the same flags for loadgen / serve and for the simulation.
WORKLOAD=(--rate "$RATES" --requests "$REQUESTS" --prompt-tokens 32-96 --output-tokens 32 --seed 7)
SCHEDULER=(--max-batch-size 8 --max-batched-tokens 512 --max-wait-us 1000 --max-queue 256)

echo "simulate_check: $(date -u +%Y-%m-%dT%H:%MZ), model $MODEL (dummy weights), $(nproc) cores," \
  "$(lscpu | sed -n 's/^Model name: *//p')" >&2
"$REPO/scripts/calibrate_cpu_profile.sh" "$TPSERVE" "$MODEL" "$WORK"

for tp in 1 2; do
  start_server "$WORK/serve$tp.log" "$TPSERVE" --model "$MODEL" --load-format dummy --device cpu --tp "$tp" \
    "${SCHEDULER[@]}"
  echo "simulate_check: TP=$tp, loadgen against $TARGET" >&2
  "$TPSERVE" loadgen --server "$TARGET" "${WORKLOAD[@]}" --json >"$WORK/measured$tp.json" 2>/dev/null
  # The server's KV cache, so that the simulation has the same one.
  blocks="$(sed -n 's/.* \([0-9]*\) KV blocks of .*/\1/p' "$WORK/serve$tp.log" | head -1)"
  stop_server
  kv=()
  [[ -n "$blocks" ]] && kv=(--kv-cache-blocks "$blocks")
  "$TPSERVE" plan simulate --model "$MODEL" --hardware "$WORK/cpu.json" --tp "$tp" "${WORKLOAD[@]}" \
    "${SCHEDULER[@]}" "${kv[@]}" --json >"$WORK/simulated$tp.json"
done

python3 - "$WORK" "$RATES" <<'PY'
import json, os, sys
work, rates = sys.argv[1], [float(r) for r in sys.argv[2].split(",")]

def saturation(runs):
    """The highest rate whose output throughput is >= 95% of the offered load (0: none)."""
    best = 0
    for run in runs:
        offered = run["rate"] * run["output_tokens"] / max(1, run["completed"]) if run["completed"] else 0
        if run["completed"] == run["sent"] and run["output_token_throughput"] >= 0.95 * offered:
            best = max(best, run["rate"])
    return best

errors = []
print(f"{'tp':>3} {'rate':>6}  {'TTFT p50 ms (sim/real)':>24}  {'TPOT p50 ms (sim/real)':>24}  {'tok/s (sim/real)':>20}")
for tp in (1, 2):
    measured = json.load(open(os.path.join(work, f"measured{tp}.json")))["runs"]
    simulated = [r for r in json.load(open(os.path.join(work, f"simulated{tp}.json")))["runs"]]
    real_sat, sim_sat = saturation(measured), saturation(simulated)
    for m, s in zip(measured, simulated):
        below = m["rate"] <= real_sat
        row = f"{tp:>3} {m['rate']:>6g}"
        for key in ("ttft_ms", "tpot_ms"):
            e = s[key]["p50"] / m[key]["p50"] - 1 if m[key]["p50"] > 0 else float("nan")
            if below:
                errors.append(abs(e))
            row += f"  {s[key]['p50']:>8.1f} /{m[key]['p50']:>8.1f} {100 * e:>+6.1f}%"
        e = s["output_token_throughput"] / m["output_token_throughput"] - 1
        errors.append(abs(e))
        row += f"  {s['output_token_throughput']:>7.1f} /{m['output_token_throughput']:>7.1f} {100 * e:>+5.1f}%"
        print(row + ("" if below else "   (above saturation)"))
    steps = sorted(rates).index(sim_sat) - sorted(rates).index(real_sat) if sim_sat in rates and real_sat in rates else None
    print(f"TP={tp}: saturation rate measured {real_sat:g} req/s, simulated {sim_sat:g} req/s "
          f"({'within one step' if steps is not None and abs(steps) <= 1 else 'MISSED'})")
errors.sort()
print(f"median |error| {100 * errors[len(errors) // 2]:.1f}% over {len(errors)} figures, worst {100 * errors[-1]:.1f}% "
      f"(goal: median <= 15%)")
PY
