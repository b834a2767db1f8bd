#!/usr/bin/env python3
"""The serving simulation against published serving results (published_serving.json; docs/PLANNER.md):
each configuration (model, GPU, TP, dtype, input/output lengths, concurrency or burst) simulated once by
`tpserve plan simulate` with the presets' default engine calibration, and every published figure of it
(output tok/s, req/s, TTFT, ITL/TPOT, E2E) compared with the simulation's. A burst of N requests sent at
once is simulated as N clients with one request each. Scheduler limits: --max-batch-size 256 (vLLM's
max_num_seqs), --max-batched-tokens 8192.

    benchmarks/planner/check_published_serving.py [path/to/tpserve] [--calibration default|none|FILE] [--fp8-kv]

--fp8-kv: configurations with fp8 weights keep their KV cache in fp8 too (--kv-cache-dtype fp8), as
TensorRT-LLM's fp8 profiles usually do; the sources do not say.
"""
import json
import pathlib
import statistics
import subprocess
import sys

here = pathlib.Path(__file__).resolve().parent
args = [a for a in sys.argv[1:] if not a.startswith("--")]
tpserve = args[0] if args else str(here.parents[1] / "build/server/tpserve")
calibration = sys.argv[sys.argv.index("--calibration") + 1] if "--calibration" in sys.argv else "default"
fp8_kv = "--fp8-kv" in sys.argv
points = json.load(open(here / "published_serving.json"))["points"]

# Published metric -> (the simulation's field, statistic).
METRICS = {"output_tokens_per_s": ("output_token_throughput", None), "requests_per_s": ("request_throughput", None),
           "ttft_ms_mean": ("ttft_ms", "mean"), "ttft_ms": ("ttft_ms", "mean"), "ttft_ms_p50": ("ttft_ms", "p50"),
           "itl_ms_p50": ("itl_ms", "p50"), "itl_ms": ("itl_ms", "mean"), "tpot_ms_mean": ("tpot_ms", "mean"),
           "e2e_latency_ms_mean": ("e2e_ms", "mean"), "e2e_latency_ms_p50": ("e2e_ms", "p50")}


def clients(p):
    load = p["load"]
    return int(load["concurrency"]) if "concurrency" in load else int(load["num_prompts"])


def key(p):
    return (p["model"], p["hardware"], p["tp"], p["dtype"], round(p["input_tokens"]), round(p["output_tokens"]),
            clients(p), "concurrency" in p["load"])


runs = {}
for k in sorted({key(p) for p in points}):
    model, hardware, tp, dtype, inputs, outputs, n, closed = k
    requests = max(4 * n, 32) if closed else n  # a burst: every request at once
    out = subprocess.run([tpserve, "plan", "simulate", "--model", model, "--hardware", hardware, "--calibration",
                          calibration, "--tp", str(tp), "--dtype", "fp8" if dtype == "fp8" else "bf16",
                          "--concurrency", str(n), "--requests", str(requests), "--prompt-tokens", str(inputs),
                          "--output-tokens", str(outputs), "--max-batch-size", "256", "--max-batched-tokens", "8192",
                          "--kv-cache-dtype", "fp8" if fp8_kv and dtype == "fp8" else "auto", "--json"],
                         capture_output=True, text=True, check=True)
    runs[k] = json.loads(out.stdout)["runs"][0]

print(f"{'group':<11} {'model':<12} {'hardware':<9} {'tp':>2} {'dtype':<5} {'in/out':>10} {'load':>9} "
      f"{'metric':<20} {'published':>10} {'simulated':>10} {'error':>7}")
errors = {}
for p in points:
    field, stat = METRICS[p["metric"]]
    run = runs[key(p)]
    simulated = run[field] if stat is None else run[field][stat]
    error = simulated / p["value"] - 1
    kind = "throughput" if stat is None else "latency"
    errors.setdefault((p["group"], kind), []).append(abs(error))
    load = (f"c={clients(p)}" if "concurrency" in p["load"] else f"burst {clients(p)}")
    print(f"{p['group']:<11} {p['model']:<12} {p['hardware']:<9} {p['tp']:>2} {p['dtype']:<5} "
          f"{round(p['input_tokens']):>5}/{round(p['output_tokens']):<4} {load:>9} {p['metric']:<20} "
          f"{p['value']:>10.2f} {simulated:>10.2f} {100 * error:>+6.1f}%")

print(f"\ncalibration: {calibration}; KV cache: {'fp8 where the weights are fp8' if fp8_kv else 'bf16'}")
every = []
for (group, kind), values in sorted(errors.items()):
    every += values
    print(f"  {group:<11} {kind:<10}: {len(values):>3} figures, median |error| {100 * statistics.median(values):.1f}%, "
          f"worst {100 * max(values):.1f}%")
for kind in ("throughput", "latency"):
    values = [v for (g, k), vs in errors.items() if k == kind for v in vs]
    print(f"  all {kind:<10}: {len(values):>3} figures, median |error| {100 * statistics.median(values):.1f}%")
print(f"  all: {len(every)} figures from {len({g for g, _ in errors})} sources, median |error| "
      f"{100 * statistics.median(every):.1f}%, worst {100 * max(every):.1f}%")
