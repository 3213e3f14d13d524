// The peer of BenchmarkEncodeUnigram (tokenizer/bench_test.go): the Hugging Face tokenizers
// library (npm "tokenizers", the Rust library) encoding the same 1 MiB texts with the same
// tokenizer.json files; MB of input per CPU-second, median of 5.
//   node bench.mjs DIR_WITH_node_modules ORACLE_TOKENIZERS_DIR
import { createRequire } from "module";
import fs from "fs";
import os from "os";
import path from "path";
import zlib from "zlib";
const here = path.dirname(new URL(import.meta.url).pathname);
const require = createRequire(path.join(process.argv[2], "x.js"));
const { Tokenizer } = require("tokenizers");
const corpus = JSON.parse(fs.readFileSync(path.join(process.argv[3], "corpus.json")));
const english = [0, 1, 2, 3, 4, 5, 6, 18, 19, 20, 21, 24, 25, 26, 27, 29, 30, 31, 34, 35, 72].map(i => corpus[i]);
const rep = parts => {
  const one = parts.join("\n");
  return (one + "\n").repeat(Math.floor((1 << 20) / Buffer.byteLength(one)) + 1);
};
const texts = { english: rep(english), corpus: rep(corpus) };
for (const name of ["t5", "albert"]) {
  const tmp = path.join(os.tmpdir(), `unigram-${name}.json`);
  fs.writeFileSync(tmp, zlib.gunzipSync(fs.readFileSync(path.join(here, name, "tokenizer.json.gz"))));
  const tok = Tokenizer.fromFile(tmp);
  for (const kind of ["english", "corpus"]) {
    const t = texts[kind];
    const times = [];
    for (let i = 0; i < 5; i++) {
      const c0 = process.cpuUsage();
      await tok.encode(t, null, { addSpecialTokens: false });
      const c = process.cpuUsage(c0);
      times.push((c.user + c.system) / 1e6);
    }
    times.sort((a, b) => a - b);
    console.log(`${name}/${kind}: ${(Buffer.byteLength(t) / times[2] / 1e6).toFixed(2)} MB/cpu-s`);
  }
}
