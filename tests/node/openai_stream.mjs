// The official openai package against `bankml serve`: a streamed chat completion, the same request
// whole, and the model list. Prints one JSON line; exits 1 if anything disagrees.
// usage: node openai_stream.mjs PORT API_KEY
import OpenAI from "openai";

const [port, key] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: key, timeout: 30000, maxRetries: 0 });
const req = { model: "tiny", messages: [{ role: "user", content: "hello there" }], max_tokens: 24, temperature: 0.8, seed: 11 };

const models = await client.models.list();
const stream = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
let text = "", chunks = 0, finish = null, usage = null;
for await (const chunk of stream) {
  chunks++;
  const c = chunk.choices[0];
  if (c?.delta?.content) text += c.delta.content;
  if (c?.finish_reason) finish = c.finish_reason;
  if (chunk.usage) usage = chunk.usage;
}
const whole = await client.chat.completions.create(req);
const out = {
  model: models.data[0].id, chunks, finish, usage, stream_text: text,
  whole_text: whole.choices[0].message.content, whole_usage: whole.usage,
};
console.log(JSON.stringify(out));
const ok = text.length > 0 && text === out.whole_text && chunks > 2 && usage && usage.completion_tokens === whole.usage.completion_tokens;
process.exit(ok ? 0 : 1);
