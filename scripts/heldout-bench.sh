#!/usr/bin/env bash
# The held-out latency table of measured selection (issue 26): for each model, the plan a static
# compile writes (--no-tune) against the plan a default measured compile writes (--tune at the
# default budget, a fresh tuning database: a cold compile), timed by `vkc compare` in PAIRS
# alternating pairs (40) that the selection itself never measured: the pairs in which the
# measured plan was faster, and the median cut (1 − the median of measured ÷ static). The table
# also says whether measurement changed the graph of the function timed, how many paired rounds
# the selection measured, and the measured compile's wall time against its budget.
#
# Models (MODELS, default all of them):
#   whisper   examples/whisper-tiny-encoder, encode
#   resnet    examples/resnet-tiny, forward
#   resnet18  ResNet-18 as ONNX (torchvision's shape, seeded random weights) written by the
#             project's ONNX writer (go test -run TestResNet18ONNX), forward, batch 1, SIZE×SIZE
#             images (default 64 on lavapipe, 224 on a GPU)
#   smollm2   examples/smollm2-135m, prefill at 128 tokens (the last row's logits, as generation
#             runs it); LAYERS=n keeps its first n layers (lavapipe default 4: the 30-layer
#             model's 40 pairs take hours there), VOCAB as gpu-bench.sh
#   gemma3    Gemma 3 (sliding-window and global attention, GELU-tanh gated FFN, tied output):
#             the llama.cpp oracle's gemma3-tiny-Q8_0.gguf (random weights, 4 layers, hidden 256,
#             context 128), prefill at GLEN tokens (32: the short length the selection times
#             beside the capacity, tune.ShortAt)
#   qwen3moe  Qwen3-MoE (8 experts, 2 used): the oracle's qwen3moe-tiny-Q8_0.gguf (2 layers,
#             hidden 256, context 128), prefill at GLEN tokens
#             Both read ORACLES (../shared/oracles, else .gpu/oracles: on the GPU machine copy
#             the two files there first, keeping the llamacpp/<model>/ folders; see below)
#
# lavapipe (this machine, CPU Vulkan): bash scripts/heldout-bench.sh
# H200 (GPU machine): gpu-bench.sh's heldout part runs this script there (its header says how);
# the machine has no Go toolchain, so prepare here .gpu/vkc and .gpu/vkc.test (which writes the
# ResNet-18 file there: 45 MiB at any size, too large to carry beside the binaries):
#   bash ../shared/gpu/prepare.sh && go test -c -o .gpu/vkc.test .
#   run(command=". .gpu/prelude.sh && PARTS=heldout OUT=$OUT bash scripts/gpu-bench.sh", carry=[".gpu"])
# and for the Gemma and MoE rows (HMODELS="gemma3 qwen3moe"), before the call:
#   for m in gemma3 qwen3moe; do mkdir -p .gpu/oracles/llamacpp/$m-tiny &&
#     cp ../shared/oracles/llamacpp/$m-tiny/$m-tiny-Q8_0.gguf .gpu/oracles/llamacpp/$m-tiny/; done
# Knobs: VKC (bin/vkc), VKC_TEST (.gpu/vkc.test, without go), OUT (/tmp/heldout), PAIRS (40), N (timed runs per timing, 7), BUDGET
# (empty: vkc's default), MODELS, LAYERS, SIZE, RESNET18 (a ResNet-18 ONNX file made already), ORACLES, GLEN (32). Every measured compile's report is kept in
# $OUT/<model>-tuned.txt, every comparison's JSON in $OUT/<model>-compare.json, the table in
# $OUT/table.md.
set -uo pipefail
VKC=${VKC:-bin/vkc}
OUT=${OUT:-/tmp/heldout}
PAIRS=${PAIRS:-40}
N=${N:-7}
BUDGET=${BUDGET:-}
MODELS=${MODELS:-whisper resnet resnet18 smollm2 gemma3 qwen3moe}
ORACLES=${ORACLES:-../shared/oracles}
[ -d "$ORACLES" ] || [ ! -d .gpu/oracles ] || ORACLES=.gpu/oracles
GLEN=${GLEN:-32}
mkdir -p "$OUT"
if [ "$VKC" = bin/vkc ] && { [ ! -x bin/vkc ] || [ -n "$(find . -name '*.go' -newer bin/vkc -print -quit)" ]; }; then
  go build -o bin/vkc ./cmd/vkc || exit 1
fi
cpu=$("$VKC" devices 2>/dev/null | grep -m1 '^\*' | grep -c '(cpu)')
LAYERS=${LAYERS-$([ "$cpu" = 1 ] && echo 4)}
SIZE=${SIZE:-$([ "$cpu" = 1 ] && echo 64 || echo 224)}
BF=(); [ -n "$BUDGET" ] && BF=(--budget "$BUDGET")
wall() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }

# model NAME → the model file, the function, and compile/compare flags.
model() {
  case $1 in
    whisper) M=examples/whisper-tiny-encoder/model.yaml FN=encode CF=() XF=() ;;
    resnet) M=examples/resnet-tiny/model.yaml FN=forward CF=() XF=() ;;
    resnet18)
      M=${RESNET18:-$OUT/resnet18-$SIZE.onnx} FN=forward CF=(--dim N=1) XF=()
      if [ ! -s "$M" ]; then
        # Written by TestResNet18ONNX: with go here, else by the root package's test binary
        # (VKC_TEST, e.g. .gpu/vkc.test on the GPU machine, which has no Go toolchain).
        if command -v go > /dev/null; then W=(go test -count=1 -run '^TestResNet18ONNX$' .)
        else W=("${VKC_TEST:-.gpu/vkc.test}" -test.count=1 -test.run '^TestResNet18ONNX$'); fi
        VKC_RESNET18_ONNX=$M VKC_RESNET18_SIZE=$SIZE "${W[@]}" > "$OUT/resnet18-write.txt" 2>&1 ||
          { cat "$OUT/resnet18-write.txt"; echo "no $M: make it with TestResNet18ONNX (the header says how)" >&2; return 1; }
      fi ;;
    smollm2)
      M=examples/smollm2-135m/model.yaml FN=prefill CF=(-f prefill) XF=(--length 128)
      if [ -n "${LAYERS:-}${VOCAB:-}" ]; then
        sed -e "s/^  layers: .*/  layers: ${LAYERS:-30}/" -e "s/^  vocab: .*/  vocab: ${VOCAB:-49152}/" "$M" > "$OUT/smollm2-small.yaml"
        M=$OUT/smollm2-small.yaml
      fi ;;
    gemma3 | qwen3moe)
      M=$ORACLES/llamacpp/$1-tiny/$1-tiny-Q8_0.gguf FN=prefill CF=(-f prefill) XF=(--length "$GLEN")
      [ -s "$M" ] || { echo "no $M: the llama.cpp oracle (ORACLES; the header says how on the GPU machine)" >&2; return 1; } ;;
    *) echo "unknown model $1" >&2; return 1 ;;
  esac
}

rows=()
for name in $MODELS; do
  model "$name" || continue
  echo "=== [$(date +%H:%M:%S)] $name: $M, function $FN"
  "$VKC" compile "$M" "${CF[@]}" --no-tune -o "$OUT/$name-static.plan" -q || continue
  rm -f "$OUT/$name-tune.json"
  s=$(date +%s.%N)
  "$VKC" compile "$M" "${CF[@]}" --tune "${BF[@]}" --tune-db "$OUT/$name-tune.json" -o "$OUT/$name-tuned.plan" > "$OUT/$name-tuned.txt" 2>&1 || { tail -5 "$OUT/$name-tuned.txt"; continue; }
  secs=$(wall "$s")
  # The selection of the function timed: its paired rounds, and whether the winner is the static
  # extraction (then measurement kept the graph).
  sel=$(awk -v fn="$FN" '$1=="function" && $2==fn":" {on=1; print; next} on && /^ *\* / {print; exit}' "$OUT/$name-tuned.txt")
  rounds=$(echo "$sel" | sed -n 's/.* \([0-9]*\) paired rounds.*/\1/p' | head -1)
  if echo "$sel" | grep -q '^ *\* .*static extraction'; then changed=no; else changed=yes; fi
  "$VKC" compare "$OUT/$name-static.plan" "$OUT/$name-tuned.plan" -f "$FN" "${XF[@]}" --pairs "$PAIRS" -n "$N" --json > "$OUT/$name-compare.json" || continue
  row=$(python3 - "$OUT/$name-compare.json" "$name" "$FN${XF[*]:+ ${XF[*]}}" "$secs" "${BUDGET:-default}" "${rounds:--}" "$changed" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
name, fn, secs, budget, rounds, changed = sys.argv[2:]
print(f"| {name} | {fn} | {secs} s ({budget}) | {rounds} | {changed} | {r['a_median_ns']/1e6:.3f} | {r['b_median_ns']/1e6:.3f} | {r['b_wins']}/{r['pairs']} | {100*r['cut']:+.1f}% |")
EOF
)
  echo "$row"
  rows+=("$row")
done
{
  echo "Held-out latency on $("$VKC" devices 2>/dev/null | grep -m1 '^\*' | sed 's/^\* [0-9]*: //'): static plan (--no-tune) against a default measured compile (--tune${BUDGET:+ --budget $BUDGET}, cold database), $PAIRS alternating pairs of $N runs (GPU time medians)."
  echo
  echo "| model | function | measured compile (budget) | selection rounds | graph changed | static ms | measured ms | measured faster | median cut |"
  echo "|---|---|---|---:|---|---:|---:|---:|---:|"
  printf '%s\n' "${rows[@]}"
} | tee "$OUT/table.md"
