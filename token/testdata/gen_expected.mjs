// gen_expected.mjs writes expected.json: the exact o200k_base and cl100k_base
// token counts of every sample in corpus.json, computed by OpenAI's tiktoken
// (npm package "tiktoken", the WASM build of the reference Rust encoder).
// Special-token strings in the text are counted as plain text, as Mneme does.
//
// Regenerate (node_modules stays outside the repository):
//
//	mkdir -p /tmp/tokcal && cd /tmp/tokcal && npm init -y && npm install tiktoken@1.0.22
//	node /work/main/token/testdata/gen_expected.mjs
import { createRequire } from "node:module";
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(process.cwd(), "/"));
const { get_encoding } = require("tiktoken");

const corpus = JSON.parse(readFileSync(join(here, "corpus.json"), "utf8"));
const encs = ["o200k_base", "cl100k_base"].map((n) => [n, get_encoding(n)]);
const out = corpus.map(({ name, text }) => {
  const row = { name };
  for (const [n, enc] of encs) row[n] = enc.encode(text, [], []).length;
  return row;
});
for (const [, enc] of encs) enc.free();
writeFileSync(join(here, "expected.json"), JSON.stringify(out, null, 1) + "\n");
console.log(`wrote ${out.length} rows`);
