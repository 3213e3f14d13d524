#!/usr/bin/env bash
# The GPU benchmark batch: vkc beside PyTorch and llama.cpp on the same weights, in one device call.
#
# Here (the machine with Go), from the project root:
#   bash ../shared/gpu/prepare.sh ./kernels ./runtime
# On the GPU machine (run(command=..., carry=[".gpu"])):
#   . .gpu/prelude.sh && bash scripts/gpu-bench.sh
#
# SmolLM2-135M F16 (examples/smollm2-135m, random weights) for: prefill of 128 and 512 tokens
# (pp128, pp512), decode at positions 127 and 2000, and a plain f16 GEMM 4096×4096×4096, by
#   - vkc, static and tuned (measured) plans: GPU time (timestamps) and wall time per call;
#   - PyTorch eager and CUDA graphs (examples/bench/torch_peer.py, CUDA events);
#   - llama.cpp's Vulkan backend (../shared/peers/llamacpp: llama-bench, wall time);
#   - the GEMM: vkc's best kernel (kernels.test BenchmarkCoopGEMM4096: the cooperative-matrix
#     template's best point of a sweep, and matmul_tiled) against cuBLAS (torch.matmul).
# The table of medians, spreads and ratios is printed at the end and written to $OUT/table.md,
# every figure to $OUT/results.json, the raw logs to $OUT/<part>.txt (at most 8 files in all).
#
# PARTS (default "check static tuned torch llamacpp gemm study table"; estimated H200 wall time each):
#   check     kernels.test: the decode fusions (column parts, split attention combined in its
#             pass, the batched step's attention_rows blocks and KV dtypes) checked against the
#             interpreter on this device                                              ~30 s
#   static    vkc compile --no-tune; bench prefill, decode at $POS, --pp $PP --tg 32   ~25 s
#   tuned     vkc compile --tune (--budget $BUDGET when set, else the compiler's default) of
#             the model with its weights in a safetensors file, on a fresh database and without
#             the vkc and NVIDIA pipeline caches (cold), the same benches       ~$BUDGET + 30 s
#   warm      the tuned compile again on that database, twice (byte-identical, nothing measured:
#             issue 17)                                                                 ~5 s
#   torch     weights, vkc's prefill logits, torch_peer.py (eager; graphs compile ~40 s) ~100 s
#   llamacpp  GGUF from the same weights, llama-bench pp and tg at depths ~$POS       ~35 s
#   gemm      kernels.test BenchmarkCoopGEMM4096 and cuBLAS 4096³                     ~30 s
#   cm2       issue 27: matmul_cm2 (VK_NV_cooperative_matrix2) on the device: TestMatmulCM2GPU
#             (its points against the interpreter), then BenchmarkCoopShapes over the block
#             sizes that ran best and larger ones, each with the K loop written out 1, 2, 4, 8
#             slices a step (unroll) and, where the product allows, the result stored directly
#             (direct), at the 8B prefill shapes, 4096³ and the Q4_K gate/up form; cuBLAS 4096³
#             beside, into cm2.txt; not a default part                               ~4 min
#   gemmpeer  issue 27: f16 products at the 8B prefill's shapes (512×4096×14336, 512×14336×4096)
#             and 4096³ three ways in one process tree: matmul_cm2's static point
#             (BenchmarkCoopShapes), llama.cpp's own product on the same Vulkan device
#             (test-backend-ops perf MUL_MAT at m=4096 n=512 k=14336, f16, q8_0, q4_K: the only
#             such shape its perf list has) and cuBLAS (torch.matmul), into gemmpeer.txt: how far
#             the Vulkan products are from cuBLAS, the peer's included; not a default part  ~1 min
#   gemv      issue 27: kernels.test BenchmarkDecodeGEMV, decode's matrix–vector products at
#             Llama-3.1-8B's shapes (4096², 14336×4096, 4096×14336, 128256×4096) in f16, bf16,
#             q8_0, q4_k, q6_k (GEMV_DTYPES), static choice and best suggested point, GB/s and
#             share of the copy rate measured in the same process, into micro.txt; not a default
#             part                                                                    ~2 min
#   study     runtime.test barrier study (cost vs work, buffer-range, persistent)     ~30 s
#   pipeline  issue 17's compile figures: static compile twice (byte-identical), from a
#             safetensors file three times with peak RSS, a compile measured by default  ~60 s
#   length    scripts/length-bench.sh on SmolLM2: the 1..512 prefill at n = 1 7 64 300 512
#             against plans compiled for each n (issue of run-time lengths)          ~120 s
#   whisper   the Whisper encoder static and tuned ($WBUDGET), into micro.txt      ~60 s
#   moe       vkc.test BenchmarkMoEDecode (8, 32, 128 experts, k = 2, against dense), into
#             micro.txt (each model compiled as vkc compile would); not a default part  ~90 s
#   heldout   issue 26: scripts/heldout-bench.sh (the held-out table of measured selection:
#             Whisper encoder, resnet-tiny, ResNet-18 at 224×224, SmolLM2-135M prefill-128, each
#             static plan against a default measured compile, $HPAIRS (40) alternating pairs the
#             selection never measured), into heldout.txt; its ResNet-18 file is written there by
#             .gpu/vkc.test (go test -c -o .gpu/vkc.test .); HMODELS, HSIZE (224) and LAYERS
#             narrow it (a lavapipe dry run: LAYERS=1 HSIZE=32 HPAIRS=4), HBUDGET sets a budget
#             (default: the compiler's); its gemma3 and qwen3moe rows (Gemma 3, Qwen3-MoE) read
#             the llama.cpp oracles copied into .gpu/oracles first (heldout-bench.sh's header
#             says how; without them those rows are left out); not a default part        ~5 min
#   select    issue 26: SmolLM2-135M's every function at the default budget (rounds per
#             function), then a Llama-3.2-1B-shaped Q8_0 file static against measured, with the
#             selection's trace and vkc compare, into select.txt; not a default part   ~3 min
#   selectn   issue 26: SmolLM2-135M's default measured compile SELECTN times (default 4): the
#             paired rounds per function of each, into selectn.txt; not a default part  ~70 s
#   staticab  issue 27: SmolLM2-135M's static plan against the graph as written and, with
#             VKCOLD=path, another build's static plan: vkc compare on prefill at 512 and 128
#             rows and on decode, into staticab.txt; not a default part               ~90 s
#   table     the table from what the parts above left in $J (also after a split call) ~1 s
#   quant     issue 13: vkc vs llama-bench on Q8_0 and Q4_K_M GGUF files of a SmolLM2 and a
#             Llama-3.2-1B shape, static and tuned (--int8 auto), into quant.txt (see below);
#             not in the default parts: its own calls, QMODELS=smollm2 (~4 min), QMODELS=llama1b
#   serve     issue 24: vkc serve with continuous batching (--parallel $SLOTS) under vkc loadgen's
#             load at 1, 4, 16 and 64 streams, SmolLM2-135M and Llama-3.2-1B shapes (random
#             weights), with the targets (see below); not in the default parts: SMODELS=smollm2
#             (~3 min), SMODELS=llama1b (~4 min), into serve.txt
#   big8b     issue 22: Llama 3.1 8B-shaped GGUF files (random weights quantized to Q4_K_M and Q8_0
#             by llama-quantize; made once into $W/bench-8b by BenchmarkCompile8B of .gpu/vkc.test,
#             which also times the static compile) through vkc beside llama-bench: device memory
#             (the plan's own figure, vkc inspect --check-device, the heap budget before and
#             with the plan loaded), pp512, tg128 and the first-token latency of a 512-token
#             prompt, into big8b.txt. Not in the default parts: its own call (~8 min the first
#             time, ~5 min with the files made). Needs .gpu/vkc.test: go test -c -o .gpu/vkc.test .
#   prec      issue 22: the quant part's SmolLM2-shaped F16 and Q4_K_M files (run it first) imported
#             with --act f32 --kv f32, the defaults (f16 activations into the prefill's products:
#             matmul_coop, a quantized B dequantized into f16 tiles; f16 KV cache), --kv q8_0 and
#             --kv q4_0, beside llama-bench -ctk/-ctv f16, q8_0, q4_0 (-fa 1); into prec.txt; not a
#             default part (~4 min)
#   ttft      issue 27: cold and warm time to first token of a 512-token prompt, vkc run beside
#             llama-bench -pg 512,1 (each a whole process: load, pipelines, prompt, one token) on
#             the quant part's files (TTFT_MODELS), into ttft.txt                     ~1 min
# Issue 27 (use the hardware), in four calls of at most ~8 min each, against its targets (pp512
# and tg ≥ 1.2× llama.cpp, decode GEMVs ≥ 70% of the copy rate, GEMM f16 4096³ ≥ 70% of cuBLAS):
#   1. PARTS="quant ttft gemm" QMODELS=smollm2 QTYPES=F16 PP=512 QTG=128 TTFT_MODELS=smollm2-F16
#   2. PARTS="quant ttft" QMODELS=llama1b PP=512 QTG=128 TTFT_MODELS="llama1b-Q8_0 llama1b-Q4_K_M"
#   3. PARTS=big8b BIG8B_QUANTS=Q4_K_M   4. PARTS=big8b BIG8B_QUANTS=Q8_0   (issue 22's part:
#      llama-bench -p 512 -n 128 against vkc bench --pp 512 --tg 128, the decode kernels' GB/s)
# QTG (default 32, 8 in a dry run) is the quant part's generation length; QTYPES=F16 takes the
# unquantized source file itself.
# Defaults: BUDGET unset (the compiler's default budget; ≈ 5 min in all), REPS=5, POS="127 2000",
# PP=128,512.
# A split call: PARTS="check static tuned table" (~3 min), then PARTS="torch llamacpp gemm study
# table" (~3.5 min);
# the table part reads every part's JSON left in $J (/tmp/vb/json): on a fresh machine only what
# that call measured, so keep each call's table.md and results.json.
#
# Dry run on lavapipe (here): a smaller SmolLM2 (LAYERS, VOCAB, SEQ), tiny budgets:
#   go build -o .gpu/vkc ./cmd/vkc && LAYERS=1 VOCAB=4096 SEQ=16 PP=16,32 BUDGET=5s REPS=2 N=3 \
#     NPREFILL=2 OUT=/tmp/gb PARTS="static tuned llamacpp table" bash scripts/gpu-bench.sh
set -u
# time -f reports the peak RSS of a compile where GNU time is installed.
TV=(); [ -x /usr/bin/time ] && TV=(/usr/bin/time -f "[peak RSS %M KB, %e s wall, %U s user]")
OUT=${OUT:-out}
W=${WORK:-/tmp/vb}
J=$W/json
mkdir -p "$OUT" "$W" "$J"
V=${VKC:-.gpu/vkc}
KT=${KERNELS_TEST:-$PWD/.gpu/kernels.test}
RT=${RUNTIME_TEST:-$PWD/.gpu/runtime.test}
VT=${VKC_TEST:-$PWD/.gpu/vkc.test}
KIT=${LLAMA_KIT:-.gpu/peers/llamacpp}
[ -d "$KIT" ] || KIT=../shared/peers/llamacpp
S=${SMOLLM2:-examples/smollm2-135m/model.yaml}
WH=${WHISPER:-examples/whisper-tiny-encoder/model.yaml}
BUDGET=${BUDGET:-}
BF=(); [ -n "$BUDGET" ] && BF=(--budget "$BUDGET")
WBUDGET=${WBUDGET:-40s}
REPS=${REPS:-5}
N=${N:-50}
POS=${POS:-127 2000}
PP=${PP:-128,512}
FA=${FA:-1}
PY=${PY:-python3}
DEFAULT_PARTS="check static tuned torch llamacpp gemm study table"
PARTS=${PARTS:-$DEFAULT_PARTS}
# Names of earlier versions of this script.
PARTS=$(echo " $PARTS " | sed -e 's/ smollm2-static / static /; s/ smollm2-tuned / tuned /; s/ peer / torch /; s/ throughput / static tuned /; s/ whisper-static / whisper /; s/ whisper-tuned / whisper /')
want() { [[ " $PARTS " == *" $1 "* ]]; }
part() { echo; echo "=== [$(date +%H:%M:%S) +${SECONDS}s] $*"; }
# t runs a command, then prints its wall time and exit status.
wall() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}'; }
t() { local s=$(date +%s.%N); "$@"; local rc=$?; echo "[wall $(wall "$s") s, rc $rc] $*"; return $rc; }
# tj runs a command whose stdout is JSON: it goes to $J/$1.json and to the log.
tj() {
  local name=$1 s=$(date +%s.%N); shift
  "$@" > "$J/$name.json"; local rc=$?
  cat "$J/$name.json"; echo "[wall $(wall "$s") s, rc $rc] $*"; return $rc
}

# A smaller SmolLM2 for dry runs: LAYERS=n layers, VOCAB=v tokens, SEQ=s prefill tokens (the
# context, 2048, stays, so that decode at 2000 runs).
if [ -n "${LAYERS:-}${VOCAB:-}${SEQ:-}" ]; then
  sed -e "s/^  layers: .*/  layers: ${LAYERS:-30}/" -e "s/^  vocab: .*/  vocab: ${VOCAB:-49152}/" \
    -e "s/^    dims: {seq: 1\.\.[0-9]*}/    dims: {seq: 1..${SEQ:-512}}/" -e "s/^    dims: {seq: 128}/    dims: {seq: ${SEQ:-128}}/" \
    "$S" > "$W/smollm2-small.yaml"
  S=$W/smollm2-small.yaml
fi
NPREFILL=${NPREFILL:-20}
# The prefill benches run at the first of $PP tokens: SmolLM2's prefill has a run-time length
# (1..512), so --length; a prefill of static length runs as it is.
PRE=${PP%%,*}
LEN=(); grep -q '^    dims: {seq: [0-9]*\.\.' "$S" && LEN=(--length "$PRE")

# benches times one plan: prefill, decode at each of $POS, then pp/tg throughput; JSON as $1-*.
benches() {
  local tag=$1 plan=$2
  part "$tag: prefill of $PRE tokens (GPU and wall time per call, roofline)"
  tj "$tag-prefill" $V bench "$plan" -f prefill "${LEN[@]}" -n "$NPREFILL" --json
  for p in $POS; do
    part "$tag: decode at position $p"
    tj "$tag-decode-$p" $V bench "$plan" -f decode -n "$N" --input pos="$p" --json
  done
  part "$tag: prompt and generation throughput, llama-bench's tests (pp ${PP}, tg32, $REPS repetitions)"
  tj "$tag-pp" $V bench "$plan" --pp "$PP" --tg 32 -r "$REPS" --json
  part "$tag: the per-kernel table of decode at position ${POS%% *}"
  t $V bench "$plan" -f decode -n 5 --input pos="${POS%% *}" | sed -n '/per kernel/,$p' | head -40
}

if want static; then
{
  part devices; $V devices | head -40
  part "smollm2 static compile"
  t $V compile "$S" -o "$W/s_static.plan" --no-tune
  $V inspect "$W/s_static.plan" | grep -E '^function|dispatches' | head -8
  benches vkc-static "$W/s_static.plan"
} > "$OUT/vkc-static.txt" 2>&1
fi

# sfmodel writes the model's weights to a safetensors file once and a model.yaml that maps it
# ($W/sf/model.yaml), so that compile times do not include generating random weights.
sfmodel() {
  if [ ! -s "$W/sf/model.yaml" ]; then
    mkdir -p "$W/sf"
    $V check -write-weights "$W/sf/weights.safetensors" "$S" | tail -1
    sed 's/^weights:.*/weights: {file: weights.safetensors}/' "$S" > "$W/sf/model.yaml"
  fi
}

if want tuned; then
{
  sfmodel
  part "smollm2 tuned compile, budget ${BUDGET:-default}, cold: a fresh tuning database $W/tune.json, no pipeline caches"
  rm -f "$W/tune.json"; rm -rf ~/.cache/nvidia ~/.cache/vkc/pipelines-*.bin
  t "${TV[@]}" $V compile "$W/sf/model.yaml" -o "$W/s_tuned.plan" --tune "${BF[@]}" --tune-db "$W/tune.json"
  benches vkc-tuned "$W/s_tuned.plan"
  part "what tuning gained per kernel problem (on a copy of the database: vkc tune resumes searches)"
  cp "$W/tune.json" "$W/tune-gains.json"
  t $V tune "$S" -budget 1s -tune-db "$W/tune-gains.json" | head -60
} > "$OUT/vkc-tuned.txt" 2>&1
fi

if want warm; then
{
  sfmodel
  for i in 1 2; do
    part "smollm2 tuned compile again ($i), warm (the database's searches and selections reused)"
    t "${TV[@]}" $V compile "$W/sf/model.yaml" -o "$W/s_tuned2.plan" --tune "${BF[@]}" --tune-db "$W/tune.json" 2>&1 | tee "$W/warm.txt"
    cmp "$W/s_tuned.plan" "$W/s_tuned2.plan" && echo "cold and warm tuned plans byte-identical"
    grep -q ' 0 searched (0 configurations' "$W/warm.txt" && grep -q 'recorded by an earlier compile' "$W/warm.txt" && echo "the warm compile measured nothing"
  done
} >> "$OUT/vkc-tuned.txt" 2>&1
fi

if want pipeline; then
{
  part "smollm2 static compile twice (deterministic plans)"
  t $V compile "$S" -o "$W/s_static1.plan" --no-tune -q
  t $V compile "$S" -o "$W/s_static2.plan" --no-tune -q
  cmp "$W/s_static1.plan" "$W/s_static2.plan" && echo "static plans byte-identical"
  part "smollm2 static compile from a safetensors file (weights memory-mapped, written into the plan from the file): 'compiled ... in' is the compile, the rest of the wall time parsing and writing the weights"
  sfmodel
  for i in 1 2 3; do t "${TV[@]}" $V compile "$W/sf/model.yaml" -o "$W/s_file.plan" --no-tune 2>&1 | grep -E 'compiled|peak RSS|wall'; done
  if [ -s "$W/tune.json" ]; then
    part "a compile without --tune: measured by default on a GPU (warm on the tuned part's database)"
    t $V compile "$S" -o "$W/s_default.plan" --tune-db "$W/tune.json" 2>&1 | grep -E 'by default|compiled|recorded'
    $V inspect "$W/s_default.plan" | grep 'chosen by'
    $V tune --list --tune-db "$W/tune.json" | sed -n '/measured selections/,$p' | head -20
  fi
} >> "$OUT/vkc-tuned.txt" 2>&1
fi

# weights writes the model's weights once, for the peers.
weights() {
  [ -s "$W/w.safetensors" ] || t $V check -write-weights "$W/w.safetensors" "$S" | tail -2
}

if want torch; then
{
  part "PyTorch peer: the same weights and prompt"
  weights
  vocab=$(awk '/^  vocab:/{print $2}' "$S")
  $PY - "$W/tokens.npy" "$PRE" "$vocab" <<'EOF'
import sys, struct
# seq token ids < vocab as an int32 .npy (no numpy needed: the header by hand), the same every call.
n, vocab = int(sys.argv[2]), int(sys.argv[3])
ids, x = [], 1
for _ in range(n):
    x = (x * 1103515245 + 12345) % 2**31
    ids.append(x % vocab)
hdr = "{'descr': '<i4', 'fortran_order': False, 'shape': (%d,), }" % n
hdr += " " * (64 - 10 - len(hdr) - 1) + "\n"
with open(sys.argv[1], "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode() + struct.pack("<%di" % n, *ids))
EOF
  [ -f "$W/s_static.plan" ] || t $V compile "$S" -o "$W/s_static.plan" --no-tune -q
  # every row's logits, compared with PyTorch's: score (prefill returns the last row's only)
  t $V run "$W/s_static.plan" -f score --input tokens="$W/tokens.npy" --input pos=0 -o "$W/vkc_out"
  layers=$(awk '/^  layers:/{print $2}' "$S")
  seqs=$(echo "$PP" | tr ' ' ,)
  poss=$(echo $POS | tr ' ' ,)
  tj torch $PY examples/bench/torch_peer.py --weights "$W/w.safetensors" --tokens "$W/tokens.npy" \
    --vkc-logits "$W/vkc_out/logits.npy" --seqs "$seqs" --decode-at "$poss" --layers "$layers" --vocab "$vocab" --reps 20 ${PEER_FLAGS:-}
} > "$OUT/torch.txt" 2>&1
fi

if want llamacpp; then
{
  part "llama.cpp peer (Vulkan backend): $KIT"
  head -3 "$KIT/BUILD-INFO.txt" 2>/dev/null
  weights
  L=$W/llamacpp
  mkdir -p "$L"
  [ -x "$L/bin/llama-bench" ] || t tar -xJf "$KIT/llamacpp-vulkan-bin.tar.xz" -C "$L"
  layers=$(awk '/^  layers:/{print $2}' "$S")
  [ -s "$L/model-f16.gguf" ] || t $PY "$KIT/st2gguf.py" "$W/w.safetensors" "$L/model-f16.gguf" --layers "$layers"
  if [ -n "${LAYERS:-}" ]; then export GGML_VK_VISIBLE_DEVICES=${GGML_VK_VISIBLE_DEVICES:-0}; fi # lavapipe: llama.cpp skips CPU devices otherwise
  part "llama-bench pp ${PP} (prefill, wall time; -fa $FA, $REPS repetitions)"
  t "$L/bin/llama-bench" -m "$L/model-f16.gguf" -p "$PP" -n 0 -r "$REPS" -ngl 99 -fa "$FA" -o jsonl > "$J/llamacpp-pp.jsonl"
  cat "$J/llamacpp-pp.jsonl"
  # tg8 after a prompt of depth d decodes positions d..d+7: centred on 127 and 2000.
  depths=$(for p in $POS; do echo $((p - 4)); done | paste -sd,)
  part "llama-bench tg8 at depths $depths (decode steps around positions $POS)"
  t "$L/bin/llama-bench" -m "$L/model-f16.gguf" -p 0 -n 8 -d "$depths" -r "$REPS" -ngl 99 -fa "$FA" -o jsonl > "$J/llamacpp-tg.jsonl"
  cat "$J/llamacpp-tg.jsonl"
} > "$OUT/llamacpp.txt" 2>&1
fi

if want check; then
{
  part "the decode fusions on this device against the interpreter: column parts (QKV rope and cache writes, SwiGLU; a batched step's too), split attention combined in its pass, the batched step's attention in blocks of rows and its f16/q8_0/q4_0 caches"
  if [ -x "$KT" ]; then
    (cd kernels && t "$KT" -test.run 'ColumnParts|AttentionSplit|AttentionRowsChunks|RowsKVDTypes' -test.count=1 -test.v 2>&1 | grep -E '^(=== RUN|--- |ok|FAIL|PASS)|_test.go' | grep -v '=== RUN' | tail -60)
  else
    echo "no $KT: run ../shared/gpu/prepare.sh ./kernels ./runtime first"
  fi
} >> "$OUT/micro.txt" 2>&1
fi

if want gemm; then
{
  part "f16 GEMM 4096x4096x4096: vkc (matmul_coop sweep, matmul_tiled) on the device"
  if [ -x "$KT" ]; then
    (cd kernels && t "$KT" -test.run '^$' -test.bench 'CoopGEMM4096$' -test.benchtime 1x -test.v) | tee "$J/gemm-vkc.txt"
  else
    echo "no $KT: run ../shared/gpu/prepare.sh ./kernels ./runtime first"
  fi
  part "f16 GEMM 4096x4096x4096: cuBLAS through PyTorch"
  tj gemm-torch $PY examples/bench/torch_peer.py --gemm 4096
} >> "$OUT/micro.txt" 2>&1
fi

if want cm2; then
{
  if [ -x "$KT" ]; then
    part "matmul_cm2 against the interpreter on the device (TestMatmulCM2GPU)"
    (cd kernels && t "$KT" -test.run 'TestMatmulCM2GPU' -test.v 2>&1 | grep -E '^(--- |ok|FAIL|PASS)|    --- |not valid|_test.go' | tail -40)
    # The points: blocks bk,bm,bn,wg × unroll (unroll·bk ≤ 256) × direct (0; 1 where valid,
    # which BenchmarkCoopShapes reports as not valid elsewhere).
    CM2P=""
    for blk in 32,128,128,128 64,64,64,256 64,128,64,128 32,128,128,256 64,128,256,256 64,256,128,256 32,128,256,256 32,256,128,256 64,128,128,128; do
      IFS=, read -r bk bm bn wg <<< "$blk"
      for u in 1 2 4 8; do
        [ $((u * bk)) -le 256 ] || continue
        for dr in 0 1; do CM2P="$CM2P bk=$bk,bm=$bm,bn=$bn,direct=$dr,unroll=$u,wg=$wg"; done
      done
    done
    for sh in 512x4096x14336 512x14336x4096 4096x4096x4096; do
      part "matmul_cm2 points at $sh (f16 linear)"
      (cd kernels && VKC_COOP_TEMPLATE=matmul_cm2 VKC_COOP_POINTS="$CM2P" VKC_COOP_SHAPES=$sh t "$KT" -test.run '^$' -test.bench 'CoopShapes$' -test.benchtime 1x -test.v 2>&1 | grep -E '  point |best|static|FAIL|panic|SKIP|missing' | cut -c1-200 | head -90)
    done
    part "matmul_cm2 points at 512x28672x4096 (rmsnorm_linear[act=f16] over Q4_K: the 8B gate/up form)"
    (cd kernels && VKC_COOP_FORM=rmsnorm-q4_k VKC_COOP_TEMPLATE=matmul_cm2 VKC_COOP_POINTS="$CM2P" VKC_COOP_SHAPES=512x28672x4096 t "$KT" -test.run '^$' -test.bench 'CoopShapes$' -test.benchtime 1x -test.v 2>&1 | grep -E '  point |best|static|FAIL|panic|SKIP|missing' | cut -c1-200 | head -90)
  else
    echo "no $KT: run ../shared/gpu/prepare.sh ./kernels ./runtime first"
  fi
  part "f16 GEMM 4096x4096x4096: cuBLAS through PyTorch"
  tj cm2-torch $PY examples/bench/torch_peer.py --gemm 4096
} >> "$OUT/cm2.txt" 2>&1
fi

if want gemmpeer; then
{
  for sh in 512x4096x14336 512x14336x4096 4096x4096x4096; do
    part "gemmpeer: matmul_cm2's static point at $sh (f16 linear; BenchmarkCoopShapes)"
    if [ -x "$KT" ]; then
      (cd kernels && VKC_COOP_TEMPLATE=matmul_cm2 VKC_COOP_POINTS=1 VKC_COOP_SHAPES=$sh t "$KT" -test.run '^$' -test.bench 'CoopShapes$' -test.benchtime 1x -test.v 2>&1 | grep -E '  point |best|static|FAIL|panic|SKIP|missing' | cut -c1-200)
    else
      echo "no $KT: run ../shared/gpu/prepare.sh ./kernels ./runtime first"
    fi
  done
  part "gemmpeer: llama.cpp's own products (test-backend-ops perf, Vulkan0) at m=4096 n=512 k=14336"
  L=$W/llamacpp
  mkdir -p "$L"
  [ -x "$L/bin/test-backend-ops" ] || t tar -xJf "$KIT/llamacpp-vulkan-bin.tar.xz" -C "$L"
  t "$L/bin/test-backend-ops" perf -o MUL_MAT -b Vulkan0 -p 'type_a=(f16|q8_0|q4_K),type_b=f32,m=4096,n=512,'
  part "gemmpeer: cuBLAS through PyTorch at the same shapes"
  tj gemmpeer-torch $PY examples/bench/torch_peer.py --gemm 512x4096x14336,512x14336x4096,4096
} > "$OUT/gemmpeer.txt" 2>&1
fi

if want gemv; then
{
  part "decode GEMVs at Llama-3.1-8B's shapes (issue 27): static and best suggested point against the copy rate"
  if [ -x "$KT" ]; then
    (cd kernels && VKC_GEMV_DTYPES=${GEMV_DTYPES:-} t "$KT" -test.run '^$' -test.bench 'DecodeGEMV$' -test.benchtime 1x -test.v) | tee "$J/gemv-vkc.txt"
  else
    echo "no $KT: run ../shared/gpu/prepare.sh ./kernels ./runtime first"
  fi
} >> "$OUT/micro.txt" 2>&1
fi

if want study; then
{
  part "barrier study (issue 14): cost per barrier against the work on either side, buffer-range against global barriers, a persistent kernel's grid barrier"
  if [ -x "$RT" ]; then
    (cd runtime && t "$RT" -test.run '^$' -test.bench 'BarrierCost|RangeBarriers|PersistentPhases' -test.benchtime 1x -test.v) | tee "$J/study.txt"
  else
    echo "no $RT: run ../shared/gpu/prepare.sh ./kernels ./runtime first"
  fi
} >> "$OUT/micro.txt" 2>&1
fi

if want moe; then
{
  part "mixtures of experts (issue 23): decode time per token at 8, 32 and 128 experts (k = 2) against the dense model of the same active parameters"
  if [ -x "$VT" ]; then
    t "$VT" -test.run '^$' -test.bench MoEDecode -test.benchtime 200x -test.v | tee "$J/moe.txt"
  else
    echo "no $VT: build it first: go test -c -o .gpu/vkc.test ."
  fi
} >> "$OUT/micro.txt" 2>&1
fi

if want length; then
{
  part "run-time length: SmolLM2-135M prefill 1..512 at n = 1 7 64 300 512 against plans compiled for each n (static compiles; GPU-time ratios are the figure)"
  t env MODEL="$S" VKC="$V" DIR="$W/length" REPS="${LREPS:-20}" ROUNDS="${LROUNDS:-3}" bash scripts/length-bench.sh
  $V inspect "$W/length/bounded.plan" | grep -E "^function|run-time length|variant for" | head -20
} > "$OUT/length.txt" 2>&1
fi

if want heldout; then
{
  part "held-out latency of measured selection (issue 26): static plans against default measured compiles, ${HPAIRS:-40} alternating pairs each"
  t env VKC="$V" VKC_TEST="$VT" OUT="$W/heldout" LAYERS="${LAYERS:-}" VOCAB="${VOCAB:-}" SIZE="${HSIZE:-224}" \
    PAIRS="${HPAIRS:-40}" N="${HN:-7}" BUDGET="${HBUDGET:-}" MODELS="${HMODELS:-whisper resnet resnet18 smollm2 gemma3 qwen3moe}" ORACLES="${ORACLES:-.gpu/oracles}" bash scripts/heldout-bench.sh
  part "each measured compile's selection of the function timed"
  for f in "$W"/heldout/*-tuned.txt; do echo "--- $f"; grep -E "^compiled|^  (tune|select|list|lower) " "$f"; sed -n '/^function /,/^  note/p' "$f" | grep -v '^  note' | head -14; done
} > "$OUT/heldout.txt" 2>&1
fi

if want whisper; then
{
  part "whisper static"
  t $V compile $WH -o "$W/w_static.plan" --no-tune
  t $V bench "$W/w_static.plan" -f encode -n 50
  part "whisper tuned ($WBUDGET)"
  t $V compile $WH -o "$W/w_tuned.plan" --tune --budget "$WBUDGET" --tune-db "$W/tune.json"
  t $V bench "$W/w_tuned.plan" -f encode -n 50
  t $V tune $WH -budget 1s -tune-db "$W/tune.json"
} >> "$OUT/micro.txt" 2>&1
fi

# quant (issue 13): block-quantized weights, vkc against llama.cpp's llama-bench on the same GGUF
# files in the same call. QMODELS (default "smollm2 llama1b"): a SmolLM2-135M-shaped and a
# Llama-3.2-1B-shaped model get random weights (vkc check -write-weights on $S and
# testdata/llama-1.2b), an F16 GGUF by the kit's st2gguf.py (numpy) and Q8_0 and Q4_K_M files by
# its llama-quantize; each file is imported (vkc import --ctx 1024 --prefill 512), compiled
# statically (exact kernels) and, unless QTUNE=0, tuned with --int8 auto (the tuner measures the
# float and the integer-dot decode kernels; budget QBUDGET, default 150s; a 128-token prefill, so
# that the selection's float64 reference stays affordable); each plan runs --pp $PP --tg 32 and
# one profiled decode at position 127; llama-bench -p $PP -n 32 -ngl 99 -fa $FA on the same file.
# scripts/quant_bench.py prints the table: tokens/s and ratios, and the decode GEMV effective
# bandwidth against the copy bandwidth vkc measures. Everything into $OUT/quant.txt. Estimated
# H200 wall time: smollm2 ~4 min, llama1b ~6 min with QTUNE=1: one model per call
# (QMODELS=smollm2, then QMODELS=llama1b). QTYPES (default "Q8_0 Q4_K_M") are llama-quantize's
# type names; QTYPES="Q2_K Q3_K_M IQ4_XS IQ4_NL MXFP4" QTUNE=0 measures the formats of issue 23
# (not yet run on a GPU).
# QUANT_DRY=1 rehearses it on this machine's lavapipe with the llama.cpp oracle's tiny F16 file
# instead of random models (no numpy needed) and small tests.
# tjf FILE CMD...: t, with CMD's standard output (JSON) into FILE.
tjf() { local f=$1 s=$(date +%s.%N); shift; "$@" > "$f"; local rc=$?; echo "[wall $(wall "$s") s, rc $rc] $* > $f"; return $rc; }
export QTYPES=${QTYPES:-Q8_0 Q4_K_M}
# quant_files NAME MODEL.yaml ROPE_THETA: $W/quant/NAME-F16.gguf (random weights; the llama.cpp
# oracle's tiny F16 file with QUANT_DRY) and NAME-Q.gguf for each of QTYPES, each made once.
quant_files() {
  local name=$1 yaml=$2 theta=$3 q
  local Q=$W/quant
  mkdir -p "$Q/llamacpp"
  part "$name: llama.cpp kit $KIT"
  [ -f "$KIT/llamacpp-vulkan-bin.tar.xz" ] || { echo "no llama.cpp kit at $KIT"; return 1; }
  [ -x "$Q/llamacpp/bin/llama-quantize" ] || tar -xJf "$KIT/llamacpp-vulkan-bin.tar.xz" -C "$Q/llamacpp" || return 1
  local LL=$Q/llamacpp/bin
  if [ ! -f "$Q/$name-F16.gguf" ]; then
    if [ -n "${QUANT_DRY:-}" ]; then
      part "$name: F16 source (dry run: the llama.cpp oracle's llama-tiny-F16.gguf)"
      cp "${ORACLE_F16:-../shared/oracles/llamacpp/llama-tiny/llama-tiny-F16.gguf}" "$Q/$name-F16.gguf" || return 1
    else
      part "$name: random weights, F16 GGUF"
      t $V check -write-weights "$Q/$name.safetensors" "$yaml" | tail -2
      t $PY "$KIT/st2gguf.py" "$Q/$name.safetensors" "$Q/$name-F16.gguf" --rope-theta "$theta" || return 1
      rm -f "$Q/$name.safetensors"
    fi
  fi
  for q in $QTYPES; do
    [ -f "$Q/$name-$q.gguf" ] && continue
    # MXFP4: llama.cpp's MXFP4_MOE puts MXFP4 on expert tensors only; a dense model gets it on
    # every 2-D weight by overrides (as scripts/oracles/quant_models.py makes its MXFP4 file).
    local qa=$q qo=()
    if [ "$q" = MXFP4 ]; then
      qa=MXFP4_MOE qo=(--token-embedding-type mxfp4 --output-tensor-type mxfp4)
      for tt in attn_q attn_k attn_v attn_output ffn_gate ffn_up ffn_down; do qo+=(--tensor-type "$tt=mxfp4"); done
    fi
    t "$LL/llama-quantize" "${qo[@]}" "$Q/$name-F16.gguf" "$Q/$name-$q.gguf" $qa "$(nproc)" > "$Q/$name-$q.quantize.log" 2>&1 || { tail -20 "$Q/$name-$q.quantize.log"; return 1; }
    grep -E "model size|quant size|fallback" "$Q/$name-$q.quantize.log" | sort | uniq -c | head -8
  done
}
quant_model() { # NAME MODEL.yaml ROPE_THETA
  local name=$1 q g pl
  local Q=$W/quant LL=$W/quant/llamacpp/bin
  local QPP=$PP TG=${QTG:-32} QREPS=$REPS CTX=1024 PREFILL=512 TPREFILL=128 QPOS=127
  if [ -n "${QUANT_DRY:-}" ]; then
    QPP=16,32 TG=${QTG:-8} QREPS=2 CTX=64 PREFILL=32 TPREFILL=16 QPOS=5
    export GGML_VK_VISIBLE_DEVICES=0 # llama.cpp skips a CPU Vulkan device (lavapipe) otherwise
  fi
  quant_files "$@" || return 1
  for q in $QTYPES; do
    g=$Q/$name-$q.gguf pl=$Q/$name-$q
    part "$name $q: $(stat -c %s "$g") bytes; vkc static"
    t $V import "$g" -o "$pl.yaml" --ctx $CTX --prefill $PREFILL --force | tail -3
    t $V compile "$pl.yaml" -o "$pl.plan" --no-tune -q || continue
    $V inspect "$pl.plan" | grep -E "weights|by dtype|8-bit|dequantization" | head -6
    tjf "$pl.vkc.json" $V bench "$pl.plan" --pp $QPP --tg $TG -r $QREPS --json
    tjf "$pl.decode.json" $V bench "$pl.plan" -f decode -n 50 --input pos=$QPOS --json
    if [ "${QTUNE:-1}" != 0 ]; then
      part "$name $q: vkc tuned, --int8 auto (prefill up to $TPREFILL)"
      t $V import "$g" -o "$pl-tuned.yaml" --ctx $CTX --prefill $TPREFILL --force | tail -1
      t $V compile "$pl-tuned.yaml" -o "$pl-tuned.plan" --tune --int8 auto --budget ${QBUDGET:-150s} --tune-db "$Q/tune.json" -q || true
      if [ -f "$pl-tuned.plan" ]; then
        $V inspect "$pl-tuned.plan" | grep -E "8-bit|matmul_vec" | head -8
        tjf "$pl-tuned.vkc.json" $V bench "$pl-tuned.plan" --pp $QPP --tg $TG -r $QREPS --json
        tjf "$pl-tuned.decode.json" $V bench "$pl-tuned.plan" -f decode -n 50 --input pos=$QPOS --json
      fi
    fi
    part "$name $q: llama-bench"
    tjf "$pl.llamacpp.json" "$LL/llama-bench" -m "$g" -p $QPP -n $TG -r $QREPS -ngl 99 -fa $FA -o json 2> "$pl.llamacpp.err" || tail -20 "$pl.llamacpp.err"
    grep -m3 -E "ggml_vulkan: [0-9]" "$pl.llamacpp.err"
  done
  part "$name: summary"
  $PY scripts/quant_bench.py "$Q" "$name"
  part "$name: the vkc and llama-bench results as JSON"
  for f in "$Q/$name"-*.vkc.json "$Q/$name"-*.llamacpp.json; do echo "--- $f"; cat "$f"; done
}
# ttft (issue 27): time to first token as a user sees it, one process each: vkc run PLAN
# --prompt-ids (a 512-token prompt, one generated token: the plan loaded, its pipelines made,
# the prefill, the first decode) cold (no vkc pipeline cache, no NVIDIA shader cache) and warm
# (the same again), beside llama-bench -pg 512,1 -r 1 --no-warmup on the same GGUF file (the
# model loaded, its pipelines made, one 512-token prompt and one token), cold and warm alike;
# wall time of the whole process. TTFT_MODELS (default "llama1b-Q4_K_M smollm2-F16"): files the
# quant part made in $W/quant ($name-$q.gguf); each is imported and compiled statically here
# when the quant part has not.
ttft() {
  local Q=$W/quant m g pl ids n=${TTFT_PROMPT:-512}
  [ -n "${QUANT_DRY:-}" ] && n=${TTFT_PROMPT:-16}
  ids=$(seq 1 "$n" | paste -sd,)
  for m in ${TTFT_MODELS:-llama1b-Q4_K_M smollm2-F16}; do
    g=$Q/$m.gguf pl=$Q/$m
    [ -f "$g" ] || { echo "no $g: run the quant part first (QMODELS, QTYPES)"; continue; }
    if [ ! -f "$pl.plan" ]; then
      t $V import "$g" -o "$pl.yaml" --ctx 1024 --prefill $n --force | tail -1
      t $V compile "$pl.yaml" -o "$pl.plan" --no-tune -q || continue
    fi
    for temp in cold warm; do
      [ $temp = cold ] && rm -rf ~/.cache/nvidia ~/.cache/vkc/pipelines-*.bin
      part "ttft $m $temp: vkc run --prompt-ids (1..$n) --steps 1, the whole process"
      t $V run "$pl.plan" --prompt-ids "$ids" --steps 1 2>&1 | tail -3
      [ $temp = cold ] && rm -rf ~/.cache/nvidia
      part "ttft $m $temp: llama-bench -pg $n,1 -r 1 --no-warmup, the whole process"
      t "$Q/llamacpp/bin/llama-bench" -m "$g" -p 0 -n 0 -pg "$n,1" -r 1 --no-warmup -ngl 99 -fa $FA -o md 2>&1 | grep -E '^\||error' | tail -3
    done
  done
}

if want quant; then
{
  for m in ${QMODELS:-smollm2 llama1b}; do
    case $m in
    smollm2) quant_model smollm2 "$S" 100000 ;;
    llama1b) quant_model llama1b testdata/llama-1.2b/model.yaml 500000 ;;
    *) echo "QMODELS: unknown model $m (smollm2, llama1b)" ;;
    esac
  done
} >> "$OUT/quant.txt" 2>&1
fi

# select (issue 26): measured selection at the default budget beyond the held-out table's one
# function each: SmolLM2-135M's every function on a cold database (paired rounds per function),
# then a Llama-3.2-1B-shaped Q8_0 file (the quant part's, made here when absent: numpy and the
# kit's llama-quantize) imported --ctx 1024 --prefill 512, its static plan against
# --tune --budget $SBUDGET (default: the compiler's) with VKC_TUNE_TRACE=1 (the trace without the
# tuner's per-configuration lines), then vkc compare on decode and on prefill at 128 tokens, into
# select.txt; not a default part (~2 min, the 1B file made once: ~1 min more).
select_trace() { grep -v -E '^\[ *[0-9.]+s\] tune: (try|done|chose) |timed: ' "$1" | awk '/ invalid: /{print substr($0, 1, 900); next} {print substr($0, 1, 240)}'; }
if want select; then
{
  B=()
  [ -n "${SBUDGET:-}" ] && B=(--budget "$SBUDGET")
  part "select: SmolLM2-135M, every function, a default measured compile on a cold database"
  rm -f "$W/select-smollm2.db"
  t "${TV[@]}" env VKC_TUNE_TRACE=1 $V compile "$S" -o "$W/select-smollm2.plan" --tune "${B[@]}" --tune-db "$W/select-smollm2.db" > "$W/select-smollm2.txt" 2>&1
  select_trace "$W/select-smollm2.txt"
  if QTYPES=Q8_0 quant_files llama1b testdata/llama-1.2b/model.yaml 500000; then
    g=$W/quant/llama1b-Q8_0.gguf pl=$W/select-llama1b
    part "select: the Llama-3.2-1B-shaped Q8_0 file, static and measured (${SBUDGET:-the default budget})"
    t $V import "$g" -o "$pl.yaml" --ctx 1024 --prefill 512 --force | tail -1
    t $V compile "$pl.yaml" -o "$pl.plan" --no-tune -q
    rm -f "$pl.db"
    t "${TV[@]}" env VKC_TUNE_TRACE=1 $V compile "$pl.yaml" -o "$pl-tuned.plan" --tune "${B[@]}" --tune-db "$pl.db" > "$pl-tuned.txt" 2>&1
    select_trace "$pl-tuned.txt"
    part "select: vkc compare, static (A) against measured (B)"
    t $V compare "$pl.plan" "$pl-tuned.plan" -f decode --pairs 20 | tail -3
    t $V compare "$pl.plan" "$pl-tuned.plan" -f prefill --length 128 --pairs 20 | tail -3
  fi
} >> "$OUT/select.txt" 2>&1
fi

# selectn (issue 26): SmolLM2-135M's default measured compile SELECTN times in a row (default 4),
# each on a cold database (--budget $SBUDGET when set), a line each: the compile's exit status
# and wall time, each function's paired rounds, and the checks abandoned at the budget's
# deadline, into selectn.txt (the traces in $W/selectn-K.txt). One compile says little: the
# rounds vary with the driver's cache and with where the checks end (session 19 on the H100: 1
# compile of 13 reached 3 rounds in every function); not a default part (~17 s a compile).
if want selectn; then
{
  B=()
  [ -n "${SBUDGET:-}" ] && B=(--budget "$SBUDGET")
  part "selectn: $S, the default measured compile ${SELECTN:-4} times (${SBUDGET:-the default budget})"
  for k in $(seq 1 "${SELECTN:-4}"); do
    f=$W/selectn-$k.txt
    rm -f "$W/selectn-$k.db"
    s=$(date +%s.%N)
    env VKC_TUNE_TRACE=1 $V compile "$S" -o "$W/selectn.plan" --tune "${B[@]}" --tune-db "$W/selectn-$k.db" > "$f" 2>&1
    rc=$?
    echo "compile $k: rc $rc, $(wall "$s") s; rounds: $(awk '/^function /{sub(":", "", $2); printf "%s %s, ", $2, $5}' "$f")abandoned checks: $(grep -c 'abandoned at the budget' "$f")"
  done
} >> "$OUT/selectn.txt" 2>&1
fi

# staticab (issue 27): SmolLM2-135M's static plans (--no-tune) from $VKC and, when VKCOLD names
# another compiler build, from it, beside the graph as written (--no-optimize): each plan's
# prefill dispatches, and vkc compare of the pairs (STATICAB_PAIRS, default 8, alternating) on
# prefill at STATICAB_LENGTHS (512 128) rows and on decode, into staticab.txt. Session 24's
# static extraction priced by kernel estimates (docs/tuning.md, "The static extraction") is
# measured this way; not a default part (~90 s).
if want staticab; then
{
  part "staticab: $S static (--no-tune) from $V${VKCOLD:+ and $VKCOLD}, and as written"
  plans=(new)
  t $V compile "$S" -o "$W/sab-new.plan" --no-tune -q
  t $V compile "$S" -o "$W/sab-asw.plan" --no-tune --no-optimize -q
  if [ -n "${VKCOLD:-}" ]; then
    t $VKCOLD compile "$S" -o "$W/sab-old.plan" --no-tune -q && plans+=(old)
  fi
  plans+=(asw)
  for p in "${plans[@]}"; do
    echo "$p: $($V inspect "$W/sab-$p.plan" 2>/dev/null | awk '/^function prefill/{f=1} f&&/dispatches/{print; exit}')"
  done
  for other in "${plans[@]:1}"; do
    for L in ${STATICAB_LENGTHS:-512 128}; do
      part "staticab: new against $other, prefill at $L rows"
      $V compare "$W/sab-new.plan" "$W/sab-$other.plan" -f prefill --length $L --pairs "${STATICAB_PAIRS:-8}" 2>&1 | tail -3
    done
    part "staticab: new against $other, decode"
    $V compare "$W/sab-new.plan" "$W/sab-$other.plan" -f decode --pairs "${STATICAB_PAIRS:-8}" 2>&1 | tail -3
  done
} >> "$OUT/staticab.txt" 2>&1
fi

# serve (issue 24): continuous batching under load. For each of SMODELS (default "smollm2
# llama1b"): the model's F16 GGUF with random weights (the file the quant part makes, reused when
# it is there), a byte-level ChatML tokenizer of exactly its vocabulary (scripts/bench_tokenizer.py:
# the chat API needs a tokenizer and a template, and random weights have none), imported with
# --parallel $SLOTS (default 16) slots (--ctx 2048 --prefill 256), compiled (measured by default on
# a GPU; SBUDGET sets --budget), served on 127.0.0.1:18200 and loaded by vkc loadgen --streams
# 1,4,16,64 --requests $SREQ (default 64) --max-tokens $STOK (default 128) (the requests are
# streamed chat completions; loopback only). Printed: the load table, and the issue's targets:
# aggregate tokens/s at 16 streams at least 6x one stream's, and p99 inter-token latency at 16
# streams at most 2x one stream's; requests lost 0. Into $OUT/serve.txt.
# SKV sets the slots' KV cache dtype (--kv: f16 by default; f32, q8_0, q4_0), e.g. SKV=q8_0.
# SERVE_DRY=1 rehearses it on this machine's lavapipe with the llama.cpp oracle's tiny F16 file
# instead of random models (no numpy needed), e.g. SERVE_DRY=1 SMODELS=smollm2 SREQ=8 STOK=8 SLOTS=4.
SLOTS=${SLOTS:-16}
SCTX=${SCTX:-2048}
SREQ=${SREQ:-64}
STOK=${STOK:-128}
SBF=(); [ -n "${SBUDGET:-}" ] && SBF=(--budget "$SBUDGET")
SKVF=(); [ -n "${SKV:-}" ] && SKVF=(--kv "$SKV")
serve_model() { # NAME MODEL.yaml ROPE_THETA
  local name=$1 yaml=$2 theta=$3
  local D=$W/serve Q=$W/quant
  mkdir -p "$D" "$Q"
  local g=$Q/$name-F16.gguf
  if [ -n "${SERVE_DRY:-}" ] && [ ! -f "$g" ]; then
    cp "${ORACLE_F16:-../shared/oracles/llamacpp/llama-tiny/llama-tiny-F16.gguf}" "$g" || return 1
  fi
  if [ ! -f "$g" ]; then
    part "$name: random weights, F16 GGUF"
    t $V check -write-weights "$D/$name.safetensors" "$yaml" | tail -2
    t $PY "$KIT/st2gguf.py" "$D/$name.safetensors" "$g" --rope-theta "$theta" || return 1
    rm -f "$D/$name.safetensors"
  fi
  part "$name: --parallel $SLOTS ${SKV:+--kv $SKV }, compiled"
  t $V import "$g" -o "$D/$name.yaml" --ctx "$SCTX" --prefill 256 --parallel "$SLOTS" "${SKVF[@]}" --force | tail -3
  local vocab
  vocab=$(awk '/^  vocab:/ {print $2; exit}' "$D/$name.yaml")
  t $PY scripts/bench_tokenizer.py "$vocab" "$D/tok-$name" || return 1
  t $V compile "$D/$name.yaml" -o "$D/$name.plan" --tokenizer "$D/tok-$name/tokenizer.json" "${SBF[@]}" -q || return 1
  $V inspect "$D/$name.plan" | grep -E '^function|variant|dispatches' | head -8
  part "$name: vkc serve, vkc loadgen at 1, 4, 16, 64 streams"
  $V serve "$D/$name.plan" --port 18200 --log-format json 2> "$D/$name.serve.log" &
  local pid=$! i
  for i in $(seq 1200); do curl -sf -o /dev/null http://127.0.0.1:18200/health && break; sleep 0.5; done
  tjf "$D/$name.load.json" $V loadgen http://127.0.0.1:18200 --streams 1,4,16,64 --requests "$SREQ" --max-tokens "$STOK" --json
  curl -s http://127.0.0.1:18200/metrics | grep -E '^vkc_(generated|prompt|batch|kv|requests_total)' | head -20
  kill -TERM $pid; wait $pid; echo "vkc serve exited $?"
  tail -3 "$D/$name.serve.log"
  $PY - "$D/$name.load.json" "$name" <<'PYEOF'
import json, sys
rs = json.load(open(sys.argv[1]))
ms = lambda ns: ns / 1e6
print("| %s | streams | requests | lost | tokens/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms |" % sys.argv[2])
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
by = {}
for r in rs:
    by[r["Streams"]] = r
    print("| | %d | %d | %d | %.1f | %.1f | %.1f | %.2f | %.2f |" % (r["Streams"], r["Requests"], r["Lost"], r["Throughput"],
          ms(r["TTFTp50"]), ms(r["TTFTp99"]), ms(r["ITLp50"]), ms(r["ITLp99"])))
if 1 in by and 16 in by:
    tp = by[16]["Throughput"] / by[1]["Throughput"]
    itl = by[16]["ITLp99"] / by[1]["ITLp99"] if by[1]["ITLp99"] else float("inf")
    lost = sum(r["Lost"] for r in rs)
    print("tokens/s at 16 streams / 1 stream: %.2fx (target >= 6): %s" % (tp, "met" if tp >= 6 else "NOT met"))
    print("p99 inter-token latency at 16 streams / 1 stream: %.2fx (target <= 2): %s" % (itl, "met" if itl <= 2 else "NOT met"))
    print("requests lost: %d (target 0)" % lost)
PYEOF
}
if want serve; then
{
  for m in ${SMODELS:-smollm2 llama1b}; do
    case $m in
    smollm2) serve_model smollm2 "$S" 100000 ;;
    llama1b) serve_model llama1b testdata/llama-1.2b/model.yaml 500000 ;;
    *) echo "SMODELS: unknown model $m (smollm2, llama1b)" ;;
    esac
  done
} >> "$OUT/serve.txt" 2>&1
fi

# big8b: see the PARTS list. CTX8 (default 4096) is the KV cache's context, PREFILL8 (512) the
# prefill's capacity; BIG8B_QUANTS ("Q4_K_M Q8_0") the files; BIG8B_TUNED=15s (unset: none)
# also compiles each file measured at that budget and compares it with the static plan.
big8b() {
  local B=$W/bench-8b CTX8=${CTX8:-4096} PREFILL8=${PREFILL8:-512} q g pl
  mkdir -p "$B"
  part "big8b: the files (BenchmarkCompile8B makes them once with llama-quantize, then times vkc's static compile for lavapipe, device-free)"
  [ -x .gpu/vkc.test ] || { echo "no .gpu/vkc.test: go test -c -o .gpu/vkc.test . before the call"; return 1; }
  t env VKC_BENCH_CACHE="$B" VKC_BENCH_8B_QUANTS="${BIG8B_QUANTS:-Q4_K_M Q8_0}" LLAMA_KIT="$KIT" \
    .gpu/vkc.test -test.run '^$' -test.bench 'Compile8B$' -test.benchtime 1x -test.timeout 30m | tail -12
  local LL=$B/bin
  for q in ${BIG8B_QUANTS:-Q4_K_M Q8_0}; do
    g=$B/llama-3.1-8b-shape-random-$q.gguf pl=$B/llama8b-$q
    [ -f "$g" ] || { echo "no $g"; continue; }
    part "big8b $q: $(stat -c %s "$g") bytes; vkc import (ctx $CTX8, prefill up to $PREFILL8) and static compile"
    t $V import "$g" -o "$pl.yaml" --ctx $CTX8 --prefill $PREFILL8 --force | tail -2
    t "${TV[@]}" $V compile "$pl.yaml" -o "$pl.plan" --no-tune -q || continue
    $V inspect "$pl.plan" | grep -E "^  (weights|state|arena|device)|by dtype|dequantization" | head -8
    part "big8b $q: device memory against the heap (budget before the run, then with the plan loaded)"
    $V devices | grep -E "^\*|heap"
    $V inspect --check-device "$pl.plan" | grep -E "^(runs|fits)" || true
    part "big8b $q: vkc bench pp512 tg128 (wall time as engine.Generate sees it; the first token of a 512-token prompt is pp512's time per call)"
    tjf "$pl.vkc.json" $V bench "$pl.plan" --pp 512 --tg 128 -r $REPS --json
    $V bench "$pl.plan" --pp 512 --tg 8 -r 1 2>&1 | grep "device memory"
    tjf "$pl.decode.json" $V bench "$pl.plan" -f decode -n 30 --input pos=511 --json
    # decode's per-kernel table (one serialised run): where tg128 goes against llama.cpp's.
    $V bench "$pl.plan" -f decode -n 10 --input pos=511 2>&1 | grep -v '^weights:' | head -40
    if [ -n "${BIG8B_TUNED:-}" ]; then
      # A measured compile at budget $BIG8B_TUNED (a fresh tuning database: a cold compile)
      # against the static plan: wall time against the budget, then held-out pairs of decode
      # (at pos 511) and prefill (512 tokens) by vkc compare.
      part "big8b $q: measured compile at --budget $BIG8B_TUNED against the static plan (vkc compare, held-out pairs)"
      rm -f "$pl.tunedb"
      # The whole report (and VKC_TUNE_TRACE's lines when it is set) stays in $pl-tuned.txt.
      t "${TV[@]}" $V compile "$pl.yaml" -o "$pl-tuned.plan" --tune --budget "$BIG8B_TUNED" --tune-db "$pl.tunedb" > "$pl-tuned.txt" 2>&1
      grep -E "^compiled|^  (tune|select|list|lower) |paired rounds|checked against|not checked|^\[(wall|peak)" "$pl-tuned.txt" | head -40
      t $V compare "$pl.plan" "$pl-tuned.plan" -f decode --pairs 20 | tail -4
      t $V compare "$pl.plan" "$pl-tuned.plan" -f prefill --length 512 --pairs 10 | tail -4
    fi
    part "big8b $q: llama-bench -p 512 -n 128 on the same file"
    tjf "$pl.llamacpp.json" "$LL/llama-bench" -m "$g" -p 512 -n 128 -r $REPS -ngl 99 -fa $FA -o json 2> "$pl.llamacpp.err" || tail -20 "$pl.llamacpp.err"
    grep -m3 -E "ggml_vulkan: [0-9]" "$pl.llamacpp.err"
  done
  part "big8b: summary (targets: device memory ≤ file + KV cache + 10%, pp512 ≥ 1.0×, tg128 ≥ 1.1× llama.cpp)"
  $PY - "$B" ${BIG8B_QUANTS:-Q4_K_M Q8_0} <<'PYEOF'
import json, os, sys
b, quants = sys.argv[1], sys.argv[2:]
def load(p):
    try:
        with open(p) as f:
            return json.load(f)
    except Exception as e:
        print(f"  {p}: {e}"); return []
for q in quants:
    g = f"{b}/llama-3.1-8b-shape-random-{q}.gguf"
    v, l = load(f"{b}/llama8b-{q}.vkc.json"), load(f"{b}/llama8b-{q}.llamacpp.json")
    if not v or not os.path.exists(g):
        continue
    fsize = os.path.getsize(g)
    def ts(rows, np, ng):
        for r in rows:
            if r.get("n_prompt") == np and r.get("n_gen") == ng:
                return r.get("median_ts") or r.get("avg_ts")
    def device(rows, np, ng):
        # vkc's device time against its wall time, a token (medians over the samples)
        for r in rows:
            if r.get("n_prompt") == np and r.get("n_gen") == ng and any(r.get("device_ns") or []):
                n, d, w = max(np, ng), sorted(r["device_ns"]), sorted(r["samples_ns"])
                return f"; vkc on the device {d[len(d)//2]/n/1e3:.0f} of {w[len(w)//2]/n/1e3:.0f} µs a token"
        return ""
    dev = v[0].get("plan_device_bytes", 0)
    print(f"{q}: file {fsize/2**30:.2f} GiB; vkc's plan needs {dev/2**30:.2f} GiB of device memory, allocated {v[0].get('allocated_bytes',0)/2**30:.2f} GiB;"
          f" heap budget {v[0].get('heap_budget',0)/2**30:.2f} GiB, in use with the plan {v[0].get('heap_usage',0)/2**30:.2f} GiB")
    for test, np, ng in (("pp512", 512, 0), ("tg128", 0, 128)):
        a, c = ts(v, np, ng), ts(l, np, ng)
        ratio = f"{a/c:.2f}×" if a and c else "-"
        first = f", first token {1000*512/a:.1f} ms" if a and np else ""
        print(f"  {test}: vkc {a or 0:.1f} t/s, llama.cpp {c or 0:.1f} t/s: {ratio}{first}{device(v, np, ng)}")
PYEOF
}
if want big8b; then
  big8b >> "$OUT/big8b.txt" 2>&1
fi

# prec (issue 22): vkc's precision options against llama.cpp's cache types on the same files.
if want prec; then
{
  Q=$W/quant
  LL=$Q/llamacpp/bin
  for q in F16 Q4_K_M; do
    g=$Q/smollm2-$q.gguf
    [ -f "$g" ] || { echo "no $g: run PARTS=quant QMODELS=smollm2 first"; continue; }
    for p in "f32:--act f32 --kv f32" "default:" "kvq8:--kv q8_0" "kvq4:--kv q4_0"; do
      n=${p%%:*} f=${p#*:}
      pl=$Q/prec-$q-$n
      part "prec $q $n: vkc import $f"
      t $V import "$g" -o "$pl.yaml" --ctx 1024 --prefill 512 $f --force | tail -2
      t $V compile "$pl.yaml" -o "$pl.plan" --no-tune -q || continue
      $V inspect "$pl.plan" | grep -E "state|matmul_coop" | head -6
      tjf "$pl.vkc.json" $V bench "$pl.plan" --pp $PP --tg 32 -r $REPS --json
      cat "$pl.vkc.json"
    done
    for c in f16 q8_0 q4_0; do
      part "prec $q: llama-bench -ctk $c -ctv $c -fa 1"
      tjf "$Q/prec-$q-llamacpp-$c.json" "$LL/llama-bench" -m "$g" -p $PP -n 32 -r $REPS -ngl 99 -fa 1 -ctk $c -ctv $c -o json 2> "$Q/prec-$q-llamacpp-$c.err" || tail -5 "$Q/prec-$q-llamacpp-$c.err"
      cat "$Q/prec-$q-llamacpp-$c.json"
    done
  done
} >> "$OUT/prec.txt" 2>&1
fi

if want ttft; then
  ttft >> "$OUT/ttft.txt" 2>&1
fi

if want table; then
  $PY scripts/gpu-bench-table.py "$J" "$OUT/table.md" "$OUT/results.json" --pos "$POS" --pp "$PP"
fi
echo "done in ${SECONDS}s: $(ls "$OUT" | tr '\n' ' ')"
