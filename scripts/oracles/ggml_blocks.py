#!/usr/bin/env python3
"""Golden dequantizations of the block formats vkc added after the shared llamacpp oracle.

Usage: python3 scripts/oracles/ggml_blocks.py OUTDIR   (Debian's python3 with python3-numpy)

Writes OUTDIR/quant-blocks-new.gguf and OUTDIR/quant-blocks-new.golden.safetensors (testdata/ggml-blocks
holds the committed copy, read by ir/quant's TestQuantBlocksOracle) the same way
../shared/oracles/llamacpp/blocks was made (its README, "blocks/quant-blocks.gguf"): one tensor per
type (q2_k, q3_k, iq4_nl, iq4_xs, mxfp4), each ne = [512, 4] from the same f32 source, quantized by
ggml's own ggml_quantize_chunk (no imatrix, the call llama-quantize makes) and dequantized by ggml's
own to_float (ggml_get_type_traits), both called from the peer kit's libggml-base through ctypes.
The GGUF is written with the peer kit's gguf-py; its dequantizers are checked bit for bit against
ggml's here too, so two implementations agree before a value becomes golden.

The source rows: 0 normal(0, 1); 1 normal(0, 0.01); 2 normal(0, 3) with its first 32 values 0 and
±20 at columns 100 and 400; 3 uniform(0, 1). Seed 2301.

Environment: LLAMACPP_BIN (default /tmp/llamacpp-peer/bin, where run.sh unpacks the kit; unpacked
here from the kit's tarball when missing), PEER (default ../shared/peers/llamacpp from the repo).
"""
import ctypes
import json
import os
import struct
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PEER = os.environ.get("PEER", os.path.join(REPO, "..", "shared", "peers", "llamacpp"))
sys.path.insert(0, os.path.join(PEER, "gguf-py"))
import gguf  # noqa: E402
from gguf import quants  # noqa: E402

TYPES = [("q2_k", 10), ("q3_k", 11), ("iq4_nl", 20), ("iq4_xs", 23), ("mxfp4", 39)]


def peer_bin():
    d = os.environ.get("LLAMACPP_BIN", "/tmp/llamacpp-peer/bin")
    if not os.path.exists(os.path.join(d, "libggml-base.so.0")):
        root = os.path.dirname(d)
        os.makedirs(root, exist_ok=True)
        subprocess.run(["tar", "-xJf", os.path.join(PEER, "llamacpp-vulkan-bin.tar.xz"), "-C", root], check=True)
    return d


class Traits(ctypes.Structure):
    _fields_ = [("type_name", ctypes.c_char_p), ("blck_size", ctypes.c_int64),
                ("blck_size_interleave", ctypes.c_int64), ("type_size", ctypes.c_size_t),
                ("is_quantized", ctypes.c_bool), ("to_float", ctypes.c_void_p),
                ("from_float_ref", ctypes.c_void_p)]


def ggml():
    lib = ctypes.CDLL(os.path.join(peer_bin(), "libggml-base.so.0"))
    lib.ggml_get_type_traits.restype = ctypes.POINTER(Traits)
    lib.ggml_get_type_traits.argtypes = [ctypes.c_int]
    lib.ggml_type_name.restype = ctypes.c_char_p
    lib.ggml_type_name.argtypes = [ctypes.c_int]
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    return lib


def source():
    rng = np.random.default_rng(2301)
    x = np.empty((4, 512), np.float32)
    x[0] = rng.normal(0, 1, 512)
    x[1] = rng.normal(0, 0.01, 512)
    x[2] = rng.normal(0, 3, 512)
    x[2, :32] = 0
    x[2, 100], x[2, 400] = 20, -20
    x[3] = rng.uniform(0, 1, 512)
    return x


def quantize(lib, t, x):
    """ggml_quantize_chunk of the rows of x; returns the blocks as bytes."""
    tr = lib.ggml_get_type_traits(t).contents
    rows, n = x.shape
    out = ctypes.create_string_buffer(rows * n // tr.blck_size * tr.type_size)
    xs = np.ascontiguousarray(x, np.float32)
    size = lib.ggml_quantize_chunk(t, xs.ctypes.data, out, 0, rows, n, None)
    assert size == len(out.raw), (size, len(out.raw))
    return out.raw


def to_float(lib, t, raw, k):
    tr = lib.ggml_get_type_traits(t).contents
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(tr.to_float)
    y = np.zeros(k, np.float32)
    buf = ctypes.create_string_buffer(raw, len(raw))
    fn(ctypes.cast(buf, ctypes.c_void_p), y.ctypes.data, k)
    return y


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        dt = {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32"}[a.dtype]
        b = a.tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    os.replace(path + ".tmp", path)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    lib = ggml()
    x = source()
    w = gguf.GGUFWriter(os.path.join(out, "quant-blocks-new.gguf.tmp"), "quant-blocks")
    gold = {}
    for name, t in TYPES:
        tr = lib.ggml_get_type_traits(t).contents
        assert lib.ggml_type_name(t).decode().lower() == name, (t, lib.ggml_type_name(t))
        qt = gguf.GGMLQuantizationType(t)
        be, bb = gguf.GGML_QUANT_SIZES[qt]
        assert (tr.blck_size, tr.type_size) == (be, bb), (name, tr.blck_size, tr.type_size, be, bb)
        raw = quantize(lib, t, x)
        y = to_float(lib, t, raw, x.size).reshape(x.shape)
        blocks = np.frombuffer(raw, np.uint8).reshape(4, -1)
        yp = quants.dequantize(blocks, qt).astype(np.float32)
        if not np.array_equal(y.view(np.uint32), yp.view(np.uint32)):
            bad = np.flatnonzero(y.view(np.uint32) != yp.view(np.uint32))
            sys.exit(f"{name}: ggml and gguf-py differ at {len(bad)} elements, first {bad[:5]}")
        w.add_tensor(name, blocks, raw_shape=blocks.shape, raw_dtype=qt)
        gold[name] = y
        err = np.abs(y - x).max(axis=1)
        print(f"{name}: {len(raw)} bytes, max |dequant - source| per row {err}")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(os.path.join(out, "quant-blocks-new.gguf.tmp"), os.path.join(out, "quant-blocks-new.gguf"))
    write_safetensors(os.path.join(out, "quant-blocks-new.golden.safetensors"), gold)


if __name__ == "__main__":
    main()
