#!/usr/bin/env bash
# Two vkc serve replicas behind HAProxy on loopback, with a bounded load through it
# (docs/serving.md, "Scale beyond one process").
#
#   bash scripts/serve-haproxy.sh          # needs Debian's haproxy (apt-get install haproxy)
#
# 1. Compiles MODEL (default testdata/chat-tiny/parallel.yaml: 4 slots) for the device once and
#    starts two `vkc serve` replicas of it on 127.0.0.1:18101 and :18102, and HAProxy on
#    127.0.0.1:18100 with deploy/haproxy.cfg (health checks on /health, least connections,
#    requests a replica refuses sent to the other).
# 2. `vkc loadgen` sends STREAMS (default 1,4,16) concurrent streamed chat completions through
#    HAProxy, REQUESTS (default 32) per level of MAXTOK (default 16) tokens; every request must
#    succeed, and both replicas must have served some.
# 3. The same load again while replica 1 is stopped with SIGTERM halfway: it finishes what it
#    is streaming, HAProxy's health check takes it out, and nothing is lost.
# Everything stops at the end (or on failure); the logs stay in $DIR. Exit status 0 when no
# request was lost.
set -eu
cd "$(dirname "$0")/.."
MODEL=${MODEL:-testdata/chat-tiny/parallel.yaml}
STREAMS=${STREAMS:-1,4,16}
REQUESTS=${REQUESTS:-32}
MAXTOK=${MAXTOK:-16}
DIR=${DIR:-$(mktemp -d /tmp/vkc-haproxy.XXXXXX)}
command -v haproxy >/dev/null || { echo "serve-haproxy.sh: needs haproxy (Debian: apt-get install haproxy)" >&2; exit 1; }
mkdir -p "$DIR"
go build -o "$DIR/vkc" ./cmd/vkc
VKC=$DIR/vkc
"$VKC" compile -q "$MODEL" -o "$DIR/model.plan"

pids=()
stop_all() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap stop_all EXIT

"$VKC" serve "$DIR/model.plan" --port 18101 --log-format json 2>"$DIR/r1.log" & pids+=($!); r1=$!
"$VKC" serve "$DIR/model.plan" --port 18102 --log-format json 2>"$DIR/r2.log" & pids+=($!)
haproxy -db -f deploy/haproxy.cfg >"$DIR/haproxy.log" 2>&1 & pids+=($!)

healthy() { curl -sf -o /dev/null --max-time 2 "$1/health"; }
for u in http://127.0.0.1:18101 http://127.0.0.1:18102 http://127.0.0.1:18100; do
	for i in $(seq 600); do healthy "$u" && break; sleep 0.2; done
	healthy "$u" || { echo "serve-haproxy.sh: $u not healthy after 2 minutes" >&2; exit 1; }
done
sleep 1.5 # HAProxy's checks see both replicas up (rise 2, every 500 ms)

served() { grep -c '"path":"/v1/chat/completions","status":200' "$1" || true; }

echo "== the load through HAProxy (127.0.0.1:18100) to two replicas"
"$VKC" loadgen http://127.0.0.1:18100 --streams "$STREAMS" --requests "$REQUESTS" --max-tokens "$MAXTOK" | tee "$DIR/load.md"
n1=$(served "$DIR/r1.log"); n2=$(served "$DIR/r2.log")
echo "replica 1 answered $n1 requests, replica 2 $n2"
if [ "$n1" -eq 0 ] || [ "$n2" -eq 0 ]; then
	echo "serve-haproxy.sh: a replica answered nothing" >&2
	exit 1
fi

echo "== the same load while replica 1 shuts down (SIGTERM) halfway"
"$VKC" loadgen http://127.0.0.1:18100 --streams 4 --requests "$REQUESTS" --max-tokens "$MAXTOK" >"$DIR/drain.md" &
load=$!
sleep 1
kill -TERM "$r1"
wait "$r1" && echo "replica 1 stopped with exit status 0" || { echo "serve-haproxy.sh: replica 1 exited $?" >&2; exit 1; }
wait "$load" || { cat "$DIR/drain.md"; echo "serve-haproxy.sh: requests were lost while a replica shut down" >&2; exit 1; }
cat "$DIR/drain.md"
grep -q '"msg":"stopped"' "$DIR/r1.log" || { echo "serve-haproxy.sh: replica 1 did not stop gracefully" >&2; exit 1; }
echo "nothing lost; logs in $DIR"
