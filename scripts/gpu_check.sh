#!/usr/bin/env bash
# The device check: one command for a bare GPU machine (nvcc, CMake, ninja, PyTorch; none of our
# Debian packages; no network), run from the repository root with gpu-bundle/ beside it
# (scripts/gpu_bundle.sh makes it here). Every stage runs under `timeout` and appends one JSON line
# to OUT_DIR/results.jsonl, whatever happens. Typical total about 4 minutes (the 8B dummy weights
# are made on the host); the limits add up to more so that a slow stage still reports.
#
#   scripts/gpu_check.sh OUT_DIR
#
# Stages: environment (GPU, driver, nvcc, where cuBLASLt and NCCL were found); the gpu tests (the
# CUDA kernels against the CPU ops; the CUDA engine against the CPU engine: logits, greedy
# continuations, TP=2/4 on the one GPU, batch invariance); `tpserve devices`; generate on a dummy
# tiny model at TP=1 and TP=2 sharing the GPU; bench-comm over NCCL (1 rank) and the rank-order
# communicator and the one-shot AllReduce at 2/4/8 ranks sharing the GPU; bench-decode on the
# small model (TP=1 eager and from CUDA graphs, and TP=2 sharing the GPU over rank-order and over
# one-shot + fused norm) and on llama-3-8b dummy weights (TP=1, batch 1/8/32), next to the GPU's read
# bandwidth measured in the same run; bench_cuda_gemm (the batch-invariant GEMM algorithms against
# cuBLASLt's per-token-count picks, llama-3-8b shapes); bench_cuda_kernels (each norm,
# element-wise and attention kernel against its memory floor, llama-3-8b shapes).
set -uo pipefail
OUT="${1:?usage: scripts/gpu_check.sh OUT_DIR}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUNDLE="${GPU_BUNDLE:-$REPO/gpu-bundle}"
mkdir -p "$OUT"
RESULTS="$OUT/results.jsonl"
# cuBLASLt 13 and NCCL 2 are not carried (hundreds of MB): the device's toolkit or PyTorch's
# wheels (nvidia/*/lib) provide them.
LIB_DIRS="$BUNDLE/lib"
find_library_dir() {
  local name="$1" dir
  for dir in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/lib64 \
    $(python3 -c 'import glob, site; print(" ".join(d for p in site.getsitepackages() for d in glob.glob(p + "/nvidia/*/lib")))' 2>/dev/null) \
    /usr/lib/x86_64-linux-gnu; do
    if [[ -e "$dir/$name" ]]; then
      echo "$dir"
      return 0
    fi
  done
  return 1
}
FOUND_LIBS=""
for lib in libcublasLt.so.13 libnccl.so.2; do
  if dir=$(find_library_dir "$lib"); then
    LIB_DIRS="$LIB_DIRS:$dir"
    FOUND_LIBS="$FOUND_LIBS $lib=$dir"
  else
    FOUND_LIBS="$FOUND_LIBS $lib=MISSING"
  fi
done
export LD_LIBRARY_PATH="$LIB_DIRS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export FOUND_LIBS BUNDLE  # read by the environment stage's shell
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
  echo "libraries:$FOUND_LIBS"
  ldd "$BUNDLE/libtpserve_cuda.so" | grep -E 'not found|cublasLt|nccl' || true
}

: >"$RESULTS"
stage environment 60 bash -c "$(declare -f environment); environment"
stage gpu_kernel_tests 120 "$BUNDLE/cuda_ops_test" --gtest_output="json:$OUT/gpu_kernel_tests.json"
stage gpu_engine_tests 240 "$BUNDLE/cuda_engine_test" --gtest_output="json:$OUT/gpu_engine_tests.json"
stage devices 60 "$BUNDLE/tpserve" devices
stage generate_cuda 120 "$BUNDLE/tpserve" generate --model tiny --load-format dummy --prompt "Hello" \
  --max-tokens 16 --device cuda --json --profile
stage generate_cuda_tp2_shared 120 "$BUNDLE/tpserve" generate --model tiny --load-format dummy --prompt "Hello" \
  --max-tokens 16 --device cuda --tp 2 --share-gpu --json
stage bench_cuda_gemm 90 "$BUNDLE/bench_cuda_gemm" --tokens 1,8,32
stage bench_cuda_kernels 60 "$BUNDLE/bench_cuda_kernels" --tokens 1,8,32 --context 512
stage bench_comm_nccl 90 "$BUNDLE/tpserve" bench-comm --backend nccl -g 1 -b 8 -e 64M -f 4 -n 50 -w 10 --json
for ranks in 2 4 8; do
  stage "bench_comm_rank_order_$ranks" 90 "$BUNDLE/tpserve" bench-comm --backend rank-order -g "$ranks" \
    -b 1K -e 16M -f 4 -n 50 -w 10 --json
  stage "bench_comm_oneshot_$ranks" 90 "$BUNDLE/tpserve" bench-comm --backend oneshot -g "$ranks" \
    -b 1K -e 16M -f 4 -n 50 -w 10 --json
done
stage bench_decode_small 180 "$BUNDLE/tpserve" bench-decode --model small --load-format dummy --device cuda \
  --tp 1 --batch 1,8,32 --context 128 --steps 32 --json
stage bench_decode_small_graphs 180 "$BUNDLE/tpserve" bench-decode --model small --load-format dummy --device cuda \
  --tp 1 --batch 1,8,32 --context 128 --steps 32 --cuda-graphs on --json
stage bench_decode_small_tp2_shared 180 "$BUNDLE/tpserve" bench-decode --model small --load-format dummy \
  --device cuda --share-gpu --tp 2 --batch 1,32 --context 128 --steps 32 --json
stage bench_decode_small_tp2_shared_oneshot 180 "$BUNDLE/tpserve" bench-decode --model small --load-format dummy \
  --device cuda --share-gpu --tp 2 --allreduce oneshot --batch 1,32 --context 128 --steps 32 --json
stage bench_decode_llama3_8b 420 "$BUNDLE/tpserve" bench-decode --model llama-3-8b --load-format dummy \
  --device cuda --tp 1 --batch 1,8,32 --context 512 --steps 32 --json
echo "gpu_check: results in $RESULTS"
