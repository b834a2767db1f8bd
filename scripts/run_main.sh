#!/usr/bin/env bash
# README command (1): set up a fresh Debian 12 machine and run tpserve's main job on the built-in
# default model (written by `tpserve make-model`: random weights, real Llama-3 tokenizer).
#
#   scripts/run_main.sh [--model DIR] [--tp N] [--prompt TEXT] [--smoke]
#
# --model DIR uses a real Hugging Face checkpoint directory instead of the default model.
# --smoke stops by itself as soon as the result has been shown (what CI runs).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"

MODEL=""
TP=2
PROMPT="The quick brown fox jumps over the lazy dog."
MAX_TOKENS=48
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) MODEL="$2"; shift 2 ;;
    --tp) TP="$2"; shift 2 ;;
    --prompt) PROMPT="$2"; shift 2 ;;
    --smoke) shift ;;  # every step below already ends by itself
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "run_main: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

scripts/setup.sh
TPSERVE=build/server/tpserve

if [[ -z "$MODEL" ]]; then
  MODEL=.assets/models/tpserve-small-llama3
  if [[ ! -f "$MODEL/config.json" ]]; then
    "$TPSERVE" make-model --out "$MODEL" --preset small --tokenizer llama3 --seed 0
  fi
fi

echo "== the model, sharded for tp=$TP =="
"$TPSERVE" inspect --model "$MODEL" --tp "$TP"
echo "== the prompt as the model sees it =="
"$TPSERVE" tokenize --model "$MODEL" --text "$PROMPT"
echo "== generation on tp=$TP ranks, with the per-step latency breakdown =="
"$TPSERVE" generate --model "$MODEL" --tp "$TP" --prompt "$PROMPT" --max-tokens "$MAX_TOKENS" --profile
