#!/usr/bin/env python3
"""The step model's prefill steps against published_prefill.json (docs/PLANNER.md): each point's time to
the first token of one prompt at batch 1, predicted by `tpserve plan simulate` (one request, its whole
prompt in one step, as the publishing engines ran it), twice:

1. with the uncalibrated presets (datasheet FLOPs and bandwidth): the hardware's floor;
2. calibrated from published timings, leave one source out: for each source group and GPU type,
   `plan calibrate --base HARDWARE --engine-steps POINTS --out PROFILE` fits the compute efficiency on
   that GPU's points from the other groups only, and the group's points are predicted on PROFILE
   ('*': no other group measured that GPU; the preset alone).

    benchmarks/planner/check_published_prefill.py [path/to/tpserve]
"""
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile

import published

here = pathlib.Path(__file__).resolve().parent
tpserve = sys.argv[1] if len(sys.argv) > 1 else str(here.parents[1] / "build/server/tpserve")
points = json.load(open(here / "published_prefill.json"))["points"]


def report(title, hardware_of):
    print(f"\n{title}")
    print(f"{'group':<13} {'engine':<30} {'model':<12} {'hardware':<11} {'tp':>2} {'prompt':>6} {'dtype':<5} "
          f"{'published':>9} {'predicted':>9} {'error':>7}")
    errors, preset_only = [], []
    for p in points:
        hardware, label = hardware_of(p)
        predicted = published.prefill_ttft_ms(tpserve, p, hardware, "none")
        row = (f"{p['group']:<13} {p['engine'][:30]:<30} {p['model']:<12} {label:<11} {p['tp']:>2} "
               f"{p['prompt_tokens']:>6} {p['dtype']:<5} {p['ttft_ms']:>9.1f}")
        if predicted is None:
            print(row + "   refused: the planner's memory model leaves no KV cache for this prompt (not scored)")
            continue
        error = predicted / p["ttft_ms"] - 1
        errors.append(abs(error))
        preset_only.append(label.endswith("*"))
        print(row + f" {predicted:>9.1f} {100 * error:>+6.1f}%")
    print(f"{len(errors)} points from {len({p['group'] for p in points})} source groups: median |error| "
          f"{100 * statistics.median(errors):.1f}%, worst {100 * max(errors):.1f}%")
    if any(preset_only) and not all(preset_only):
        for name, chosen in (("calibrated", [e for e, o in zip(errors, preset_only) if not o]),
                             ("preset alone (*)", [e for e, o in zip(errors, preset_only) if o])):
            print(f"  {name}: {len(chosen)} points, median |error| {100 * statistics.median(chosen):.1f}%, "
                  f"worst {100 * max(chosen):.1f}%")
    return errors


report("Uncalibrated presets (the hardware's floor):", lambda p: (p["hardware"], p["hardware"]))

with tempfile.TemporaryDirectory() as scratch:
    profiles = {}  # (left-out group, hardware) -> profile path, or None: no other group measured it
    print("\nCompute efficiency per GPU type, fitted without each source group:")
    for group in sorted({p["group"] for p in points}):
        for hardware in sorted({p["hardware"] for p in points if p["group"] == group}):
            others = [p for p in points if p["group"] != group and p["hardware"] == hardware]
            if not others:
                profiles[(group, hardware)] = None
                continue
            steps = pathlib.Path(scratch, f"{group}-{hardware}.steps.json")
            steps.write_text(json.dumps({"points": others}))
            profile = pathlib.Path(scratch, f"{group}-{hardware}.json")
            run = subprocess.run([tpserve, "plan", "calibrate", "--base", hardware, "--engine-steps", str(steps),
                                  "--out", str(profile)], capture_output=True, text=True, check=True)
            profiles[(group, hardware)] = str(profile)
            fitted = json.loads(profile.read_text())["efficiency"]
            print(f"  without {group}, {hardware}: compute efficiency {fitted['compute']:.3f}, half of that rate at "
                  f"{fitted['compute_half_rows']:.0f} rows; from {len(others)} points "
                  f"({len({p['group'] for p in others})} groups)")

    def calibrated(p):
        path = profiles[(p["group"], p["hardware"])]
        return (path, p["hardware"]) if path else (p["hardware"], p["hardware"] + "*")

    report("Calibrated from the other source groups' points on the same GPU (leave one source out):", calibrated)
