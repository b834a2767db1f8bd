#!/usr/bin/env python3
"""bench-decode with a step limit below batch x context (4 x 40 tokens, 16 a step): the contexts are
filled in chunks and every point runs; --jsonl prints each row on stderr as it is measured (the keys
of --json's rows plus "device"), and --json's document keeps its schema with the same rows.

    bench_decode_jsonl_test.py TPSERVE_BINARY MODEL_DIR
"""
import json
import subprocess
import sys

TPSERVE, MODEL = sys.argv[1], sys.argv[2]
TOP_KEYS = {"device", "device_name", "model", "read_gb_per_s", "threads", "untraced_step_ms", "trace_overhead",
            "rows"}
ROW_KEYS = {"kernel", "tp", "batch", "context", "step_ms", "tokens_per_s", "vs_batch1", "compute_ms", "comm_ms",
            "host_ms", "comm_share", "allreduce_bytes", "allreduce_us", "weight_bytes", "ceiling_tokens_per_s",
            "fraction_of_ceiling", "op_ms"}
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

print("bench_decode_jsonl: " + ("all passed" if not failures else f"{len(failures)} failed"))
sys.exit(1 if failures else 0)
