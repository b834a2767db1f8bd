#!/usr/bin/env bash
# Issue 35's measurements: tpserve's CPU Linear kernels on this machine, in one run, next to the
# DRAM read ceiling and the compute ceilings (bf16, f32-grade, f32-grade with the weights streamed at batch 8's
# intensity) measured in the same run (bench_linear), decode on
# the default model at batch 1 and 8 per kernel (bench-decode), and llama.cpp on the same bf16
# weights: `llama-bench -p 0 -n 128 -t 2`, built from the llama.cpp source that the node-llama-cpp
# npm package bundles (scripts/fetch_assets.sh fetches it), twice: native, and AVX2 only
# (-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_AVX512=OFF) to face the avx2 kernel. The GGUF is written
# by benchmarks/llamacpp/hf_to_gguf_bf16.py with llama.cpp's gguf-py and numpy, without torch.
# A benchmark, not a test: minutes, and a llama.cpp build (about 10 min on 2 cores, kept in OUT).
#
#   benchmarks/cpu_kernels_vs_llamacpp.sh [BUILD_DIR] [OUT_DIR]
#
# Needs python3-numpy (apt). Environment: KERNELS (default: those of avx512bf16,avx512,avx2 this CPU
# runs), THREADS (default 2), STEPS (bench-decode steps per point, default 24), ROUNDS (bench-decode
# runs, default 3, the kernels' order rotated each time: a VM's DRAM can slow for a minute, and
# whichever kernel ran then would carry it; the table shows each figure's median and range),
# LLAMACPP (default 1; 0 skips llama.cpp: the tpserve measurements alone, in a few minutes).
# Each kernel's bench-decode is followed at once by llama-bench of the build it faces, and the
# ratio is the median over the rounds of each round's pair: both sides of a ratio see the same
# minute of this machine's memory (one llama-bench after all of tpserve's rounds once put a slow
# minute on one side only: 1.14x where the paired rounds of the same run gave 1.3x).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$REPO/build}"
OUT="${2:-$REPO/.assets/bench-cpu-kernels}"
THREADS="${THREADS:-2}"
STEPS="${STEPS:-24}"
ROUNDS="${ROUNDS:-3}"
PYTHON=/usr/bin/python3  # Debian's, with python3-numpy
TPSERVE="$BUILD/server/tpserve"
mkdir -p "$OUT"
"$PYTHON" -c "import numpy" 2>/dev/null || { echo "cpu_kernels: apt-get install python3-numpy" >&2; exit 1; }

if [[ -z ${KERNELS:-} ]]; then
  runs="$("$TPSERVE" devices 2>/dev/null | sed -n 's/.*(runs here: \(.*\))/\1/p')"
  KERNELS=""
  for k in avx512bf16 avx512 avx2; do [[ " $runs " == *" $k "* ]] && KERNELS+="${KERNELS:+,}$k"; done
fi
echo "== $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs), $THREADS threads, kernels $KERNELS, $(date -u +%FT%TZ)"

MODEL="$REPO/.assets/models/tpserve-small-llama3"
[[ -f $MODEL/config.json ]] || "$TPSERVE" make-model --out "$MODEL" --preset small --tokenizer llama3 --seed 0

echo "== bench_linear (the small model's shapes; ceilings measured in this run)"
"$BUILD/benchmarks/bench_linear" --threads "$THREADS" --tokens 1,8 --kernels "$KERNELS" --greedy | tee "$OUT/bench_linear.txt"

# llama.cpp from the bundle in the npm package fetch_assets.sh keeps in its cache, built before
# the rounds (about 10 min the first time, kept in OUT).
rm -f "$OUT"/bench_decode*.json "$OUT"/llama_bench_*.json  # no stale figures beside this run's
if [[ ${LLAMACPP:-1} != 0 ]]; then
NLC_VER="$(sed -n 's/^NLC_VER="\(.*\)"/\1/p' "$REPO/scripts/fetch_assets.sh")"
TGZ="$REPO/.assets/cache/node-llama-cpp-$NLC_VER.tgz"
[[ -f $TGZ ]] || "$REPO/scripts/fetch_assets.sh" >/dev/null
LLAMA="$OUT/llama.cpp"
if [[ ! -d $LLAMA/.git ]]; then
  tar -xzf "$TGZ" -C "$OUT" package/llama/gitRelease.bundle package/llama/llama.cpp.info.json
  git clone -q "$OUT/package/llama/gitRelease.bundle" "$LLAMA"
fi
echo "== llama.cpp $(tr -d '\n ' < "$OUT/package/llama/llama.cpp.info.json") at $(git -C "$LLAMA" rev-parse --short HEAD)"
build_llama() {  # DIR CMAKE_FLAGS...
  local dir="$1"; shift
  if [[ ! -x $dir/bin/llama-bench ]]; then
    cmake -S "$LLAMA" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DGGML_CCACHE=OFF "$@" > "$dir.configure.log"
    cmake --build "$dir" --target llama-bench > "$dir.build.log"
  fi
}
build_llama "$OUT/llama-native" -DGGML_NATIVE=ON
[[ $KERNELS == *avx2* ]] && build_llama "$OUT/llama-avx2" -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON \
  -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AVX512_BF16=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_VBMI=OFF
GGUF="$OUT/tpserve-small-llama3-bf16.gguf"
[[ -f $GGUF ]] || PYTHONPATH="$LLAMA/gguf-py" "$PYTHON" "$REPO/benchmarks/llamacpp/hf_to_gguf_bf16.py" "$MODEL" "$GGUF"
fi
peer_build() { [[ $1 == avx2 ]] && echo avx2 || echo native; }  # the llama.cpp build a kernel faces

peer_note=""
[[ ${LLAMACPP:-1} != 0 ]] && peer_note="; each kernel followed by llama-bench -p 0 -n 128 -t $THREADS of the build it faces"
echo "== bench-decode --tp 1 --batch 1,8 (default model, context 32), $ROUNDS rounds, the kernels' order rotated$peer_note"
IFS=, read -ra kernel_list <<< "$KERNELS"
for ((round = 0; round < ROUNDS; ++round)); do
  shift_by=$((round % ${#kernel_list[@]}))
  for kernel in "${kernel_list[@]:shift_by}" "${kernel_list[@]:0:shift_by}"; do
    "$TPSERVE" bench-decode --model "$MODEL" --tp 1 --batch 1,8 --steps "$STEPS" --threads "$THREADS" \
      --linear-kernel "$kernel" --json > "$OUT/bench_decode_${round}_$kernel.json"
    build="$(peer_build "$kernel")"
    if [[ ${LLAMACPP:-1} != 0 && -x $OUT/llama-$build/bin/llama-bench ]]; then
      "$OUT/llama-$build/bin/llama-bench" -m "$GGUF" -p 0 -n 128 -t "$THREADS" -o json \
        > "$OUT/llama_bench_${round}_$kernel.json"
    fi
  done
done

"$PYTHON" - "$OUT" "$KERNELS" "$MODEL" <<'PY'
import json, pathlib, re, statistics, sys
out, kernels = pathlib.Path(sys.argv[1]), sys.argv[2].split(",")
rows = []  # every bench-decode row, with its round
for path in sorted(out.glob("bench_decode_*_*.json")):
    for row in json.loads(path.read_text())["rows"]:
        row["round"] = path.stem.split("_")[2]
        rows.append(row)
rounds = sorted({r["round"] for r in rows})
peer = {}  # (round, kernel) -> llama.cpp tg128 tokens/s of the run right after that kernel's
for path in out.glob("llama_bench_*_*.json"):
    _, _, round_, kernel = path.stem.split("_")
    peer[round_, kernel] = json.loads(path.read_text())[0]["avg_ts"]
LINEARS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "lm_head")
for r in rows:  # the weight-streaming ops alone: their medians' sum over the median paired read
    r["linears_of_read"] = r["paired_read_ms"] / sum(r["op_ms"][op] for op in LINEARS)
def figure(kernel, batch, key):  # median over the rounds, lowest, highest
    values = [r[key] for r in rows if r["kernel"] == kernel and r["batch"] == batch]
    return statistics.median(values), min(values), max(values)
linear_text = (out / "bench_linear.txt").read_text()
bf16 = re.search(r"bf16 compute (\d+) GFLOP/s", linear_text)
f32_grade = re.search(r"f32-grade = .* = (\d+) GFLOP/s", linear_text)
# VDPBF16PS while streaming 256 MiB at 8 tokens' intensity; half of it: the f32-grade rate with the
# weights coming from DRAM (compute_peak.h), in GFLOP/s.
streamed = re.search(r"while streaming from DRAM at 8 tokens' intensity .*?\) (\d+) GFLOP/s", linear_text)
streamed_f32_grade = 0.5 * float(streamed.group(1)) if streamed else None
def versus_llama(kernel):  # (median, lowest, highest) of each round's ratio, and of llama.cpp's tok/s
    ratios, peers = [], []
    for r in rows:
        if r["kernel"] == kernel and r["batch"] == 1 and (r["round"], kernel) in peer:
            peers.append(peer[r["round"], kernel])
            ratios.append(r["tokens_per_s"] / peers[-1])
    if not ratios:
        return None, None
    return ((statistics.median(ratios), min(ratios), max(ratios)),
            (statistics.median(peers), min(peers), max(peers)))
print(f"\n== decode, default model, TP=1, median of {len(rounds)} rounds (range) (tokens/s; ceiling = weight bytes / "
      "DRAM read, that round; of read = median over steps of the step's weight bytes read right after it / the step; "
      "Linears = the same read over the five projections' median times alone, without attention, norms and sampling; "
      "llama.cpp tg128: median of its runs, each right after the kernel's; ratio: median of those pairs' ratios)")
print(f"{'kernel':>10} {'batch 1':>21} {'of ceiling':>10} {'of read':>15} {'Linears':>8} {'batch 8':>21} "
      f"{'x batch 1':>17}  {'llama.cpp tg128':>16} {'ratio':>17}")
for k in kernels:
    one, one_low, one_high = figure(k, 1, "tokens_per_s")
    read, read_low, read_high = figure(k, 1, "fraction_of_paired_read")
    eight, eight_low, eight_high = figure(k, 8, "tokens_per_s")
    times, times_low, times_high = figure(k, 8, "vs_batch1")
    ratio, peer_rate = versus_llama(k)
    peer_text = f"{peer_rate[0]:.1f} ({'avx2' if k == 'avx2' else 'native'})" if peer_rate else "-"
    ratio = f"{ratio[0]:.2f}x ({ratio[1]:.2f}-{ratio[2]:.2f})" if ratio else "-"
    print(f"{k:>10} {one:>7.1f} ({one_low:.1f}-{one_high:.1f}) {100 * figure(k, 1, 'fraction_of_ceiling')[0]:>9.0f}% "
          f"{100 * read:>4.0f}% ({100 * read_low:.0f}-{100 * read_high:.0f}%) "
          f"{100 * figure(k, 1, 'linears_of_read')[0]:>7.0f}% "
          f"{eight:>7.1f} ({eight_low:.1f}-{eight_high:.1f}) {times:>5.2f}x ({times_low:.2f}-{times_high:.2f})  "
          f"{peer_text:>16} {ratio:>17}")
# Batch 8 is compute-bound: each token costs 2 FLOPs per weight, so the compute ceilings measured by
# bench_linear cap its tokens/s (the Linears alone; attention and the rest come on top).
eight = next(r for r in rows if r["batch"] == 8)
flops_per_token = 2 * eight["weight_bytes"] / 2  # bf16 weights: 2 bytes each, a multiply and an add
one = {k: figure(k, 1, "tokens_per_s")[0] for k in kernels}
print("\n== batch 8 against the compute ceilings (tokens/s = GFLOP/s / FLOPs per token; this run; medians)")
for name, gflops in (("bf16 (VDPBF16PS)", bf16 and float(bf16.group(1))),
                     ("f32-grade (float64 bound)", f32_grade and float(f32_grade.group(1))),
                     ("f32-grade, weights streamed", streamed_f32_grade)):
    if gflops:
        cap = gflops * 1e9 / flops_per_token
        print(f"  {name:>26}: {cap:7.1f} tok/s = " +
              ", ".join(f"{k} {cap / one[k]:.2f}x batch 1" for k in kernels))
for k in kernels:
    tokens_per_s = figure(k, 8, "tokens_per_s")[0]
    if f32_grade:
        cap = float(f32_grade.group(1)) * 1e9 / flops_per_token
        print(f"  {k:>26}: batch 8 {tokens_per_s:7.1f} tok/s = {100 * tokens_per_s / cap:.0f}% of the f32-grade cap")
# Batch 8's floor in this run: its Linears at the streamed f32-grade rate, plus the rest of its step
# (attention, norms, sampling, the host) as this kernel's own batch-8 steps measured it. bench-decode
# samples greedily without logits, so with avx512bf16 the LM head screens on the activations' hi
# halves (cpu::GreedyLinear): one VDPBF16PS per product, so its floor is the slower of its read at
# the DRAM rate and its arithmetic at the streamed bf16 rate (not half of it).
config = json.loads((pathlib.Path(sys.argv[3]) / "config.json").read_text())
lm_head_flops = 2 * config["vocab_size"] * config["hidden_size"]  # a token's, exact
dram = re.search(r"DRAM read ([\d.]+) GB/s", linear_text)
if streamed_f32_grade:
    for k in kernels:
        layers_s = (flops_per_token - lm_head_flops) * 8 / (streamed_f32_grade * 1e9)
        lm_head_s = lm_head_flops * 8 / (streamed_f32_grade * 1e9)
        if k == "avx512bf16" and dram:
            lm_head_s = max(lm_head_flops / float(dram.group(1)) / 1e9,  # bytes: 2 a weight = FLOPs
                            lm_head_flops * 8 / (2 * streamed_f32_grade * 1e9))
        rest_ms = statistics.median(r["step_ms"] - sum(r["op_ms"][op] for op in LINEARS)
                                    for r in rows if r["kernel"] == k and r["batch"] == 8)
        floor = 8 / (layers_s + lm_head_s + rest_ms / 1e3)
        print(f"  {k:>26}: floor {floor:7.1f} tok/s = {floor / one[k]:.2f}x batch 1 (layer Linears "
              f"{1e3 * layers_s:.2f} ms at the streamed rate + LM head {1e3 * lm_head_s:.2f} ms"
              f"{' (greedy: hi halves, or the read)' if k == 'avx512bf16' and dram else ''} + the rest of its "
              f"step {rest_ms:.2f} ms); batch 8 is at {100 * figure(k, 8, 'tokens_per_s')[0] / floor:.0f}% of it")
PY
