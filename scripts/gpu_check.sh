#!/usr/bin/env bash
# The device check: one command for a bare GPU machine (nvcc, CMake, ninja, PyTorch; none of our
# Debian packages; no network), run from the repository root with gpu-bundle/ beside it.
#
# How to run it (a session whose task is lent a GPU machine; 15 minutes of device time in all,
# the machine's start included, so the whole script is held to GPU_CHECK_BUDGET_S = 360 s and a
# full rerun still fits):
#   1. here, after a CUDA build:   scripts/gpu_bundle.sh            (writes gpu-bundle/)
#   2. the device tool `run` with  carry: ["gpu-bundle"], timeout_s: 400,
#                                  command: scripts/gpu_check.sh "$OUT"
#   Here, without a GPU: scripts/gpu_check.sh --plan OUT_DIR prints the stage table as JSON lines
#   (what ctest's gpu_check.dry_run checks: stage count, sum of limits, files to OUT, and that every
#   program and flag a stage names exists in the bundle), and scripts/gpu_check.sh OUT_DIR runs it.
#
# What comes back: OUT_DIR holds results.jsonl and the gtest JSON files, nothing else (the device
# returns at most 8 files): 1 + 5 = 6 files. results.jsonl gets one line per stage as soon as the
# stage ends: {"stage", "index", "limit_s", "rc", "timed_out", "skipped", "seconds", "commands":
# [{"command", "rc", "timed_out", "seconds"}], "log_bytes", "head" (the log's first 2 KB when the
# tail does not hold it all), "tail" (the log's last 16 KB)}. A stage's rc is its first failing
# command's. The whole logs stay on the device in GPU_CHECK_LOGS (default ${TMPDIR:-/tmp}/gpu-check-logs).
#
# The stages, in the order a first run must learn things, each under its own limit (seconds):
#    1 environment              20  GPU, driver, nvcc, PyTorch/NCCL, where cuBLASLt 13 and NCCL 2
#                                   were found, compute-sanitizer, unresolved libraries,
#                                   `tpserve devices`; rc 1 and a line "MISSING: ..." when nvidia-smi,
#                                   a GPU, nvcc, cuBLASLt, NCCL or a library of the module is missing
#    2 gpu_kernel_tests         25  cuda_ops_test (the CUDA kernels against the CPU ops)
#    3 gpu_engine_tests         60  cuda_engine_test (the CUDA engine against the CPU engine: logits,
#                                   greedy continuations, TP=2/4 sharing the GPU, one-shot + fused norm,
#                                   graph replay, batch invariance), then cuda_engine_limits_test (step
#                                   buffers under growing steps over one-shot, the step limits, every
#                                   rank on the graph, a failed rank releasing its peer: issue 25)
#    4 generate_cuda            25  generate on the dummy tiny model, TP=1 (--profile) and TP=2 sharing
#    5 bench_comm               35  bench-comm: rank-order and one-shot AllReduce at 2 and 8 ranks
#                                   sharing the GPU (1 KiB-16 MiB); last (never run: if registering
#                                   a window hangs, only it is lost), NCCL at 1 rank as a sweep
#                                   (NCCL's choice, Ring/LL, Ring/Simple and symmetric windows, each
#                                   a process; eager and --graph 10; whether the symmetric kernels ran)
#    6 bench_decode_small       45  bench-decode, small model: TP=1 eager and --cuda-graphs on; TP=2
#                                   sharing the GPU over rank-order and over --allreduce oneshot
#    7 bench_decode_llama3_8b   65  bench-decode, llama-3-8b shapes, dummy weights, TP=1, batch 1/8/32,
#                                   context 512, next to the GPU read bandwidth of the same run (goals:
#                                   step <= 1.15x the weight-streaming floor; batch 32 >= 10x batch 1)
#    8 bench_cuda_gemm          20  batch-invariant GEMM algorithms vs cuBLASLt's picks (llama-3-8b)
#    9 bench_cuda_kernels       15  norm, element-wise and attention kernels vs their memory floor
#   10 sanitizer_memcheck       25  compute-sanitizer memcheck over the kernel tests without cuBLASLt
#   11 sanitizer_racecheck      25  compute-sanitizer racecheck over the norm and attention tests
#   sum                        360  (typical run, estimated: 2.5-3 minutes; never yet measured)
# The limits live in the `stage` calls at the end of this file, nowhere else. A stage's commands run
# one after another within its limit (each gets what is left of it). Each stage runs under
# min(its limit, what is left of GPU_CHECK_BUDGET_S); a stage that would start with too little
# left is recorded as skipped, not run. The sanitizer stages report (a host that refuses
# compute-sanitizer, or lacks it, gives their rc and tail) and never stop anything.
#
# Dropped or shrunk to fit 360 s (the script's limits used to add up to 2,640 s over 20 stages,
# and it wrote 22 files to OUT): the per-stage .log files (their tails are in results.jsonl);
# bench-comm at 4 ranks (2 and 8 kept), 50/10 iterations per size (now 20/5), NCCL up to 64 MiB
# (now 16 MiB), and one stage per sweep (now one stage); `tpserve devices` as a stage of its own
# (now in environment); llama-3-8b's 32 layers: the host makes dummy weights on one thread at about
# 15-20 ns a parameter (make-model writes small's 174M in 3.0 s on the build machine), so the full
# 8.0B would take 2-2.5 minutes of the budget; LLAMA_LAYERS (8) keeps
# every llama-3-8b shape (hidden 4096, FFN 14336, 32/8 heads, vocabulary 128256) and the ceiling is
# computed from the weights built (2.8B parameters, 4.5 GB read per step).
set -uo pipefail

PLAN=0
if [[ "${1:-}" == "--plan" ]]; then
  PLAN=1
  shift
fi
OUT="${1:?usage: scripts/gpu_check.sh [--plan] OUT_DIR}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUNDLE="${GPU_BUNDLE:-$REPO/gpu-bundle}"
BUDGET_S="${GPU_CHECK_BUDGET_S:-360}"
LOGS="${GPU_CHECK_LOGS:-${TMPDIR:-/tmp}/gpu-check-logs}"
KILL_GRACE_S=5     # timeout -k: a command that ignores SIGTERM is killed this much later
MIN_STAGE_S=3      # a stage with less than this left of the budget is skipped
TAIL_BYTES=16000   # of each stage's log, into results.jsonl
HEAD_BYTES=2000
LLAMA_LAYERS=8     # of llama-3-8b's 32 (see above)
RESULTS="$OUT/results.jsonl"

now_ms() {
  if [[ -n "${EPOCHREALTIME:-}" ]]; then
    local t="${EPOCHREALTIME/[.,]/}"
    echo $((10#$t / 1000))
  else
    date +%s%3N
  fi
}
START_MS=$(now_ms)
DEADLINE_MS=$((START_MS + BUDGET_S * 1000))

# cuBLASLt 13 and NCCL 2 are not carried (hundreds of MB): the device's toolkit or PyTorch's
# wheels (nvidia/*/lib) provide them. Their folders go into LD_LIBRARY_PATH for our programs only;
# python3, nvidia-smi and compute-sanitizer keep the device's own environment.
find_library_dir() {
  local name="$1" dir
  # shellcheck disable=SC2046  # the site-packages folders are one word each
  for dir in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib \
    /usr/local/cuda-*/lib64 \
    $(python3 -c 'import glob, site; print(" ".join(d for p in site.getsitepackages() for d in glob.glob(p + "/nvidia/*/lib")))' 2>/dev/null) \
    /usr/lib/x86_64-linux-gnu; do
    if [[ -e "$dir/$name" ]]; then
      echo "$dir"
      return 0
    fi
  done
  dir=$(ldconfig -p 2>/dev/null | awk -v n="$name" '$1 == n {print $NF; exit}')
  [[ -n "$dir" ]] && { dirname "$dir"; return 0; }
  return 1
}
CUDA_LIBS=""   # cuBLASLt's and NCCL's folders
FOUND_LIBS=""
for lib in libcublasLt.so.13 libnccl.so.2; do
  if dir=$(find_library_dir "$lib"); then
    [[ ":$CUDA_LIBS:" == *":$dir:"* ]] || CUDA_LIBS="${CUDA_LIBS:+$CUDA_LIBS:}$dir"
    FOUND_LIBS="$FOUND_LIBS $lib=$dir"
  else
    FOUND_LIBS="$FOUND_LIBS $lib=MISSING"
  fi
done
OUR_LIBS="$BUNDLE/lib${CUDA_LIBS:+:$CUDA_LIBS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
SANITIZER_LIBS="${CUDA_LIBS}${LD_LIBRARY_PATH:+${CUDA_LIBS:+:}$LD_LIBRARY_PATH}"
# Our programs run through `env`, so that `timeout` can start them and nothing else sees these.
OURS=(env "LD_LIBRARY_PATH=$OUR_LIBS" "TPSERVE_CUDA_MODULE=$BUNDLE/libtpserve_cuda.so" "TPSERVE_ASSETS=$BUNDLE/assets")
SANITIZER=$(command -v compute-sanitizer || true)
for candidate in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
  [[ -z "$SANITIZER" && -x "$candidate" ]] && SANITIZER="$candidate"
done
# Under the sanitizer the test binary finds cuBLASLt on LD_LIBRARY_PATH; the sanitizer is the
# device's own program, so it gets no bundled Debian library.
if [[ -n "$SANITIZER_LIBS" ]]; then
  SANITIZE=(env "LD_LIBRARY_PATH=$SANITIZER_LIBS" "${SANITIZER:-compute-sanitizer}")
else
  SANITIZE=(env -u LD_LIBRARY_PATH "${SANITIZER:-compute-sanitizer}")
fi

# bench-decode --jsonl prints each row on stderr as soon as it is measured, so a stage stopped at its
# limit still returns the rows it measured; a bundle from before --jsonl gets --json alone.
DECODE_JSON=(--json)
if "${OURS[@]}" "$BUNDLE/tpserve" bench-decode --help 2>/dev/null | grep -q -- '--jsonl'; then
  DECODE_JSON=(--json --jsonl)
fi

if ((!PLAN)); then
  mkdir -p "$OUT" || exit 1
  out_real=$(cd "$OUT" && pwd -P)
  mkdir -p "$LOGS" || exit 1
  logs_real=$(cd "$LOGS" && pwd -P)
  if [[ "$logs_real/" == "$out_real/"* ]]; then
    echo "gpu_check: the logs folder $LOGS is inside $OUT (only 8 files come back): set GPU_CHECK_LOGS elsewhere" >&2
    exit 2
  fi
  rm -f "$logs_real"/*.log "$logs_real"/*.cmds
  : >"$RESULTS"
  [[ -d "$BUNDLE" ]] || echo "gpu_check: NO BUNDLE at $BUNDLE (run scripts/gpu_bundle.sh here and carry gpu-bundle): every stage will fail" >&2
  HAVE_PYTHON=1
  command -v python3 >/dev/null || { HAVE_PYTHON=0; echo "gpu_check: no python3: results.jsonl gets no tails" >&2; }
fi

environment() {
  local missing=() line
  date -u +%Y-%m-%dT%H:%M:%SZ
  if command -v nvidia-smi >/dev/null; then
    local smi_rc
    line=$(nvidia-smi --query-gpu=name,driver_version,memory.total,pci.bus_id --format=csv,noheader 2>&1)
    smi_rc=$?
    echo "gpu: $line"
    [[ $smi_rc -eq 0 && -n "$line" && "$line" != *"failed"* && "$line" != *"No devices"* ]] || missing+=(gpu)
    nvidia-smi topo -m 2>/dev/null | head -20
  else
    echo "nvidia-smi: MISSING (not on PATH)"
    missing+=(nvidia-smi)
  fi
  local nvcc
  nvcc=$(command -v nvcc || { [[ -x /usr/local/cuda/bin/nvcc ]] && echo /usr/local/cuda/bin/nvcc; })
  if [[ -n "$nvcc" ]]; then
    echo "nvcc: $nvcc ($("$nvcc" --version 2>&1 | tail -1))"
  else
    echo "nvcc: MISSING (neither on PATH nor /usr/local/cuda/bin)"
    missing+=(nvcc)
  fi
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())), "gpus", torch.cuda.device_count())' 2>&1 | tail -1
  lscpu 2>/dev/null | grep -m1 'Model name'
  echo "cpus: $(nproc), memory: $(free -g 2>/dev/null | awk '/^Mem:/ {print $2 " GiB"}')"
  echo "libraries:$FOUND_LIBS"
  [[ "$FOUND_LIBS" == *libcublasLt.so.13=MISSING* ]] && missing+=(libcublasLt.so.13)
  [[ "$FOUND_LIBS" == *libnccl.so.2=MISSING* ]] && missing+=(libnccl.so.2)
  echo "compute-sanitizer: ${SANITIZER:-absent (its stages will say so)}"
  local unresolved
  unresolved=$(env LD_LIBRARY_PATH="$OUR_LIBS" ldd "$BUNDLE/libtpserve_cuda.so" "$BUNDLE/tpserve" 2>&1 | grep -E 'not found|No such file')
  if [[ -n "$unresolved" ]]; then
    echo "unresolved: $unresolved"
    missing+=(module-libraries)
  fi
  echo "$ tpserve devices"
  env LD_LIBRARY_PATH="$OUR_LIBS" TPSERVE_CUDA_MODULE="$BUNDLE/libtpserve_cuda.so" "$BUNDLE/tpserve" devices 2>&1 ||
    echo "tpserve devices: rc=$?"
  if ((${#missing[@]})); then
    echo "MISSING: ${missing[*]}"
    return 1
  fi
  echo "environment: complete"
}
export BUNDLE FOUND_LIBS OUR_LIBS SANITIZER  # read by the environment stage's shell

# The record of one stage, from the per-command lines in $LOGS/NAME.cmds and the log.
record() {
  local name="$1" index="$2" limit="$3" rc="$4" seconds="$5" skipped="$6" log="$LOGS/$1.log"
  if ((!HAVE_PYTHON)); then
    local skipped_json=null
    [[ -n "$skipped" ]] && skipped_json="\"$skipped\""
    printf '{"stage": "%s", "index": %d, "limit_s": %d, "rc": %s, "skipped": %s, "seconds": %s, "tail": null}\n' \
      "$name" "$index" "$limit" "${rc:-null}" "$skipped_json" "$seconds" >>"$RESULTS"
    return
  fi
  python3 - "$name" "$index" "$limit" "$rc" "$seconds" "$skipped" "$log" "$LOGS/$name.cmds" "$TAIL_BYTES" "$HEAD_BYTES" \
    >>"$RESULTS" <<'PY'
import json, os, sys
name, index, limit, rc, seconds, skipped, log, cmds, tail_bytes, head_bytes = sys.argv[1:]
tail_bytes, head_bytes = int(tail_bytes), int(head_bytes)
commands = []
if os.path.exists(cmds):
    for line in open(cmds, errors="replace"):
        fields = line.rstrip("\n").split("\t", 2)
        if len(fields) != 3:
            continue
        c_rc, c_seconds, command = fields
        commands.append({"command": command, "rc": None if c_rc == "-" else int(c_rc),
                         "timed_out": c_rc in ("124", "137"), "seconds": float(c_seconds)})
data = open(log, "rb").read() if os.path.exists(log) else b""
entry = {"stage": name, "index": int(index), "limit_s": int(limit), "rc": int(rc) if rc else None,
         "timed_out": any(c["timed_out"] for c in commands), "skipped": skipped or None,
         "seconds": float(seconds), "commands": commands, "log": log, "log_bytes": len(data)}
if len(data) > tail_bytes:
    entry["head"] = data[:head_bytes].decode(errors="replace")
entry["tail"] = data[-tail_bytes:].decode(errors="replace")
print(json.dumps(entry))
PY
}

STAGE_INDEX=0
LIMIT_SUM=0
NOT_OK=()
OUT_FILES=(results.jsonl)
# stage NAME LIMIT_S [--out FILE]... -- COMMAND... [\; COMMAND...]
# Runs the commands one after another under the stage's limit (what is left of it for each), their
# output in $LOGS/NAME.log, and appends the stage's line to results.jsonl. --out names each file a
# command writes into OUT (the dry run counts them). With --plan: prints the stage as a JSON line.
stage() {
  local name="$1" limit="$2"
  shift 2
  local outs=()
  while [[ "${1:-}" == --out ]]; do
    outs+=("$2")
    OUT_FILES+=("$2")
    shift 2
  done
  [[ "${1:-}" == -- ]] && shift
  STAGE_INDEX=$((STAGE_INDEX + 1))
  LIMIT_SUM=$((LIMIT_SUM + limit))
  if ((PLAN)); then
    python3 -c '
import json, sys
name, limit, n_outs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
outs, rest = sys.argv[4:4 + n_outs], sys.argv[4 + n_outs:]
commands, current = [], []
for token in rest:
    if token == ";":
        commands.append(current); current = []
    else:
        current.append(token)
commands.append(current)
print(json.dumps({"stage": name, "limit_s": limit, "outputs": outs, "commands": commands}))
' "$name" "$limit" "${#outs[@]}" "${outs[@]}" "$@"
    return
  fi

  local log="$LOGS/$name.log" cmds="$LOGS/$name.cmds" start left stage_end rc="" c_start c_left c_rc display
  : >"$log"
  : >"$cmds"
  start=$(now_ms)
  left=$(((DEADLINE_MS - start) / 1000 - KILL_GRACE_S - 1))
  if ((left < MIN_STAGE_S)); then
    echo "skipped: ${left}s of the ${BUDGET_S}s budget left" >"$log"
    record "$name" "$STAGE_INDEX" "$limit" "" 0 "budget of ${BUDGET_S} s spent"
    echo "gpu_check: [$STAGE_INDEX] $name SKIPPED (budget of ${BUDGET_S} s spent)"
    NOT_OK+=("$name(skipped)")
    return
  fi
  ((left > limit)) && left=$limit
  stage_end=$((start + left * 1000))
  local argv=()
  run_command() {
    display=""
    local token skip_env=0 unset_next=0 t
    [[ "${argv[0]}" == env ]] && skip_env=1
    for token in "${argv[@]}"; do
      if ((skip_env)); then  # the display leaves out `env [-u NAME] [NAME=VALUE]...`
        if ((unset_next)); then unset_next=0; continue; fi
        [[ "$token" == -u ]] && { unset_next=1; continue; }
        [[ "$token" == env || "$token" == *=* ]] && continue
      fi
      skip_env=0
      if [[ "$token" == *$'\n'* ]]; then
        display+="${display:+ }'<${#token}-byte script>'"
        continue
      fi
      t="${token//"$BUNDLE/"/}"
      t="${t//"$OUT/"/}"
      t="${t//[$'\t\n']/ }"
      ((${#t} > 160)) && t="${t:0:150}..."
      display+="${display:+ }$t"
    done
    c_start=$(now_ms)
    c_left=$(((stage_end - c_start) / 1000))
    if ((c_left < 1)); then
      printf -- '-\t0\t%s\n' "$display" >>"$cmds"
      echo "$ $display: not started (the stage's ${left}s are spent)" >>"$log"
      return
    fi
    echo "$ $display  (limit ${c_left}s)" >>"$log"
    timeout -k "$KILL_GRACE_S" "$c_left" "${argv[@]}" >>"$log" 2>&1 </dev/null
    c_rc=$?
    ((c_rc == 124 || c_rc == 137)) && echo "gpu_check: timed out after ${c_left}s: $display" >>"$log"
    printf '%d\t%s\t%s\n' "$c_rc" "$(awk -v ms=$(($(now_ms) - c_start)) 'BEGIN {printf "%.3f", ms / 1000}')" "$display" >>"$cmds"
    [[ -z "$rc" || "$rc" == 0 ]] && rc=$c_rc
  }
  local token
  for token in "$@"; do
    if [[ "$token" == ";" ]]; then
      run_command
      argv=()
    else
      argv+=("$token")
    fi
  done
  ((${#argv[@]})) && run_command
  local seconds
  seconds=$(awk -v ms=$(($(now_ms) - start)) 'BEGIN {printf "%.3f", ms / 1000}')
  record "$name" "$STAGE_INDEX" "$limit" "${rc:-0}" "$seconds" ""
  echo "gpu_check: [$STAGE_INDEX] $name rc=${rc:-0} ${seconds}s (limit ${limit}s)"
  if [[ "${rc:-0}" != 0 ]]; then
    NOT_OK+=("$name(rc=$rc)")
    tail -n 4 "$log" | cut -c1-300 | sed 's/^/    /'
  fi
}

TPSERVE="$BUNDLE/tpserve"
TINY=(--model tiny --load-format dummy --prompt "Hello" --max-tokens 16 --device cuda --json)
SMALL=(--model small --load-format dummy --device cuda --context 128 --steps 32 "${DECODE_JSON[@]}")
COMM=(-b 1K -e 16M -f 4 -n 20 -w 5 --json)
KERNEL_TESTS_MEMCHECK='CudaOps.RmsNorm*:CudaOps.SiluMul*:CudaOps.Rope*:CudaOps.EmbeddingGather*:CudaOps.CastToBf16*:CudaOps.PagedAttention*:CudaOps.TheDecodersGlueKernels*'
KERNEL_TESTS_RACECHECK='CudaOps.RmsNorm*:CudaOps.PagedAttention*'

# The stage table: names, limits (seconds) and commands. Keep the header's table in step.
stage environment 20 -- bash -c "$(declare -f environment); environment"
stage gpu_kernel_tests 25 --out gpu_kernel_tests.json -- \
  "${OURS[@]}" "$BUNDLE/cuda_ops_test" --gtest_output="json:$OUT/gpu_kernel_tests.json"
stage gpu_engine_tests 60 --out gpu_engine_tests.json --out gpu_engine_limits_tests.json -- \
  "${OURS[@]}" "$BUNDLE/cuda_engine_test" --gtest_output="json:$OUT/gpu_engine_tests.json" \; \
  "${OURS[@]}" "$BUNDLE/cuda_engine_limits_test" --gtest_output="json:$OUT/gpu_engine_limits_tests.json"
stage generate_cuda 25 -- \
  "${OURS[@]}" "$TPSERVE" generate "${TINY[@]}" --profile \; \
  "${OURS[@]}" "$TPSERVE" generate "${TINY[@]}" --tp 2 --share-gpu
stage bench_comm 35 -- \
  "${OURS[@]}" "$TPSERVE" bench-comm --backend rank-order -g 2 "${COMM[@]}" \; \
  "${OURS[@]}" "$TPSERVE" bench-comm --backend oneshot -g 2 "${COMM[@]}" \; \
  "${OURS[@]}" "$TPSERVE" bench-comm --backend rank-order -g 8 "${COMM[@]}" \; \
  "${OURS[@]}" "$TPSERVE" bench-comm --backend oneshot -g 8 "${COMM[@]}" \; \
  "${OURS[@]}" "$TPSERVE" bench-comm --backend nccl -g 1 -b 8 -e 16M -f 4 -n 20 -w 5 --protocols LL,Simple \
    --algorithms Ring --graph 10 --register --hardware h200-sxm
stage bench_decode_small 45 -- \
  "${OURS[@]}" "$TPSERVE" bench-decode "${SMALL[@]}" --tp 1 --batch 1,8,32 \; \
  "${OURS[@]}" "$TPSERVE" bench-decode "${SMALL[@]}" --tp 1 --batch 1,8,32 --cuda-graphs on \; \
  "${OURS[@]}" "$TPSERVE" bench-decode "${SMALL[@]}" --share-gpu --tp 2 --batch 1,32 \; \
  "${OURS[@]}" "$TPSERVE" bench-decode "${SMALL[@]}" --share-gpu --tp 2 --allreduce oneshot --batch 1,32
stage bench_decode_llama3_8b 65 -- \
  "${OURS[@]}" "$TPSERVE" bench-decode --model llama-3-8b --load-format dummy --num-layers "$LLAMA_LAYERS" \
  --device cuda --tp 1 --batch 1,8,32 --context 512 --steps 32 "${DECODE_JSON[@]}"
stage bench_cuda_gemm 20 -- "${OURS[@]}" "$BUNDLE/bench_cuda_gemm" --tokens 1,8,32
stage bench_cuda_kernels 15 -- "${OURS[@]}" "$BUNDLE/bench_cuda_kernels" --tokens 1,8,32 --context 512
stage sanitizer_memcheck 25 --out sanitizer_memcheck.json -- \
  "${SANITIZE[@]}" --tool memcheck --error-exitcode 99 --print-limit 20 "$BUNDLE/cuda_ops_test" \
  --gtest_filter="$KERNEL_TESTS_MEMCHECK" --gtest_output="json:$OUT/sanitizer_memcheck.json"
stage sanitizer_racecheck 25 --out sanitizer_racecheck.json -- \
  "${SANITIZE[@]}" --tool racecheck --error-exitcode 99 --print-limit 20 "$BUNDLE/cuda_ops_test" \
  --gtest_filter="$KERNEL_TESTS_RACECHECK" --gtest_output="json:$OUT/sanitizer_racecheck.json"

if ((PLAN)); then
  python3 -c 'import json, sys; print(json.dumps({"summary": True, "stages": int(sys.argv[1]), "limit_sum_s": int(sys.argv[2]), "budget_s": int(sys.argv[3]), "out_files": sys.argv[4:]}))' \
    "$STAGE_INDEX" "$LIMIT_SUM" "$BUDGET_S" "${OUT_FILES[@]}"
  exit 0
fi
files=$(find "$OUT" -type f | wc -l)
echo "gpu_check: $STAGE_INDEX stages in $((($(now_ms) - START_MS) / 1000))s (limits sum to ${LIMIT_SUM}s, budget ${BUDGET_S}s);" \
  "$files files in $OUT (at most 8 come back); logs in $LOGS"
((files <= 8)) || echo "gpu_check: MORE THAN 8 FILES in $OUT: the device returns only 8" >&2
if ((${#NOT_OK[@]})); then
  echo "gpu_check: not OK: ${NOT_OK[*]}"
  exit 1
fi
echo "gpu_check: every stage OK"
