#!/usr/bin/env python3
"""The step model's GEMM and AllReduce terms against kernel timings that Vidur profiled
(vidur_profiles.json: Llama-2-70B on H100 and A100, TP 1-8, 512-4,096 tokens a step; docs/PLANNER.md).

A step of N tokens sends N rows through every GEMM and AllReduce, so `tpserve plan --batch N --context 1`
prices the GEMMs and AllReduces of a prefill step of N tokens. Three tables:

1. GEMMs, all layers: Vidur's four projections a layer x layers, against the planner's GEMM term with the
   uncalibrated preset (`--calibration none`: the datasheet rate) and with the default engine calibration
   (fitted on published end-to-end prefill times, which include everything else a step spends).
2. AllReduce, one message of N x hidden bf16 elements: Vidur's NCCL timing against the collective model.
3. How each grows from 2,048 to 4,096 tokens a step, beside Splitwise's published prefill times of the
   same model, GPU and TP degree (published_prefill.json): kernels that scale with the tokens cannot give
   a step that grows faster than they do.

    benchmarks/planner/check_vidur_profiles.py [path/to/tpserve]
"""
import json
import pathlib
import statistics
import sys

import published

here = pathlib.Path(__file__).resolve().parent
tpserve = sys.argv[1] if len(sys.argv) > 1 else str(here.parents[1] / "build/server/tpserve")
vidur = json.load(open(here / "vidur_profiles.json"))
prefill = json.load(open(here / "published_prefill.json"))["points"]
model, layers = vidur["model"], vidur["layers"]
gemm_ops = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")


def planned(hardware, tp, tokens, calibration):
    """The planner's row for a step of `tokens` rows (no attention to speak of: context 1)."""
    point = {"model": model, "tp": tp, "batch": tokens, "context": 1, "dtype": "bf16"}
    return published.plan_row(tpserve, point, hardware, calibration)


def vidur_gemm_ms(row):
    """All layers' four projections, each the mean of the CSV's medians for that (tokens, TP)."""
    return layers * sum(statistics.mean(row[op]) for op in gemm_ops)


def splitwise_ms(hardware, tp, tokens):
    for p in prefill:
        if (p["group"], p["model"], p["hardware"], p["tp"], p["prompt_tokens"]) == ("splitwise", model, hardware, tp,
                                                                                     tokens):
            return p["ttft_ms"]
    return None


gemm = {}  # (hardware, tp, tokens) -> (vidur, planned with none, planned with default)
default_step_ms = {}  # (hardware, tp, tokens) -> the default calibration's whole step
print(f"1. GEMMs of all {layers} layers (ms): Vidur's kernels against the step model")
print(f"{'hardware':<9} {'tp':>2} {'tokens':>6} {'Vidur':>8} {'none':>8} {'none/V':>7} {'default':>8} {'default/V':>9}")
for profile in vidur["profiles"]:
    hardware = profile["hardware"]
    for row in profile["gemm_ms_per_layer"]:
        key = (hardware, row["tp"], row["tokens"])
        measured = vidur_gemm_ms(row)
        floor = planned(hardware, row["tp"], row["tokens"], "none")["parts_ms"]["gemm"]
        calibrated_row = planned(hardware, row["tp"], row["tokens"], "default")
        calibrated = calibrated_row["parts_ms"]["gemm"]
        gemm[key] = (measured, floor, calibrated)
        default_step_ms[key] = calibrated_row["step_ms"]
        print(f"{hardware:<9} {row['tp']:>2} {row['tokens']:>6} {measured:>8.1f} {floor:>8.1f} {floor / measured:>7.2f} "
              f"{calibrated:>8.1f} {calibrated / measured:>9.2f}")
for hardware in sorted({k[0] for k in gemm}):
    floors = [f / m for (h, _, _), (m, f, _) in gemm.items() if h == hardware]
    calibrated = [c / m for (h, _, _), (m, _, c) in gemm.items() if h == hardware]
    print(f"  {hardware}: the kernels run at {100 * statistics.median(floors):.0f}% of the datasheet rate (median; "
          f"{100 * min(floors):.0f}-{100 * max(floors):.0f}%); the default calibration prices the GEMMs "
          f"{statistics.median(calibrated):.2f}x the kernels' time (median; {min(calibrated):.2f}-{max(calibrated):.2f}x)")

print("\n2. One AllReduce of tokens x hidden bf16 (us): Vidur's NCCL timing against the collective model")
print(f"{'hardware':<9} {'gpus':>4} {'MiB':>4} {'tokens':>6} {'Vidur':>7} {'model':>7} {'error':>7}")
allreduce = {}  # (hardware, gpus, tokens) -> Vidur's ms
errors = []
for profile in vidur["profiles"]:
    hardware = profile["hardware"]
    for entry in profile["all_reduce"]:
        tokens = entry["bytes"] // (2 * 8192)  # Llama-2-70B's hidden size, 2 bytes an element
        measured_us = 1e3 * statistics.mean(entry["median_ms"])
        allreduce[(hardware, entry["gpus"], tokens)] = measured_us / 1e3
        model_us = planned(hardware, entry["gpus"], tokens, "none")["allreduce"]["time_us"]
        errors.append(abs(model_us / measured_us - 1))
        print(f"{hardware:<9} {entry['gpus']:>4} {entry['bytes'] >> 20:>4} {tokens:>6} {measured_us:>7.0f} "
              f"{model_us:>7.0f} {100 * (model_us / measured_us - 1):>+6.1f}%")
if errors:
    print(f"  {len(errors)} sizes: median |error| {100 * statistics.median(errors):.1f}%, worst {100 * max(errors):.1f}%")

print("\n3. From 2,048 to 4,096 tokens a step: how much longer")
print(f"{'hardware':<9} {'tp':>2} {'Vidur GEMMs':>11} {'+ AllReduces':>12} {'model step':>10} {'Splitwise TTFT':>14}")
for hardware, tp in sorted({(k[0], k[1]) for k in gemm}):
    if (hardware, tp, 2048) not in gemm or (hardware, tp, 4096) not in gemm:
        continue
    small, large = gemm[(hardware, tp, 2048)][0], gemm[(hardware, tp, 4096)][0]
    with_ar = "-"
    if tp == 1 or (hardware, tp, 2048) in allreduce:
        messages = 2 * layers if tp > 1 else 0
        ar_small = messages * allreduce.get((hardware, tp, 2048), 0)
        ar_large = messages * allreduce.get((hardware, tp, 4096), 0)
        with_ar = f"{(large + ar_large) / (small + ar_small):.2f}x"
    step = [default_step_ms[(hardware, tp, n)] for n in (2048, 4096)]
    published_small, published_large = splitwise_ms(hardware, tp, 2048), splitwise_ms(hardware, tp, 4096)
    splitwise = f"{published_large / published_small:.2f}x" if published_small and published_large else "-"
    print(f"{hardware:<9} {tp:>2} {large / small:>10.2f}x {with_ar:>12} {step[1] / step[0]:>9.2f}x {splitwise:>14}")
