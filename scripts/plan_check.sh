#!/usr/bin/env bash
# The planner checked against this machine (a benchmark, not a pass/fail test): calibrate a CPU
# profile on some configurations of the CPU backend, predict others it has not seen, measure
# those with bench-decode in the same run, and print each prediction's error.
#
#   scripts/plan_check.sh [BUILD_DIR] [MODEL]      (defaults: build, small)
#
# Calibration (scripts/calibrate_cpu_profile.sh): bench-decode TP=1 at batch 1, 2 and 8, context
# 64, and prefill steps of 32-512 tokens; bench-comm all_reduce and all_gather at 2 ranks.
# Predicted and measured: TP=2 and batch 4 (unseen), context 256 (unseen).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$REPO/build}"
MODEL="${2:-small}"
TPSERVE="$BUILD/server/tpserve"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
STEPS=32

echo "plan_check: $(date -u +%Y-%m-%dT%H:%MZ), model $MODEL (dummy weights), $(nproc) cores" >&2
"$REPO/scripts/calibrate_cpu_profile.sh" "$TPSERVE" "$MODEL" "$WORK"

POINTS=(--tp "1,2" --batch "1,4" --context "64,256")
"$TPSERVE" plan --model "$MODEL" --hardware "$WORK/cpu.json" "${POINTS[@]}" --json >"$WORK/predicted.json"
"$TPSERVE" bench-decode --model "$MODEL" --load-format dummy --device cpu "${POINTS[@]}" --steps "$STEPS" \
  --json >"$WORK/measured.json" 2>/dev/null

python3 - "$WORK/predicted.json" "$WORK/measured.json" <<'PY'
import json, sys
predicted = {(r["tp"], r["batch"], r["context"]): r for r in json.load(open(sys.argv[1]))["rows"]}
measured = json.load(open(sys.argv[2]))["rows"]
calibrated = {(1, 1, 64), (1, 8, 64)}
print(f"{'tp':>3} {'batch':>5} {'context':>7} {'seen':>5} {'predicted_ms':>12} {'measured_ms':>11} {'error':>7}"
      f"  {'pred comm':>9} {'meas comm':>9}")
errors = []
for m in measured:
    key = (m["tp"], m["batch"], m["context"])
    p = predicted[key]
    error = p["step_ms"] / m["step_ms"] - 1
    seen = key in calibrated
    if not seen:
        errors.append(abs(error))
    pred_comm = p["parts_ms"]["allreduce"] + p["parts_ms"]["logits_gather"]
    print(f"{key[0]:>3} {key[1]:>5} {key[2]:>7} {'yes' if seen else 'no':>5} {p['step_ms']:>12.2f} {m['step_ms']:>11.2f}"
          f" {100 * error:>+6.1f}%  {pred_comm:>9.3f} {m['comm_ms']:>9.3f}")
errors.sort()
print(f"unseen points: {len(errors)}, median |error| {100 * errors[len(errors) // 2]:.1f}%, "
      f"worst {100 * errors[-1]:.1f}% (goal: every point within 15%)")
PY
