#!/usr/bin/env python3
"""generate --batch with the prefix cache (issue 32): the copies of one prompt prefill its full
blocks once and share them, and every copy's tokens and logprobs are those of --prefix-caching off,
greedy and seeded, at TP 1 and 2; the JSON timing and --profile count the prompt tokens computed and
those taken from the cache.

    generate_prefix_cache_test.py TPSERVE_BINARY MODEL_DIR
"""
import json
import subprocess
import sys

TPSERVE, MODEL = sys.argv[1], sys.argv[2]
PROMPT = "The quick brown fox jumps over the lazy dog while the cat watches from the window. " * 3
failures = []


def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what, flush=True)
    if not condition:
        failures.append(what)


def generate(tp, caching, sampling, extra=()):
    run = subprocess.run([TPSERVE, "generate", "--model", MODEL, "--device", "cpu", "--prompt", PROMPT, "--batch", "3",
                          "--max-tokens", "6", "--tp", str(tp), "--block-size", "4", "--logprobs", "2",
                          "--prefix-caching", caching, *sampling, *extra],
                         capture_output=True, text=True, timeout=120)
    check(run.returncode == 0, f"TP={tp} {caching} {sampling}: generate ran ({run.stderr[-300:]!r})")
    return run


for tp in (1, 2):
    for sampling in ([], ["--temperature", "0.8", "--seed", "11"]):
        on, off = (json.loads(generate(tp, c, sampling, ["--json"]).stdout or "{}") for c in ("on", "off"))
        prompt_tokens = len(on.get("prompt_token_ids", []))
        shared = (prompt_tokens - 1) // 4 * 4  # full blocks, never the last token
        what = f"TP={tp}, {'seeded' if sampling else 'greedy'}"
        check([o["token_ids"] for o in on.get("outputs", [])] == [o["token_ids"] for o in off.get("outputs", [])]
              and [o["logprobs"] for o in on.get("outputs", [])] == [o["logprobs"] for o in off.get("outputs", [])]
              and len(on.get("outputs", [])) == 3,
              f"{what}: every copy's tokens and logprobs equal --prefix-caching off")
        check(on.get("timing", {}).get("cached_tokens") == 2 * shared,
              f"{what}: copies 2 and 3 took {shared} prompt tokens each from the cache "
              f"({on.get('timing', {}).get('cached_tokens')})")
        check(on.get("timing", {}).get("prefill_tokens") == 3 * prompt_tokens - 2 * shared,
              f"{what}: the rest was computed ({on.get('timing', {}).get('prefill_tokens')} of {3 * prompt_tokens})")
        check(off.get("timing", {}).get("cached_tokens") == 0, f"{what}: off takes nothing from a cache")

profile = generate(1, "on", [], ["--profile"])
check("taken from the prefix cache" in profile.stderr, "--profile counts the prompt tokens taken from the cache")

print("generate_prefix_cache: " + ("all passed" if not failures else f"{len(failures)} failed"))
sys.exit(1 if failures else 0)
