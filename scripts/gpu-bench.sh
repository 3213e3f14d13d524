#!/usr/bin/env bash
# The GPU benchmark batch, run on the GPU machine in one call (see ../shared/GPU.md):
#   bash ../shared/gpu/prepare.sh && cp -r examples testdata scripts .gpu/  (done by the caller)
#   run: . .gpu/prelude.sh && bash scripts/gpu-bench.sh
# It compiles SmolLM2-135M and the Whisper encoder statically and with measured tuning (cold and
# warm, to show the tuning database reused), benches prefill-128 and decode at position 127, and
# runs the PyTorch peer on the same weights and tokens in the same session, and measures prompt and
# generation throughput the way llama-bench does (pp128, pp512, tg32). Every -f bench prints
# GFLOP/s and roofline shares against the device's copy bandwidth and f32 peak, which vkc measures
# on the device the first time (cached in ~/.cache/vkc/peaks). SmolLM2's prefill has a run-time
# length 1..512 (one plan, variants for 1, 8, 64 tokens); the -f benches run it at 128 tokens. The
# length part runs scripts/length-bench.sh on SmolLM2: prefill at n = 1 7 64 300 512 on the 1..512
# plan against plans compiled for each n. Everything goes to $OUT (or ./out): one log per part, so
# a failing part does not hide the others.
set -u
OUT=${OUT:-out}
mkdir -p "$OUT" /tmp/vb
V=${VKC:-.gpu/vkc}
S=${SMOLLM2:-examples/smollm2-135m/model.yaml} # SMOLLM2 and WHISPER let a dry run on lavapipe use small models
W=${WHISPER:-examples/whisper-tiny-encoder/model.yaml}
# time -v reports the peak RSS of a compile where GNU time is installed.
TV=(); [ -x /usr/bin/time ] && TV=(/usr/bin/time -f "[peak RSS %M KB, %e s wall, %U s user]")
part() { echo "=== $*"; }
# PARTS selects parts by name (default: all): smollm2-static whisper-static peer smollm2-tuned whisper-tuned throughput length
want() { [ -z "${PARTS:-}" ] || [[ " $PARTS " == *" $1 "* ]]; }
t() { local s=$(date +%s.%N); "$@"; local rc=$?; echo "[wall $(awk -v a="$s" -v b="$(date +%s.%N)" "BEGIN{printf \"%.2f\", b-a}") s, rc $rc] $*"; return $rc; }

if want smollm2-static; then
{
part devices; $V devices | head -40
part smollm2 static compile, cold then warm
t $V compile $S -o /tmp/vb/s_static.plan --no-tune
t $V compile $S -o /tmp/vb/s_static2.plan --no-tune -q
cmp /tmp/vb/s_static.plan /tmp/vb/s_static2.plan && echo "static plans byte-identical"
part "smollm2 static compile from a safetensors file (weights memory-mapped, written into the plan from the file): the issue's static figure; 'compiled ... in' is the compile, the rest of the wall time parsing and writing the weights"
mkdir -p /tmp/vb/sf
t $V check -write-weights /tmp/vb/sf/weights.safetensors $S | tail -1
sed 's/^weights:.*/weights: {file: weights.safetensors}/' $S > /tmp/vb/sf/model.yaml
for i in 1 2 3; do t "${TV[@]}" $V compile /tmp/vb/sf/model.yaml -o /tmp/vb/s_file.plan --no-tune 2>&1 | grep -E 'compiled|peak RSS|wall'; done
part smollm2 static bench
t $V bench /tmp/vb/s_static.plan -f prefill --length 128 -n 20
t $V bench /tmp/vb/s_static.plan -f decode -n 50 --input pos=127
} > "$OUT/smollm2-static.txt" 2>&1
fi
if want whisper-static; then
{
part whisper static
t $V compile $W -o /tmp/vb/w_static.plan --no-tune
t $V bench /tmp/vb/w_static.plan -f encode -n 50
} > "$OUT/whisper-static.txt" 2>&1
fi
if want peer; then
{
part peer: same weights, same tokens
t $V check -write-weights /tmp/vb/w.safetensors $S | tail -2
python3 -c "import numpy as np; np.save('/tmp/vb/tokens.npy', np.random.default_rng(1).integers(0, 49152, 128).astype(np.int32))"
[ -f /tmp/vb/s_static.plan ] || t $V compile $S -o /tmp/vb/s_static.plan --no-tune -q
t $V run /tmp/vb/s_static.plan -f prefill --input tokens=/tmp/vb/tokens.npy --input pos=0 -o /tmp/vb/vkc_out
t python3 examples/bench/torch_peer.py --weights /tmp/vb/w.safetensors --tokens /tmp/vb/tokens.npy --vkc-logits /tmp/vb/vkc_out/logits.npy ${PEER_FLAGS:-}
part vkc in the same session, for the ratio
t $V bench /tmp/vb/s_static.plan -f decode -n 50 --input pos=127 | head -12
} > "$OUT/peer.txt" 2>&1
fi
if want smollm2-tuned; then
{
part "smollm2 tuned compile, cold (a fresh database) then warm, with the default budget (BUDGET overrides it)"
rm -f /tmp/vb/tune.json
B=(); [ -n "${BUDGET:-}" ] && B=(--budget "$BUDGET")
t "${TV[@]}" $V compile $S -o /tmp/vb/s_tuned.plan --tune "${B[@]}" --tune-db /tmp/vb/tune.json
t "${TV[@]}" $V compile $S -o /tmp/vb/s_tuned2.plan --tune "${B[@]}" --tune-db /tmp/vb/tune.json 2>&1 | tee /tmp/vb/warm.txt
cmp /tmp/vb/s_tuned.plan /tmp/vb/s_tuned2.plan && echo "cold and warm tuned plans byte-identical"
grep -q ' 0 searched (0 configurations' /tmp/vb/warm.txt && grep -q 'recorded by an earlier compile' /tmp/vb/warm.txt && echo "the warm compile measured nothing"
part "a third compile without --tune: measured by default on a GPU (warm again)"
t $V compile $S -o /tmp/vb/s_default.plan --tune-db /tmp/vb/tune.json 2>&1 | grep -E 'by default|compiled|recorded'
$V inspect /tmp/vb/s_default.plan | grep 'chosen by'
$V tune --list --tune-db /tmp/vb/tune.json | sed -n '/measured selections/,$p' 
part smollm2 tuned bench
t $V bench /tmp/vb/s_tuned.plan -f prefill --length 128 -n 20
t $V bench /tmp/vb/s_tuned.plan -f decode -n 50 --input pos=127
part smollm2 tuned bench of the warm compile plan
t $V bench /tmp/vb/s_tuned2.plan -f prefill --length 128 -n 20 | head -4
t $V bench /tmp/vb/s_tuned2.plan -f decode -n 50 --input pos=127 | head -4
part gains
t $V tune $S -budget 1s -tune-db /tmp/vb/tune.json
$V inspect /tmp/vb/s_tuned.plan | head -60
} > "$OUT/smollm2-tuned.txt" 2>&1
fi
if want whisper-tuned; then
{
part whisper tuned
t $V compile $W -o /tmp/vb/w_tuned.plan --tune --budget ${WBUDGET:-40s} --tune-db /tmp/vb/tune.json
t $V compile $W -o /tmp/vb/w_tuned2.plan --tune --budget ${WBUDGET:-40s} --tune-db /tmp/vb/tune.json
t $V bench /tmp/vb/w_tuned.plan -f encode -n 50
t $V bench /tmp/vb/w_tuned2.plan -f encode -n 50 | head -4
part whisper gains
t $V tune $W -budget 1s -tune-db /tmp/vb/tune.json
} > "$OUT/whisper.txt" 2>&1
fi
if want throughput; then
{
part "smollm2 throughput, llama-bench's tests pp128 pp512 tg32, 5 repetitions (the peer: ../shared/peers/llamacpp/run.sh runs llama-bench -p 128 -n 32 -r 5)"
[ -f /tmp/vb/s_static.plan ] || t $V compile $S -o /tmp/vb/s_static.plan --no-tune -q
t $V bench /tmp/vb/s_static.plan --pp 128,512 --tg 32 -r 5
[ -f /tmp/vb/s_tuned.plan ] && t $V bench /tmp/vb/s_tuned.plan --pp 128,512 --tg 32 -r 5
part the same as JSON
t $V bench /tmp/vb/s_static.plan --pp 128,512 --tg 32 -r 5 --json
part roofline of prefill-128 and decode at 127 as JSON, with the device peaks vkc measured
t $V bench /tmp/vb/s_static.plan -f prefill --length 128 -n 20 --json
t $V bench /tmp/vb/s_static.plan -f decode -n 50 --input pos=127 --json
} > "$OUT/throughput.txt" 2>&1
fi
if want length; then
{
part "run-time length: SmolLM2-135M prefill 1..512 at n = 1 7 64 300 512 against plans compiled for each n (static compiles; GPU-time ratios are the figure)"
t env MODEL=$S VKC=$V DIR=/tmp/vb/length REPS=${LREPS:-20} ROUNDS=${LROUNDS:-3} bash scripts/length-bench.sh
$V inspect /tmp/vb/length/bounded.plan | grep -E "^function|run-time length|variant for" | head -20
} > "$OUT/length.txt" 2>&1
fi
echo done
