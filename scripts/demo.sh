#!/usr/bin/env bash
# The README's main command: installs what is missing (scripts/setup.sh), builds vkc, checks the
# tinyllama example (the Hugging Face oracle's weights) and runs it greedily in the reference
# interpreter: prefill on the oracle's 16-token prompt, then 8 decode steps over the KV cache.
# The tokens printed must equal Hugging Face's. (Once `vkc compile` exists this becomes
# compile-and-run on the best Vulkan device.)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

echo "== build"
mkdir -p bin
go build -o bin/vkc ./cmd/vkc

echo "== vkc check examples/tinyllama/model.yaml"
bin/vkc check examples/tinyllama/model.yaml

echo "== vkc eval (prefill the prompt, then 8 greedy decode steps)"
out=$(bin/vkc eval examples/tinyllama/model.yaml -f prefill \
  --input tokens=testdata/hf/tinyllama/golden.safetensors:input_ids --input pos=0 --greedy 9)
echo "$out"
# greedy_tokens of testdata/hf/tinyllama/golden.safetensors
want="greedy tokens: 101 175 85 117 132 175 6 182 26"
if grep -qx "$want" <<<"$out"; then
  echo "== the tokens equal Hugging Face transformers' greedy continuation"
else
  echo "== MISMATCH: Hugging Face transformers gives: ${want#greedy tokens: }" >&2
  exit 1
fi
