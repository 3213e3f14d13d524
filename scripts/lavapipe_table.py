#!/usr/bin/env python3
"""The table of scripts/lavapipe-table.sh: medians over interleaved rounds, ratios to llama.cpp.

Usage: lavapipe_table.py JSON-DIR "F16 Q4_K_M"

Reads vkc-{static,tuned}-QUANT-ROUND.json (vkc bench --pp --tg --json) and
llamacpp-QUANT-ROUND.json (llama-bench -o json), and load.txt (round, column, quant, 1-minute load
average when the column started). Each round's figure is the run's median t/s (vkc: median_ts;
llama-bench: the median of samples_ts); the table shows the median over rounds, the lowest and
highest round, and vkc ÷ llama.cpp of the medians (above 1, vkc is faster). Standard library only.
"""
import glob
import json
import os
import re
import statistics
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def rates(d, vkc):
    """test name -> tokens/s of one run."""
    out = {}
    for r in d or []:
        if vkc:
            out[r.get("test")] = r.get("median_ts")
            continue
        n_p, n_g = r.get("n_prompt", 0), r.get("n_gen", 0)
        name = f"pp{n_p}" if n_g == 0 else f"tg{n_g}"
        s = r.get("samples_ts") or [r.get("avg_ts")]
        out[name] = statistics.median(s)
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    base, quants = sys.argv[1], sys.argv[2].split()
    cols = ["vkc-static", "vkc-tuned", "llamacpp"]
    # (col, quant) -> test -> [t/s per round]
    runs = {}
    rounds = set()
    for path in glob.glob(os.path.join(base, "*.json")):
        m = re.match(r"(vkc-static|vkc-tuned|llamacpp)-(.+)-(\d+)\.json$", os.path.basename(path))
        if not m:
            continue
        col, q, r = m.group(1), m.group(2), int(m.group(3))
        rounds.add(r)
        for test, ts in rates(load(path), col != "llamacpp").items():
            if ts:
                runs.setdefault((col, q), {}).setdefault(test, []).append(ts)
    med = lambda xs: statistics.median(xs) if xs else None
    fmt = lambda x: "-" if x is None else f"{x:.1f}"
    print(f"{len(rounds)} interleaved rounds; t/s: median over rounds [lowest–highest round]\n")
    print("| quant | test | vkc static | vkc tuned | llama.cpp | static ÷ llama.cpp | tuned ÷ llama.cpp |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for q in quants:
        tests = []
        for c in cols:
            tests += [t for t in runs.get((c, q), {}) if t not in tests]
        tests.sort(key=lambda t: (t[:2] != "pp", t))
        for t in tests:
            cells, ms = [], {}
            for c in cols:
                xs = runs.get((c, q), {}).get(t, [])
                ms[c] = med(xs)
                cells.append("-" if not xs else f"{fmt(ms[c])} [{fmt(min(xs))}–{fmt(max(xs))}]")
            ll = ms["llamacpp"]
            rat = ["-" if not ms[c] or not ll else f"{ms[c] / ll:.2f}" for c in cols[:2]]
            print(f"| {q} | {t} | " + " | ".join(cells) + " | " + " | ".join(rat) + " |")
    loads = []
    try:
        with open(os.path.join(base, "load.txt")) as f:
            loads = [float(l.split()[3]) for l in f if len(l.split()) == 4]
    except OSError:
        pass
    if loads:
        print(f"\n1-minute load average at the start of each column: median {statistics.median(loads):.1f}, "
              f"range {min(loads):.1f}–{max(loads):.1f} ({len(loads)} runs)")


if __name__ == "__main__":
    main()
