#!/usr/bin/env python3
"""The side-by-side table of scripts/gpu-bench.sh: vkc (static, tuned), PyTorch (eager, CUDA
graphs) and llama.cpp on SmolLM2-135M F16, and vkc's GEMM against cuBLAS.

    gpu-bench-table.py JSON_DIR TABLE.md RESULTS.json [--pos "127 2000"] [--pp 128,512]

Reads what the parts left in JSON_DIR (vkc bench --json outputs, torch_peer.py's JSON,
llama-bench's jsonl, the GEMM benchmark's log), prints the table (Markdown) and writes it to
TABLE.md, and every figure it used to RESULTS.json. A figure no part measured is "-". Medians with
their spread: vkc GPU/wall times as median and (p90 - p10)/median over the repetitions; t/s as
median ± standard deviation (llama.cpp: its mean ± standard deviation, and the median of its
samples); PyTorch as the median and [min, max] of its repetitions. Ratios are the peer's time
over vkc's (or vkc's rate over the peer's): above 1, vkc is faster. Only the standard library.
"""
import argparse
import glob
import json
import os
import re
import statistics
import sys


def load(path):
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    text = text.strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        # A log with a JSON object in it (a wall-time line after it, warnings before it).
        start, end = text.find("{"), text.rfind("}")
        if text.lstrip().startswith("["):
            start, end = text.find("["), text.rfind("]")
        try:
            return json.loads(text[start:end + 1])
        except ValueError:
            return None


def jsonl(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
    except OSError:
        pass
    return out


class Fig:
    """A figure: value (ms, t/s or TFLOP/s), its spread as text, and the clock it was read on."""

    def __init__(self, value, spread="", clock=""):
        self.value, self.spread, self.clock = value, spread, clock

    def text(self, fmt):
        if self.value is None:
            return "-"
        s = fmt % self.value
        if self.spread:
            s += " " + self.spread
        return s

    def json(self):
        return {"value": self.value, "spread": self.spread, "clock": self.clock}


NONE = Fig(None)


def vkc_time(d, clock):
    """GPU or wall median of a vkc bench --json object, in ms."""
    if not d or clock not in d:
        return NONE
    c = d[clock]
    return Fig(c["median_ns"] / 1e6, "±%.1f%%" % (100 * c.get("spread", 0) / 2), clock)


def vkc_tps(lst, test):
    for r in lst or []:
        if r.get("test") == test:
            return Fig(r.get("median_ts"), "± %.1f" % r.get("stddev_ts", 0), "wall")
    return NONE


def torch_ms(d, key, k):
    r = (d or {}).get(key, {}).get(str(k))
    if not r or "median_ms" not in r:
        return NONE
    return Fig(r["median_ms"], "[%.3g, %.3g]" % (r["min_ms"], r["max_ms"]), "cuda events")


def llama(rows, n_prompt=0, n_gen=0, depth=None):
    for r in rows:
        if r.get("n_prompt", 0) == n_prompt and r.get("n_gen", 0) == n_gen and (depth is None or r.get("n_depth", 0) == depth):
            ts = r.get("samples_ts") or []
            med = statistics.median(ts) if ts else r.get("avg_ts")
            return Fig(med, "± %.1f" % r.get("stddev_ts", 0), "wall"), r
    return NONE, None


def per_token_ms(f):
    """t/s → ms per token (spread as a share)."""
    if f.value is None or not f.value:
        return NONE
    m = re.match(r"± ([0-9.]+)", f.spread or "")
    sp = "±%.1f%%" % (100 * float(m.group(1)) / f.value) if m else ""
    return Fig(1000 / f.value, sp, f.clock)


def tps_from_ms(f, n):
    if f.value is None:
        return NONE
    return Fig(n * 1000 / f.value, "", f.clock)


def best(figs, lower=True):
    vals = [f.value for f in figs if f.value is not None]
    if not vals:
        return None
    return min(vals) if lower else max(vals)


def ratio(vkc, peer, lower=True):
    if vkc is None or peer is None or vkc == 0 or peer == 0:
        return "-"
    return "%.2f×" % (peer / vkc if lower else vkc / peer)


def gemm_vkc(path):
    """TFLOP/s of the GEMM benchmark: the best point of the cooperative sweep, and the peer line."""
    try:
        text = open(path).read()
    except OSError:
        return NONE, NONE, ""
    coop = tiled = NONE
    cfg = ""
    for line in text.splitlines():
        m = re.search(r"^\s*(matmul_\w+)\s+(\S*)\s+([0-9.]+) µs\s+([0-9.]+) TFLOP/s", line)
        if m:
            name, c, tf = m.group(1), m.group(2), float(m.group(4))
            if name == "matmul_tiled":
                tiled = Fig(tf, "", "gpu")
            elif coop.value is None or tf > coop.value:
                coop, cfg = Fig(tf, "", "gpu"), c
    if coop.value is None:
        m = re.search(r"BenchmarkCoopGEMM4096\S*\s+\d+\s+.*?([0-9.]+) TFLOP/s", text)
        if m:
            coop = Fig(float(m.group(1)), "", "gpu")
    if coop.value is None:
        m = re.search(r"\S+_test\.go:\d+: (.*)\n--- SKIP", text)
        if m:
            cfg = "(skipped: " + m.group(1)[:80] + ")"
    return coop, tiled, cfg


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("table")
    ap.add_argument("results")
    ap.add_argument("--pos", default="127 2000")
    ap.add_argument("--pp", default="128,512")
    a = ap.parse_args()
    D = a.dir
    positions = [int(x) for x in a.pos.split()]
    pps = [int(x) for x in a.pp.replace(" ", ",").split(",") if x]
    v = {}
    for tag in ("vkc-static", "vkc-tuned"):
        v[tag] = {"prefill": load(os.path.join(D, tag + "-prefill.json")), "pp": load(os.path.join(D, tag + "-pp.json"))}
        for p in positions:
            v[tag]["decode-%d" % p] = load(os.path.join(D, "%s-decode-%d.json" % (tag, p)))
    torch = load(os.path.join(D, "torch.json"))
    lpp, ltg = jsonl(os.path.join(D, "llamacpp-pp.jsonl")), jsonl(os.path.join(D, "llamacpp-tg.jsonl"))
    gt = (load(os.path.join(D, "gemm-torch.json")) or {}).get("cublas_gemm_f16")
    coop, tiled, coopcfg = gemm_vkc(os.path.join(D, "gemm-vkc.txt"))

    rows = []  # (test, unit, lower-is-better, [vkc static, vkc tuned], [torch eager, torch graphs, llama.cpp], target, note)

    def row(test, unit, lower, vk, peers, target="", note=""):
        rows.append((test, unit, lower, vk, peers, target, note))

    st, tu = v["vkc-static"], v["vkc-tuned"]
    n0 = pps[0] if pps else 128
    row("prefill %d, GPU time per call" % n0, "ms", True, [vkc_time(st["prefill"], "gpu"), vkc_time(tu["prefill"], "gpu")],
        [torch_ms(torch, "eager_prefill_ms_by_seq", n0), NONE, NONE], "≤ 1.5 ms", "vkc: all logits; PyTorch: CUDA events, all logits")
    row("prefill %d, wall time per call" % n0, "ms", True, [vkc_time(st["prefill"], "wall"), vkc_time(tu["prefill"], "wall")],
        [NONE, NONE, NONE], "", "write inputs, submit, wait, read every position's logits")
    for n in pps:
        lf, _ = llama(lpp, n_prompt=n)
        row("pp%d" % n, "t/s", False, [vkc_tps(st["pp"], "pp%d" % n), vkc_tps(tu["pp"], "pp%d" % n)],
            [tps_from_ms(torch_ms(torch, "eager_prefill_ms_by_seq", n), n), NONE, lf], "",
            "wall; vkc through Generate (up to the first token), llama-bench pp; PyTorch from its prefill time")
    for p in positions:
        key = "decode-%d" % p
        lf, lr = llama(ltg, n_gen=8, depth=p - 4)
        if lr is None:
            lf, lr = llama(ltg, n_gen=8) if len(positions) == 1 else (NONE, None)
        row("decode at %d, GPU time per step" % p, "ms", True, [vkc_time(st[key], "gpu"), vkc_time(tu[key], "gpu")],
            [torch_ms(torch, "eager_decode_ms_by_pos", p), torch_ms(torch, "cuda_graph_decode_ms_by_pos", p), NONE],
            "≤ 0.45 ms", "PyTorch: CUDA events over 32 (graphs: 8) steps from the position")
        row("decode at %d, wall time per step" % p, "ms", True, [vkc_time(st[key], "wall"), vkc_time(tu[key], "wall")],
            [NONE, NONE, per_token_ms(lf)], "≤ 0.55 ms", "llama.cpp: tg8 from depth %d (positions %d..%d)" % (p - 4, p - 4, p + 3))
    gtf = Fig(gt["tflops_median"], "[%.0f, %.0f]" % (2 * 4096 ** 3 / (gt["max_ms"] * 1e-3) / 1e12, gt["tflops_best"]), "cuda events") if gt else NONE
    row("GEMM f16 4096³", "TFLOP/s", False, [tiled, coop], [gtf, NONE, NONE], "≥ 300",
        "vkc: matmul_tiled, and matmul_coop's best point of its sweep %s (GPU timestamps); peer: cuBLAS (torch.matmul)" % coopcfg)

    head = "| test | unit | vkc static | vkc tuned | PyTorch eager | PyTorch graphs | llama.cpp | vkc ÷ PyTorch | vkc ÷ llama.cpp | target | |"
    lines = [head, "|" + "---|" * 11]
    res = {"rows": []}
    for test, unit, lower, vk, peers, target, note in rows:
        fmt = "%.3f" if unit == "ms" else "%.1f"
        bv = best(vk, lower)
        bt = best(peers[:2], lower)
        bl = peers[2].value
        met = ""
        if target and bv is not None:
            lim = float(re.search(r"[0-9.]+", target).group(0))
            met = "met" if (bv <= lim if lower else bv >= lim) else "not met"
        cells = [test, unit] + [f.text(fmt) for f in vk] + [f.text(fmt) for f in peers] + \
            [ratio(bv, bt, lower), ratio(bv, bl, lower), (target + " " + met).strip(), note]
        if test.startswith("GEMM"):
            cells[2] = "tiled " + cells[2]
            cells[3] = "coop " + cells[3]
        lines.append("| " + " | ".join(cells) + " |")
        res["rows"].append({"test": test, "unit": unit, "vkc_static": vk[0].json(), "vkc_tuned": vk[1].json(),
                            "torch_eager": peers[0].json(), "torch_graphs": peers[1].json(), "llamacpp": peers[2].json(),
                            "target": target, "met": met, "note": note})
    extra = []
    if torch:
        if "logits_max_row_rel_err" in torch:
            extra.append("PyTorch against vkc's prefill logits: max row-relative error %.3g, argmax agreement %.3f" %
                         (torch["logits_max_row_rel_err"], torch.get("argmax_agree", float("nan"))))
        if "compile_s" in torch:
            extra.append("PyTorch CUDA graphs: torch.compile took %.0f s" % torch["compile_s"])
        for k in ("cuda_graph_error",):
            if k in torch:
                extra.append("PyTorch: " + torch[k])
    for r in (lpp + ltg)[:1]:
        extra.append("llama.cpp: %s, %s, flash attention %s, build %s" % (r.get("gpu_info"), r.get("backends"), r.get("flash_attn"), r.get("build_commit")))
    for tag in ("vkc-static", "vkc-tuned"):
        d = v[tag]["decode-%d" % positions[0]] if positions else None
        if d and "stats" in d:
            s = d["stats"]
            extra.append("%s decode: %d dispatches, %d barriers per step" % (tag, s["dispatches"], s["barriers"]))
        d = v[tag]["prefill"]
        if d and "stats" in d:
            s = d["stats"]
            extra.append("%s prefill: %d dispatches, %d barriers per call" % (tag, s["dispatches"], s["barriers"]))
    study = os.path.join(D, "study.txt")
    if os.path.exists(study):
        for line in open(study):
            if "STUDY" in line:
                extra.append(line.strip().split("STUDY", 1)[1].strip())
    out = "\n".join(lines) + "\n\n" + "\n".join("- " + e for e in extra) + "\n"
    res["notes"] = extra
    res["inputs"] = sorted(os.path.basename(p) for p in glob.glob(os.path.join(D, "*")))
    with open(a.table, "w") as f:
        f.write(out)
    with open(a.results, "w") as f:
        json.dump(res, f, indent=1)
    sys.stdout.write("\n" + out)


if __name__ == "__main__":
    main()
