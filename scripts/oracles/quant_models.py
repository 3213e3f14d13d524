#!/usr/bin/env python3
"""Tiny llama GGUF files in the block formats Q2_K, Q3_K, IQ4_NL, IQ4_XS and MXFP4, with llama.cpp's
logits and a float64 reference: the end-to-end oracle of those formats.

Usage: python3 scripts/oracles/quant_models.py OUTDIR [NAME ...]    (Debian's python3 + python3-numpy)

NAME is one of MIX (the default; testdata/llamacpp-quant holds the committed copy) or Q2_K, Q3_K_M,
IQ4_XS, IQ4_NL, MXFP4 (written into a cache folder by scripts/oracles/quant-models.sh, read by the
end-to-end tests when present). Each file is made as ../shared/oracles/llamacpp/README.md says its
files were made:
  1. random weights in GGUF layout (seed 2311): matrices and embeddings normal(0, 0.08), RMSNorm
     weights 1 + normal(0, 0.1); written as an F32 GGUF by the peer kit's gguf-py (arch llama,
     tokenizer model "none", llama.vocab_size for llama.cpp's no-vocab mode);
  2. llama-quantize (2 threads, no imatrix): Q2_K, Q3_K_M, IQ4_XS, IQ4_NL are llama.cpp's own mixes
     of those names; MXFP4 is MXFP4_MOE with every 2-D weight forced to mxfp4 by --tensor-type,
     --token-embedding-type and --output-tensor-type (llama.cpp's MXFP4_MOE puts MXFP4 on expert
     tensors only, and this model has none); MIX is Q8_0 with each weight given one of the five
     types the same way (table MIX below), so that one small file has every new format in a
     decode product, a prefill product, the embedding or the output (--pure would ignore them);
  3. llama.cpp's logits: llama-logits on the CPU backend (no Vulkan device, -ngl 0, 2 threads,
     -fa 0, n_ctx 256, F16 KV cache), the 12 prompt ids as one batch, then 6 greedy single-token
     decodes (-split 12), each a fresh run over the one-token-longer sequence (the rows two runs
     share must be bit-identical);
  4. the reference: every tensor dequantized by gguf-py (checked bit for bit against ggml's own
     to_float from libggml-base), then a float64 numpy forward with GGUF semantics (RoPE on
     interleaved pairs, as llama.cpp's LLAMA_ROPE_TYPE_NORM), for the prompt and, teacher-forced,
     for the 6 decode positions; and its own greedy continuation.
The golden has the schema of the shared oracle's (input_ids, prefill_logits, greedy_tokens,
decode_logits, ref_prefill_logits, ref_decode_logits, ref_greedy_tokens); NAME.json beside it has
the tensor types and the measured errors (README's terms: row-relative error, etc.).

Environment: LLAMACPP_BIN (default /tmp/llamacpp-peer/bin; unpacked from the kit when missing),
PEER (default ../shared/peers/llamacpp from the repository).
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ggml_blocks  # noqa: E402  (peer_bin, ggml, to_float, write_safetensors; sets up gguf-py)
import gguf  # noqa: E402
from gguf import quants  # noqa: E402

# The model: one llama layer, small enough that a file is tens of KB. hidden 256 (a whole K-quant
# super-block per row), 2 heads of 64 (attn_output's rows of 128 are not whole super-blocks, so
# llama-quantize gives that tensor its fallback type in the K-quant files), 1 KV head (GQA 2),
# FFN 64 (ffn_down's rows of 64: the same), vocab 32.
VOCAB, HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, FFN = 32, 256, 1, 2, 1, 64, 64
EPS, THETA, CTX = 1e-5, 10000.0, 128
N_PROMPT, N_DECODE, SEED = 12, 6, 2311

# MIX: the type of each weight (rows × columns as GGUF ne1 × ne0).
MIX = {
    "token_embd": "q2_k",     # 32 × 256: a K-quant embedding
    "output": "mxfp4",        # 32 × 256: a block-32 output, 17-byte blocks
    "attn_q": "q3_k",         # 128 × 256
    "attn_k": "iq4_xs",       # 64 × 256
    "attn_v": "q2_k",         # 64 × 256
    "attn_output": "iq4_nl",  # 256 × 128
    "ffn_gate": "iq4_xs",     # 64 × 256
    "ffn_up": "q3_k",         # 64 × 256
    "ffn_down": "mxfp4",      # 256 × 64
}
TYPES = {"Q2_K": "Q2_K", "Q3_K_M": "Q3_K_M", "IQ4_XS": "IQ4_XS", "IQ4_NL": "IQ4_NL", "MXFP4": "MXFP4_MOE", "MIX": "Q8_0"}


def weights():
    rng = np.random.default_rng(SEED)
    mat = lambda r, c: rng.normal(0, 0.08, (r, c)).astype(np.float32)  # noqa: E731
    norm = lambda n: (1 + rng.normal(0, 0.1, n)).astype(np.float32)  # noqa: E731
    w = {"token_embd.weight": mat(VOCAB, HIDDEN)}
    for i in range(LAYERS):
        p = f"blk.{i}."
        w[p + "attn_norm.weight"] = norm(HIDDEN)
        w[p + "attn_q.weight"] = mat(HEADS * HEAD_DIM, HIDDEN)
        w[p + "attn_k.weight"] = mat(KV_HEADS * HEAD_DIM, HIDDEN)
        w[p + "attn_v.weight"] = mat(KV_HEADS * HEAD_DIM, HIDDEN)
        w[p + "attn_output.weight"] = mat(HIDDEN, HEADS * HEAD_DIM)
        w[p + "ffn_norm.weight"] = norm(HIDDEN)
        w[p + "ffn_gate.weight"] = mat(FFN, HIDDEN)
        w[p + "ffn_up.weight"] = mat(FFN, HIDDEN)
        w[p + "ffn_down.weight"] = mat(HIDDEN, FFN)
    w["output_norm.weight"] = norm(HIDDEN)
    w["output.weight"] = mat(VOCAB, HIDDEN)
    prompt = np.random.default_rng(SEED + 1).integers(1, VOCAB, N_PROMPT).astype(np.int32)
    return w, prompt


def write_f32(path, w):
    g = gguf.GGUFWriter(path, "llama")
    g.add_name("llama-quant-tiny")
    g.add_type("model")
    g.add_block_count(LAYERS)
    g.add_context_length(CTX)
    g.add_embedding_length(HIDDEN)
    g.add_feed_forward_length(FFN)
    g.add_head_count(HEADS)
    g.add_head_count_kv(KV_HEADS)
    g.add_rope_freq_base(THETA)
    g.add_layer_norm_rms_eps(EPS)
    g.add_key_length(HEAD_DIM)
    g.add_value_length(HEAD_DIM)
    g.add_rope_dimension_count(HEAD_DIM)
    g.add_vocab_size(VOCAB)
    g.add_file_type(gguf.LlamaFileType.ALL_F32)
    g.add_quantization_version(gguf.GGML_QUANT_VERSION)
    g.add_tokenizer_model("none")
    for k, v in w.items():
        g.add_tensor(k, v)
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()


def run(cmd, log):
    env = dict(os.environ, GGML_VK_VISIBLE_DEVICES="none")
    with open(log, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, check=True, env=env)


def quantize(binp, f32, out, name, log):
    cmd = [os.path.join(binp, "llama-quantize")]
    if name == "MIX":
        for t, q in MIX.items():
            if t == "token_embd":
                cmd += ["--token-embedding-type", q]
            elif t == "output":
                cmd += ["--output-tensor-type", q]
            else:
                cmd += ["--tensor-type", f"{t}={q}"]
    elif name == "MXFP4":
        for t in ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]:
            cmd += ["--tensor-type", f"{t}=mxfp4"]
        cmd += ["--token-embedding-type", "mxfp4", "--output-tensor-type", "mxfp4"]
    run(cmd + [f32, out, TYPES[name], "2"], log)


def llama_logits(binp, model, toks, tmp, log):
    run([os.path.join(binp, "llama-logits"), "-m", model, "-t", ",".join(map(str, toks)), "-split", str(N_PROMPT),
         "-ngl", "0", "-th", "2", "-fa", "0", "-c", "256", "-o", tmp], log)
    return np.fromfile(tmp, dtype=np.float32).reshape(len(toks), VOCAB)


def llama_greedy(binp, model, prompt, tmp, log):
    seq, prev = [int(t) for t in prompt], None
    for step in range(N_DECODE + 1):
        L = llama_logits(binp, model, seq, tmp, log)
        if prev is not None and not np.array_equal(prev, L[:len(prev)]):
            sys.exit(f"{model}: rows shared by consecutive llama.cpp runs differ at step {step}")
        prev = L
        if step < N_DECODE:
            seq.append(int(np.argmax(L[-1])))
    return L[:N_PROMPT], np.array(seq[N_PROMPT:], np.int32), L[N_PROMPT:]


def dequantized(lib, path):
    """Every tensor of the GGUF as float64 [ne1, ne0], by gguf-py, checked against ggml's to_float."""
    r = gguf.GGUFReader(path)
    out, types = {}, {}
    for t in r.tensors:
        qt = t.tensor_type
        if qt in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            y = np.array(t.data, np.float32)
        else:
            y = quants.dequantize(t.data, qt).astype(np.float32)
            g = ggml_blocks.to_float(lib, int(qt), np.ascontiguousarray(t.data).tobytes(), y.size).reshape(y.shape)
            if not np.array_equal(g.view(np.uint32), y.view(np.uint32)):
                sys.exit(f"{path}: {t.name} ({qt.name}): gguf-py and ggml dequantize differently")
        ne = [int(n) for n in t.shape]
        out[t.name] = y.reshape(list(reversed(ne))).astype(np.float64)
        types[t.name] = qt.name
    return out, types


def rmsnorm(x, w):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + float(np.float32(EPS))) * w


def rope(x, pos):
    # x [T, heads, HEAD_DIM]; llama.cpp's NORM rope: pairs (2i, 2i+1), θ_i = pos·THETA^(−2i/HEAD_DIM).
    i = np.arange(HEAD_DIM // 2)
    ang = pos[:, None] * THETA ** (-2.0 * i / HEAD_DIM)  # [T, HEAD_DIM/2]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = x[..., 0::2], x[..., 1::2]
    y = np.empty_like(x)
    y[..., 0::2] = a * c - b * s
    y[..., 1::2] = a * s + b * c
    return y


def forward(w, toks):
    """float64 logits of every position of toks (causal), GGUF semantics."""
    T = len(toks)
    pos = np.arange(T, dtype=np.float64)
    x = w["token_embd.weight"][toks]
    for i in range(LAYERS):
        p = f"blk.{i}."
        h = rmsnorm(x, w[p + "attn_norm.weight"])
        q = rope((h @ w[p + "attn_q.weight"].T).reshape(T, HEADS, HEAD_DIM), pos)
        k = rope((h @ w[p + "attn_k.weight"].T).reshape(T, KV_HEADS, HEAD_DIM), pos)
        v = (h @ w[p + "attn_v.weight"].T).reshape(T, KV_HEADS, HEAD_DIM)
        att = np.empty((T, HEADS, HEAD_DIM))
        mask = np.tril(np.ones((T, T), bool))
        for hh in range(HEADS):
            kv = hh // (HEADS // KV_HEADS)
            s = q[:, hh] @ k[:, kv].T / np.sqrt(HEAD_DIM)
            s = np.where(mask, s, -np.inf)
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            att[:, hh] = s @ v[:, kv]
        x = x + att.reshape(T, -1) @ w[p + "attn_output.weight"].T
        h = rmsnorm(x, w[p + "ffn_norm.weight"])
        g, u = h @ w[p + "ffn_gate.weight"].T, h @ w[p + "ffn_up.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ w[p + "ffn_down.weight"].T
    x = rmsnorm(x, w["output_norm.weight"])
    return x @ w["output.weight"].T


def rowrel(a, b):
    return float((np.abs(a - b).max(axis=1) / np.abs(b).max(axis=1)).max())


def make(out, name, binp, lib, work):
    w, prompt = weights()
    f32 = os.path.join(work, "llama-quant-tiny-F32.gguf")
    log = os.path.join(work, f"{name}.log")
    if not os.path.exists(f32):
        write_f32(f32 + ".tmp", w)
        os.replace(f32 + ".tmp", f32)
    model = os.path.join(out, f"llama-quant-tiny-{name}.gguf")
    quantize(binp, f32, model + ".tmp", name, log)
    os.replace(model + ".tmp", model)
    pre, greedy, dec = llama_greedy(binp, model, prompt, os.path.join(work, "logits.f32"), log)
    wd, types = dequantized(lib, model)
    full = forward(wd, np.concatenate([prompt, greedy]))
    ref_pre, ref_dec = full[:N_PROMPT], full[N_PROMPT:]
    seq = list(prompt)
    for _ in range(N_DECODE):
        seq.append(int(np.argmax(forward(wd, np.array(seq))[-1])))
    ref_greedy = np.array(seq[N_PROMPT:], np.int32)
    w32 = {k: v.astype(np.float32) for k, v in wd.items()}
    f32_pre = forward(w32, prompt)  # what exact dequantization with f32-rounded weights gives, in f64
    e_pre, e_dec = rowrel(pre, ref_pre), rowrel(dec, ref_dec)
    agree = 0
    while agree < N_DECODE and greedy[agree] == ref_greedy[agree]:
        agree += 1
    argdiff = [f"prefill pos {i}" for i in range(N_PROMPT) if np.argmax(pre[i]) != np.argmax(ref_pre[i])]
    argdiff += [f"decode step {i}" for i in range(N_DECODE) if np.argmax(dec[i]) != np.argmax(ref_dec[i])]
    info = {
        "file": os.path.basename(model), "bytes": os.path.getsize(model),
        "tensor_types": types,
        "llamacpp_vs_ref_prefill": e_pre, "llamacpp_vs_ref_decode": e_dec,
        "tolerance_2": float(f"{2 * max(e_pre, e_dec):.2g}"),
        "argmax_differs_at": argdiff, "greedy_agree": agree,
        "f32_weights_vs_ref": rowrel(f32_pre, ref_pre),
        "greedy_tokens": greedy.tolist(), "ref_greedy_tokens": ref_greedy.tolist(),
    }
    gold = os.path.join(out, f"llama-quant-tiny-{name}.golden.safetensors")
    ggml_blocks.write_safetensors(gold, {
        "input_ids": prompt, "prefill_logits": pre.astype(np.float32), "greedy_tokens": greedy,
        "decode_logits": dec.astype(np.float32), "ref_prefill_logits": ref_pre.astype(np.float32),
        "ref_decode_logits": ref_dec.astype(np.float32), "ref_greedy_tokens": ref_greedy})
    with open(os.path.join(out, f"llama-quant-tiny-{name}.json"), "w") as f:
        json.dump(info, f, indent=1, sort_keys=True)
        f.write("\n")
    print(json.dumps({k: info[k] for k in ("file", "bytes", "llamacpp_vs_ref_prefill", "llamacpp_vs_ref_decode",
                                           "tolerance_2", "greedy_agree", "argmax_differs_at")}))


def main():
    out = sys.argv[1]
    names = sys.argv[2:] or ["MIX"]
    for n in names:
        if n not in TYPES:
            sys.exit(f"unknown NAME {n}: want one of {', '.join(TYPES)}")
    os.makedirs(out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="vkc-quant-models-")  # the F32 GGUF, logs, logits
    binp = ggml_blocks.peer_bin()
    lib = ggml_blocks.ggml()
    for n in names:
        make(out, n, binp, lib, work)
    print(f"logs in {work}")


if __name__ == "__main__":
    main()
