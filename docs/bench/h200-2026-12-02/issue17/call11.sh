# Call 11 (issue 17, the last commit: the static choice retimed warm): gpu-bench's static, tuned
# (default budget, cold), warm (twice), pipeline and table parts; the tuner and end-to-end tests.
. .gpu/prelude.sh > $OUT/devices.txt 2>&1
PARTS="static tuned warm pipeline table" bash scripts/gpu-bench.sh > $OUT/bench.log 2>&1
export VKC_NO_VALIDATION=1
f() { grep -E '^(--- |ok|FAIL|PASS|panic)|_test.go:[0-9]+:' | grep -v -E '^\s+--- (PASS|SKIP)' ; }
{
echo "== tune.test"; date; (cd lower/tune && timeout 120 ../../.gpu/tune.test -test.count=1 -test.v 2>&1 | f; echo "rc ${PIPESTATUS[0]}")
echo "== vkc.test"; date; timeout 150 .gpu/vkc.test -test.count=1 -test.v 2>&1 | f; echo "rc ${PIPESTATUS[0]}"
date
} > $OUT/tests.txt 2>&1
echo "call11 done in ${SECONDS}s"
