#!/usr/bin/env python3
"""Fits the default engine calibration the presets are used with (planner/calibrations/engines.json)
on every published point (published_points.json: decode steps; published_prefill.json: time to the
first token at batch 1), and checks it leave one source out: each source group's points predicted
from a calibration fitted without them. docs/PLANNER.md records the result.

Per preset GPU, `plan calibrate --base GPU --engine-steps DECODE` fits the memory efficiency and the
fixed time per decoder layer on its decode points, then `plan calibrate --base THAT --engine-steps
PREFILL` the compute efficiency and the row count at which GEMMs reach half of it on its prefill
points. A GPU with no decode (or no prefill) points takes the numbers of its nearest sibling that has
them (SIBLINGS: the same class of machine, then the generation before or after). Decode points of
engines without CUDA graphs ("engine_mode": "eager": TGI 1.0.3, vLLM's enforce_eager runs) fit none
of that: on each GPU's fitted numbers they fit the host time per layer such an engine needs (`plan
calibrate --engine-steps`), one figure for every GPU (the mean over GPUs, weighted by their points),
which `plan --engine-mode eager` uses.

    benchmarks/planner/fit_engine_calibration.py [path/to/tpserve] [--check-only] [--points]

--points also prints every point's held-out error (source group, model, GPU, TP, prompt or batch).
"""
import datetime
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile

import published

here = pathlib.Path(__file__).resolve().parent
repo = here.parents[1]
args = [a for a in sys.argv[1:] if not a.startswith("--")]
tpserve = args[0] if args else str(repo / "build/server/tpserve")
check_only = "--check-only" in sys.argv
per_point = "--points" in sys.argv
GPUS = sorted(p.stem for p in (repo / "planner/profiles").glob("*.json"))
# Where a GPU without points borrows from, nearest first: HGX boards from HGX boards, PCIe cards from
# PCIe cards.
SIBLINGS = {"a10-pcie": ["l40s-pcie", "a100-sxm", "a100-sxm-40gb", "h100-sxm", "h200-sxm"],
            "l40s-pcie": ["a10-pcie", "a100-sxm", "h100-sxm", "a100-sxm-40gb", "h200-sxm"],
            "a100-sxm": ["a100-sxm-40gb", "h100-sxm", "h200-sxm", "l40s-pcie", "a10-pcie"],
            "a100-sxm-40gb": ["a100-sxm", "h100-sxm", "h200-sxm", "l40s-pcie", "a10-pcie"],
            "h100-sxm": ["h200-sxm", "a100-sxm", "a100-sxm-40gb", "l40s-pcie", "a10-pcie"],
            "h200-sxm": ["h100-sxm", "a100-sxm", "a100-sxm-40gb", "l40s-pcie", "a10-pcie"]}


def borrowed(gpu, fits):
    """`gpu`'s own fit, else its nearest sibling's, and where it came from."""
    if gpu in fits:
        return fits[gpu], None
    for sibling in SIBLINGS[gpu]:
        if sibling in fits:
            return fits[sibling], sibling
    raise ValueError("no points on any GPU")
decode_points = json.load(open(here / "published_points.json"))["points"]
prefill_points = json.load(open(here / "published_prefill.json"))["points"]


def decode_group(p):
    s = p["source"].lower()
    for key, group in (("lmdeploy", "lmdeploy"), ("nim", "nim"), ("vllm-project", "vllm"), ("philschmid", "tgi"),
                       ("qwenlm", "qwen")):
        if key in s:
            return group
    raise ValueError("no source group for " + p["source"])


for p in decode_points:
    p["group"] = decode_group(p)


def calibrate(base, points, scratch, name):
    steps = pathlib.Path(scratch, name + ".steps.json")
    steps.write_text(json.dumps({"points": points}))
    out = pathlib.Path(scratch, name + ".profile.json")
    subprocess.run([tpserve, "plan", "calibrate", "--base", base, "--engine-steps", str(steps), "--out", str(out)],
                   capture_output=True, text=True, check=True)
    return out


def preset_profile(gpu):
    """The preset as a profile file's JSON (`plan calibrate --base GPU` with nothing to fit)."""
    out = subprocess.run([tpserve, "plan", "calibrate", "--base", gpu, "--out", "/dev/stdout"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.split("\nwrote")[0])


def described(points):
    groups = sorted({p["group"] for p in points})
    return f"{len(points)} points ({', '.join(groups)})"


def fit(all_decode, prefill, scratch, tag):
    """({gpu: {"efficiency": ..., "overheads": ..., "fitted_on": ...}}, {"layer_host_us": ...,
    "fitted_on": ...}) from these points."""
    decode = [p for p in all_decode if published.engine_mode(p) == "graphs"]
    decode_fits, prefill_fits = {}, {}
    for gpu in GPUS:
        mine = [p for p in decode if p["hardware"] == gpu]
        if mine:
            profile = json.loads(calibrate(gpu, mine, scratch, f"{tag}-{gpu}-decode").read_text())
            decode_fits[gpu] = (profile["efficiency"]["memory"], profile["overheads"]["layer_us"], described(mine))
    for gpu in GPUS:
        mine = [p for p in prefill if p["hardware"] == gpu]
        if not mine:
            continue
        base = preset_profile(gpu)
        (m, l, _), _ = borrowed(gpu, decode_fits)
        base["efficiency"]["memory"] = base["efficiency"]["attention"] = m
        base["overheads"]["layer_us"] = l
        base_path = pathlib.Path(scratch, f"{tag}-{gpu}-base.json")
        base_path.write_text(json.dumps(base))
        profile = json.loads(calibrate(str(base_path), mine, scratch, f"{tag}-{gpu}-prefill").read_text())
        prefill_fits[gpu] = (profile["efficiency"]["compute"], profile["efficiency"]["compute_half_rows"], described(mine))
    out = {}
    for gpu in GPUS:
        (m, l, d), decode_from = borrowed(gpu, decode_fits)
        (c, h, pd), prefill_from = borrowed(gpu, prefill_fits)
        out[gpu] = {"efficiency": {"memory": round(m, 4), "compute": round(c, 4), "compute_half_rows": round(h, 1)},
                    "overheads": {"layer_us": round(l, 2)},
                    "fitted_on": (f"decode: {decode_from}'s" if decode_from else "decode:") + f" {d}; " +
                                 (f"prefill: {prefill_from}'s" if prefill_from else "prefill:") + f" {pd}"}
    return out, fit_eager([p for p in all_decode if published.engine_mode(p) == "eager"], out, scratch, tag)


def fit_eager(eager, profiles, scratch, tag):
    """The host time per layer of the eager points, each on its GPU's fitted numbers (`profiles`)."""
    per_gpu = []  # (points, layer_host_us)
    for gpu in GPUS:
        mine = [p for p in eager if p["hardware"] == gpu]
        if not mine:
            continue
        base = preset_profile(gpu)
        base["efficiency"].update(profiles[gpu]["efficiency"])
        base["efficiency"]["attention"] = profiles[gpu]["efficiency"]["memory"]
        base["overheads"]["layer_us"] = profiles[gpu]["overheads"]["layer_us"]
        base_path = pathlib.Path(scratch, f"{tag}-{gpu}-eager-base.json")
        base_path.write_text(json.dumps(base))
        profile = json.loads(calibrate(str(base_path), mine, scratch, f"{tag}-{gpu}-eager").read_text())
        per_gpu.append((len(mine), profile["overheads"]["layer_host_us"]))
    points = sum(n for n, _ in per_gpu)
    if points == 0:
        return None  # no eager entry: `plan --engine-mode eager` refuses such a calibration by name
    return {"layer_host_us": round(sum(n * h for n, h in per_gpu) / points, 1),
            "fitted_on": f"decode: {described(eager)} on {len(per_gpu)} GPU types"}


def write_calibration(fitted, path, about):
    profiles, eager = fitted
    value = {"_about": about, "profiles": profiles} | ({"eager": eager} if eager else {})
    path.write_text(json.dumps(value, indent=1) + "\n")


def predict_decode(p, calibration):
    mode = published.engine_mode(p) if calibration != "none" else "graphs"
    return published.plan_row(tpserve, p, p["hardware"], calibration, mode)["step_ms"]


def predict_prefill(p, calibration):
    return published.prefill_ttft_ms(tpserve, p, p["hardware"], calibration)


def errors(points, calibration_of, predict):
    out = []
    for p in points:
        predicted = predict(p, calibration_of(p))
        if predicted is not None:
            out.append((p, predicted / published.measured_ms(p) - 1))
    return out


def summary(name, errs):
    values = [abs(e) for _, e in errs]
    worst = max(errs, key=lambda pe: abs(pe[1]))
    print(f"  {name}: {len(values)} points, median |error| {100 * statistics.median(values):.1f}%, worst "
          f"{100 * max(values):.1f}% ({worst[0]['group']} {worst[0]['model']} {worst[0]['hardware']} TP={worst[0]['tp']})")
    return values


with tempfile.TemporaryDirectory() as scratch:
    target = repo / "planner/calibrations/engines.json"
    if not check_only:
        fitted = fit(decode_points, prefill_points, scratch, "all")
        profiles, eager = fitted
        about = (f"The default engine calibration of the presets (tpserve plan --calibration default), fitted "
                 f"{datetime.date.today().isoformat()} by benchmarks/planner/fit_engine_calibration.py on every "
                 f"published point in benchmarks/planner/published_points.json ({len(decode_points)} decode) and "
                 f"published_prefill.json ({len(prefill_points)} prefill): per GPU, the memory efficiency and fixed "
                 f"time per layer of decode steps, the compute efficiency and half-rate rows of prefill; a GPU "
                 f"without points takes its nearest sibling's; eager (no CUDA graphs): the host time per layer of "
                 f"the decode points of engines without CUDA graphs. Checked leave one source out: docs/PLANNER.md.")
        write_calibration(fitted, target, about)
        for gpu, c in profiles.items():
            print(f"{gpu}: memory {c['efficiency']['memory']:.3f}, {c['overheads']['layer_us']:.1f} us/layer, compute "
                  f"{c['efficiency']['compute']:.3f}, half at {c['efficiency']['compute_half_rows']:.0f} rows "
                  f"({c['fitted_on']})")
        if eager:
            print(f"eager engines: {eager['layer_host_us']:.1f} us of host time per layer ({eager['fitted_on']})")
        print(f"wrote {target} (rebuild tpserve to compile it in)")

    print("\nUncalibrated presets (--calibration none):")
    none_all = summary("decode", errors(decode_points, lambda p: "none", predict_decode)) + \
        summary("prefill", errors(prefill_points, lambda p: "none", predict_prefill))
    groups = sorted({p["group"] for p in decode_points + prefill_points})
    held_out, eager_held_out = {}, []
    for group in groups:
        fitted = fit([p for p in decode_points if p["group"] != group],
                     [p for p in prefill_points if p["group"] != group], scratch, "without-" + group)
        path = pathlib.Path(scratch, f"without-{group}.json")
        write_calibration(fitted, path, "leave-one-out")
        held_out[group] = str(path)
        if any(p["group"] == group and published.engine_mode(p) == "eager" for p in decode_points):
            eager_held_out.append(f"{fitted[1]['layer_host_us']:.1f} us without {group} ({fitted[1]['fitted_on']})")
    print("\nLeave one source out (each group predicted from a calibration fitted without it):")
    decode_errs = errors(decode_points, lambda p: held_out[p["group"]], predict_decode)
    prefill_errs = errors(prefill_points, lambda p: held_out[p["group"]], predict_prefill)
    print(f"  eager engines' host time per layer: {'; '.join(eager_held_out)}")
    both = summary("decode", decode_errs) + summary("prefill", prefill_errs)
    for group in groups:
        summary("  " + group, [e for e in decode_errs + prefill_errs if e[0]["group"] == group])
    print(f"  all: {len(both)} points, median |error| {100 * statistics.median(both):.1f}%, worst "
          f"{100 * max(both):.1f}%, {sum(1 for v in both if v > 0.5)} worse than 50% (goal: median <= 25%, none > 50%)")
    print(f"  uncalibrated, same points: median |error| {100 * statistics.median(none_all):.1f}%, worst "
          f"{100 * max(none_all):.1f}%, {sum(1 for v in none_all if v > 0.5)} worse than 50%")
    if per_point:
        print("\nEach point held out (group, model, GPU, TP, decode batch or prompt tokens, dtype: error):")
        for p, e in sorted(decode_errs + prefill_errs,
                           key=lambda pe: (pe[0]["group"], pe[0]["hardware"], pe[0]["model"], pe[0]["tp"],
                                           pe[0].get("prompt_tokens", 0), pe[0].get("batch", 0))):
            shape = f"prompt {p['prompt_tokens']}" if "prompt_tokens" in p else f"batch {p.get('batch', '?')}"
            print(f"  {p['group']:<12} {p['model']:<14} {p['hardware']:<13} TP={p['tp']} {shape:<12} "
                  f"{p.get('dtype', ''):<5} {100 * e:+6.1f}%")
