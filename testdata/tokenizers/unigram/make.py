#!/usr/bin/python3
"""Makes the Unigram tokenizers of this folder and the texts to encode with them.

1. Trains two small SentencePiece unigram models (Debian's python3-sentencepiece 0.1.97) on
   English text found on a Debian machine (the licenses in /usr/share/common-licenses) and the
   73 strings of ../shared/oracles/tokenizers/corpus.json:
   - t5:     normalization nmt_nfkc, no byte fallback (unknown characters are <unk>);
   - albert: normalization nmt_nfkc_cf (NFKC with case folding), byte_fallback.
2. Writes each as a Hugging Face tokenizer.json the way transformers' converters write T5's and
   ALBERT's (SpmConverter: the model's pieces and scores in id order, its precompiled_charsmap):
   - t5:     Precompiled; WhitespaceSplit + Metaspace(▁, always); Unigram (unk_id 2);
             TemplateProcessing "$A </s>"; Metaspace decoder;
   - albert: Replace ``→", ''→"; Precompiled; Replace(" {2,}" → " "); Metaspace(▁, always);
             Unigram (unk_id 1, byte_fallback); TemplateProcessing "[CLS] $A [SEP]";
             Sequence(ByteFallback, Metaspace) decoder.
   The SentencePiece models go to a scratch folder (SPM_OUT) for encode.mjs's cross-check.
3. Writes texts.json: the corpus strings and Unigram-specific ones.

Then encode.mjs encodes texts.json with the Hugging Face tokenizers library (npm "tokenizers"
0.23.2, the Rust library) and sentencepiece, and writes golden.json. See README.md.
"""
import base64
import glob
import gzip
import json
import os
import sys
import tempfile

import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as pb

HERE = os.path.dirname(os.path.abspath(__file__))
ORACLE = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "../../../../shared/oracles/tokenizers")
SPM_OUT = sys.argv[2] if len(sys.argv) > 2 else "/tmp/unigram-spm"

EXTRA = [
    "ｆｕｌｌｗｉｄｔｈ ＴＥＸＴ １２３",      # NFKC to ASCII
    "ｶﾞｷﾞ ｱｲｳ",                          # halfwidth katakana: ｶﾞ is one 6-byte grapheme
    "cafe\u0301 re\u0301sume\u0301 A\u030a",  # combining marks
    "ﬁ ﬂ ™ ½ ① Ⅻ ㎏ ℃",                     # compatibility characters
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝐁𝐨𝐥𝐝",                          # mathematical letters
    "☃ ❄ ♞ ⚙",                              # symbols not in the training text
    "नमस्ते दुनिया",                            # Devanagari: graphemes over 6 bytes
    "สวัสดีครับ",                              # Thai
    "👨‍👩‍👧‍👦 👍🏽 🇫🇷",                         # ZWJ, modifier, flags
    "  leading, trailing   and   many   spaces  ",
    "tabs\tand\nnewlines\r\nand\u3000ideographic\u00a0nbsp",
    "</s> <unk> <pad> [CLS] [SEP] <0x41>",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "``quoted'' and \"double\" and 'single'",
    "The Quick Brown Fox Jumps Over The Lazy Dog",
    "x",
    "",
    " ",
    "\u200b\u200d\ufeff",
    "Ⓐⓑⓒ ＡＢＣ",
]


def corpus_text():
    parts = []
    for p in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(p):
            with open(p, encoding="utf-8", errors="replace") as f:
                parts.append(f.read())
    with open(os.path.join(ORACLE, "corpus.json"), encoding="utf-8") as f:
        corpus = json.load(f)
    # The corpus strings a few times, so that their characters and words are in the vocabulary.
    parts.extend(corpus * 3)
    return "\n".join(parts), corpus


def train(name, text, rule, byte_fallback, vocab_size):
    d = tempfile.mkdtemp()
    inp = os.path.join(d, "in.txt")
    with open(inp, "w", encoding="utf-8") as f:
        for line in text.splitlines():
            if line.strip():
                f.write(line + "\n")
    prefix = os.path.join(d, name)
    spm.SentencePieceTrainer.train(
        input=inp, model_prefix=prefix, model_type="unigram", vocab_size=vocab_size,
        normalization_rule_name=rule, byte_fallback=byte_fallback, character_coverage=0.9995,
        num_threads=1, minloglevel=2, max_sentence_length=100000,
        pad_id=0 if name == "t5" else 0, eos_id=1 if name == "t5" else -1, unk_id=2 if name == "t5" else 1,
        bos_id=-1 if name == "t5" else -1,
        user_defined_symbols=[] if name == "t5" else ["[CLS]", "[SEP]", "[MASK]"])
    with open(prefix + ".model", "rb") as f:
        return f.read()


def tokenizer_json(name, model_bytes):
    m = pb.ModelProto()
    m.ParseFromString(model_bytes)
    vocab = [[p.piece, p.score] for p in m.pieces]
    charsmap = base64.b64encode(m.normalizer_spec.precompiled_charsmap).decode()
    pieces = [p.piece for p in m.pieces]
    specials = [(i, p.piece) for i, p in enumerate(m.pieces) if p.type in (pb.ModelProto.SentencePiece.CONTROL, pb.ModelProto.SentencePiece.UNKNOWN, pb.ModelProto.SentencePiece.USER_DEFINED)]
    added = [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, s in specials]
    meta = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}
    if name == "t5":
        eos = pieces.index("</s>")
        t = {
            "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
            "normalizer": {"type": "Precompiled", "precompiled_charsmap": charsmap},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, meta]},
            "post_processor": {"type": "TemplateProcessing",
                               "single": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}],
                               "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}},
                                        {"Sequence": {"id": "B", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}],
                               "special_tokens": {"</s>": {"id": "</s>", "ids": [eos], "tokens": ["</s>"]}}},
            "decoder": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
            "model": {"type": "Unigram", "unk_id": pieces.index("<unk>"), "vocab": vocab, "byte_fallback": False},
        }
    else:
        cls, sep = pieces.index("[CLS]"), pieces.index("[SEP]")
        t = {
            "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "Replace", "pattern": {"String": "``"}, "content": "\""},
                {"type": "Replace", "pattern": {"String": "''"}, "content": "\""},
                {"type": "Precompiled", "precompiled_charsmap": charsmap},
                {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]},
            "pre_tokenizer": meta,
            "post_processor": {"type": "TemplateProcessing",
                               "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
                               "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}},
                                        {"Sequence": {"id": "B", "type_id": 1}}, {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
                               "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [cls], "tokens": ["[CLS]"]},
                                                  "[SEP]": {"id": "[SEP]", "ids": [sep], "tokens": ["[SEP]"]}}},
            "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"},
                                                          {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}]},
            "model": {"type": "Unigram", "unk_id": pieces.index("<unk>"), "vocab": vocab, "byte_fallback": True},
        }
    return t


def main():
    text, corpus = corpus_text()
    for name, rule, bf, size in [("t5", "nmt_nfkc", False, 1200), ("albert", "nmt_nfkc_cf", True, 1200)]:
        model = train(name, text, rule, bf, size)
        os.makedirs(os.path.join(HERE, name), exist_ok=True)
        # The SentencePiece model, for encode.mjs's cross-check only (not kept in the repository).
        os.makedirs(os.path.join(SPM_OUT), exist_ok=True)
        with open(os.path.join(SPM_OUT, name + ".model"), "wb") as f:
            f.write(model)
        data = json.dumps(tokenizer_json(name, model), ensure_ascii=False, indent=None).encode()
        with gzip.GzipFile(os.path.join(HERE, name, "tokenizer.json.gz"), "wb", mtime=0) as f:
            f.write(data)
    with open(os.path.join(HERE, "texts.json"), "w", encoding="utf-8") as f:
        json.dump(corpus + EXTRA, f, ensure_ascii=False, indent=0)


if __name__ == "__main__":
    main()
