#!/usr/bin/env python3
"""What the engine's safety nets cost on the hot path: the collective timeouts (every wait of the
in-process communicator watches the clock once it stops spinning) on against off, on the 16 KiB
AllReduce (bench-comm, 2 ranks) and on a decode step (bench-decode). Runs are interleaved in
rounds [off, on, off'] (the order rotates each round) so drift on this shared machine hits both
sides; it prints the median of each side, on/off - 1, and next to it off'/off - 1, the spread of
two identical configurations measured the same way: the overhead means something only where it
stands out of that spread.

    benchmarks/safety_overhead.py [--tpserve build/server/tpserve] [--rounds 5] [--model small]
"""
import argparse
import json
import statistics
import subprocess

parser = argparse.ArgumentParser()
parser.add_argument("--tpserve", default="build/server/tpserve")
parser.add_argument("--rounds", type=int, default=5)
parser.add_argument("--model", default="small", help="a known model name (dummy weights)")
parser.add_argument("--tp", type=int, default=2)
parser.add_argument("--json", action="store_true")
args = parser.parse_args()
ON_MS = "60000"  # serve's default


def run_json(command):
    return json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)


def allreduce_us(timeout_ms):
    out = run_json([args.tpserve, "bench-comm", "--backend", "local", "-g", str(args.tp), "-b", "16K", "-e", "16K",
                    "-n", "3000", "-w", "300", "--collective-timeout-ms", timeout_ms, "--json"])
    return out["rows"][0]["in_place"]["time_us"]


def decode_step_ms(timeout_ms):
    out = run_json([args.tpserve, "bench-decode", "--model", args.model, "--load-format", "dummy", "--device", "cpu",
                    "--tp", str(args.tp), "--batch", "1", "--steps", "48", "--collective-timeout-ms", timeout_ms,
                    "--json"])
    return out["rows"][0]["step_ms"]


report = {}
for name, measure, unit in (("allreduce_16KiB", allreduce_us, "us"), ("decode_step", decode_step_ms, "ms")):
    samples = {"off": [], "on": [], "off_again": []}
    for round_index in range(args.rounds):
        order = [("off", "0"), ("on", ON_MS), ("off_again", "0")]
        order = order[round_index % 3:] + order[:round_index % 3]
        for label, timeout in order:
            samples[label].append(measure(timeout))
    medians = {label: statistics.median(values) for label, values in samples.items()}
    report[name] = {
        "unit": unit,
        "rounds": args.rounds,
        "median": medians,
        "overhead": medians["on"] / medians["off"] - 1,
        "off_off_spread": medians["off_again"] / medians["off"] - 1,
        "samples": samples,
    }

if args.json:
    print(json.dumps(report, indent=1))
else:
    print(f"safety nets on ({ON_MS} ms collective timeout) vs off (0), TP={args.tp}, {args.rounds} interleaved rounds")
    print(f"{'measure':<18} {'off':>10} {'on':>10} {'off again':>10} {'on/off-1':>10} {'off/off-1':>10}")
    for name, r in report.items():
        m = r["median"]
        print(f"{name:<18} {m['off']:>9.3f}{r['unit'][0]} {m['on']:>9.3f}{r['unit'][0]} {m['off_again']:>9.3f}{r['unit'][0]}"
              f" {100 * r['overhead']:>+9.2f}% {100 * r['off_off_spread']:>+9.2f}%")
