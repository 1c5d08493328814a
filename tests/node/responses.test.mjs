// The Responses API through Mneme: the npm `openai` client (full resend
// and previous_response_id, streamed and not), the Vercel AI SDK's default
// `openai(model)`, `@openai/agents` in its default (Responses) mode and
// LangChain's ChatOpenAI with useResponsesApi.
import { test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import { generateText, streamText, tool, stepCountIs } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { z } from "zod";
import { MNEME, POLICY, STEPS, task, toolResult, toolSchema, managedFetch, finish } from "./lib.mjs";
import { agentCase } from "./agents.mjs";
import { chatModels, langchainCase } from "./langchain.mjs";

const tools = [{ type: "function", name: "lookup", description: "Look a record up", parameters: toolSchema, strict: true }];

for (const chain of ["resend", "previous_response_id"]) {
  for (const stream of [false, true]) {
    const name = `openai-responses-${chain}-${stream ? "stream" : "json"}`;
    test(name, async () => {
      const thread = `${name}-${process.pid}`;
      const { fetch, seen } = managedFetch();
      const client = new OpenAI({
        baseURL: `${MNEME}/v1`, apiKey: "sk-test", maxRetries: 0, fetch,
        defaultHeaders: { "X-Mneme-Thread": thread, "X-Mneme-Policy": POLICY },
      });
      let input = [{ role: "user", content: task(name) }];
      let prev;
      const callIds = [];
      let resp;
      for (let i = 0; i < STEPS + 5; i++) {
        const params = { model: "gpt-4o-mini", instructions: "You are a careful agent.", input, tools, store: false };
        if (prev) params.previous_response_id = prev;
        resp = stream ? await client.responses.stream(params).finalResponse() : await client.responses.create(params);
        const calls = resp.output.filter((it) => it.type === "function_call");
        if (!calls.length) break;
        const outputs = calls.map((c) => ({ type: "function_call_output", call_id: c.call_id, output: toolResult(c.arguments) }));
        callIds.push(...calls.map((c) => c.call_id));
        if (chain === "resend") {
          input = [...input, ...resp.output, ...outputs];
        } else {
          prev = resp.id;
          input = outputs;
        }
      }
      assert.match(resp.output_text, /mneme-done/);
      await finish(name, { seen, thread, callIds });
    });
  }
}

for (const stream of [false, true]) {
  const name = `vercel-openai-${stream ? "stream" : "json"}`;
  test(name, async () => {
    const thread = `${name}-${process.pid}`;
    const { fetch, seen } = managedFetch();
    const callIds = [];
    const opts = {
      // openai(model) is the Responses API in AI SDK 5.
      model: createOpenAI({ baseURL: `${MNEME}/v1`, apiKey: "sk-test", headers: { "X-Mneme-Thread": thread, "X-Mneme-Policy": POLICY }, fetch })("gpt-4o-mini"),
      system: "You are a careful agent.",
      prompt: task(name),
      tools: {
        lookup: tool({
          description: "Look a record up",
          inputSchema: z.object({ step: z.number(), note: z.string() }),
          execute: async (args, { toolCallId }) => (callIds.push(toolCallId), toolResult(args)),
        }),
      },
      providerOptions: { openai: { store: false } },
      maxRetries: 0,
      stopWhen: stepCountIs(STEPS + 5),
    };
    let text;
    if (stream) {
      const errors = [];
      text = await streamText({ ...opts, onError: ({ error }) => errors.push(error) }).text;
      assert.deepEqual(errors, []);
    } else {
      text = (await generateText(opts)).text;
    }
    assert.match(text, /mneme-done/);
    await finish(name, { seen, thread, callIds });
  });
}

for (const stream of [false, true]) {
  agentCase("responses", stream);
  langchainCase("ChatOpenAI-responses", (o) => chatModels.ChatOpenAI(o, { useResponsesApi: true }), stream);
}
