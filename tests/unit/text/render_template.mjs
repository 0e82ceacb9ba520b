// Reference side of the chat-format tests: renders conversations through the real Jinja chat
// template (tokenizer_config.json) with @huggingface/jinja, and tokenizes the result with HF
// tokenizers. Usage: node render_template.mjs REQUEST.json RESULT.json
// REQUEST: {"node_modules", "tokenizer_config", "tokenizer", "cases": [{"messages", "tools",
//           "add_generation_prompt", "enable_thinking", "plain_tokens"}]}  RESULT: {"texts": [...], "ids": [[...]]}
// plain_tokens: added tokens the case's reference tokenizer does not match in text (they occur only
// in message content there, which the C++ formats always encode as plain text).
import { createRequire } from 'module';
import fs from 'fs';

const req = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const require = createRequire(req.node_modules + '/');
const { Template } = await import(req.node_modules + '/@huggingface/jinja/dist/index.js');
const { Tokenizer } = require('@anush008/tokenizers');
const config = JSON.parse(fs.readFileSync(req.tokenizer_config, 'utf8'));
const template = new Template(config.chat_template);
const tok = Tokenizer.fromFile(req.tokenizer);
// The tokenizer with these added tokens unmatchable in text. They keep their place in the list:
// HF numbers added tokens by position when loading, so removing one would shift the later ids.
function without_added(contents) {
  const j = JSON.parse(fs.readFileSync(req.tokenizer, 'utf8'));
  let renamed = 0;
  for (const t of j.added_tokens)
    if (contents.includes(t.content)) t.content += '\u0000(plain text in this case)', ++renamed;
  if (renamed !== contents.length) throw new Error('not all are added tokens: ' + contents);
  return Tokenizer.fromString(JSON.stringify(j));
}
const out = { texts: [], ids: [] };
for (const c of req.cases) {
  const vars = { messages: c.messages, add_generation_prompt: c.add_generation_prompt, bos_token: '', eos_token: config.eos_token };
  if (c.tools && c.tools.length) vars.tools = c.tools;
  if (c.enable_thinking !== undefined) vars.enable_thinking = c.enable_thinking;
  const text = template.render(vars);
  out.texts.push(text);
  const plain = c.plain_tokens || [];
  const case_tok = plain.length ? without_added(plain) : tok;
  out.ids.push((await case_tok.encode(text, null, { addSpecialTokens: false })).getIds());
}
fs.writeFileSync(process.argv[3], JSON.stringify(out));
