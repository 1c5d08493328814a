// The Vercel AI SDK (`ai`) with its OpenAI provider in Chat Completions
// mode (`openai.chat()`) and its Anthropic provider (`anthropic()`): the
// SDK runs the tool loop itself (generateText / streamText with tools).
import { test } from "node:test";
import assert from "node:assert/strict";
import { generateText, streamText, tool, stepCountIs } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { createAnthropic } from "@ai-sdk/anthropic";
import { z } from "zod";
import { MNEME, POLICY, STEPS, task, toolResult, managedFetch, finish } from "./lib.mjs";

const providers = {
  "openai.chat": ({ headers, fetch }) => createOpenAI({ baseURL: `${MNEME}/v1`, apiKey: "sk-test", headers, fetch }).chat("gpt-4o-mini"),
  anthropic: ({ headers, fetch }) => createAnthropic({ baseURL: `${MNEME}/v1`, apiKey: "sk-ant-test", headers, fetch })("claude-opus-4-5"),
};

for (const [provider, model] of Object.entries(providers)) {
  for (const stream of [false, true]) {
    const name = `vercel-${provider}-${stream ? "stream" : "json"}`;
    test(name, async () => {
      const thread = `${name}-${process.pid}`;
      const { fetch, seen } = managedFetch();
      const callIds = [];
      const tools = {
        lookup: tool({
          description: "Look a record up",
          inputSchema: z.object({ step: z.number(), note: z.string() }),
          execute: async (args, { toolCallId }) => {
            callIds.push(toolCallId);
            return toolResult(args);
          },
        }),
      };
      const opts = {
        model: model({ headers: { "X-Mneme-Thread": thread, "X-Mneme-Policy": POLICY }, fetch }),
        system: "You are a careful agent.",
        prompt: task(name),
        tools,
        maxRetries: 0,
        stopWhen: stepCountIs(STEPS + 5),
      };
      let text;
      if (stream) {
        const errors = [];
        const r = streamText({ ...opts, onError: ({ error }) => errors.push(error) });
        text = await r.text;
        assert.deepEqual(errors, []);
      } else {
        text = (await generateText(opts)).text;
      }
      assert.match(text, /mneme-done/);
      await finish(name, { seen, thread, callIds });
    });
  }
}
