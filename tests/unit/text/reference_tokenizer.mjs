// Reference side of the tokenizer tests and benchmark: HuggingFace tokenizers (Rust, through the
// @anush008/tokenizers node binding). Usage: node reference_tokenizer.mjs REQUEST.json RESULT.json
// REQUEST: {"node_modules": dir, "tokenizer": path, "mode": ..., "inputs": [file, ...], ...}
//   encode:      ids of each input file (read as UTF-8 with replacement, like a decoder would)
//   pretokenize: pieces of each input under the Split regex "regex" (Isolated)
//   normalize:   NFC of each input as the tokenizer's normaliser gives it
//   decode:      "ids": [[...], ...] to text
//   bench:       seconds to encode the inputs one after another, "repeat" times (best is kept)
import { createRequire } from 'module';
import fs from 'fs';

const req = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const require = createRequire(req.node_modules + '/');
const { Tokenizer } = require('@anush008/tokenizers');
const tok = Tokenizer.fromFile(req.tokenizer);
const texts = (req.inputs || []).map(f => fs.readFileSync(f).toString('utf8'));
const out = { mode: req.mode };

if (req.mode === 'encode') {
  out.ids = [];
  for (const t of texts) out.ids.push((await tok.encode(t, null, { addSpecialTokens: false })).getIds());
} else if (req.mode === 'pretokenize') {
  // The tokenizer itself with only its Split step, the regex replaced by "regex" (a plain string
  // pattern in the binding's splitPreTokenizer would be literal, not a regex).
  const j = JSON.parse(fs.readFileSync(req.tokenizer, 'utf8'));
  const split = j.pre_tokenizer.pretokenizers[0];
  split.pattern = { Regex: req.regex };
  j.pre_tokenizer = split;
  const pt = Tokenizer.fromString(JSON.stringify(j)).getPreTokenizer();
  out.pieces = texts.map(t => pt.preTokenizeString(t).map(p => p[0]));
} else if (req.mode === 'normalize') {
  const n = tok.getNormalizer();
  out.texts = texts.map(t => n.normalizeString(t));
} else if (req.mode === 'decode') {
  out.texts = [];
  for (const ids of req.ids) out.texts.push(await tok.decode(ids, false));
} else if (req.mode === 'bench') {
  for (const t of texts) await tok.encode(t, null, { addSpecialTokens: false });  // warm-up
  let best = Infinity, count = 0;
  for (let r = 0; r < (req.repeat || 3); ++r) {
    const t0 = process.hrtime.bigint();
    count = 0;
    for (const t of texts) count += (await tok.encode(t, null, { addSpecialTokens: false })).getLength();
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  out.seconds = best;
  out.tokens = count;
  const t0 = process.hrtime.bigint();
  await tok.encodeBatch(texts, { addSpecialTokens: false });
  out.batch_seconds = Number(process.hrtime.bigint() - t0) / 1e9;
} else {
  throw new Error('unknown mode ' + req.mode);
}
fs.writeFileSync(process.argv[3], JSON.stringify(out));
