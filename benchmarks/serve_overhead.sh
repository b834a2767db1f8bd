#!/usr/bin/env bash
# Starts `tpserve serve` on a model (TP=1, loopback, free ports), runs bench_serve against it at
# 1 and 32 concurrent streams, and stops the server.
#   benchmarks/serve_overhead.sh MODEL_DIR [STREAMS=1,32] [MAX_TOKENS=64]
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODEL="$1"; STREAMS="${2:-1,32}"; MAX_TOKENS="${3:-64}"
LOG="$(mktemp)"
"$REPO/build/server/tpserve" serve --model "$MODEL" --tp 1 --port 0 --metrics-port 0 \
  --max-batch-size 32 2>"$LOG" &
SERVER=$!
trap 'kill -TERM $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true; rm -f "$LOG"' EXIT
for _ in $(seq 1 600); do grep -q "tpserve ready:" "$LOG" && break; sleep 0.1; done
TARGET="$(sed -n 's/.*tpserve ready: grpc \([0-9.:]*\) .*/\1/p' "$LOG")"
"$REPO/build/benchmarks/bench_serve" --target "$TARGET" --server-pid "$SERVER" \
  --streams "$STREAMS" --max-tokens "$MAX_TOKENS"
