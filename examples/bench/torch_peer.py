#!/usr/bin/env python3
"""PyTorch peer for vkc benchmarks: the same Llama-shaped model with the same weights, timed with
CUDA events in the same machine session as `vkc bench`.

It builds transformers' LlamaForCausalLM from the shape of a vkc example (SmolLM2-135M by default),
loads the weights vkc generated (written once with `vkc check -write-weights w.safetensors
examples/smollm2-135m/model.yaml`), checks that its prefill logits agree with vkc's (an .npy
written by `vkc run plan.bin -f score --input tokens=... -o vkc_logits.npy`), and times:
  - eager prefill of --seq tokens,
  - eager decode, one token at a time over a dynamic KV cache,
  - CUDA-graph decode: torch.compile(mode="reduce-overhead") over a static cache (--no-compile skips it).
Results are printed as one JSON object (medians in milliseconds) so a shell script can put them
beside vkc's own figures.

scripts/gpu-bench.sh (part torch) asks for more, each figure with its spread (min and max of the
repetitions): --seqs 128,512 times eager prefill at each length (random tokens), --decode-at
127,2000 times eager and CUDA-graph decode steps starting at each position (a prompt of that many
random tokens first), and --gemm 4096 times only a plain f16 GEMM (cuBLAS through torch.matmul,
A [n, n] times W [n, n] transposed, as a linear layer) in TFLOP/s, without building the model;
--gemm 512x4096x14336,4096 times each shape of a list, MxNxK (A [M, K] times W [N, K] transposed)
or n for n×n×n, as one JSON object per shape under "cublas_gemm_f16" (a list when there are several).
"""
import argparse
import json
import statistics
import sys
import time

import numpy as np
import torch
from safetensors.torch import load_file


def hf_name(name):
    """vkc parameter name -> transformers LlamaForCausalLM name."""
    fixed = {"embed": "model.embed_tokens.weight", "out_norm": "model.norm.weight"}
    if name in fixed:
        return fixed[name]
    parts = name.split(".")
    if parts[0] != "layers":
        raise KeyError(name)
    i, leaf = parts[1], parts[2]
    leafs = {
        "attn_norm": "input_layernorm.weight",
        "mlp_norm": "post_attention_layernorm.weight",
        "wq": "self_attn.q_proj.weight",
        "wk": "self_attn.k_proj.weight",
        "wv": "self_attn.v_proj.weight",
        "wo": "self_attn.o_proj.weight",
        "w_gate": "mlp.gate_proj.weight",
        "w_up": "mlp.up_proj.weight",
        "w_down": "mlp.down_proj.weight",
    }
    return f"model.layers.{i}.{leafs[leaf]}"


def build(args):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.ffn,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads, head_dim=args.hidden // args.heads,
        max_position_embeddings=args.ctx, rms_norm_eps=1e-5, tie_word_embeddings=True,
        rope_parameters={"rope_theta": args.theta, "rope_type": "default"},
        attention_bias=False, mlp_bias=False,
    )
    cfg.rope_theta = args.theta  # older transformers read this attribute
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(dtype=torch.float16)
    w = load_file(args.weights)
    sd = {hf_name(k): v.to(torch.float16) for k, v in w.items()}
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [m for m in missing if m != "lm_head.weight"]  # tied to the embedding
    if missing or unexpected:
        sys.exit(f"weights do not fit: missing {missing[:5]}, unexpected {unexpected[:5]}")
    model.tie_weights()
    return model.cuda().eval()


def spread(times):
    """median, min and max of a list of milliseconds, as JSON fields"""
    return {"median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times), "n": len(times)}


def ints(text):
    return [int(x) for x in text.split(",") if x.strip()]


def gemm_shapes(text):
    """The shapes of --gemm: a comma-separated list of MxNxK or n (n×n×n)."""
    shapes = []
    for f in text.split(","):
        f = f.strip()
        if not f:
            continue
        dims = [int(x) for x in f.split("x")]
        if len(dims) == 1:
            dims *= 3
        if len(dims) != 3 or min(dims) <= 0:
            raise ValueError(f"--gemm {f!r}: want MxNxK or n")
        shapes.append(dims)
    return shapes


def gemm(args, out):
    """Plain f16 GEMMs through cuBLAS (torch.matmul, A [M, K] times W [N, K] transposed, as a
    linear layer), timed by CUDA events."""
    results = []
    for m, n, k in gemm_shapes(args.gemm):
        g = torch.Generator(device="cuda").manual_seed(3)
        a = torch.randn(m, k, dtype=torch.float16, device="cuda", generator=g)
        w = torch.randn(n, k, dtype=torch.float16, device="cuda", generator=g)
        times = []
        for _ in range(5):
            torch.matmul(a, w.t())
        torch.cuda.synchronize()
        for _ in range(max(args.reps, 20)):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            torch.matmul(a, w.t())
            e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e))
        flops = 2.0 * m * n * k
        r = spread(times)
        r["tflops_median"] = flops / (r["median_ms"] * 1e-3) / 1e12
        r["tflops_best"] = flops / (r["min_ms"] * 1e-3) / 1e12
        r["shape"] = [m, n, k]
        r["reduced_precision_reduction"] = bool(torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction)
        results.append(r)
    out["cublas_gemm_f16"] = results[0] if len(results) == 1 else results


def cuda_time(fn, reps, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times), min(times), max(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--weights", help="safetensors weights of the model (every mode but --gemm)")
    p.add_argument("--vkc-logits", help=".npy of vkc's prefill logits for the same tokens")
    p.add_argument("--tokens", help=".npy of the prompt token ids (i32)")
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--decode-steps", type=int, default=32)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--seqs", default="", help="eager prefill lengths to time (default: --seq)")
    p.add_argument("--decode-at", default="", help="positions to time decode steps at (default: after the prompt)")
    p.add_argument("--gemm", default="", help="time only f16 GEMMs through cuBLAS: MxNxK or n (n×n×n), comma-separated")
    p.add_argument("--vocab", type=int, default=49152)
    p.add_argument("--hidden", type=int, default=576)
    p.add_argument("--ffn", type=int, default=1536)
    p.add_argument("--layers", type=int, default=30)
    p.add_argument("--heads", type=int, default=9)
    p.add_argument("--kv-heads", type=int, default=3)
    p.add_argument("--ctx", type=int, default=2048)
    p.add_argument("--theta", type=float, default=100000.0)
    args = p.parse_args()
    if not args.gemm and not args.weights:
        p.error("--weights is required (except with --gemm)")

    out = {"torch": torch.__version__, "device": torch.cuda.get_device_name()}
    if args.gemm:
        gemm(args, out)
        print(json.dumps(out, indent=1))
        return
    model = build(args)
    if args.tokens:
        ids = torch.from_numpy(np.load(args.tokens).astype(np.int64)).reshape(1, -1).cuda()
    else:
        g = torch.Generator().manual_seed(1)
        ids = torch.randint(0, args.vocab, (1, args.seq), generator=g).cuda()

    with torch.no_grad():
        logits = model(ids, use_cache=False).logits[0].float()
        if args.vkc_logits:
            ref = torch.from_numpy(np.load(args.vkc_logits).astype(np.float32)).cuda()
            err = (logits - ref).abs().max(dim=-1).values / logits.abs().max(dim=-1).values
            out["logits_max_row_rel_err"] = float(err.max())
            out["argmax_agree"] = float((logits.argmax(-1) == ref.argmax(-1)).float().mean())

        gen = torch.Generator().manual_seed(2)

        def prompt(n):
            return torch.randint(0, args.vocab, (1, n), generator=gen).cuda()

        seqs = ints(args.seqs) or [ids.shape[1]]
        by_seq = {}
        # vkc's prefill computes the last row's logits only (its score function every row's):
        # the LM head on one row here too, where transformers has the argument.
        last_row = {}
        try:
            model(ids[:, :2], use_cache=False, logits_to_keep=1)
            last_row = {"logits_to_keep": 1}
        except TypeError:
            pass
        out["eager_prefill_last_row_only"] = bool(last_row)
        for n in seqs:
            x = ids if n == ids.shape[1] else prompt(n)
            try:
                med, lo, hi = cuda_time(lambda: model(x, use_cache=False, **last_row), args.reps)
                by_seq[str(n)] = {"median_ms": med, "min_ms": lo, "max_ms": hi, "n": args.reps}
            except Exception as e:  # report, do not hide: the other figures still stand
                by_seq[str(n)] = {"error": f"{type(e).__name__}: {e}"[:300]}
        out["eager_prefill_ms_by_seq"] = by_seq
        if "median_ms" in by_seq.get(str(ids.shape[1]), {}):
            out["eager_prefill_ms"] = by_seq[str(ids.shape[1])]["median_ms"]

        from transformers import DynamicCache

        positions = ints(args.decode_at) or [ids.shape[1]]

        def eager_decode(p):
            cache = DynamicCache()
            x = ids if p == ids.shape[1] else prompt(p)
            o = model(x, past_key_values=cache, use_cache=True)
            tok = o.logits[:, -1:].argmax(-1)
            torch.cuda.synchronize()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(args.decode_steps):
                o = model(tok, past_key_values=cache, use_cache=True)
                tok = o.logits[:, -1:].argmax(-1)
            b.record()
            torch.cuda.synchronize()
            return a.elapsed_time(b) / args.decode_steps

        by_pos = {}
        for p in positions:
            try:
                eager_decode(p)
                by_pos[str(p)] = spread([eager_decode(p) for _ in range(5)])
            except Exception as e:
                by_pos[str(p)] = {"error": f"{type(e).__name__}: {e}"[:300]}
        out["eager_decode_ms_by_pos"] = by_pos
        if "median_ms" in by_pos[str(positions[0])]:
            out["eager_decode_ms_per_token"] = by_pos[str(positions[0])]["median_ms"]

        if not args.no_compile:
            try:
                from transformers import StaticCache
                try:
                    cache = StaticCache(config=model.config, max_cache_len=args.ctx)
                except TypeError:
                    cache = StaticCache(model.config, 1, args.ctx, device="cuda", dtype=torch.float16)
                step = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
                state = {}

                def start(p):
                    # A prompt of p tokens through the static cache (eagerly), then decode from p.
                    cache.reset()
                    x = ids if p == ids.shape[1] else prompt(p)
                    o = model(x, past_key_values=cache, cache_position=torch.arange(p, device="cuda"), use_cache=True)
                    state["tok"], state["n"] = o.logits[:, -1:].argmax(-1), p

                def graph_decode(steps):
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record()
                    for _ in range(steps):
                        cp = torch.tensor([state["n"]], device="cuda")
                        o = step(state["tok"], past_key_values=cache, cache_position=cp, use_cache=True)
                        state["tok"] = o.logits[:, -1:].argmax(-1).clone()
                        state["n"] += 1
                    b.record()
                    torch.cuda.synchronize()
                    return a.elapsed_time(b) / steps

                graphs = {}
                t0 = time.time()
                for i, p in enumerate(positions):
                    steps = max(args.decode_steps // 4, 1)
                    if p + 3 + 4 * steps > args.ctx:
                        graphs[str(p)] = {"error": f"position {p} + {3 + 4 * steps} steps exceeds the cache of {args.ctx}"}
                        continue
                    start(p)
                    graph_decode(3)  # compile and capture (the first position), warm up
                    if i == 0:
                        out["compile_s"] = time.time() - t0
                    graphs[str(p)] = spread([graph_decode(steps) for _ in range(4)])
                out["cuda_graph_decode_ms_by_pos"] = graphs
                if "median_ms" in graphs.get(str(positions[0]), {}):
                    out["cuda_graph_decode_ms_per_token"] = graphs[str(positions[0])]["median_ms"]
            except Exception as e:  # report, do not hide: the eager figures still stand
                out["cuda_graph_error"] = f"{type(e).__name__}: {e}"[:300]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
