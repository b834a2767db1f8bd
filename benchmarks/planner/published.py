"""What the checks against published points share (check_published.py, check_published_prefill.py,
fit_engine_calibration.py): a published figure as milliseconds, and the planner's prediction of it
through the tpserve binary."""
import json
import subprocess


def measured_ms(p):
    """A decode point's time per decode step (ms per token of one sequence), or a prefill point's TTFT."""
    if "ttft_ms" in p:
        return p["ttft_ms"]
    return p["value"] if p["unit"] == "ms_per_token" else 1e3 / p["value"]


def dtype(p):
    return "fp8" if p.get("dtype") == "fp8" else "bf16"


def engine_mode(p):
    """How the point's engine issued its kernels: "eager" (no CUDA graphs) or "graphs"."""
    return p.get("engine_mode", "graphs")


def plan_row(tpserve, p, hardware, calibration, mode="graphs"):
    """`tpserve plan` at a decode point (its TP, batch, context and dtype) for an engine of `mode`
    (--engine-mode): the JSON row."""
    out = subprocess.run([tpserve, "plan", "--model", p["model"], "--hardware", hardware, "--calibration", calibration,
                          "--engine-mode", mode, "--tp", str(p["tp"]), "--batch", str(p["batch"]),
                          "--context", str(p["context"]), "--dtype", dtype(p), "--json"],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["rows"][0]


def prefill_ttft_ms(tpserve, p, hardware, calibration):
    """`tpserve plan simulate` of one request whose whole prompt is prefilled in one step, as the
    publishing engines ran it: its TTFT (ms), or None when the request does not fit."""
    tokens = p["prompt_tokens"]
    out = subprocess.run([tpserve, "plan", "simulate", "--model", p["model"], "--hardware", hardware,
                          "--calibration", calibration, "--tp", str(p["tp"]), "--dtype", dtype(p), "--requests", "1",
                          "--rate", "1", "--prompt-tokens", str(tokens), "--output-tokens", "1",
                          "--max-batched-tokens", str(max(tokens, 2048)), "--json"],
                         capture_output=True, text=True, check=True)
    run = json.loads(out.stdout)["runs"][0]
    return run["ttft_ms"]["p50"] if run["completed"] else None
