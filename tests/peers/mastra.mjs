// Issue 19's peer, Mastra's memory (@mastra/memory on @mastra/libsql), run
// beside Mneme's own benchmarks by scripts/bench-speed's peers part, on the
// same host in the same run, so that each figure is read as a ratio.
//
//	node mastra.mjs append agent.jsonl --writers 32 --count 5000 [--sync full|normal]
//	node mastra.mjs cold agent.jsonl --messages 10000 [--runs 3]
//
// append: every call is what an agent's turn does with Mastra's memory,
// Memory.saveMessages with one message, on a new database; --writers
// threads append at once (async loops in one process, as a Node server's
// requests), each the workload from its start. Mastra opens libSQL with
// synchronous=NORMAL (an fsync only at checkpoints); --sync full gives its
// connection synchronous=FULL, the durability of Mneme's appends (an
// fsync at every commit), and the one the issue's bars are set against.
// The connection's setting is read back after the run and printed, so a
// row can't claim a durability it did not have.
//
// cold: a thread of --messages messages (the workload repeated), written
// once; then --runs times, a new store and memory on the file (the module
// loaded, as in a process that restarts: Mneme's BenchmarkColdStart opens
// its store in the same process, too) and the first recall of the thread,
// timed from the open to the messages returned.
//
// The output is Go benchmark lines, for benchstat and for the ratios
// bench-speed prints beside Mneme's rows.
import { readFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { createClient } from "@libsql/client";
import { LibSQLStore } from "@mastra/libsql";
import { Memory } from "@mastra/memory";

function usage(msg) {
  if (msg) console.error(`mastra.mjs: ${msg}`);
  console.error(
    "usage: node mastra.mjs append FILE [--writers N] [--count N] [--sync full|normal]\n" +
      "       node mastra.mjs cold FILE [--messages N] [--runs N]",
  );
  process.exit(2);
}

const [mode, file, ...rest] = process.argv.slice(2);
if (!mode || !file) usage();
if (mode !== "append" && mode !== "cold") usage(`unknown mode ${mode}`);
const opts = {};
for (let i = 0; i < rest.length; i += 2) {
  if (!rest[i].startsWith("--") || rest[i + 1] === undefined) usage(`bad argument ${rest[i]}`);
  opts[rest[i].slice(2)] = rest[i + 1];
}
const int = (name, def) => {
  const v = opts[name] === undefined ? def : Number(opts[name]);
  if (!Number.isInteger(v) || v < 1) usage(`--${name} must be a positive integer`);
  return v;
};

// The workload: package message's JSON, one message a line, turned into
// Mastra's stored form (format 2: parts; a tool call and its result as
// tool-invocation parts). Mastra stores no system messages, so the system
// prompt is saved as the user's: every call writes one message.
let workload;
try {
  workload = readFileSync(file, "utf8")
    .split("\n")
    .filter(Boolean)
    .map((line) => JSON.parse(line));
} catch (err) {
  usage(`${file}: ${err.message}`);
}
if (workload.length === 0) usage(`${file} holds no messages`);

const toolNames = new Map();
function mastraMessage(m, id, threadId, resourceId, createdAt) {
  const parts = [];
  for (const p of m.parts ?? []) {
    if (p.type === "text") {
      parts.push({ type: "text", text: p.text });
    } else if (p.type === "tool_call") {
      toolNames.set(p.tool_call_id, p.tool_name);
      parts.push({
        type: "tool-invocation",
        toolInvocation: { state: "call", toolCallId: p.tool_call_id, toolName: p.tool_name, args: JSON.parse(p.arguments || "{}") },
      });
    } else if (p.type === "tool_result") {
      const text = (p.content ?? []).map((c) => c.text ?? "").join("");
      parts.push({
        type: "tool-invocation",
        toolInvocation: { state: "result", toolCallId: p.tool_call_id, toolName: toolNames.get(p.tool_call_id) ?? "tool", args: {}, result: text },
      });
    }
  }
  return {
    id,
    threadId,
    resourceId,
    createdAt,
    role: m.role === "user" || m.role === "system" ? "user" : "assistant",
    type: "v2",
    content: { format: 2, parts },
  };
}

// open makes a store on path as Mastra's LibSQLStore makes its own (WAL,
// busy_timeout) with one connection, so that the synchronous setting given
// here holds for every statement; sync null leaves Mastra's own pragmas.
async function open(path, sync) {
  let storage;
  let client;
  if (sync === null) {
    storage = new LibSQLStore({ id: "bench", url: `file:${path}` });
    client = storage.client;
  } else {
    client = createClient({ url: `file:${path}`, concurrency: 1 });
    await client.execute("PRAGMA journal_mode=WAL");
    await client.execute("PRAGMA busy_timeout=5000");
    storage = new LibSQLStore({ id: "bench", client });
  }
  await storage.init();
  if (sync !== null) {
    // After init: Mastra's workflow store sets synchronous=NORMAL on the
    // connection as it starts.
    await client.execute(`PRAGMA synchronous=${sync}`);
  }
  const memory = new Memory({
    storage,
    options: { lastMessages: 10, semanticRecall: false, workingMemory: { enabled: false } },
  });
  return { storage, client, memory };
}

const SYNC_NAMES = ["OFF", "NORMAL", "FULL", "EXTRA"];

function line(name, n, totalNs, metrics) {
  const fields = [`Benchmark${name}`, String(n), `${(totalNs / n).toFixed(0)} ns/op`];
  for (const [unit, v] of Object.entries(metrics)) fields.push(`${Number(v.toPrecision(6))} ${unit}`);
  console.log(fields.join("\t"));
}

async function append() {
  const writers = int("writers", 1);
  const count = int("count", 5000);
  const sync = (opts.sync ?? "full").toUpperCase();
  if (sync !== "FULL" && sync !== "NORMAL") usage("--sync must be full or normal");
  const dir = mkdtempSync(join(tmpdir(), "mastra-append-"));
  try {
    // NORMAL is Mastra's own setup (its LibSQLStore's pragmas).
    const { client, memory } = await open(join(dir, "m.db"), sync === "NORMAL" ? null : sync);
    const resourceId = "acme";
    for (let w = 0; w < writers; w++) {
      await memory.createThread({ threadId: `t${w}`, resourceId, title: `t${w}` });
    }
    const lat = new Array(count);
    let next = 0;
    let t = Date.parse("2026-01-01T00:00:00Z");
    const cpu0 = process.cpuUsage();
    const start = performance.now();
    await Promise.all(
      Array.from({ length: writers }, async (_, w) => {
        for (let seq = 0; ; seq++) {
          const i = next++;
          if (i >= count) return;
          const m = mastraMessage(workload[seq % workload.length], `t${w}-${seq}`, `t${w}`, resourceId, new Date(t++));
          const s = performance.now();
          await memory.saveMessages({ messages: [m] });
          lat[i] = performance.now() - s;
        }
      }),
    );
    const elapsed = performance.now() - start;
    const cpu = process.cpuUsage(cpu0);
    const got = (await client.execute("PRAGMA synchronous")).rows[0][0];
    const stored = Number((await client.execute("SELECT count(*) FROM mastra_messages")).rows[0][0]);
    if (stored !== count) throw new Error(`stored ${stored} messages, appended ${count}`);
    lat.sort((a, b) => a - b);
    line(`PeerAppend/mastra/${SYNC_NAMES[got].toLowerCase()}/${writers}`, count, elapsed * 1e6, {
      "msgs/s": count / (elapsed / 1e3),
      "cpu-µs/msg": (cpu.user + cpu.system) / count,
      "p50-µs": lat[Math.floor(count / 2)] * 1e3,
      "p99-µs": lat[Math.floor((count * 99) / 100)] * 1e3,
    });
    client.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function cold() {
  const n = int("messages", 10000);
  const runs = int("runs", 3);
  const dir = mkdtempSync(join(tmpdir(), "mastra-cold-"));
  try {
    const path = join(dir, "m.db");
    {
      // The thread, written in batches (its writing is not measured).
      const { storage, memory, client } = await open(path, null);
      const resourceId = "acme";
      await memory.createThread({ threadId: "t", resourceId, title: "t" });
      const store = await storage.getStore("memory");
      let t = Date.parse("2026-01-01T00:00:00Z");
      for (let i = 0; i < n; i += 500) {
        const batch = [];
        for (let j = i; j < Math.min(n, i + 500); j++) {
          batch.push(mastraMessage(workload[j % workload.length], `m${j}`, "t", resourceId, new Date(t++)));
        }
        await store.saveMessages({ messages: batch });
      }
      client.close();
    }
    const times = [];
    for (let r = 0; r < runs; r++) {
      const start = performance.now();
      const { memory, client } = await open(path, null);
      const { messages } = await memory.recall({ threadId: "t", resourceId: "acme" });
      times.push(performance.now() - start);
      if (messages.length !== 10) throw new Error(`recall gave ${messages.length} messages, want the last 10`);
      client.close();
    }
    const sorted = [...times].sort((a, b) => a - b);
    line(`PeerColdStart/mastra/${n % 1000 === 0 ? `${n / 1000}k` : n}`, runs, sorted.reduce((a, b) => a + b, 0) * 1e6, {
      "ms/first": times[0],
      "ms/median": sorted[Math.floor(runs / 2)],
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (mode === "append") await append();
else await cold();
