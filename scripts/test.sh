#!/usr/bin/env bash
# The test command of the README and of CI: installs what is missing, then checks formatting, vet,
# the whole test suite (GPU paths on lavapipe when there is no GPU), a brief run of every fuzz target,
# and renders the DOT output with graphviz.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

echo "== gofmt"
bad=$(gofmt -l $(git ls-files '*.go') || true)
if [ -n "$bad" ]; then echo "gofmt would change:"; echo "$bad"; exit 1; fi

echo "== go vet"
go vet ./...

echo "== go test"
# The kernels package is most of the suite's time on a CPU device: lavapipe compiles each kernel's
# pipelines cold, one core at a time, so alone it took 60 of this script's 74 minutes on a 2-core
# machine. Its tests run in two processes (every other test by name) beside the other packages.
mod=github.com/vkc-project/vkc
ktests=$(go test -list '^(Test|Example|Fuzz)' ./kernels | grep -E '^(Test|Example|Fuzz)')
[ -n "$ktests" ] || { echo "go test -list ./kernels listed no tests"; exit 1; }
# Every other test by name, but for the slowest, pinned to a half each so that a test added or
# renamed does not move them all to one: on 2026-12-06 by parity alone the odd half held
# TestCoopMatmulEmulated (324 s), TestMatmulVecQ (282 s), TestMatmulVecQDot (252 s) and
# TestCoopMatmulQuantEmulated (210 s), 1331 s in all, against 346 s for the even half.
pinned1="TestCoopMatmulEmulated TestCoopMatmulQuantEmulated TestCoopAttentionEmulated"
pinned0="TestMatmulVecQ TestMatmulVecQDot"
half() {
  echo "$ktests" | awk -v r="$1" -v p1=" $pinned1 " -v p0=" $pinned0 " \
    '{ t = " " $0 " "; h = index(p1, t) ? 1 : index(p0, t) ? 0 : NR % 2 } h == r' | paste -sd'|'
}
klog=$(mktemp -d)
go test -count=1 -timeout 85m -v -run "^($(half 1))\$" ./kernels >"$klog/a" 2>&1 &
ka=$!
go test -count=1 -timeout 85m -v -run "^($(half 0))\$" ./kernels >"$klog/b" 2>&1 &
kb=$!
rc=0
go test -count=1 -timeout 85m $(go list ./... | grep -vx "$mod/kernels") || rc=1
wait $ka || { grep -vE '^(=== (RUN|PAUSE|CONT)| *--- PASS)' "$klog/a" || true; rc=1; }
wait $kb || { grep -vE '^(=== (RUN|PAUSE|CONT)| *--- PASS)' "$klog/b" || true; rc=1; }
echo "kernels, odd tests:  $(tail -1 "$klog/a")"
echo "kernels, even tests: $(tail -1 "$klog/b")"
# The slowest top-level tests of each half (-v), to balance the halves by measured time.
for h in a b; do
  echo "kernels, slowest of half $h: $(grep -E '^--- (PASS|FAIL|SKIP): ' "$klog/$h" | sed -E 's/^--- [A-Z]+: ([^ ]+) \(([0-9.]+)s\)/\2 \1/' | sort -rn | head -6 | awk '{printf "%s %ss, ", $2, $1}')"
done
[ "$rc" = 0 ] || exit 1

echo "== ONNX node tests: counts (interpreter, compiled plans; warm pipeline cache by now)"
go test -count=1 -run 'TestONNXNode(Interpreter|Plans)$' -v ./importer . >/tmp/vkc-onnx-node.log 2>&1 || { cat /tmp/vkc-onnx-node.log; exit 1; }
grep -A24 'ONNX node tests through' /tmp/vkc-onnx-node.log | grep -v '^=== \|^--- \|^PASS\|^ok' || grep -m1 'SKIP\|missing' /tmp/vkc-onnx-node.log || true

echo "== benchmarks (one iteration each: saturation and extraction at 2, 8 and 30 layers)"
go test -run '^$' -bench 'Layers|Saturate' -benchtime 1x ./egraph ./rules

echo "== benchmarks (one iteration each: static compiles of SmolLM2-135M and a 1.2 B Llama shape, time and peak RSS)"
# The 1.2 B compile makes 2.5 GB of random weights once and writes a plan of the same size; it
# skips itself, saying why, without 5.3 GB of free disk or 4 GiB of available memory.
go test -run '^$' -bench 'CompileSmolLM2|CompileLlama1B' -benchmem -benchtime 1x .

echo "== fuzz (briefly, each target)"
# Budgets are counts of executions, about 8 s each on a 2-core machine: a duration -fuzztime
# races Go's fuzz coordinator (golang/go#75804, unfixed in Go 1.26), which then fails a target
# with "context deadline exceeded" and no failing input. FUZZTIME overrides every target's.
fuzzcount() {
  case $1 in
    FuzzBuilder) echo 20000x ;;
    FuzzDecodeContents) echo 15000x ;;
    FuzzParse | FuzzParseModel) echo 50000x ;;
    FuzzImportONNX) echo 60000x ;;
    FuzzGGUF) echo 100000x ;;
    FuzzByteLevelRoundTrip | FuzzRegexAgainstStdlib) echo 40000x ;;
    *) echo 150000x ;;
  esac
}
for f in $(git ls-files '*_test.go'); do
  for name in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)' "$f" | awk '{print $2}'); do
    echo "fuzz $name in ./$(dirname "$f")"
    go test -run='^$' -fuzz="^${name}\$" -fuzztime="${FUZZTIME:-$(fuzzcount "$name")}" -fuzzminimizetime=1x "./$(dirname "$f")" >/tmp/vkc-fuzz.log 2>&1 || { cat /tmp/vkc-fuzz.log; exit 1; }
  done
done

if [ -x scripts/dot-check.sh ]; then
  echo "== dot"
  bash scripts/dot-check.sh
fi
echo "== all checks passed"
