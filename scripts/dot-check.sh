#!/usr/bin/env bash
# Renders `vkc dot` of tinyllama (prefill and decode) and of the Whisper encoder with graphviz's
# dot -Tsvg, to prove the DOT output is valid. scripts/test.sh runs it; the SVGs go to out/dot/.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v dot >/dev/null || { echo "dot-check: graphviz's dot is missing (bash scripts/setup.sh installs it)" >&2; exit 1; }
mkdir -p bin out/dot
go build -o bin/vkc ./cmd/vkc
for spec in tinyllama:prefill tinyllama:decode whisper-tiny-encoder:encode; do
  ex=${spec%%:*} fn=${spec##*:}
  bin/vkc dot "examples/$ex/model.yaml" -f "$fn" -o "out/dot/$ex-$fn.dot"
  dot -Tsvg "out/dot/$ex-$fn.dot" -o "out/dot/$ex-$fn.svg"
  grep -q "<svg" "out/dot/$ex-$fn.svg"
  echo "dot: $ex $fn ok ($(wc -c <"out/dot/$ex-$fn.svg") bytes of SVG)"
done
