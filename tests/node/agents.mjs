// `@openai/agents`: the Agents SDK runs the loop, on an OpenAI client
// pointed at Mneme (its provider in Chat Completions mode, or its default,
// the Responses API).
import { test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import { Agent, Runner, OpenAIProvider, tool, setTracingDisabled } from "@openai/agents";
import { z } from "zod";
import { MNEME, POLICY, STEPS, task, toolResult, managedFetch, finish } from "./lib.mjs";

setTracingDisabled(true);

export function agentCase(api, stream) {
  const name = `agents-${api}-${stream ? "stream" : "json"}`;
  test(name, async () => {
    const thread = `${name}-${process.pid}`;
    const { fetch, seen } = managedFetch();
    const openAIClient = new OpenAI({
      baseURL: `${MNEME}/v1`, apiKey: "sk-test", maxRetries: 0, fetch,
      defaultHeaders: { "X-Mneme-Thread": thread, "X-Mneme-Policy": POLICY },
    });
    const runner = new Runner({ modelProvider: new OpenAIProvider({ openAIClient, useResponses: api === "responses" }) });
    const run = (...a) => runner.run(...a);
    const callIds = [];
    const lookup = tool({
      name: "lookup",
      description: "Look a record up",
      parameters: z.object({ step: z.number(), note: z.string() }),
      execute: async (args) => toolResult(args),
    });
    const agent = new Agent({ name: "worker", instructions: "You are a careful agent.", model: "gpt-4o-mini", tools: [lookup] });
    let out;
    if (stream) {
      const r = await run(agent, task(name), { maxTurns: STEPS + 5, stream: true });
      for await (const _ of r.toStream()) { /* drain */ }
      await r.completed;
      out = r;
    } else {
      out = await run(agent, task(name), { maxTurns: STEPS + 5 });
    }
    assert.match(String(out.finalOutput), /mneme-done/);
    for (const item of out.newItems) if (item.type === "tool_call_item") callIds.push(item.rawItem.callId);
    await finish(name, { seen, thread, callIds });
  });
}
