#!/usr/bin/env bash
# Regenerates the end-to-end oracle of the block formats Q2_K, Q3_K, IQ4_NL, IQ4_XS and MXFP4: tiny
# llama GGUF files quantized by llama.cpp's llama-quantize, with llama.cpp's CPU logits and a float64
# reference (scripts/oracles/quant_models.py says how). The mixed file (every new format in one
# model, tens of KB) is committed in testdata/llamacpp-quant; the five per-type files (Q2_K,
# Q3_K_M, IQ4_XS, IQ4_NL, MXFP4: about 90 KB each) go into a cache folder, where
# TestGGUFQuantTypes finds them (it skips them, naming this script, when they are absent):
#
#   scripts/oracles/quant-models.sh            # the per-type files into the cache
#   scripts/oracles/quant-models.sh --mix      # the committed mixed file into testdata (review the diff)
#
# The cache is $VKC_ORACLE_CACHE/llamacpp-quant (default ~/.cache/vkc/oracles/llamacpp-quant).
# Needs Debian's python3 with python3-numpy (apt-get install python3-numpy) and the llama.cpp peer
# kit in ../shared/peers/llamacpp (unpacked into $LLAMACPP_BIN, default /tmp/llamacpp-peer/bin).
# Takes about a minute on two cores.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
py=/usr/bin/python3
if ! "$py" -c 'import numpy' 2>/dev/null; then
  echo "quant-models: needs $py with numpy (apt-get install python3-numpy)" >&2
  exit 1
fi
if [ "${1:-}" = "--mix" ]; then
  exec "$py" "$here/quant_models.py" "$repo/testdata/llamacpp-quant" MIX
fi
cache=${VKC_ORACLE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vkc/oracles}/llamacpp-quant
exec "$py" "$here/quant_models.py" "$cache" Q2_K Q3_K_M IQ4_XS IQ4_NL MXFP4
