// LangChain ChatOpenAI (Chat Completions) and ChatAnthropic (the case: langchain.mjs).
import { chatModels, langchainCase } from "./langchain.mjs";

for (const stream of [false, true]) {
  langchainCase("ChatOpenAI", chatModels.ChatOpenAI, stream);
  langchainCase("ChatAnthropic", chatModels.ChatAnthropic, stream);
}
