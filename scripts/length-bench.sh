#!/usr/bin/env bash
# The run-time-length benchmark (docs/design-runtime-length.md): a prefill with a run-time length
# 1..512, run at n = LENGTHS, against plans compiled for exactly each n (vkc compile --length n).
# Three plans per model:
#   bounded   the 1..512 plan as vkc compile makes it (variants for capacities 1, 8, 64 beside 512)
#   capacity  the 1..512 plan without variants (--length-variants none): every n on the 512 plan,
#             its grids following n
#   exact     one plan per n, compiled for exactly that length
# and for each n the median GPU time and wall time of `vkc bench -f prefill --length n` (static
# compiles, no tuning), with the ratios bounded/exact and capacity/exact. The target is a ratio
# of at most 1.25.
#
#   bash scripts/length-bench.sh                         # lavapipe: examples/bench/length-model.yaml
#   MODEL=examples/smollm2-135m/model.yaml VKC=.gpu/vkc bash scripts/length-bench.sh   # the H200
#
# Environment: VKC (the vkc binary; default: go run ./cmd/vkc, built once), MODEL, LENGTHS,
# REPS (timed repetitions per bench, default 5), ROUNDS (each plan benched that many times per n,
# in alternating order; the median is reported; default 2), DIR (plans, default /tmp/vkc-length).
set -eu
cd "$(dirname "$0")/.."
MODEL=${MODEL:-examples/bench/length-model.yaml}
LENGTHS=${LENGTHS:-1 7 64 300 512}
REPS=${REPS:-5}
ROUNDS=${ROUNDS:-2}
DIR=${DIR:-/tmp/vkc-length}
mkdir -p "$DIR"
if [ -z "${VKC:-}" ]; then
	go build -o "$DIR/vkc" ./cmd/vkc
	VKC=$DIR/vkc
fi

echo "model $MODEL; lengths $LENGTHS; $REPS repetitions per bench, $ROUNDS rounds"
"$VKC" devices | head -3
"$VKC" compile "$MODEL" -o "$DIR/bounded.plan" -q
"$VKC" compile "$MODEL" -o "$DIR/capacity.plan" --length-variants none -q
for n in $LENGTHS; do
	"$VKC" compile "$MODEL" -o "$DIR/exact$n.plan" --length "$n" -q
done

# bench PLAN N prints the GPU, wall and CPU medians in nanoseconds of a prefill of N tokens (CPU:
# the vkc process's CPU time per run, which on lavapipe is the device's work and does not count
# what other processes on the machine took; 0 where unknown).
bench() {
	local args=(-f prefill -n "$REPS" --peaks=false --json)
	case "$1" in *exact*) ;; *) args+=(--length "$2") ;; esac
	local j
	j=$("$VKC" bench "$1" "${args[@]}" | tr -d ' \n')
	for k in gpu wall cpu; do
		printf '%s ' "$(echo "$j" | sed -n "s/.*\"$k\":{\"median_ns\":\([0-9]*\).*/\1/p" | grep . || echo 0)"
	done
	echo
}
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ms() { awk -v x="$1" 'BEGIN {printf "%.3f", x/1e6}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a/b; else print "-"}'; }

declare -A res=()
for n in $LENGTHS; do
	for r in $(seq "$ROUNDS"); do
		order="exact bounded capacity"
		[ $((r % 2)) -eq 0 ] && order="capacity bounded exact"
		for k in $order; do
			plan=$DIR/$k.plan
			[ "$k" = exact ] && plan=$DIR/exact$n.plan
			read -r g w c < <(bench "$plan" "$n")
			res[$k,$n,gpu]="${res[$k,$n,gpu]:-} $g"
			res[$k,$n,wall]="${res[$k,$n,wall]:-} $w"
			res[$k,$n,cpu]="${res[$k,$n,cpu]:-} $c"
		done
	done
	echo "n=$n done" >&2
done
for m in ${METRICS:-gpu cpu wall}; do
	echo
	echo "$m time, median ms of $ROUNDS benches of $REPS runs each (ratio: against the plan compiled for exactly n)"
	echo
	echo "| n | exact | bounded (1..512, variants) | ratio | capacity (1..512, no variants) | ratio |"
	echo "|---:|---:|---:|---:|---:|---:|"
	for n in $LENGTHS; do
		e=$(echo "${res[exact,$n,$m]}" | median); b=$(echo "${res[bounded,$n,$m]}" | median); c=$(echo "${res[capacity,$n,$m]}" | median)
		echo "| $n | $(ms "$e") | $(ms "$b") | $(ratio "$b" "$e") | $(ms "$c") | $(ratio "$c" "$e") |"
	done
done
