#!/usr/bin/env bash
# The README's main command: installs what is missing (scripts/setup.sh), builds vkc, checks the
# tinyllama example (the Hugging Face oracle's weights), compiles it for the best Vulkan device
# (lavapipe when there is no GPU; on a GPU the compile measures, within the default 15 s budget)
# and runs it greedily there: prefill on the oracle's 16-token prompt, then 8 decode steps over the
# KV cache on the device, printing the tokens and the time per token. The tokens must equal
# Hugging Face's.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

echo "== build"
mkdir -p bin
go build -o bin/vkc ./cmd/vkc

echo "== vkc check examples/tinyllama/model.yaml"
bin/vkc check examples/tinyllama/model.yaml

echo "== vkc compile examples/tinyllama/model.yaml (the best Vulkan device, lavapipe when there is no GPU: measured within 15 s on a GPU, static on lavapipe)"
bin/vkc compile examples/tinyllama/model.yaml -o bin/tinyllama.plan

echo "== vkc run: greedy generation on the device (prefill the 16-token prompt, then 8 decode steps)"
# input_ids of testdata/hf/tinyllama/golden.safetensors
prompt=37,235,140,72,255,137,203,133,79,192,144,129,204,71,237,252
out=$(bin/vkc run bin/tinyllama.plan --prompt-ids "$prompt" --steps 9)
echo "$out"
# greedy_tokens of testdata/hf/tinyllama/golden.safetensors
want="greedy tokens: 101 175 85 117 132 175 6 182 26"
if grep -qx "$want" <<<"$out"; then
  echo "== the tokens equal Hugging Face transformers' greedy continuation"
else
  echo "== MISMATCH: Hugging Face transformers gives: ${want#greedy tokens: }" >&2
  exit 1
fi
