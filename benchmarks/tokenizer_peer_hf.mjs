// Peer for bench_tokenizer: Hugging Face's own tokenizers library (Rust, through its Node.js
// binding from npm) encoding the same ~64 KB documents as bench_tokenizer (NUL-separated in
// TEXT_FILE) with encodeBatch on one thread (TOKENIZERS_PARALLELISM=false, set by
// bench_tokenizer), so the comparison is one core against one core. Median of runs.
//   node benchmarks/tokenizer_peer_hf.mjs TOKENIZER_JSON TEXT_FILE [RUNS]
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "../scripts/golden/package.json"));
const { Tokenizer } = require("tokenizers");

const [tokenizerPath, textPath, runsArg] = process.argv.slice(2);
const runs = Number(runsArg ?? 5);
const text = readFileSync(textPath, "utf8");
const megabytes = Buffer.byteLength(text, "utf8") / 1e6;
const tokenizer = Tokenizer.fromFile(tokenizerPath);

const pieces = text.split("\0").filter((d) => d.length > 0);  // documents, NUL-separated

const seconds = [];
let tokens = 0;
for (let run = 0; run <= runs; run++) {
  const start = process.hrtime.bigint();
  const encodings = await tokenizer.encodeBatch(pieces, { addSpecialTokens: false });
  const elapsed = Number(process.hrtime.bigint() - start) / 1e9;
  tokens = encodings.reduce((n, e) => n + e.getIds().length, 0);
  if (run > 0) seconds.push(elapsed);
}
seconds.sort((a, b) => a - b);
const median = seconds[Math.floor(seconds.length / 2)];
console.log(JSON.stringify({ peer: "huggingface tokenizers (npm tokenizers@0.23.2)", text_mb: megabytes,
                             tokens, encode_mb_per_s: megabytes / median }));
