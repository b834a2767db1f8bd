#!/usr/bin/env bash
# A CPU hardware profile for the planner, calibrated on this machine: bench-decode at TP=1
# (decode at batch 1, 2 and 8, context 64; prefill steps of 32 to 512 tokens) and bench-comm
# all_reduce / all_gather at 2 ranks, fitted by `plan calibrate`. Used by plan_check.sh and
# simulate_check.sh.
#
#   scripts/calibrate_cpu_profile.sh TPSERVE MODEL OUT_DIR
#       writes OUT_DIR/cpu.json (the profile) and the measurements it was fitted on
set -euo pipefail
TPSERVE="${1:?calibrate_cpu_profile: needs the tpserve binary}"
MODEL="${2:?calibrate_cpu_profile: needs a model}"
OUT="${3:?calibrate_cpu_profile: needs an output directory}"
"$TPSERVE" bench-decode --model "$MODEL" --load-format dummy --device cpu --tp 1 --batch 1,2,8 --context 64 \
  --steps 32 --prefill 32,64,128,256,512 --json >"$OUT/calibration.json" 2>/dev/null
"$TPSERVE" bench-comm --collective all_reduce --ranks 2 -b 1K -e 4M -f 2 -n 50 --json >"$OUT/all_reduce.json"
"$TPSERVE" bench-comm --collective all_gather --ranks 2 -b 64K -e 64M -f 4 -n 10 --json >"$OUT/all_gather.json"
"$TPSERVE" plan calibrate --bench-decode "$OUT/calibration.json" --bench-comm "$OUT/all_reduce.json" \
  --bench-comm "$OUT/all_gather.json" --out "$OUT/cpu.json" >&2
