// Reference side of the chat-format tests: renders conversations through the real Jinja chat
// template (tokenizer_config.json) with @huggingface/jinja, and tokenizes the result with HF
// tokenizers. Usage: node render_template.mjs REQUEST.json RESULT.json
// REQUEST: {"node_modules", "tokenizer_config", "tokenizer", "cases": [{"messages", "tools",
//           "add_generation_prompt", "enable_thinking"}]}  RESULT: {"texts": [...], "ids": [[...]]}
import { createRequire } from 'module';
import fs from 'fs';

const req = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const require = createRequire(req.node_modules + '/');
const { Template } = await import(req.node_modules + '/@huggingface/jinja/dist/index.js');
const { Tokenizer } = require('@anush008/tokenizers');
const config = JSON.parse(fs.readFileSync(req.tokenizer_config, 'utf8'));
const template = new Template(config.chat_template);
const tok = Tokenizer.fromFile(req.tokenizer);
const out = { texts: [], ids: [] };
for (const c of req.cases) {
  const vars = { messages: c.messages, add_generation_prompt: c.add_generation_prompt, bos_token: '', eos_token: config.eos_token };
  if (c.tools && c.tools.length) vars.tools = c.tools;
  if (c.enable_thinking !== undefined) vars.enable_thinking = c.enable_thinking;
  const text = template.render(vars);
  out.texts.push(text);
  out.ids.push((await tok.encode(text, null, { addSpecialTokens: false })).getIds());
}
fs.writeFileSync(process.argv[3], JSON.stringify(out));
