// Drives `mneme serve` with the official npm `openai` client: a chat, a
// streamed answer, and a tool call the model makes (non-streamed and
// streamed), resending the whole history every time as agents do. The
// server must run with a fake model upstream (`mneme serve --demo
// --demo-turns 0`, which uses the first tool it is offered when the user
// asks something). MNEME_URL is its base URL.
import assert from "node:assert/strict";
import OpenAI from "openai";

const base = process.env.MNEME_URL;
if (!base) {
  console.error("MNEME_URL is not set");
  process.exit(2);
}
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "sk-node-client", maxRetries: 0 });
const thread = `node-${process.pid}-${Date.now()}`;
const opts = { headers: { "X-Mneme-Thread": thread } };
const model = "gpt-4o-mini";
const tools = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "Weather of a city",
      parameters: { type: "object", properties: { query: { type: "string" } } },
    },
  },
];
const messages = [
  { role: "system", content: "You are terse." },
  { role: "user", content: "Hello from node" },
];
let lastThreadTokens = 0;

function checkHeaders(response, what) {
  assert.equal(response.headers.get("x-mneme-thread"), thread, `${what}: X-Mneme-Thread`);
  const win = Number(response.headers.get("x-mneme-window-tokens"));
  const threadTokens = Number(response.headers.get("x-mneme-thread-tokens"));
  assert.ok(win > 0, `${what}: X-Mneme-Window-Tokens ${win}`);
  assert.ok(threadTokens > lastThreadTokens, `${what}: the thread grows (${threadTokens} after ${lastThreadTokens})`);
  assert.match(response.headers.get("x-mneme-compacted") ?? "", /^(true|false)$/, `${what}: X-Mneme-Compacted`);
  lastThreadTokens = threadTokens;
}

async function step(name, fn) {
  await fn();
  console.log(`ok - ${name}`);
}

await step("chat completion", async () => {
  const { data, response } = await client.chat.completions.create({ model, messages }, opts).withResponse();
  assert.equal(data.choices[0].message.content, "ok: Hello from node");
  checkHeaders(response, "chat");
  messages.push({ role: "assistant", content: data.choices[0].message.content });
});

await step("streamed chat completion", async () => {
  messages.push({ role: "user", content: "Stream this answer" });
  const { data: stream, response } = await client.chat.completions
    .create({ model, messages, stream: true, stream_options: { include_usage: true } }, opts)
    .withResponse();
  let text = "";
  let finish = null;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? "";
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(text, "ok: Stream this answer");
  assert.equal(finish, "stop");
  checkHeaders(response, "stream");
  messages.push({ role: "assistant", content: text });
});

await step("tool call", async () => {
  messages.push({ role: "user", content: "Weather in Paris?" });
  const { data, response } = await client.chat.completions.create({ model, messages, tools }, opts).withResponse();
  const msg = data.choices[0].message;
  assert.equal(data.choices[0].finish_reason, "tool_calls");
  assert.equal(msg.tool_calls.length, 1);
  assert.equal(msg.tool_calls[0].function.name, "get_weather");
  assert.deepEqual(JSON.parse(msg.tool_calls[0].function.arguments), { query: "Weather in Paris?" });
  checkHeaders(response, "tool call");
  messages.push(msg, { role: "tool", tool_call_id: msg.tool_calls[0].id, content: "sunny, 21C" });

  const after = await client.chat.completions.create({ model, messages, tools }, opts).withResponse();
  assert.equal(after.data.choices[0].message.content, "ok: Weather in Paris?");
  checkHeaders(after.response, "tool result");
  messages.push({ role: "assistant", content: after.data.choices[0].message.content });
});

await step("streamed tool call", async () => {
  messages.push({ role: "user", content: "And in Oslo?" });
  const runner = client.chat.completions.stream({ model, messages, tools }, opts);
  const final = await runner.finalChatCompletion();
  const msg = final.choices[0].message;
  assert.equal(final.choices[0].finish_reason, "tool_calls");
  assert.equal(msg.tool_calls[0].function.name, "get_weather");
  assert.deepEqual(JSON.parse(msg.tool_calls[0].function.arguments), { query: "And in Oslo?" });
  messages.push(msg, { role: "tool", tool_call_id: msg.tool_calls[0].id, content: "rain, 8C" });
  const { data, response } = await client.chat.completions.create({ model, messages, tools }, opts).withResponse();
  assert.equal(data.choices[0].message.content, "ok: And in Oslo?");
  checkHeaders(response, "streamed tool result");
});

await step("errors in OpenAI's shape", async () => {
  await assert.rejects(
    client.chat.completions.create({ model, messages: [{ role: "wizard", content: "x" }] }, opts),
    (err) => err instanceof OpenAI.BadRequestError && /messages\[0\]/.test(err.message),
  );
});

console.log(`node openai client: all steps passed on thread ${thread}`);
