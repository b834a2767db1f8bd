#!/usr/bin/env python3
"""Runs `tpserve plan` on the scored points of published_points.json and prints prediction,
publication and error per point, then the median and worst absolute error (docs/PLANNER.md), twice:

1. with the uncalibrated presets (datasheet bandwidth and FLOPs, NCCL's model, no engine overhead):
   the hardware's floor;
2. calibrated per engine: for each (engine, hardware) with points marked "role": "calibration"
   (the engine's TP=1, batch-1 runs), `plan calibrate --base HARDWARE --engine-steps THOSE --out
   PROFILE` fits the engine's memory efficiency and per-layer time, and the engine's scored points
   on that hardware are predicted on PROFILE. An engine run with and without CUDA graphs
   ("engine_mode": "eager") counts as two engines; an eager engine's TP=1 runs fit its per-layer
   time like any other's (one GPU type's TP=1 runs cannot tell host time from GPU time). A point whose engine has no calibration on its
   hardware borrows, in this order: the newest calibrated version of the same engine on the same
   hardware ('~'), or the same engine's per-layer time from another GPU type on its own preset ('^');
   else the preset alone ('*'). Calibration points are never scored.

    benchmarks/planner/check_published.py [path/to/tpserve]
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
points = json.load(open(here / "published_points.json"))["points"]
evaluated = [p for p in points if p.get("role") != "calibration"]


def engine_of(p):
    """The engine as calibrations are keyed: its name and version, and " eager" without CUDA graphs."""
    return p["engine"] + (" eager" if published.engine_mode(p) == "eager" else "")


def predict(p, hardware):
    # Presets at the hardware's floor (--calibration none): the per-engine calibrations below are
    # profile files that carry their own numbers.
    return published.plan_row(tpserve, p, hardware, "none")


def report(title, hardware_of):
    print(f"\n{title}")
    print(f"{'engine':<17} {'model':<12} {'hardware':<14} {'tp':>2} {'batch':>5} {'ctx':>5} {'dtype':<5} "
          f"{'unit':<13} {'published':>9} {'predicted':>9} {'error':>7} {'comm%':>6}")
    errors, marks = [], []
    for p in evaluated:
        hardware, label = hardware_of(p)
        marks.append(label[len(p["hardware"]):])
        row = predict(p, hardware)
        predicted = row["step_ms"] if p["unit"] == "ms_per_token" else row["tokens_per_s"] / p["batch"]
        error = row["step_ms"] / published.measured_ms(p) - 1  # of the time per token, whatever unit was published
        errors.append(abs(error))
        print(f"{engine_of(p):<17} {p['model']:<12} {label:<14} {p['tp']:>2} {p['batch']:>5} {p['context']:>5} "
              f"{p.get('dtype', 'bf16'):<5} {p['unit']:<13} {p['value']:>9.2f} {predicted:>9.2f} {100 * error:>+6.1f}% "
              f"{100 * row['comm_share']:>5.1f}%")
    print(f"{len(errors)} points from {len({p['source'].split(' ')[0] for p in evaluated})} sources: "
          f"median |error| {100 * statistics.median(errors):.1f}%, worst {100 * max(errors):.1f}% "
          "(goal: median <= 20%, none worse than 40%)")
    return errors, marks


report("Uncalibrated presets (the hardware's floor):", lambda p: (p["hardware"], p["hardware"]))


def version(engine):
    return tuple(int(x) for x in engine.split(" ")[0].split("-", 1)[1].split(".") if x.isdigit())


def family(engine):
    name, _, mode = engine.partition(" ")
    return name.split("-", 1)[0] + (" " + mode if mode else "")


with tempfile.TemporaryDirectory() as scratch:
    fitted = {}  # (engine, hardware) -> profile JSON
    print("\nEngine calibrations (from the calibration points only):")
    for key in sorted({(engine_of(p), p["hardware"]) for p in points if p.get("role") == "calibration"}):
        engine, hardware = key
        steps = pathlib.Path(scratch, f"{engine.replace(' ', '-')}-{hardware}.steps.json")
        steps.write_text(json.dumps({"points": [{k: v for k, v in p.items() if k != "engine_mode"} for p in points
                                                if p.get("role") == "calibration" and (engine_of(p), p["hardware"]) == key]}))
        profile = pathlib.Path(scratch, f"{engine.replace(' ', '-')}-{hardware}.json")
        subprocess.run([tpserve, "plan", "calibrate", "--base", hardware, "--engine-steps", str(steps),
                        "--out", str(profile)], capture_output=True, text=True, check=True)
        fitted[key] = json.loads(profile.read_text())
        print(f"  {engine} on {hardware}: memory efficiency {fitted[key]['efficiency']['memory']:.3f}, "
              f"{fitted[key]['overheads']['layer_us']:.1f} us per layer")

    def borrowed(p):
        """The profile file and table label for a scored point (see the module docstring)."""
        engine, hardware = engine_of(p), p["hardware"]
        if (engine, hardware) in fitted:
            source, mark = fitted[(engine, hardware)], ""
        else:
            same_hw = sorted((e for e, h in fitted if h == hardware and family(e) == family(engine)), key=version)
            other_hw = [h for e, h in fitted if e == engine]
            if same_hw:
                source, mark = fitted[(same_hw[-1], hardware)], "~"
            elif other_hw:
                base = pathlib.Path(scratch, f"{hardware}.preset.json")
                subprocess.run([tpserve, "plan", "calibrate", "--base", hardware, "--out", str(base)],
                               capture_output=True, text=True, check=True)
                source = json.loads(base.read_text())
                source["overheads"]["layer_us"] = fitted[(engine, other_hw[0])]["overheads"]["layer_us"]
                mark = "^"
            else:
                return hardware, hardware + "*"
        path = pathlib.Path(scratch, f"{engine.replace(' ', '-')}-{hardware}-{mark or 'own'}.json")
        path.write_text(json.dumps(source))
        return str(path), hardware + mark

    errors, marks = report("Calibrated per engine (own calibration; ~ newest calibrated version on this GPU; "
                           "^ per-layer time from another GPU; * preset):", borrowed)
    for name, kinds in (("own calibration", {""}), ("borrowed (~ ^)", {"~", "^"}), ("preset (*)", {"*"})):
        chosen = [e for e, m in zip(errors, marks) if m in kinds]
        if chosen:
            print(f"  {name}: {len(chosen)} points, median |error| {100 * statistics.median(chosen):.1f}%, "
                  f"worst {100 * max(chosen):.1f}%")

    # The TP choice wherever a source measured one model at several TP degrees (same engine, GPU,
    # batch and context): the fastest step, and the most tokens/s per GPU, measured and predicted.
    print("\nTP choice where a source measured several TP degrees (calibrated per engine):")
    groups = {}
    for p in points:
        groups.setdefault((engine_of(p), p["hardware"], p["model"], p["batch"], p["context"]), []).append(p)
    for (engine, hardware, model, batch, context), group in sorted(groups.items()):
        if len({p["tp"] for p in group}) < 2:
            continue
        measured = {p["tp"]: published.measured_ms(p) for p in group}
        predicted = {p["tp"]: predict(p, borrowed(p)[0])["step_ms"] for p in group}
        fastest = (min(measured, key=measured.get), min(predicted, key=predicted.get))
        per_gpu = (min(measured, key=lambda tp: measured[tp] * tp), min(predicted, key=lambda tp: predicted[tp] * tp))
        steps = ", ".join(f"TP={tp} {measured[tp]:.1f}/{predicted[tp]:.1f} ms" for tp in sorted(measured))
        print(f"  {engine} {model} on {hardware}, batch {batch}: {steps} (measured/predicted); fastest TP "
              f"{fastest[0]}/{fastest[1]} {'agrees' if fastest[0] == fastest[1] else 'DIFFERS'}; most tokens/s per "
              f"GPU TP {per_gpu[0]}/{per_gpu[1]} {'agrees' if per_gpu[0] == per_gpu[1] else 'DIFFERS'}")
