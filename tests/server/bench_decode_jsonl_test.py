#!/usr/bin/env python3
"""bench-decode with a step limit below batch x context (4 x 40 tokens, 16 a step): the contexts are
filled in chunks and every point runs; --jsonl prints each row on stderr as it is measured (the keys
of --json's rows plus "device"), and --json's document keeps its schema with the same rows. Then
--prefill: prefill steps of one prompt each, timed per op, which plan calibrate fits the GEMM rate's
rise with the rows on.

    bench_decode_jsonl_test.py TPSERVE_BINARY MODEL_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

TPSERVE, MODEL = sys.argv[1], sys.argv[2]
TOP_KEYS = {"device", "device_name", "model", "read_gb_per_s", "threads", "temperature", "untraced_step_ms", "trace_overhead",
            "rows", "prefill_rows"}
ROW_KEYS = {"kernel", "kv_cache_dtype", "tp", "batch", "context", "step_ms", "tokens_per_s", "vs_batch1", "compute_ms", "comm_ms",
            "host_ms", "comm_share", "allreduce_bytes", "allreduce_us", "weight_bytes", "ceiling_tokens_per_s",
            "fraction_of_ceiling", "fraction_of_paired_read", "paired_read_ms", "op_ms"}
failures = []


def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what, flush=True)
    if not condition:
        failures.append(what)


run = subprocess.run([TPSERVE, "bench-decode", "--model", MODEL, "--device", "cpu", "--tp", "1", "--batch", "1,4",
                      "--context", "40", "--steps", "2", "--threads", "2", "--max-step-tokens", "16", "--jsonl",
                      "--json"], capture_output=True, text=True, timeout=120)
check(run.returncode == 0, f"bench-decode --max-step-tokens 16 --batch 1,4 --context 40 ran ({run.stderr[-400:]!r})")
lines = [json.loads(line) for line in run.stderr.splitlines() if line.startswith("{")]
check(len(lines) == 2, f"--jsonl: one line per point on stderr ({len(lines)})")
try:
    document = json.loads(run.stdout)
except json.JSONDecodeError as e:
    document = {}
    check(False, f"--json: stdout is one JSON document ({e})")
check(set(document) == TOP_KEYS, f"--json: the documented top-level keys ({sorted(document)})")
rows = document.get("rows", [])
check([(r.get("batch"), r.get("context")) for r in rows] == [(1, 40), (4, 40)],
      f"--json: the rows of batch 1 and 4 at context 40 ({[(r.get('batch'), r.get('context')) for r in rows]})")
check(all(set(r) == ROW_KEYS for r in rows), "--json: every row has the documented keys")
check(all(set(line) == ROW_KEYS | {"device"} for line in lines), "--jsonl: every line has the rows' keys and device")
check(all(line.get("device") == "cpu" for line in lines), "--jsonl: device is cpu")
check([{k: v for k, v in line.items() if k != "device"} for line in lines] == rows,
      "--jsonl: each line is the final document's row (batch 1 comes first, so vs_batch1 agrees too)")
check(all(r.get("tokens_per_s", 0) > 0 for r in rows), "every point decoded")
check(document.get("prefill_rows") == [], "--json: no prefill rows without --prefill")
check(all(r.get("paired_read_ms", 0) > 0 and r.get("fraction_of_paired_read", 0) > 0 for r in rows),
      "CPU: every row has its paired read (on by default)")

PREFILL_KEYS = {"kernel", "kv_cache_dtype", "tp", "tokens", "step_ms", "tokens_per_s", "compute_ms", "comm_ms", "host_ms", "op_ms"}
run = subprocess.run([TPSERVE, "bench-decode", "--model", MODEL, "--device", "cpu", "--tp", "1,2", "--batch", "1,2",
                      "--context", "8", "--steps", "2", "--threads", "2", "--prefill", "8,64", "--prefill-repeats", "2",
                      "--no-paired-read", "--json"], capture_output=True, text=True, timeout=120)
check(run.returncode == 0, f"bench-decode --prefill 8,64 ran ({run.stderr[-400:]!r})")
document = json.loads(run.stdout) if run.returncode == 0 else {}
prefill = document.get("prefill_rows", [])
check(all(r.get("paired_read_ms") == 0 and r.get("fraction_of_paired_read") == 0 for r in document.get("rows", [])),
      "--no-paired-read: no row has a paired read")
check([(r.get("tp"), r.get("tokens")) for r in prefill] == [(1, 8), (1, 64), (2, 8), (2, 64)],
      f"--prefill: one row per TP degree and prompt length ({[(r.get('tp'), r.get('tokens')) for r in prefill]})")
check(all(set(r) == PREFILL_KEYS for r in prefill), "--prefill: every row has the documented keys")
for tp in (1, 2):
    rows_at_tp = [r for r in prefill if r.get("tp") == tp]
    # Which ops ran, not how long they took (timings belong in benchmarks): a prefill step runs the
    # projections, attention and the LM head for its sampling row.
    check(all(all(r.get("op_ms", {}).get(op, 0) > 0 for op in ("qkv_proj", "attention", "lm_head")) and
              r.get("step_ms", 0) > 0 and r.get("tokens_per_s", 0) > 0 for r in rows_at_tp) and rows_at_tp,
          f"TP={tp}: every prefill step was timed, per op")
too_long = subprocess.run([TPSERVE, "bench-decode", "--model", MODEL, "--device", "cpu", "--tp", "1", "--batch", "1",
                           "--max-step-tokens", "32", "--prefill", "64"], capture_output=True, text=True, timeout=60)
check(too_long.returncode != 0 and "--prefill 64: a prompt length must be 1 to --max-step-tokens (32)" in too_long.stderr,
      f"--prefill longer than a step is refused by name ({too_long.stderr[-200:]!r})")

# plan calibrate fits on the decode and prefill rows together.
with tempfile.TemporaryDirectory() as work:
    measured = os.path.join(work, "bench.json")
    with open(measured, "w") as f:
        f.write(run.stdout)
    calibrate = subprocess.run([TPSERVE, "plan", "calibrate", "--bench-decode", measured, "--out",
                                os.path.join(work, "cpu.json")], capture_output=True, text=True, timeout=60)
    check(calibrate.returncode == 0 and "of them prefill" in calibrate.stdout + calibrate.stderr,
          f"plan calibrate fits the prefill steps ({(calibrate.stdout + calibrate.stderr)[-300:]!r})")

print("bench_decode_jsonl: " + ("all passed" if not failures else f"{len(failures)} failed"))
sys.exit(1 if failures else 0)
