# Call 12 (issue 17, final code: pipelines created through cvk.c with the collector on):
# gpu-bench's static, tuned (default budget, cold), warm (twice), pipeline and table parts; the
# tuner, runtime, end-to-end and kernel tests on the H200 (every pipeline through the new path).
. .gpu/prelude.sh > $OUT/devices.txt 2>&1
PARTS="static tuned warm pipeline table" bash scripts/gpu-bench.sh > $OUT/bench.log 2>&1
export VKC_NO_VALIDATION=1
f() { grep -E '^(--- |ok|FAIL|PASS|panic)|_test.go:[0-9]+:' | grep -v -E '^\s+--- (PASS|SKIP)' ; }
{
echo "== tune.test"; date; (cd lower/tune && timeout 100 ../../.gpu/tune.test -test.count=1 -test.v 2>&1 | f; echo "rc ${PIPESTATUS[0]}")
echo "== runtime.test"; date; (cd runtime && timeout 80 ../.gpu/runtime.test -test.count=1 -test.v -test.run '^Test' 2>&1 | f; echo "rc ${PIPESTATUS[0]}")
echo "== vkc.test"; date; timeout 120 .gpu/vkc.test -test.count=1 -test.v 2>&1 | f; echo "rc ${PIPESTATUS[0]}"
echo "== kernels.test"; date; (cd kernels && timeout 200 ../.gpu/kernels.test -test.count=1 -test.v 2>&1 | f; echo "rc ${PIPESTATUS[0]}")
date
} > $OUT/tests.txt 2>&1
echo "call12 done in ${SECONDS}s"
