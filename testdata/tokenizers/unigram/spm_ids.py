#!/usr/bin/python3
"""SentencePiece's own ids for texts.json (the cross-check of encode.mjs):
   python3 spm_ids.py SPM_OUT > spm.json"""
import json, os, sys
import sentencepiece as spm
here = os.path.dirname(os.path.abspath(__file__))
texts = json.load(open(os.path.join(here, "texts.json"), encoding="utf-8"))
out = {}
for name in ["t5", "albert"]:
    sp = spm.SentencePieceProcessor(model_file=os.path.join(sys.argv[1], name + ".model"))
    out[name] = [sp.encode(t) for t in texts]
json.dump(out, sys.stdout)
