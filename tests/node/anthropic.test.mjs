// The npm `@anthropic-ai/sdk` client, Messages, streamed and not: with a
// cache breakpoint moved to the newest block each call (as Anthropic's docs
// advise and Claude Code does) plus one on the system prompt, and with
// extended thinking, whose signed blocks go back as they came.
import { test } from "node:test";
import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";
import { MNEME, POLICY, STEPS, task, toolResult, toolSchema, managedFetch, finish, upstream } from "./lib.mjs";

const tools = [{ name: "lookup", description: "Look a record up", input_schema: toolSchema }];

// withBreakpoint returns the history with cache_control on its newest block
// only (the client's own copy keeps none).
function withBreakpoint(messages) {
  const out = messages.slice(0, -1);
  const last = messages.at(-1);
  const blocks = typeof last.content === "string" ? [{ type: "text", text: last.content }] : last.content.map((b) => ({ ...b }));
  blocks[blocks.length - 1] = { ...blocks.at(-1), cache_control: { type: "ephemeral" } };
  out.push({ ...last, content: blocks });
  return out;
}

for (const mode of ["breakpoint", "thinking"]) {
  for (const stream of [false, true]) {
    const name = `anthropic-${mode}-${stream ? "stream" : "json"}`;
    test(name, async () => {
      const thread = `${name}-${process.pid}`;
      const { fetch, seen } = managedFetch();
      const client = new Anthropic({
        baseURL: MNEME, apiKey: "sk-ant-test", maxRetries: 0, fetch,
        defaultHeaders: { "X-Mneme-Thread": thread, "X-Mneme-Policy": POLICY },
      });
      const system = [{ type: "text", text: "You are a careful agent.", cache_control: { type: "ephemeral" } }];
      const messages = [
        { role: "user", content: [{ type: "text", text: task(name) }] },
        // A mid-conversation system message, as Claude Code sends them.
        { role: "system", content: "The following agents are available: Explore, Plan." },
      ];
      const callIds = [];
      let thinkingBlocks = 0;
      for (let i = 0; i < STEPS + 5; i++) {
        const params = {
          model: "claude-opus-4-5", max_tokens: 2048, system, tools,
          messages: mode === "breakpoint" ? withBreakpoint(messages) : messages,
        };
        if (mode === "thinking") params.thinking = { type: "enabled", budget_tokens: 1024 };
        const msg = stream ? await client.messages.stream(params).finalMessage() : await client.messages.create(params);
        // The reply goes back as it came: thinking blocks with their signatures.
        messages.push({ role: "assistant", content: msg.content.map(({ citations, ...b }) => (b.type === "text" && citations ? { ...b, citations } : b)) });
        thinkingBlocks += msg.content.filter((b) => b.type === "thinking" || b.type === "redacted_thinking").length;
        const uses = msg.content.filter((b) => b.type === "tool_use");
        if (!uses.length) break;
        callIds.push(...uses.map((u) => u.id));
        messages.push({ role: "user", content: uses.map((u) => ({ type: "tool_result", tool_use_id: u.id, content: toolResult(u.input) })) });
      }
      const last = messages.at(-1).content;
      assert.match(last.find((b) => b.type === "text")?.text ?? "", /mneme-done/);
      if (mode === "thinking") assert.ok(thinkingBlocks >= STEPS, `${thinkingBlocks} thinking blocks`);
      const { log } = await finish(name, { seen, thread, callIds });
      // The top-level system prompt is logged once, as the mid-conversation one.
      assert.equal(log.messages.length, messages.length + 1, "the log holds every message of the history once (and the system prompt)");
      assert.equal(log.messages.filter((m) => m.role === "system").length, 2);
      if (mode === "breakpoint") {
        for (const [i, r] of (await upstream(name)).entries()) {
          const ms = r.body.messages;
          const lastBlocks = ms.at(-1).content;
          assert.ok(lastBlocks.at(-1).cache_control, `upstream ${i}: the newest block carries the breakpoint`);
          assert.ok(r.body.system.some((b) => b.cache_control), `upstream ${i}: the system breakpoint is kept`);
        }
      }
    });
  }
}
