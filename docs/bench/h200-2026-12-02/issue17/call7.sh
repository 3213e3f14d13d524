# Call 7 (issue 17): as call 6, with the lookahead across problems, non-waiting release, the
# cheaper static choices; cold compiles start without the vkc and NVIDIA pipeline caches.
. .gpu/prelude.sh > $OUT/compile.txt 2>&1
V=.gpu/vkc; W=/tmp/w7; mkdir -p $W/sf
S=examples/smollm2-135m/model.yaml
T=(/usr/bin/time -f "[peak RSS %M KB, %e s wall, %U s user]")
{
date; nproc
$V check -write-weights $W/sf/weights.safetensors $S | tail -1
sed 's/^weights:.*/weights: {file: weights.safetensors}/' $S > $W/sf/model.yaml
M=$W/sf/model.yaml
echo "== static"; "${T[@]}" $V compile $M -o $W/static.plan --no-tune 2>&1 | grep -E "compiled|peak|wrote"
for B in 15s 30s; do
  rm -f $W/tune-$B.json; rm -rf ~/.cache/nvidia ~/.cache/vkc/pipelines-*.bin
  echo; echo "== cold $B $(date +%T) (fresh database, no pipeline caches)"
  VKC_TUNE_TRACE=1 VKC_CPUPROFILE=$OUT/cold-$B.prof "${T[@]}" $V compile $M -o $W/cold-$B.plan --tune --budget $B --tune-db $W/tune-$B.json 2> $W/cold-$B.err
  grep -v '^\[ *[0-9.]*s\] \(tune\|select\):' $W/cold-$B.err
  grep '^\[ *[0-9.]*s\] \(tune\|select\):' $W/cold-$B.err > $OUT/trace-$B.txt
  echo; echo "== warm $B $(date +%T)"
  VKC_CPUPROFILE=$OUT/warm-$B.prof "${T[@]}" $V compile $M -o $W/warm-$B.plan --tune --budget $B --tune-db $W/tune-$B.json 2>&1 | grep -v "^   \|^ \* "
  cmp $W/cold-$B.plan $W/warm-$B.plan && echo "cold and warm plans byte-identical"
  echo "== warm again $B"; "${T[@]}" $V compile $M -o $W/warm2-$B.plan --tune --budget $B --tune-db $W/tune-$B.json 2>&1 | grep -E "compiled|peak|^  [a-z]+ +[0-9.]+"
done
rm -f $OUT/warm-30s.prof
} >> $OUT/compile.txt 2>&1
{
for p in static warm-15s warm-30s; do
  echo "== $p"; $V bench $W/$p.plan --pp 128,512 --tg 32 -r 5 | head -3
  $V bench $W/$p.plan -f decode -n 50 --input pos=127 | sed -n 2,3p
  $V bench $W/$p.plan -f prefill --length 512 -n 20 | sed -n 2,3p
done
} > $OUT/bench.txt 2>&1
export VKC_NO_VALIDATION=1
{
echo "== tune.test"; (cd lower/tune && timeout 120 ../../.gpu/tune.test -test.count=1 -test.v 2>&1 | grep -E '^(--- |ok|FAIL|PASS|panic)|_test.go:[0-9]+:'; echo "rc ${PIPESTATUS[0]}")
echo "== vkc.test Tune|Warm|Weigh"; timeout 200 .gpu/vkc.test -test.count=1 -test.v -test.run 'Tune|Warm|Weigh' 2>&1 | grep -E '^(--- |ok|FAIL|PASS|panic)|_test.go:[0-9]+:' | grep -v -E '^\s+--- (PASS|SKIP)'; echo "rc ${PIPESTATUS[0]}"
} > $OUT/tests.txt 2>&1
echo "call7 done in ${SECONDS}s"
