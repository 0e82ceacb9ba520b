// The Rust side of bench_tokenizer: HuggingFace tokenizers through the @anush008/tokenizers node
// binding. Only the encode loop is timed, inside node, so process start and file reading do not count.
// Usage: node rust_tokenizer_bench.mjs REQUEST.json RESULT.json
// REQUEST: {"node_modules", "tokenizer", "documents": file holding a JSON array of strings, "repeat"}
// RESULT:  {"seconds": best one-by-one loop, "batch_seconds": best encodeBatch, "tokens", "ids": [[...]]}
import { createRequire } from 'module';
import fs from 'fs';

const req = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const require = createRequire(req.node_modules + '/');
const { Tokenizer } = require('@anush008/tokenizers');
const tok = Tokenizer.fromFile(req.tokenizer);
const docs = JSON.parse(fs.readFileSync(req.documents, 'utf8'));
const opts = { addSpecialTokens: false };

const ids = [];
for (const d of docs) ids.push((await tok.encode(d, null, opts)).getIds());  // also the warm-up
let seconds = Infinity, batch_seconds = Infinity, tokens = 0;
for (let r = 0; r < (req.repeat || 3); ++r) {
  let t0 = process.hrtime.bigint();
  tokens = 0;
  for (const d of docs) tokens += (await tok.encode(d, null, opts)).getLength();
  seconds = Math.min(seconds, Number(process.hrtime.bigint() - t0) / 1e9);
  t0 = process.hrtime.bigint();
  await tok.encodeBatch(docs, opts);
  batch_seconds = Math.min(batch_seconds, Number(process.hrtime.bigint() - t0) / 1e9);
}
fs.writeFileSync(process.argv[3], JSON.stringify({ seconds, batch_seconds, tokens, ids }));
