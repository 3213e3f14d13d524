// Encodes texts.json with the Hugging Face tokenizers library (npm "tokenizers" 0.23.2, a build of
// the Rust library) loaded with NAME/tokenizer.json, and writes NAME/golden.json; with a
// SentencePiece cross-check file (spm.json, from spm_ids.py) it records how many ids agree.
//   node encode.mjs DIR_WITH_node_modules [SPM_JSON]
import { createRequire } from "module";
import fs from "fs";
import zlib from "zlib";
import os from "os";
import path from "path";
const here = path.dirname(new URL(import.meta.url).pathname);
const require = createRequire(path.join(process.argv[2], "x.js"));
const { Tokenizer } = require("tokenizers");
const pkg = JSON.parse(fs.readFileSync(path.join(process.argv[2], "node_modules/tokenizers/package.json")));
const spm = process.argv[3] ? JSON.parse(fs.readFileSync(process.argv[3])) : null;
const texts = JSON.parse(fs.readFileSync(path.join(here, "texts.json")));
for (const name of ["t5", "albert"]) {
  const json = zlib.gunzipSync(fs.readFileSync(path.join(here, name, "tokenizer.json.gz")));
  const tmp = path.join(os.tmpdir(), `unigram-${name}.json`);
  fs.writeFileSync(tmp, json);
  const tok = Tokenizer.fromFile(tmp);
  const cases = [];
  let agree = 0;
  for (const [i, text] of texts.entries()) {
    const e = await tok.encode(text, null, { addSpecialTokens: false });
    const s = await tok.encode(text, null, { addSpecialTokens: true });
    const ids = e.getIds();
    const c = { text, ids, tokens: e.getTokens(), ids_with_special: s.getIds(),
      decoded: await tok.decode(ids, false) };
    if (spm) {
      const sp = spm[name][i];
      c.sentencepiece_agrees = JSON.stringify(sp) === JSON.stringify(ids);
      if (c.sentencepiece_agrees) agree++;
      else c.sentencepiece_ids = sp;
    }
    cases.push(c);
  }
  const golden = { tokenizer: name, reference: `tokenizers ${pkg.version} (npm build of the Hugging Face Rust library)`,
    cases };
  if (spm) golden.cross_check = { implementation: "sentencepiece 0.1.97 (Debian python3-sentencepiece), encode_as_ids", cases: texts.length, ids_agree: agree };
  fs.writeFileSync(path.join(here, name, "golden.json"), JSON.stringify(golden, null, 0) + "\n");
  console.log(name, texts.length, "cases", spm ? `sentencepiece agrees on ${agree}` : "");
}
