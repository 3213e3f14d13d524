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

# bench PLAN N prints the GPU and wall medians in nanoseconds of a prefill of N tokens.
bench() {
	local args=(-f prefill -n "$REPS" --peaks=false --json)
	case "$1" in *exact*) ;; *) args+=(--length "$2") ;; esac
	"$VKC" bench "$1" "${args[@]}" | tr -d ' \n' | grep -o '"median_ns":[0-9]*' | head -2 | cut -d: -f2 | tr '\n' ' '
	echo
}
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ms() { awk -v x="$1" 'BEGIN {printf "%.3f", x/1e6}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a/b}'; }

echo
echo "| n | exact GPU ms | bounded GPU ms | ratio | capacity GPU ms | ratio | exact wall ms | bounded wall ms | ratio | capacity wall ms | ratio |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for n in $LENGTHS; do
	declare -A gpu=() wall=()
	for r in $(seq "$ROUNDS"); do
		order="exact bounded capacity"
		[ $((r % 2)) -eq 0 ] && order="capacity bounded exact"
		for k in $order; do
			plan=$DIR/$k.plan
			[ "$k" = exact ] && plan=$DIR/exact$n.plan
			read -r g w < <(bench "$plan" "$n")
			gpu[$k]="${gpu[$k]:-} $g"
			wall[$k]="${wall[$k]:-} $w"
		done
	done
	eg=$(echo "${gpu[exact]}" | median); bg=$(echo "${gpu[bounded]}" | median); cg=$(echo "${gpu[capacity]}" | median)
	ew=$(echo "${wall[exact]}" | median); bw=$(echo "${wall[bounded]}" | median); cw=$(echo "${wall[capacity]}" | median)
	echo "| $n | $(ms "$eg") | $(ms "$bg") | $(ratio "$bg" "$eg") | $(ms "$cg") | $(ratio "$cg" "$eg") | $(ms "$ew") | $(ms "$bw") | $(ratio "$bw" "$ew") | $(ms "$cw") | $(ratio "$cw" "$ew") |"
	unset gpu wall
done
