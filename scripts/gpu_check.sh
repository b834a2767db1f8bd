#!/usr/bin/env bash
# The device check: one command for a bare GPU machine (nvcc, CMake, ninja, PyTorch; none of our
# Debian packages; no network), run from the repository root with gpu-bundle/ beside it
# (scripts/gpu_bundle.sh makes it here). Every stage runs under `timeout` and appends one JSON line
# to OUT_DIR/results.jsonl, whatever happens; the whole check fits in 5 minutes of device time.
#
#   scripts/gpu_check.sh OUT_DIR
#
# Stages: environment (GPU, driver, nvcc, the NCCL that PyTorch ships), the gpu-labelled tests
# (the CUDA ops against the CPU ops), `tpserve devices` through the CUDA module, and
# `generate --device cuda` on a dummy model (until the CUDA decoder lands this records its clear
# refusal). Later issues add the NCCL and decode benchmarks here.
set -uo pipefail
OUT="${1:?usage: scripts/gpu_check.sh OUT_DIR}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUNDLE="${GPU_BUNDLE:-$REPO/gpu-bundle}"
mkdir -p "$OUT"
RESULTS="$OUT/results.jsonl"
export LD_LIBRARY_PATH="$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TPSERVE_CUDA_MODULE="$BUNDLE/libtpserve_cuda.so"
export TPSERVE_ASSETS="$BUNDLE/assets"

# stage NAME SECONDS COMMAND...: runs COMMAND under timeout, keeps its output in OUT/NAME.log and
# appends {"stage", "rc", "seconds", "tail"} to results.jsonl.
stage() {
  local name="$1" limit="$2"
  shift 2
  local start end rc
  start=$(date +%s.%N)
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  end=$(date +%s.%N)
  python3 - "$name" "$rc" "$start" "$end" "$OUT/$name.log" >>"$RESULTS" <<'PY'
import json, sys
name, rc, start, end, log = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
with open(log, errors="replace") as f:
    tail = f.read()[-4000:]
print(json.dumps({"stage": name, "rc": rc, "timed_out": rc in (124, 137), "seconds": round(end - start, 3), "tail": tail}))
PY
  echo "gpu_check: $name rc=$rc"
}

environment() {
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,pci.bus_id --format=csv,noheader || echo "no nvidia-smi"
  nvidia-smi topo -m 2>/dev/null || true
  nvcc --version 2>/dev/null | tail -1 || echo "no nvcc"
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())))' 2>/dev/null ||
    echo "no PyTorch NCCL"
  lscpu | grep -m1 'Model name' || true
}

: >"$RESULTS"
stage environment 60 bash -c "$(declare -f environment); environment"
stage gpu_tests 120 "$BUNDLE/cuda_ops_test" --gtest_output="json:$OUT/gpu_tests.json"
stage devices 60 "$BUNDLE/tpserve" devices
stage generate_cuda 120 "$BUNDLE/tpserve" generate --model tiny --load-format dummy --prompt "Hello" \
  --max-tokens 8 --device cuda --json
echo "gpu_check: results in $RESULTS"
