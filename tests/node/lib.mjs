// Shared by the cases of the real-client harness: where Mneme and the
// fake model are, the scripted task, a fetch that checks every model call
// was managed, and the checks of the thread's log and of what went
// upstream. scripts/test starts `mneme fakellm --agent` and `mneme serve`
// in front of it, and sets MNEME_URL and FAKELLM_URL.
import assert from "node:assert/strict";

export const MNEME = process.env.MNEME_URL;
export const FAKELLM = process.env.FAKELLM_URL;
if (!MNEME || !FAKELLM) {
  throw new Error("MNEME_URL and FAKELLM_URL must be set (scripts/test starts both)");
}

// RUN tells this run's cases from those of an earlier run on one server.
export const RUN = `${process.pid}-${Date.now().toString(36)}`;

// How many tool-call steps each case runs: each step is a model call, and
// one more answers at the end.
export const STEPS = 22;

// A small budget for the SDK cases, so that compaction happens within them
// (trigger and target as the cases were sized for: the defaults' 0.85/0.50
// would leave a 22-step case masked but not cut).
export const POLICY = JSON.stringify({
  budget_tokens: 20000,
  trigger: 0.75,
  target: 0.4,
  reserve_output_tokens: 512,
  min_tail_tokens: 2500,
  evict_over_tokens: 5000,
});

// task returns the first user message of a case: the fake model reads the
// step count from it, and the case's marker finds its upstream requests.
export function task(name) {
  return `Case ${name}: run the scripted task mneme-steps=${STEPS} and report. mneme-case=${name}-${RUN}`;
}

// toolResult is what a tool returns: a few KB that name the call.
export function toolResult(args) {
  const a = typeof args === "string" ? JSON.parse(args || "{}") : args ?? {};
  const lines = [];
  for (let i = 1; i <= 60; i++) lines.push(`${a.note ?? "result"}: record ${i} of the lookup, value ${i * 7}`);
  return lines.join("\n");
}

// The JSON schema of the case tools: what the fake model fills in.
export const toolSchema = {
  type: "object",
  properties: { step: { type: "number" }, note: { type: "string" } },
  required: ["step", "note"],
  additionalProperties: false,
};

// managedFetch wraps fetch for an SDK: every model call's response must
// carry Mneme's headers. calls counts them; threads collects X-Mneme-Thread.
export function managedFetch() {
  const seen = { calls: 0, threads: new Set(), compacted: 0, errors: [] };
  const f = async (input, init) => {
    const res = await fetch(input, init);
    const url = typeof input === "string" ? input : input.url ?? String(input);
    if (/\/v1\/(chat\/completions|messages|responses)$/.test(new URL(url).pathname)) {
      seen.calls++;
      const t = res.headers.get("x-mneme-thread");
      if (!t || !res.headers.get("x-mneme-window-tokens")) seen.errors.push(`${url}: no X-Mneme-* headers (status ${res.status})`);
      if (t) seen.threads.add(t);
      if (res.headers.get("x-mneme-compacted") === "true") seen.compacted++;
      if (res.status !== 200) seen.errors.push(`${url}: status ${res.status}: ${await res.clone().text()}`);
    }
    return res;
  };
  return { fetch: f, seen };
}

async function getJSON(path) {
  const res = await fetch(MNEME + path);
  assert.equal(res.status, 200, `GET ${path}: ${res.status}`);
  return res.json();
}

// threadLog returns the thread's log through Mneme's JSON API: its export
// (one event a line, messages in OpenAI's shape) and its compactions.
export async function threadLog(id) {
  const res = await fetch(`${MNEME}/api/threads/${encodeURIComponent(id)}/export`);
  assert.equal(res.status, 200, `export ${id}: ${res.status}`);
  const events = (await res.text()).split("\n").filter(Boolean).map((l) => JSON.parse(l));
  const info = await getJSON(`/api/threads/${encodeURIComponent(id)}/events`);
  // Each message event carries the message in Mneme's own model ("mneme":
  // role and parts), whatever API it came through.
  return { events, messages: events.filter((e) => e.kind === "message").map((e) => e.mneme), compactions: info.compactions ?? [] };
}

// threadsWith returns the ids of the threads whose log holds text.
export async function threadsWith(text) {
  const { threads } = await getJSON("/api/threads?limit=500");
  const out = [];
  for (const t of threads) {
    const res = await fetch(`${MNEME}/api/threads/${encodeURIComponent(t.id)}/export`);
    if ((await res.text()).includes(text)) out.push(t.id);
  }
  return out;
}

// upstream returns the model requests fakellm received for a case (those
// holding its marker), summarization requests left out.
export async function upstream(name) {
  const res = await fetch(`${FAKELLM}/fakellm/requests`);
  const all = await res.json();
  const marker = `mneme-case=${name}-${RUN}`;
  return all.filter((r) => {
    const s = JSON.stringify(r.body);
    return s.includes(marker) && !s.includes("mneme:observer") && !s.includes("mneme:reflector") && r.path !== "/v1/messages/count_tokens";
  });
}

// checkLog: every tool call in the log has exactly one result after it,
// every result answers a call before it, and no call id, result or (when
// given) client-side message is logged twice.
export function checkLog(log, { callIds = [] } = {}) {
  const calls = new Map();
  const results = new Map();
  for (const m of log.messages) {
    for (const p of m.parts ?? []) {
      const id = p.tool_call_id;
      if (p.type === "tool_call") {
        assert.ok(!calls.has(id), `tool call ${id} logged twice`);
        calls.set(id, m);
      } else if (p.type === "tool_result") {
        assert.ok(calls.has(id), `orphan tool result ${id} in the log`);
        assert.ok(!results.has(id), `tool result ${id} logged twice`);
        results.set(id, m);
      }
    }
  }
  for (const id of calls.keys()) assert.ok(results.has(id), `tool call ${id} unanswered in the log`);
  for (const id of callIds) assert.ok(calls.has(id), `tool call ${id} the client saw is not in the log`);
  return { calls: calls.size, results: results.size };
}

// checkUpstream: no request that went upstream has an unanswered call or
// an orphan result (Chat Completions and Messages shapes).
export function checkUpstream(reqs) {
  for (const [i, r] of reqs.entries()) {
    const msgs = r.body.messages ?? [];
    if (r.path === "/v1/chat/completions") {
      let open = new Set();
      for (const m of msgs) {
        if (m.role === "tool") {
          assert.ok(open.has(m.tool_call_id), `upstream ${i}: orphan tool message ${m.tool_call_id}`);
          open.delete(m.tool_call_id);
          continue;
        }
        assert.equal(open.size, 0, `upstream ${i}: unanswered calls ${[...open]}`);
        open = new Set((m.tool_calls ?? []).map((c) => c.id));
      }
      assert.equal(open.size, 0, `upstream ${i}: unanswered calls at the end`);
    } else if (r.path === "/v1/responses") {
      // Responses pairs by call_id: each function_call has its output after
      // it, each output answers a call before it.
      const input = Array.isArray(r.body.input) ? r.body.input : [];
      const calls = new Set(), outs = new Set();
      for (const it of input) {
        if (it.type === "function_call" || it.type === "custom_tool_call") calls.add(it.call_id);
        if (it.type === "function_call_output" || it.type === "custom_tool_call_output") {
          assert.ok(calls.has(it.call_id), `upstream ${i}: orphan ${it.type} ${it.call_id}`);
          outs.add(it.call_id);
        }
      }
      for (const id of calls) assert.ok(outs.has(id), `upstream ${i}: function_call ${id} unanswered`);
      assert.equal(r.body.previous_response_id ?? null, null, `upstream ${i}: previous_response_id went upstream`);
    } else if (r.path === "/v1/messages") {
      let uses = new Set();
      for (const m of msgs) {
        const blocks = Array.isArray(m.content) ? m.content : [];
        const answered = new Set();
        for (const b of blocks) {
          if (b.type === "tool_result") {
            assert.ok(uses.has(b.tool_use_id), `upstream ${i}: orphan tool_result ${b.tool_use_id}`);
            answered.add(b.tool_use_id);
          }
        }
        for (const id of uses) assert.ok(answered.has(id), `upstream ${i}: tool_use ${id} unanswered`);
        uses = new Set(blocks.filter((b) => b.type === "tool_use").map((b) => b.id));
      }
      let n = 0;
      JSON.stringify(r.body, (k, v) => (k === "cache_control" && n++, v));
      assert.ok(n <= 4, `upstream ${i}: ${n} cache_control blocks`);
    }
  }
}

// summary prints a case's figures on one line (scripts/test shows them).
export function summary(name, fig) {
  console.log(`# case ${name}: ${Object.entries(fig).map(([k, v]) => `${k}=${v}`).join(" ")}`);
}

// finish runs the checks every case shares and prints its figures.
export async function finish(name, { seen, thread, callIds, minCalls = STEPS + 1 }) {
  if (seen) assert.deepEqual(seen.errors, [], "every call managed, none failed");
  const ups = await upstream(name);
  checkUpstream(ups);
  assert.ok(ups.length >= minCalls, `${ups.length} model calls upstream, want >= ${minCalls}`);
  if (seen) assert.ok(seen.calls >= minCalls, `${seen.calls} managed calls, want >= ${minCalls}`);
  const log = await threadLog(thread);
  const { calls } = checkLog(log, { callIds });
  assert.ok(log.compactions.length >= 1, `no compaction in ${ups.length} calls`);
  const fig = { calls: ups.length, compactions: log.compactions.length, logged: log.messages.length, tool_calls: calls };
  summary(name, fig);
  return { ups, log, fig };
}
