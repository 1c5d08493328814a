// gen_whitespace.mjs writes whitespace.json: a corpus of every whitespace
// shape (runs of 1–3 of space, tab, CR, LF, VT, NBSP, NEL, ideographic space
// and line separator between every kind of neighbour, long runs, the rest of
// Unicode's White_Space and its look-alikes that are not, and random
// mixtures of whitespace, letters, marks, digits, apostrophes and
// punctuation) with its exact o200k_base and cl100k_base token counts from
// OpenAI's tiktoken (npm "tiktoken", the WASM build of the Rust encoder).
// js-tiktoken's counts are reported where they differ (its JavaScript \s is
// not Unicode's White_Space), not committed.
//
// Regenerate (node_modules stays outside the repository):
//
//	mkdir -p /tmp/tokcal && cd /tmp/tokcal && npm init -y && npm install tiktoken@1.0.22 js-tiktoken@1.0.21
//	node /work/main/token/testdata/gen_whitespace.mjs
import { createRequire } from "node:module";
import { writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(process.cwd(), "/"));
const { get_encoding } = require("tiktoken");
const { getEncoding } = require("js-tiktoken");

const ws = [" ", "\t", "\n", "\r", "\u000b", "\u00a0", "\u0085", "\u3000", "\u2028"];
const sides = ["", "x", "X", "1", ".", "'", "\u0301", "中", "é"];
const texts = new Set(["x\n \ny"]);
const runs = [];
for (const a of ws) {
  runs.push(a);
  for (const b of ws) {
    runs.push(a + b);
    for (const c of ws) runs.push(a + b + c);
  }
}
// Runs of three over the whole set are many; keep all of them between
// letters, and the short ones between every pair of neighbours.
for (const r of runs) texts.add("a" + r + "b");
for (const l of sides)
  for (const r of sides)
    for (const w of runs) if (w.length <= 2 || (w.length === 3 && ws.indexOf(w[0]) < 4 && ws.indexOf(w[1]) < 4 && ws.indexOf(w[2]) < 4)) texts.add(l + w + r);
for (const k of [4, 5, 8, 16, 33, 100])
  for (const w of [" ", "\n", "\t", " \n", "\n ", "\r\n", "\u3000"])
    for (const [l, r] of [["", ""], ["x", ""], ["", "x"], ["x", "y"], ["1", "."]]) texts.add(l + w.repeat(k) + r);

// Random mixtures: a seeded generator, so the corpus is the same every run.
let state = 0x9e3779b9;
const rnd = (n) => {
  state ^= state << 13; state >>>= 0;
  state ^= state >>> 17;
  state ^= state << 5; state >>>= 0;
  return state % n;
};
const alphabet = [...ws, "a", "Z", "é", "Ä", "ǅ", "ʰ", "中", "\u0301", "7", "٣", "'", "'s", "'LL", "'re", "\u017f", ".", "/", "-", "😀", "{", "\r\n", "  "];
for (let i = 0; i < 3000; i++) {
  let s = "";
  for (let n = 1 + rnd(12); n > 0; n--) s += alphabet[rnd(alphabet.length)];
  texts.add(s);
}

// The rest of Unicode's White_Space (form feed, ogham space mark, the
// U+2000 block's spaces, paragraph separator, narrow no-break and medium
// mathematical spaces) and characters that look like space but are not
// White_Space (zero-width space, BOM, Mongolian vowel separator, the ASCII
// separators U+001C–U+001F that Python's isspace takes): each alone, doubled
// and next to a space or a line break, between every pair of neighbours;
// then random mixtures of them with a seed of their own, so that the texts
// above stay as they were.
const rare = ["\f", "\u1680", "\u2000", "\u2009", "\u200a", "\u2029", "\u202f", "\u205f"];
const notSpace = ["\u200b", "\ufeff", "\u180e", "\u001c", "\u001f"];
for (const l of sides)
  for (const r of sides)
    for (const c of [...rare, ...notSpace])
      for (const w of [c, c + c, " " + c, c + " ", "\n" + c, c + "\n", c + "  ", "\r\n" + c]) texts.add(l + w + r);
for (const k of [4, 17])
  for (const c of [...rare, ...notSpace])
    for (const [l, r] of [["", ""], ["x", ""], ["x", "y"]]) texts.add(l + c.repeat(k) + r);
state = 0x85ebca6b;
const alphabet2 = [...ws, ...rare, ...notSpace, "a", "Z", "é", "中", "\u0301", "7", "'", "'s", ".", "/", "\r\n", "  "];
for (let i = 0; i < 2000; i++) {
  let s = "";
  for (let n = 1 + rnd(12); n > 0; n--) s += alphabet2[rnd(alphabet2.length)];
  texts.add(s);
}

const list = [...texts];
const out = { texts: list };
for (const n of ["o200k_base", "cl100k_base"]) {
  const enc = get_encoding(n);
  const js = getEncoding(n);
  out[n] = list.map((t) => enc.encode(t, [], []).length);
  const differ = list.filter((t, i) => js.encode(t, [], []).length !== out[n][i]);
  console.log(`${n}: js-tiktoken differs from tiktoken on ${differ.length} of ${list.length}`);
  enc.free();
}
writeFileSync(join(here, "whitespace.json"), JSON.stringify(out) + "\n");
console.log(`wrote ${list.length} texts`);
