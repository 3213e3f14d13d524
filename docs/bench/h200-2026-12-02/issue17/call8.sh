# Call 8 (issue 17, final): gpu-bench's static, tuned (default budget, cold), warm (twice),
# pipeline and table parts; then the tuner, end-to-end and kernel tests on this device.
. .gpu/prelude.sh > $OUT/devices.txt 2>&1
.gpu/vkc devices >> $OUT/devices.txt 2>&1
PARTS="static tuned warm pipeline table" bash scripts/gpu-bench.sh > $OUT/bench.log 2>&1
export VKC_NO_VALIDATION=1
f() { grep -E '^(--- |ok|FAIL|PASS|panic)|_test.go:[0-9]+:' | grep -v -E '^\s+--- (PASS|SKIP)' ; }
{
echo "== tune.test"; date; (cd lower/tune && timeout 120 ../../.gpu/tune.test -test.count=1 -test.v 2>&1 | f; echo "rc ${PIPESTATUS[0]}")
echo "== vkc.test"; date; timeout 150 .gpu/vkc.test -test.count=1 -test.v 2>&1 | f; echo "rc ${PIPESTATUS[0]}"
echo "== kernels.test"; date; (cd kernels && timeout 200 ../.gpu/kernels.test -test.count=1 -test.v 2>&1 | f; echo "rc ${PIPESTATUS[0]}")
date
} > $OUT/tests.txt 2>&1
echo "call8 done in ${SECONDS}s"
