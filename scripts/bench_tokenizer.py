#!/usr/bin/env python3
"""Writes a tokenizer of exactly VOCAB ids into DIR, for serving benchmarks of models with random
weights (scripts/gpu-bench.sh, part serve): the 256 bytes (GPT-2's byte-level alphabet, id = byte
value), <|im_start|> and <|im_end|> (ids 256 and 257: special, ChatML's), then filler tokens
<|fN|> up to VOCAB, which encoding never produces but decoding turns into their text. Its
tokenizer_config.json has a ChatML chat template, so /v1/chat/completions works on any model of
that vocabulary.

    python3 scripts/bench_tokenizer.py 49152 /tmp/tok
"""
import json
import os
import sys


def main():
    vocab_size, out = int(sys.argv[1]), sys.argv[2]
    if vocab_size < 258:
        sys.exit("want a vocabulary of at least 258 tokens")
    vocab, n = {}, 0
    for b in range(256):
        printable = ord("!") <= b <= ord("~") or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF
        r = chr(b) if printable else chr(256 + n)
        n += 0 if printable else 1
        vocab[r] = b
    for i in range(258, vocab_size):
        vocab["<|f%d|>" % i] = i
    special = ["<|im_start|>", "<|im_end|>"]
    added = [{"id": 256 + i, "content": s, "special": True, "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False} for i, s in enumerate(special)]
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
           "pre_tokenizer": bl, "post_processor": None, "decoder": bl,
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                     "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": []}}
    template = ("{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + "
                "'<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False)
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": "<|im_end|>", "chat_template": template}, f)


if __name__ == "__main__":
    main()
