// LangChain's ChatOpenAI (Chat Completions) and ChatAnthropic, tools bound,
// driving the tool loop by hand as a LangChain agent does; streamed (the
// chunks concatenated) and not.
import { test } from "node:test";
import assert from "node:assert/strict";
import { ChatOpenAI } from "@langchain/openai";
import { ChatAnthropic } from "@langchain/anthropic";
import { HumanMessage, SystemMessage, ToolMessage } from "@langchain/core/messages";
import { MNEME, POLICY, STEPS, task, toolResult, toolSchema, managedFetch, finish } from "./lib.mjs";

const lookup = { type: "function", function: { name: "lookup", description: "Look a record up", parameters: toolSchema } };

export const chatModels = {
  ChatOpenAI: ({ headers, fetch }, extra = {}) => new ChatOpenAI({
    model: "gpt-4o-mini", apiKey: "sk-test", maxRetries: 0, ...extra,
    configuration: { baseURL: `${MNEME}/v1`, fetch, defaultHeaders: headers },
  }),
  ChatAnthropic: ({ headers, fetch }) => new ChatAnthropic({
    model: "claude-opus-4-5", apiKey: "sk-ant-test", maxRetries: 0, anthropicApiUrl: MNEME,
    clientOptions: { fetch, defaultHeaders: headers },
  }),
};

export function langchainCase(label, make, stream) {
  const name = `langchain-${label}-${stream ? "stream" : "json"}`;
  test(name, async () => {
    const thread = `${name}-${process.pid}`;
    const { fetch, seen } = managedFetch();
    const model = make({ headers: { "X-Mneme-Thread": thread, "X-Mneme-Policy": POLICY }, fetch }).bindTools([lookup]);
    const messages = [new SystemMessage("You are a careful agent."), new HumanMessage(task(name))];
    const callIds = [];
    let ai;
    for (let i = 0; i < STEPS + 5; i++) {
      if (stream) {
        ai = undefined;
        for await (const chunk of await model.stream(messages)) ai = ai ? ai.concat(chunk) : chunk;
      } else {
        ai = await model.invoke(messages);
      }
      messages.push(ai);
      if (!ai.tool_calls?.length) break;
      for (const c of ai.tool_calls) {
        callIds.push(c.id);
        messages.push(new ToolMessage({ tool_call_id: c.id, content: toolResult(c.args) }));
      }
    }
    const text = typeof ai.content === "string" ? ai.content : ai.content.map((b) => b.text ?? "").join("");
    assert.match(text, /mneme-done/);
    await finish(name, { seen, thread, callIds });
  });
}
