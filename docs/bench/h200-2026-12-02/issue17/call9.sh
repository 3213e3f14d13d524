# Call 9 (issue 17, final code): gpu-bench's static, tuned (default budget, cold), warm (twice),
# pipeline and table parts; a cold compile at 30 s for comparison; tuner, runtime, end-to-end tests.
. .gpu/prelude.sh > $OUT/devices.txt 2>&1
.gpu/vkc devices >> $OUT/devices.txt 2>&1
PARTS="static tuned warm pipeline table" bash scripts/gpu-bench.sh > $OUT/bench.log 2>&1
{
W=/tmp/vb; rm -f $W/tune30.json; rm -rf ~/.cache/nvidia ~/.cache/vkc/pipelines-*.bin
echo "== cold 30s"; /usr/bin/time -f "[peak RSS %M KB, %e s wall, %U s user]" .gpu/vkc compile $W/sf/model.yaml -o $W/t30.plan --tune --budget 30s --tune-db $W/tune30.json 2>&1 | grep -E "compiled|peak|^  [a-z]+ +[0-9.]+"
echo "== warm 30s"; /usr/bin/time -f "[peak RSS %M KB, %e s wall, %U s user]" .gpu/vkc compile $W/sf/model.yaml -o $W/t30w.plan --tune --budget 30s --tune-db $W/tune30.json 2>&1 | grep -E "compiled|peak|^  [a-z]+ +[0-9.]+"
cmp $W/t30.plan $W/t30w.plan && echo "cold and warm plans byte-identical"
.gpu/vkc bench $W/t30.plan --pp 128,512 --tg 32 -r 5 | head -3
} > $OUT/budget30.txt 2>&1
export VKC_NO_VALIDATION=1
f() { grep -E '^(--- |ok|FAIL|PASS|panic)|_test.go:[0-9]+:' | grep -v -E '^\s+--- (PASS|SKIP)' ; }
{
echo "== tune.test"; date; (cd lower/tune && timeout 120 ../../.gpu/tune.test -test.count=1 -test.v 2>&1 | f; echo "rc ${PIPESTATUS[0]}")
echo "== runtime.test"; date; (cd runtime && timeout 100 ../.gpu/runtime.test -test.count=1 -test.v -test.run '^Test' 2>&1 | f; echo "rc ${PIPESTATUS[0]}")
echo "== vkc.test"; date; timeout 150 .gpu/vkc.test -test.count=1 -test.v 2>&1 | f; echo "rc ${PIPESTATUS[0]}"
date
} > $OUT/tests.txt 2>&1
echo "call9 done in ${SECONDS}s"
