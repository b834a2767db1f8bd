#!/usr/bin/env python3
"""Runs `tpserve plan` on every published point of published_points.json and prints prediction,
publication and error per point, then the median and worst absolute error (docs/PLANNER.md).

    benchmarks/planner/check_published.py [path/to/tpserve]
"""
import json
import pathlib
import statistics
import subprocess
import sys

here = pathlib.Path(__file__).resolve().parent
tpserve = sys.argv[1] if len(sys.argv) > 1 else str(here.parents[1] / "build/server/tpserve")
points = json.load(open(here / "published_points.json"))["points"]
errors = []
print(f"{'model':<12} {'hardware':<9} {'tp':>2} {'batch':>5} {'ctx':>5} {'dtype':<5} {'unit':<13} {'published':>9} "
      f"{'predicted':>9} {'error':>7} {'comm%':>6}")
for p in points:
    dtype = p.get("dtype", "bf16")
    out = subprocess.run([tpserve, "plan", "--model", p["model"], "--hardware", p["hardware"], "--tp", str(p["tp"]),
                          "--batch", str(p["batch"]), "--context", str(p["context"]), "--dtype", dtype, "--json"],
                         capture_output=True, text=True, check=True)
    row = json.loads(out.stdout)["rows"][0]
    predicted = row["step_ms"] if p["unit"] == "ms_per_token" else row["tokens_per_s"] / p["batch"]
    # Error of the predicted time per token, whatever unit was published.
    published_ms = p["value"] if p["unit"] == "ms_per_token" else 1e3 / p["value"]
    error = row["step_ms"] / published_ms - 1
    errors.append(abs(error))
    print(f"{p['model']:<12} {p['hardware']:<9} {p['tp']:>2} {p['batch']:>5} {p['context']:>5} {dtype:<5} {p['unit']:<13} "
          f"{p['value']:>9.2f} {predicted:>9.2f} {100 * error:>+6.1f}% {100 * row['comm_share']:>5.1f}%")
print(f"{len(errors)} points: median |error| {100 * statistics.median(errors):.1f}%, worst {100 * max(errors):.1f}% "
      "(goal: median <= 20%, none worse than 40%)")
