// Codex (`codex exec`, from the npm package @openai/codex, which ships its
// binary) with a custom model provider pointed at Mneme (wire_api =
// "responses"), in a temp CODEX_HOME and project folder. The fake model
// scripts exec_command calls. Codex hides the response headers: what was
// managed is read from the thread's log and from what fakellm received.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { MNEME, RUN, STEPS, task, finish, threadsWith, threadLog } from "./lib.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const codex = join(here, "node_modules", ".bin", "codex");

// Codex's instructions and tools are ~8k tokens: the budget leaves ~10k.
const policy = JSON.stringify({ budget_tokens: 20000, reserve_output_tokens: 1024, trigger: 0.75, target: 0.4, min_tail_tokens: 2000, evict_over_tokens: 5000 });

test("codex", { timeout: 240_000 }, async () => {
  const name = "codex";
  const home = mkdtempSync(join(tmpdir(), "mneme-codex-home-"));
  const proj = mkdtempSync(join(tmpdir(), "mneme-codex-proj-"));
  try {
    // The README's provider entry, plus the test's policy header.
    writeFileSync(join(home, "config.toml"), `model = "gpt-5-codex"
model_provider = "mneme"

[model_providers.mneme]
name = "Mneme"
base_url = "${MNEME}/v1"
wire_api = "responses"
env_key = "OPENAI_API_KEY"
http_headers = { "X-Mneme-Policy" = ${JSON.stringify(policy)} }
`);
    const env = { PATH: process.env.PATH, HOME: home, CODEX_HOME: home, OPENAI_API_KEY: "sk-dummy" };
    const prompt = `${task(name)} mneme-dir=${proj}`;
    const r = spawnSync(codex, ["exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", prompt], {
      cwd: proj, env, encoding: "utf8", timeout: 200_000, input: "",
    });
    assert.equal(r.status, 0, `codex exited ${r.status}: ${r.stderr}\n${r.stdout}`);
    assert.match(r.stdout, /mneme-done/);
    assert.doesNotMatch(r.stderr, /stream error|unexpected status|error sending request/i, r.stderr);
    const written = readdirSync(proj).filter((f) => f.startsWith("step-"));
    assert.ok(written.length >= Math.floor(STEPS / 2) - 1, `files written: ${written}`);
    const ids = await threadsWith(`mneme-case=${name}-${RUN}`);
    assert.ok(ids.length >= 1, "no thread holds the task");
    let thread, most = -1;
    for (const id of ids) {
      const n = (await threadLog(id)).messages.length;
      if (n > most) [thread, most] = [id, n];
    }
    await finish(name, { thread });
  } finally {
    rmSync(home, { recursive: true, force: true });
    rmSync(proj, { recursive: true, force: true });
  }
});
