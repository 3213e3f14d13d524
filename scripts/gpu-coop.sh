#!/usr/bin/env bash
# The cooperative-matrix batch for the GPU machine (docs/bench/coopmat-*.txt came from it), from
# the project root after building .gpu/ (vkc and kernels.test):
#   mkdir -p .gpu && cp ../shared/gpu/debs/*.deb ../shared/gpu/prelude.sh .gpu/ &&
#   go build -o .gpu/vkc ./cmd/vkc && go test -c -o .gpu/kernels.test ./kernels
#   run: . .gpu/prelude.sh && bash scripts/gpu-coop.sh
# Parts (PARTS, default all): tests (TestCoop*GPU against the interpreter), sweep (the Coop
# benchmarks, one process), quick (one process per matmul problem, few points), smollm2 (prefill
# static, then tuned with BUDGET). Logs go to $OUT.
set -u
OUT=${OUT:-out}
mkdir -p "$OUT"
want() { [ -z "${PARTS:-}" ] || [[ " $PARTS " == *" $1 "* ]]; }
t() { local s=$(date +%s.%N); "$@"; local rc=$?; echo "[wall $(awk -v a="$s" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}') s, rc $rc] $*"; return $rc; }
templates() { .gpu/vkc inspect "$1" | grep -oE '(matmul_[a-z]+|attention_[a-z]+) ' | sort | uniq -c; }
.gpu/vkc devices | head -45 > "$OUT/coopmat-devices.txt" 2>&1
if want tests; then
  ( cd kernels && t timeout 150 ../.gpu/kernels.test -test.v -test.run 'Coop.*GPU' -test.timeout 140s ) > "$OUT/coopmat-tests.txt" 2>&1
fi
if want sweep; then
  ( cd kernels && t timeout 200 ../.gpu/kernels.test -test.run '^$' -test.bench Coop -test.benchtime 1x -test.v -test.timeout 190s ) > "$OUT/coopmat-bench-sweep.txt" 2>&1
fi
if want quick; then
  ( cd kernels && export VKC_COOP_QUICK=1
    t timeout 60 ../.gpu/kernels.test -test.run '^$' -test.bench CoopGEMM4096 -test.benchtime 1x -test.v
    for s in 128x960x576 128x576x576 128x3072x576 128x576x1536 128x49152x576; do
      t timeout 30 ../.gpu/kernels.test -test.run '^$' -test.bench "CoopSmolLM2Prefill/$s\$" -test.benchtime 1x -test.v
    done ) > "$OUT/coopmat-bench-quick.txt" 2>&1
fi
if want smollm2; then
  { S=examples/smollm2-135m/model.yaml
    t timeout 60 .gpu/vkc compile $S -o /tmp/s.plan -f prefill --no-tune -q
    templates /tmp/s.plan
    t timeout 40 .gpu/vkc bench /tmp/s.plan -f prefill -n 20 | head -45
    t timeout 110 .gpu/vkc compile $S -o /tmp/t.plan -f prefill --tune --budget ${BUDGET:-45s} --tune-db /tmp/tune.json 2>&1 | tail -25
    templates /tmp/t.plan
    t timeout 40 .gpu/vkc bench /tmp/t.plan -f prefill -n 20 | head -45; } > "$OUT/coopmat-smollm2.txt" 2>&1
fi
