// The npm `openai` client, Chat Completions, streamed and not, resending
// its whole history each call as agents do.
import { test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import { MNEME, POLICY, STEPS, task, toolResult, toolSchema, managedFetch, finish } from "./lib.mjs";

const tools = [
  { type: "function", function: { name: "lookup", description: "Look a record up", parameters: toolSchema } },
];

for (const stream of [false, true]) {
  const name = `openai-chat-${stream ? "stream" : "json"}`;
  test(name, async () => {
    const thread = `${name}-${process.pid}`;
    const { fetch, seen } = managedFetch();
    const client = new OpenAI({
      baseURL: `${MNEME}/v1`, apiKey: "sk-test", maxRetries: 0, fetch,
      defaultHeaders: { "X-Mneme-Thread": thread, "X-Mneme-Policy": POLICY },
    });
    const messages = [
      { role: "system", content: "You are a careful agent." },
      { role: "user", content: task(name) },
    ];
    const callIds = [];
    for (let i = 0; i < STEPS + 5; i++) {
      let msg;
      if (stream) {
        const s = client.chat.completions.stream({ model: "gpt-4o-mini", messages, tools });
        msg = (await s.finalChatCompletion()).choices[0].message;
      } else {
        msg = (await client.chat.completions.create({ model: "gpt-4o-mini", messages, tools })).choices[0].message;
      }
      const m = { role: "assistant", content: msg.content ?? null };
      if (msg.tool_calls?.length) m.tool_calls = msg.tool_calls.map(({ id, type, function: f }) => ({ id, type, function: { name: f.name, arguments: f.arguments } }));
      messages.push(m);
      if (!msg.tool_calls?.length) break;
      for (const c of msg.tool_calls) {
        callIds.push(c.id);
        messages.push({ role: "tool", tool_call_id: c.id, content: toolResult(c.function.arguments) });
      }
    }
    assert.match(messages.at(-1).content ?? "", /mneme-done/);
    const { log } = await finish(name, { seen, thread, callIds });
    assert.equal(log.messages.length, messages.length, "the log holds every message of the history once");
  });
}
