#!/usr/bin/env bash
# README command (1): set up a fresh Debian 12 machine and serve the built-in default model over
# gRPC and the OpenAI-compatible HTTP API (CPU backend, TP=2, loopback), then show one call to each.
#
#   scripts/run_main.sh [--model DIR] [--tp N] [--port P] [--http-port H] [--metrics-port M] [--smoke]
#
# --model DIR serves a real Hugging Face checkpoint directory instead of the default model.
# --smoke stops the server once the client call has shown its result (what CI runs); otherwise
#         the server keeps serving until Ctrl-C / SIGTERM (which drains in-flight requests).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"

MODEL=""
TP=2
PORT=50051
HTTP_PORT=8000
METRICS_PORT=9090
SMOKE=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) MODEL="$2"; shift 2 ;;
    --tp) TP="$2"; shift 2 ;;
    --port) PORT="$2"; shift 2 ;;
    --http-port) HTTP_PORT="$2"; shift 2 ;;
    --metrics-port) METRICS_PORT="$2"; shift 2 ;;
    --smoke) SMOKE=1; shift ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "run_main: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

scripts/setup.sh --target tpserve_server  # the server and the CUDA module, not the test suite
TPSERVE=build/server/tpserve
if [[ -z "$MODEL" ]]; then
  MODEL=.assets/models/tpserve-small-llama3
  if [[ ! -f "$MODEL/config.json" ]]; then
    "$TPSERVE" make-model --out "$MODEL" --preset small --tokenizer llama3 --seed 0
  fi
fi

LOG="$(mktemp)"
"$TPSERVE" serve --model "$MODEL" --tp "$TP" --host 127.0.0.1 --port "$PORT" \
  --http-port "$HTTP_PORT" --metrics-port "$METRICS_PORT" 2> >(tee "$LOG" >&2) &
SERVER=$!
trap 'kill -TERM $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true; rm -f "$LOG"' EXIT

for _ in $(seq 1 600); do
  grep -q "tpserve ready:" "$LOG" && break
  kill -0 $SERVER 2>/dev/null || { echo "run_main: the server exited" >&2; exit 1; }
  sleep 0.1
done
grep -q "tpserve ready:" "$LOG" || { echo "run_main: the server did not become ready" >&2; exit 1; }

echo "== a client call (the default model's weights are random: its text is noise) =="
"$TPSERVE" client --target "127.0.0.1:$PORT" --prompt "The quick brown fox" --max-tokens 24
echo "== a chat completion over the OpenAI-compatible HTTP API (http://127.0.0.1:$HTTP_PORT/v1) =="
python3 - "$HTTP_PORT" <<'PY'
import json, sys, urllib.request
body = json.dumps({"messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 16}).encode()
request = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
response = json.load(urllib.request.urlopen(request, timeout=60))
print(json.dumps({"model": response["model"], "content": response["choices"][0]["message"]["content"],
                  "finish_reason": response["choices"][0]["finish_reason"], "usage": response["usage"]},
                 ensure_ascii=False))
PY
echo "== a few of its metrics (http://127.0.0.1:$METRICS_PORT/metrics) =="
python3 - "$METRICS_PORT" <<'PY'
import sys, urllib.request
body = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=10).read().decode()
for line in body.splitlines():
    if line.startswith(("tpserve_requests_total", "tpserve_time_to_first_token_seconds_count",
                        "tpserve_kv_cache_usage_ratio", "tpserve_allreduce_latency_seconds_count")):
        print(line)
PY

if [[ $SMOKE == 1 ]]; then
  kill -TERM $SERVER
  wait $SERVER
  echo "run_main: smoke run done (server drained and exited)"
  exit 0
fi
echo "serving on 127.0.0.1:$PORT (metrics :$METRICS_PORT); Ctrl-C to drain and stop"
wait $SERVER
