#!/usr/bin/env bash
# The lavapipe same-file table (issue 27): a SmolLM2-shaped model of $LAYERS layers (default 4,
# SmolLM2-135M's width and vocabulary, random weights) as GGUF files (F16 from the llama.cpp kit's
# st2gguf.py, Q4_K_M from its llama-quantize), imported by vkc and run by both:
#   vkc bench PLAN --pp $PP --tg $TG    (static: --no-tune; tuned: --tune --budget $BUDGET)
#   llama-bench -m FILE -p $PP -n $TG -fa 1 -ngl 99   (llama.cpp's Vulkan backend on lavapipe)
# interleaved: each of $ROUNDS rounds runs every plan and llama-bench once (-r $R, after their own
# warm-up), in turn, so that a machine whose load moves (a shared CI or development box) moves
# every column alike. scripts/lavapipe_table.py prints medians over the rounds and the ratios,
# with the load average seen at each round.
#
# A benchmark, not a test: minutes on a 2-core machine. From the project root:
#   go build -o bin/vkc ./cmd/vkc && bash scripts/lavapipe-table.sh
# Env: WORK (default /tmp/lavapipe-table; the GGUF files and plans are kept there and reused),
# VKC (bin/vkc), KIT (../shared/peers/llamacpp), PY (a python3 with numpy, for st2gguf.py),
# LAYERS=4, PP=128, TG=32, ROUNDS=5, R=1, BUDGET=60s (tuned compiles; 0 skips them),
# QUANTS="F16 Q4_K_M", CTX=1024, DRY=1 (LAYERS=1, PP=16, TG=4, ROUNDS=1, BUDGET=0: checks the
# pipeline in a minute or two).
set -u
if [ -n "${DRY:-}" ]; then
  LAYERS=${LAYERS:-1} PP=${PP:-16} TG=${TG:-4} ROUNDS=${ROUNDS:-1} BUDGET=${BUDGET:-0}
fi
W=${WORK:-/tmp/lavapipe-table}
V=${VKC:-bin/vkc}
KIT=${KIT:-../shared/peers/llamacpp}
PY=${PY:-python3}
LAYERS=${LAYERS:-4}
PP=${PP:-128}
TG=${TG:-32}
ROUNDS=${ROUNDS:-5}
R=${R:-1}
BUDGET=${BUDGET:-60s}
QUANTS=${QUANTS:-F16 Q4_K_M}
CTX=${CTX:-1024}
S=${SMOLLM2:-examples/smollm2-135m/model.yaml}
J=$W/json
mkdir -p "$W" "$J"
# llama.cpp skips a Vulkan device that is a CPU implementation unless told to use it.
export GGML_VK_VISIBLE_DEVICES=${GGML_VK_VISIBLE_DEVICES:-0}
say() { echo "=== [$(date +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)] $*"; }
die() { echo "lavapipe-table: $*" >&2; exit 1; }
[ -x "$V" ] || die "no vkc at $V (go build -o bin/vkc ./cmd/vkc)"
[ -f "$KIT/llamacpp-vulkan-bin.tar.xz" ] || die "no llama.cpp kit at $KIT"
LL=$W/llamacpp/bin
if [ ! -x "$LL/llama-bench" ]; then
  mkdir -p "$W/llamacpp" && tar -xJf "$KIT/llamacpp-vulkan-bin.tar.xz" -C "$W/llamacpp" || die "cannot unpack the kit"
fi
M=$W/smol$LAYERS
if [ ! -s "$M-F16.gguf" ]; then
  say "random weights, $LAYERS layers; F16 GGUF"
  sed -e "s/^  layers: .*/  layers: $LAYERS/" "$S" > "$M.yaml"
  "$V" check -write-weights "$M.safetensors" "$M.yaml" | tail -1 || die "writing weights"
  "$PY" "$KIT/st2gguf.py" "$M.safetensors" "$M-F16.gguf.tmp" --layers "$LAYERS" || die "st2gguf.py (needs numpy: PY=/usr/bin/python3?)"
  mv "$M-F16.gguf.tmp" "$M-F16.gguf"
  rm -f "$M.safetensors"
fi
plans=()
for q in $QUANTS; do
  g=$M-$q.gguf
  if [ ! -s "$g" ]; then
    say "llama-quantize $q"
    "$LL/llama-quantize" "$M-F16.gguf" "$g.tmp" "$q" "$(nproc)" > "$W/quantize-$q.log" 2>&1 || { tail "$W/quantize-$q.log"; die "llama-quantize $q"; }
    mv "$g.tmp" "$g"
  fi
  "$V" import "$g" -o "$M-$q.yaml" --ctx "$CTX" --prefill "$PP" --force > /dev/null || die "vkc import $g"
  say "vkc compile $q static"
  "$V" compile "$M-$q.yaml" -o "$M-$q-static.plan" --no-tune -q || die "vkc compile $q"
  plans+=("$q:static")
  if [ "$BUDGET" != 0 ]; then
    say "vkc compile $q tuned (budget $BUDGET)"
    "$V" compile "$M-$q.yaml" -o "$M-$q-tuned.plan" --tune --budget "$BUDGET" --tune-db "$W/tune.json" -q || die "vkc compile $q --tune"
    plans+=("$q:tuned")
  fi
done
"$V" devices | head -3
"$LL/llama-bench" --version 2>&1 | head -2
rm -f "$J"/*.json "$J"/load.txt
for r in $(seq 1 "$ROUNDS"); do
  for q in $QUANTS; do
    for pl in "${plans[@]}"; do
      [ "${pl%%:*}" = "$q" ] || continue
      kind=${pl#*:}
      say "round $r: vkc $q $kind"
      echo "$r vkc-$kind $q $(cut -d' ' -f1 /proc/loadavg)" >> "$J/load.txt"
      "$V" bench "$M-$q-$kind.plan" --pp "$PP" --tg "$TG" -r "$R" --json > "$J/vkc-$kind-$q-$r.json" || echo "vkc bench failed"
    done
    say "round $r: llama-bench $q"
    echo "$r llamacpp $q $(cut -d' ' -f1 /proc/loadavg)" >> "$J/load.txt"
    "$LL/llama-bench" -m "$M-$q.gguf" -p "$PP" -n "$TG" -r "$R" -ngl 99 -fa 1 -o json > "$J/llamacpp-$q-$r.json" 2> "$W/llama-bench.err" || { tail -5 "$W/llama-bench.err"; echo "llama-bench failed"; }
    grep -m1 -E "ggml_vulkan: [0-9]" "$W/llama-bench.err"
  done
done
say "table"
python3 scripts/lavapipe_table.py "$J" "$QUANTS" | tee "$W/table.md"
