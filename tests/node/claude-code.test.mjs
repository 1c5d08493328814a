// Claude Code (`claude -p`, from the npm package @anthropic-ai/claude-code)
// with its default tools, pointed at Mneme by ANTHROPIC_BASE_URL, in a temp
// HOME and a temp project folder. The fake model scripts Write, Read and
// Bash calls against the tools Claude Code offers. Claude Code hides the
// response headers, so what was managed is read from the thread's log
// (Mneme's JSON API) and from what fakellm received.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { MNEME, RUN, STEPS, task, finish, threadsWith, threadLog, summary } from "./lib.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const claude = join(here, "node_modules", ".bin", "claude");

// Claude Code's system prompt and tool schemas alone are ~15k tokens: the
// budget leaves ~15k for the conversation, so that it compacts.
const policy = JSON.stringify({ budget_tokens: 40000, reserve_output_tokens: 1024, trigger: 0.75, target: 0.5, min_tail_tokens: 2000, evict_over_tokens: 6000 });

// normalized is what the provider's cache sees of a request: tools, system
// and messages without the breakpoint markers, string content as a block.
function normalized(body) {
  const strip = (v) => JSON.parse(JSON.stringify(v ?? null, (k, x) => (k === "cache_control" ? undefined : x)));
  const block = (c) => (typeof c === "string" ? [{ type: "text", text: c }] : c);
  const head = JSON.stringify([strip(body.tools), strip(block(body.system)), body.model]);
  const msgs = body.messages.map((m) => JSON.stringify(strip({ ...m, content: block(m.content) })));
  return { head, msgs };
}

function lastBreakpoint(body) {
  for (let i = body.messages.length - 1; i >= 0; i--) if (JSON.stringify(body.messages[i]).includes('"cache_control"')) return i;
  return -1;
}

// prefixStable returns how many calls kept the previous call's prefix, up
// to its last breakpoint, byte for byte (markers aside).
export function prefixStable(calls) {
  let stable = 0;
  for (let i = 1; i < calls.length; i++) {
    const a = normalized(calls[i - 1].body), b = normalized(calls[i].body);
    const k = lastBreakpoint(calls[i - 1].body);
    let ok = a.head === b.head && b.msgs.length > k;
    for (let j = 0; ok && j <= k; j++) ok = a.msgs[j] === b.msgs[j];
    if (ok) stable++;
  }
  return stable;
}

test("claude-code", { timeout: 240_000 }, async () => {
  const name = "claude-code";
  const home = mkdtempSync(join(tmpdir(), "mneme-cc-home-"));
  const proj = mkdtempSync(join(tmpdir(), "mneme-cc-proj-"));
  try {
    const env = {
      PATH: process.env.PATH,
      HOME: home,
      ANTHROPIC_BASE_URL: MNEME,
      ANTHROPIC_API_KEY: "sk-ant-dummy",
      ANTHROPIC_CUSTOM_HEADERS: `X-Mneme-Policy: ${policy}`,
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
      DISABLE_TELEMETRY: "1",
      DISABLE_AUTOUPDATER: "1",
    };
    const prompt = `${task(name)} mneme-dir=${proj}`;
    const r = spawnSync(claude, ["-p", prompt, "--output-format", "json", "--allowedTools", "Bash Read Write"], {
      cwd: proj, env, encoding: "utf8", timeout: 200_000, input: "",
    });
    assert.equal(r.status, 0, `claude exited ${r.status}: ${r.stderr}\n${r.stdout}`);
    const out = JSON.parse(r.stdout);
    assert.equal(out.is_error, false, r.stdout);
    assert.equal(out.api_error_status ?? null, null, r.stdout);
    assert.match(out.result, /mneme-done/);
    // The files the scripted Write calls made, in the project folder.
    const written = readdirSync(proj).filter((f) => f.startsWith("step-"));
    assert.ok(written.length >= Math.floor(STEPS / 3) - 1, `files written: ${written}`);

    // The thread of the main conversation: the one whose log holds the task
    // and the most messages.
    const ids = await threadsWith(`mneme-case=${name}-${RUN}`);
    assert.ok(ids.length >= 1, "no thread holds the task");
    let thread, most = -1;
    for (const id of ids) {
      const n = (await threadLog(id)).messages.length;
      if (n > most) [thread, most] = [id, n];
    }
    const { ups, log } = await finish(name, { thread });
    // Every tool call the model made is in the log once (finish checked the
    // pairing); the log holds each of Claude Code's calls' replies.
    const assistants = log.messages.filter((m) => m.role === "assistant").length;
    const main = ups.filter((u) => u.path === "/v1/messages" && (u.body.tools ?? []).length > 0);
    assert.ok(assistants >= main.length - 1, `${assistants} replies logged for ${main.length} main calls`);
    const stable = prefixStable(main);
    const systemInMessages = main.filter((u) => u.body.messages.some((m) => m.role === "system")).length;
    summary(`${name} cache`, { main_calls: main.length, prefix_stable: `${stable}/${main.length - 1}`, share: (stable / (main.length - 1)).toFixed(2), calls_with_mid_system: systemInMessages });
  } finally {
    rmSync(home, { recursive: true, force: true });
    rmSync(proj, { recursive: true, force: true });
  }
});
