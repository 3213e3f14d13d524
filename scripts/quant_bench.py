#!/usr/bin/env python3
"""Summarise scripts/gpu-bench.sh's quant parts: vkc vs llama.cpp on the same GGUF files.

Usage: quant_bench.py DIR NAME...   (DIR holds NAME-QUANT{,-tuned}.vkc.json, .decode.json and
NAME-QUANT.llamacpp.json as the quant parts write them)

Prints, per model and quantization, pp128/pp512/tg32 tokens/s of vkc (static plan, and the tuned
plan with --int8 auto where it exists) and of llama-bench (its avg_ts), with vkc/llama.cpp ratios;
then the decode GEMV effective bandwidth: the matrix-vector kernels' (matmul_vec*) bytes over
their time in one profiled decode at position 127, against the copy bandwidth vkc measured on the
device (roofline peaks), with the slowest and fastest of them. Standard library only (no numpy).
"""
import json
import os
import sys

# The quantizations the quant part made (gpu-bench.sh's QTYPES), in its order.
QTYPES = os.environ.get("QTYPES", "Q8_0 Q4_K_M").split()

def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def vkc_rates(d):
    """test name -> tokens/s (median) from vkc bench --pp/--tg --json."""
    out = {}
    for r in d or []:
        out[r.get("test")] = r.get("median_ts")
    return out


def llama_rates(d):
    """test name -> tokens/s (avg_ts) from llama-bench -o json."""
    out = {}
    for r in d or []:
        n_p, n_g = r.get("n_prompt", 0), r.get("n_gen", 0)
        name = f"pp{n_p}" if n_g == 0 else f"tg{n_g}"
        out[name] = r.get("avg_ts")
    return out


def fmt(x):
    return "-" if x is None else f"{x:.1f}"


def ratio(a, b):
    return "-" if not a or not b else f"{a / b:.2f}"


def gemv(d):
    """(bytes/s of all matrix-vector kernels, copy bytes/s, share %, rows) from a decode JSON."""
    if not d:
        return None
    rows = [k for k in d.get("kernels", []) if k.get("kernel", "").startswith("matmul_vec")]
    b = sum(k["rates"].get("bytes", 0) for k in rows)
    t = sum(k.get("time_ns", 0) for k in rows)
    peak = (d.get("peaks") or {}).get("bandwidth_bytes_per_s")
    bw = b / (t * 1e-9) if t else None
    share = 100 * bw / peak if bw and peak else None
    return bw, peak, share, rows


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    base, names = sys.argv[1], sys.argv[2:]
    print("| model | quant | test | vkc static t/s | vkc tuned (--int8 auto) t/s | llama.cpp t/s | static/llama.cpp | tuned/llama.cpp |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for name in names:
        for q in QTYPES:
            p = os.path.join(base, f"{name}-{q}")
            vs = vkc_rates(load(p + ".vkc.json"))
            vt = vkc_rates(load(p + "-tuned.vkc.json"))
            ll = llama_rates(load(p + ".llamacpp.json"))
            tests = list(dict.fromkeys(list(vs) + list(vt) + list(ll)))  # pp128 pp512 tg32, in order
            for test in tests:
                a, b, c = vs.get(test), vt.get(test), ll.get(test)
                print(f"| {name} | {q} | {test} | {fmt(a)} | {fmt(b)} | {fmt(c)} | {ratio(a, c)} | {ratio(b, c)} |")
    print()
    print("Decode GEMV effective bandwidth (matrix-vector kernels, one profiled decode at pos 127 (5 in a dry run);")
    print("the copy bandwidth is what vkc measured on the device; target: at least 70 %):")
    print()
    print("| model | quant | plan | GEMV GB/s | copy GB/s | % of copy | kernels | slowest kernel GB/s | fastest kernel GB/s |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for name in names:
        for q in QTYPES:
            for plan, suffix in (("static", ""), ("tuned", "-tuned")):
                g = gemv(load(os.path.join(base, f"{name}-{q}{suffix}.decode.json")))
                if g is None:
                    continue
                bw, peak, share, rows = g
                per = [k["rates"].get("bytes_per_s") or 0 for k in rows]
                lo, hi = (min(per), max(per)) if per else (None, None)
                gb = lambda x: "-" if not x else f"{x / 1e9:.3g}"
                print(f"| {name} | {q} | {plan} | {gb(bw)} | {gb(peak)} | {fmt(share)} | {len(rows)} | {gb(lo)} | {gb(hi)} |")


if __name__ == "__main__":
    main()
