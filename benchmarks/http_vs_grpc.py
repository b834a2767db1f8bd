#!/usr/bin/env python3
"""The HTTP API's cost per token against gRPC's: one `tpserve serve` (tiny dummy model by default,
where the engine's step is shortest and the front end's share largest), the same `tpserve loadgen`
workload over gRPC and over the OpenAI API (/v1/completions, SSE) at each concurrency, in rounds
whose order alternates so drift on a shared machine hits both sides. Prints per concurrency the
median over rounds of TPOT p50 and output tokens/s for each API, OpenAI/gRPC - 1, and the spread
of gRPC's own rounds (max/min - 1), the noise the difference is to be read against.

    benchmarks/http_vs_grpc.py [--tpserve build/server/tpserve] [--rounds 3] [--concurrency 1,32]
"""
import argparse
import json
import re
import statistics
import subprocess
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--tpserve", default="build/server/tpserve")
parser.add_argument("--model", default="tiny", help="a known model name (dummy weights)")
parser.add_argument("--rounds", type=int, default=3)
parser.add_argument("--concurrency", default="1,32")
parser.add_argument("--output-tokens", type=int, default=64)
parser.add_argument("--prompt-tokens", type=int, default=32)
parser.add_argument("--threads", type=int, default=1, help="the server's compute threads")
parser.add_argument("--json", action="store_true")
args = parser.parse_args()
levels = [int(c) for c in args.concurrency.split(",")]


def start_server():
    command = [args.tpserve, "serve", "--model", args.model, "--load-format", "dummy", "--device", "cpu",
               "--port", "0", "--metrics-port", "0", "--http-port", "0", "--tp", "1", "--threads", str(args.threads),
               "--max-batch-size", str(max(levels)), "--max-queue", str(4 * max(levels))]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    for line in process.stderr:
        match = re.search(r"tpserve ready: grpc ([0-9.]+:\d+) .* http ([0-9.]+:\d+)", line)
        if match:
            return process, match.group(1), match.group(2)
    sys.exit("the server did not start: " + " ".join(command))


def loadgen(api, target, concurrency):
    requests = max(16, 4 * concurrency)
    command = [args.tpserve, "loadgen", "--concurrency", str(concurrency), "--requests", str(requests),
               "--warmup", str(min(concurrency, 8)), "--prompt-tokens", str(args.prompt_tokens),
               "--output-tokens", str(args.output_tokens), "--seed", "1", "--json"]
    if api == "openai":
        command += ["--api", "openai", "--server", "http://" + target, "--vocab-size", "128256"]
    else:
        command += ["--server", target]
    run = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)["runs"][0]
    assert run["failed"] == 0, (api, concurrency, run["errors"])
    return {"tpot_p50_ms": run["tpot_ms"]["p50"], "tokens_per_s": run["output_token_throughput"],
            "ttft_p50_ms": run["ttft_ms"]["p50"], "client_cpu_ms_per_token": run["client_cpu_ms_per_token"]}


def main():
    server, grpc_target, http_target = start_server()
    samples = {(api, c): [] for api in ("grpc", "openai") for c in levels}
    try:
        for round_index in range(args.rounds):
            for c in levels:
                order = ("grpc", "openai") if round_index % 2 == 0 else ("openai", "grpc")
                for api in order:
                    samples[(api, c)].append(loadgen(api, grpc_target if api == "grpc" else http_target, c))
    finally:
        server.terminate()
        server.wait(timeout=60)
    rows = []
    for c in levels:
        row = {"concurrency": c}
        for api in ("grpc", "openai"):
            for metric in ("tpot_p50_ms", "tokens_per_s", "ttft_p50_ms", "client_cpu_ms_per_token"):
                row[f"{api}_{metric}"] = statistics.median(s[metric] for s in samples[(api, c)])
        row["tpot_openai_vs_grpc"] = row["openai_tpot_p50_ms"] / row["grpc_tpot_p50_ms"] - 1
        row["tokens_openai_vs_grpc"] = row["openai_tokens_per_s"] / row["grpc_tokens_per_s"] - 1
        grpc_tokens = [s["tokens_per_s"] for s in samples[("grpc", c)]]
        row["grpc_round_spread"] = max(grpc_tokens) / min(grpc_tokens) - 1
        rows.append(row)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{args.model}, {args.rounds} rounds, {args.prompt_tokens} prompt / {args.output_tokens} output tokens, "
          f"medians over rounds (goal: OpenAI within 5% of gRPC)")
    print(f"{'conc':>4} {'gRPC TPOT ms':>12} {'HTTP TPOT ms':>12} {'diff':>7} {'gRPC tok/s':>10} {'HTTP tok/s':>10} "
          f"{'diff':>7} {'gRPC spread':>11}")
    for r in rows:
        print(f"{r['concurrency']:>4} {r['grpc_tpot_p50_ms']:>12.3f} {r['openai_tpot_p50_ms']:>12.3f} "
              f"{100 * r['tpot_openai_vs_grpc']:>+6.1f}% {r['grpc_tokens_per_s']:>10.1f} {r['openai_tokens_per_s']:>10.1f} "
              f"{100 * r['tokens_openai_vs_grpc']:>+6.1f}% {100 * r['grpc_round_spread']:>10.1f}%")


main()
