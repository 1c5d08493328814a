// `@openai/agents` in Chat Completions mode (the case itself: agents.mjs).
import { agentCase } from "./agents.mjs";

for (const stream of [false, true]) agentCase("chat_completions", stream);
