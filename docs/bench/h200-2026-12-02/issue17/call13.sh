# Call 13 (issue 17): where the tuned plan's pp512 goes. Static and tuned (default budget) plans of
# the memory-mapped SmolLM2; prefill at 512 tokens, GPU time and the per-kernel table, and pp512
# alternating static, tuned, static, tuned.
. .gpu/prelude.sh > $OUT/devices.txt 2>&1
V=.gpu/vkc; W=/tmp/w13; mkdir -p $W/sf; S=examples/smollm2-135m/model.yaml
{
$V check -write-weights $W/sf/weights.safetensors $S | tail -1
sed 's/^weights:.*/weights: {file: weights.safetensors}/' $S > $W/sf/model.yaml
$V compile $W/sf/model.yaml -o $W/static.plan --no-tune -q
$V compile $W/sf/model.yaml -o $W/tuned.plan --tune --tune-db $W/tune.json -q
for p in static tuned static tuned; do echo "== $p pp512"; $V bench $W/$p.plan --pp 512 --tg 8 -r 5 | head -2; done
for p in static tuned; do echo "== $p prefill 512"; $V bench $W/$p.plan -f prefill --length 512 -n 20 | head -40; done
} > $OUT/pp512.txt 2>&1
echo "call13 done in ${SECONDS}s"
