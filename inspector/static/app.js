// Mneme inspector: reads the JSON API (/api/) and renders the thread list,
// the usage chart, observations, search and the timeline. No framework:
// every piece of data is inserted with textContent, never as HTML.
"use strict";

const PAGE = 200;
const $ = (id) => document.getElementById(id);
const state = { threadsNext: "", filter: "", thread: null, from: 1, info: null };

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else e.setAttribute(k, v);
  }
  for (const k of kids) if (k != null) e.append(k);
  return e;
}

function svgEl(tag, attrs) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

const fmt = (n) => (n == null ? "–" : Number(n).toLocaleString("en-US"));

function status(msg) { $("status").textContent = msg || ""; }

async function api(path) {
  const headers = {};
  const key = localStorage.getItem("mneme-key");
  if (key) headers["Authorization"] = "Bearer " + key;
  const r = await fetch(path, { headers });
  if (r.status === 401) {
    status("This server needs an API key: use the API key button.");
    throw new Error("unauthorized");
  }
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error((body.error && body.error.message) || r.statusText);
  return body;
}

// ---- thread list ------------------------------------------------------

async function loadThreads(more) {
  const q = new URLSearchParams({ limit: "50" });
  if (state.filter) q.set("q", state.filter);
  if (more && state.threadsNext) q.set("cursor", state.threadsNext);
  let page;
  try { page = await api("/api/threads?" + q); } catch (e) { status(e.message); return; }
  const list = $("thread-list");
  if (!more) list.replaceChildren();
  for (const t of page.threads) {
    const a = el("a", { href: "#/t/" + encodeURIComponent(t.id), "data-thread": t.id },
      el("div", { class: "id", text: t.id }),
      el("div", { class: "meta", text: `${fmt(t.messages)} messages · ${fmt(t.tokens)} tokens · ${new Date(t.updated).toLocaleString()}` }));
    if (state.thread === t.id) a.classList.add("active");
    list.append(el("li", {}, a));
  }
  if (!more && page.threads.length === 0) list.append(el("li", { class: "muted", text: state.filter ? "No thread matches." : "No threads yet." }));
  state.threadsNext = page.next || "";
  $("threads-more").hidden = !state.threadsNext;
}

// ---- routing ----------------------------------------------------------

function route() {
  const m = location.hash.match(/^#\/t\/([^?]+)(?:\?(.*))?$/);
  if (!m) {
    state.thread = null;
    $("thread").hidden = true;
    $("empty").hidden = false;
    return;
  }
  const id = decodeURIComponent(m[1]);
  const params = new URLSearchParams(m[2] || "");
  const seq = Number(params.get("seq") || 0);
  const from = seq ? Math.max(1, seq - 10) : Number(params.get("from") || 1);
  showThread(id, from, seq);
}

function go(id, from, seq) {
  const q = seq ? "?seq=" + seq : from > 1 ? "?from=" + from : "";
  const h = "#/t/" + encodeURIComponent(id) + q;
  if (location.hash === h) route(); else location.hash = h;
}

// ---- thread view ------------------------------------------------------

async function showThread(id, from, flashSeq) {
  const changed = state.thread !== id;
  state.thread = id;
  state.from = from;
  $("empty").hidden = true;
  $("thread").hidden = false;
  document.querySelectorAll("#thread-list a").forEach((a) => a.classList.toggle("active", a.dataset.thread === id));
  const base = "/api/threads/" + encodeURIComponent(id);
  try {
    const [log, usage, events] = await Promise.all([
      api(`${base}?from=${from}&limit=${PAGE}`),
      changed || !state.usage ? api(base + "/usage") : Promise.resolve(state.usage),
      changed || !state.events ? api(base + "/events") : Promise.resolve(state.events),
    ]);
    state.info = log.thread; state.usage = usage; state.events = events;
    status("");
    $("thread-title").textContent = id;
    renderStats(log, usage.usage, events);
    renderChart(usage, events);
    renderRecalled((usage.usage.window || {}).recalled_block);
    renderObservations(events.observations);
    renderForms(log.forms);
    renderTimeline(log, flashSeq);
    if (changed) $("search-results").replaceChildren();
  } catch (e) {
    status(e.message);
  }
}

function stat(label, value) { return el("span", { class: "stat" }, label + " ", el("b", { text: value })); }

function renderStats(log, u, events) {
  const w = u.window || {};
  $("thread-stats").replaceChildren(
    stat("messages", fmt(u.messages)),
    stat("thread tokens", fmt(u.tokens)),
    stat("window", `${fmt(w.total)} / ${fmt(w.budget)}`),
    stat("compactions", fmt(events.compactions.length)),
    stat("reflections", fmt(events.reflections.length)),
    stat("events", fmt(log.thread.events)));
}

// The sawtooth: each call's window against budget, trigger and target.
function renderChart(usage, events) {
  const box = $("chart");
  box.replaceChildren();
  const u = usage.usage.window || {};
  let pts = usage.points.map((p) => ({ x: p.last_seq, y: p.total, c: p.compacted }));
  let note = "";
  if (pts.length < 2) {
    // No recorded calls (a fresh process): reconstruct the steps from the
    // compaction events, each dropping from the trigger by what it saved.
    pts = [];
    for (const c of events.compactions) {
      pts.push({ x: c.from_seq, y: u.trigger || 0 });
      pts.push({ x: c.seq, y: Math.max(0, (u.trigger || 0) - c.tokens_before + c.tokens_after), c: true });
    }
    pts.push({ x: u.last_seq || 0, y: u.total || 0 });
    note = "reconstructed from compaction events";
  }
  const budget = u.budget || Math.max(...pts.map((p) => p.y), 1);
  const W = 900, H = 240, L = 58, R = 12, T = 12, B = 26;
  const xs = pts.map((p) => p.x);
  const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 1);
  const ymax = Math.max(budget, ...pts.map((p) => p.y)) * 1.05;
  const X = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
  const Y = (y) => T + (1 - y / ymax) * (H - T - B);
  const svg = svgEl("svg", { id: "usage-chart", viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img", "aria-label": "window tokens per call" });
  for (let i = 0; i <= 4; i++) {
    const v = (ymax / 1.05) * (i / 4);
    svg.append(svgEl("line", { class: "axis", x1: L, x2: W - R, y1: Y(v), y2: Y(v) }));
    const t = svgEl("text", { x: L - 6, y: Y(v) + 4, "text-anchor": "end" });
    t.textContent = v >= 1000 ? Math.round(v / 1000) + "k" : Math.round(v);
    svg.append(t);
  }
  const lx = svgEl("text", { x: W - R, y: H - 6, "text-anchor": "end" });
  lx.textContent = "seq " + fmt(x1);
  const l0 = svgEl("text", { x: L, y: H - 6 });
  l0.textContent = "seq " + fmt(x0);
  svg.append(lx, l0);
  for (const [cls, v] of [["budget", u.budget], ["trigger", u.trigger], ["target", u.target]]) {
    if (v) svg.append(svgEl("line", { class: cls, x1: L, x2: W - R, y1: Y(v), y2: Y(v) }));
  }
  const d = pts.map((p, i) => (i ? "L" : "M") + X(p.x).toFixed(1) + " " + Y(p.y).toFixed(1)).join(" ");
  svg.append(svgEl("path", { class: "area", d: d + ` L${X(pts[pts.length - 1].x)} ${Y(0)} L${X(pts[0].x)} ${Y(0)} Z` }));
  svg.append(svgEl("path", { class: "usage", d }));
  for (const p of pts.filter((p) => p.c)) {
    const c = svgEl("circle", { class: "compaction", cx: X(p.x), cy: Y(p.y), r: 4 });
    const t = svgEl("title", {});
    t.textContent = `compaction at seq ${p.x}: window ${fmt(p.y)} tokens`;
    c.append(t);
    svg.append(c);
  }
  box.append(svg);
  const legend = $("chart-legend");
  legend.replaceChildren(
    el("span", {}, el("i", { class: "sw-window" }), "window"),
    el("span", {}, el("i", { class: "sw-budget" }), "budget " + fmt(u.budget)),
    el("span", {}, el("i", { class: "sw-trigger" }), "trigger " + fmt(u.trigger)),
    el("span", {}, el("i", { class: "sw-target" }), "target " + fmt(u.target)),
    el("span", {}, el("i", { class: "sw-compaction" }), "compaction"));
  if (note) legend.append(el("span", { text: "(" + note + ")" }));
}

function renderObservations(blocks) {
  const list = $("observations");
  list.replaceChildren();
  $("obs-count").textContent = blocks.length ? `${blocks.length} in the memory block` : "";
  if (!blocks.length) { list.append(el("li", { class: "muted", text: "Nothing has left the window yet." })); return; }
  for (const b of blocks) {
    const kind = b.kind === "observe" ? "observation" : "catalogue";
    const link = el("a", { href: "#", text: `seq ${b.from}–${b.to}` });
    link.addEventListener("click", (e) => { e.preventDefault(); go(state.thread, 1, b.from); });
    list.append(el("li", { class: kind, "data-from": b.from, "data-to": b.to },
      el("div", { class: "range" }, kind + " of ", link, el("span", { class: "muted", text: ` · ${fmt(b.tokens)} tokens · event ${b.event_seq}` })),
      el("pre", { text: b.text })));
  }
}

// The recalled block auto-recall shows before the current request: each
// hit with why (its score and the terms the search matched).
function renderRecalled(block) {
  const list = $("recalled");
  list.replaceChildren();
  const hits = (block && block.hits) || [];
  $("recalled-count").textContent = hits.length ? `${hits.length} before seq ${block.for_seq}, for “${block.query.split("\n")[0]}”` : "";
  if (!hits.length) { list.append(el("li", { class: "muted", text: "Nothing recalled for the current request." })); return; }
  for (const h of hits) {
    const link = el("a", { href: "#", text: `seq ${h.seq}` });
    link.addEventListener("click", (e) => { e.preventDefault(); go(state.thread, 1, h.seq); });
    const why = `score ${h.score.toFixed(2)}` + (h.matched && h.matched.length ? ` · matched ${h.matched.join(", ")}` : "") + (h.clipped ? " · clipped" : "");
    list.append(el("li", { class: "recalled" },
      el("div", { class: "range" }, `${h.role} `, link, el("span", { class: "muted", text: ` · ${h.ref} · ${why}` })),
      el("pre", { text: h.text })));
  }
}

const FORMS = ["raw", "evicted", "masked", "observed", "catalogued", "dropped"];

function renderForms(forms) {
  const box = $("forms");
  box.replaceChildren();
  for (const f of FORMS) if (forms[f]) box.append(el("span", { class: "badge count " + f, text: `${f} ${fmt(forms[f])}` }));
}

function eventSummary(e) {
  const d = e.data || {};
  switch (e.kind) {
    case "compacted": {
      let s = `seq ${d.from_seq}–${d.to_seq} left the window (${d.strategy}): ${fmt(d.tokens_before)} → ${fmt(d.tokens_after)} tokens`;
      if (d.fallback) s += ` · fallback: ${d.fallback}`;
      return s;
    }
    case "reflected": return `observations of seq ${d.from_seq}–${d.to_seq} condensed: ${fmt(d.tokens_before)} → ${fmt(d.tokens_after)} tokens`;
    case "masked": return `${(d.seqs || []).length} tool results masked: seq ${(d.seqs || []).join(", ")}`;
    case "policy": return "policy: " + JSON.stringify(d);
    default: return JSON.stringify(d);
  }
}

function renderTimeline(log, flashSeq) {
  const body = $("timeline");
  body.replaceChildren();
  for (const e of log.events) {
    const tr = el("tr", { "data-seq": e.seq });
    if (e.kind === "message") {
      const content = el("td", { class: "content", title: e.preview || "" });
      for (const t of e.tools || []) content.append(el("span", { class: "tool", text: t }));
      content.append(e.preview || "");
      tr.append(el("td", { class: "num", text: e.seq }), el("td", { text: e.role }),
        el("td", {}, el("span", { class: "badge " + e.form, text: e.form })),
        el("td", { class: "num", text: fmt(e.tokens) }), content);
    } else {
      tr.classList.add("event");
      tr.append(el("td", { class: "num", text: e.seq }), el("td", { class: "muted", text: "event" }),
        el("td", {}, el("span", { class: "badge event", text: e.kind })), el("td", {}),
        el("td", { class: "content", text: eventSummary(e), title: eventSummary(e) }));
    }
    if (e.seq === flashSeq) tr.classList.add("flash");
    body.append(tr);
  }
  const first = log.events.length ? log.events[0].seq : 0;
  const last = log.events.length ? log.events[log.events.length - 1].seq : 0;
  $("page-info").textContent = `seq ${fmt(first)}–${fmt(last)} of ${fmt(log.thread.events)}`;
  $("prev").disabled = state.from <= 1;
  $("next").disabled = !log.next;
  state.next = log.next || 0;
  if (flashSeq) {
    const row = body.querySelector(`tr[data-seq="${flashSeq}"]`);
    if (row) row.scrollIntoView({ block: "center" });
  }
}

// ---- search -----------------------------------------------------------

function snippet(text) {
  // Matches come marked with « »: turn them into <mark>, as text nodes.
  const out = [];
  const parts = text.split(/«|»/);
  parts.forEach((p, i) => out.push(i % 2 ? el("mark", { text: p }) : document.createTextNode(p)));
  return out;
}

async function search(ev) {
  ev.preventDefault();
  const q = $("search-input").value.trim();
  const list = $("search-results");
  list.replaceChildren();
  if (!q) return;
  const params = new URLSearchParams({ q, limit: "20" });
  if (!$("search-all").checked) params.set("thread", state.thread);
  let res;
  try { res = await api("/api/search?" + params); } catch (e) { status(e.message); return; }
  if (!res.hits.length) { list.append(el("li", { class: "muted", text: `No results for “${q}”.` })); return; }
  for (const h of res.hits) {
    const a = el("a", { href: "#", text: `${h.thread === state.thread ? "" : h.thread + " "}seq ${h.seq}` });
    a.addEventListener("click", (e) => { e.preventDefault(); go(h.thread, 1, h.seq); });
    list.append(el("li", { "data-ref": h.ref }, a, el("span", { class: "muted", text: ` ${h.role}${h.tool ? " " + h.tool : ""} · ` }), ...snippet(h.snippet)));
  }
}

// ---- wiring -----------------------------------------------------------

function askKey() {
  const d = el("dialog", {});
  const input = el("input", { type: "password", placeholder: "Mneme API key", "aria-label": "API key" });
  const form = el("form", { method: "dialog" }, input, el("button", { type: "submit", text: "Save" }));
  form.addEventListener("submit", () => {
    if (input.value) localStorage.setItem("mneme-key", input.value); else localStorage.removeItem("mneme-key");
    status("");
    loadThreads(false);
    route();
  });
  d.append(form);
  document.body.append(d);
  d.showModal();
}

let filterTimer = 0;
document.addEventListener("DOMContentLoaded", () => {
  $("thread-filter").addEventListener("input", (e) => {
    clearTimeout(filterTimer);
    filterTimer = setTimeout(() => { state.filter = e.target.value.trim(); loadThreads(false); }, 200);
  });
  $("threads-more").addEventListener("click", () => loadThreads(true));
  $("search-form").addEventListener("submit", search);
  $("prev").addEventListener("click", () => go(state.thread, Math.max(1, state.from - PAGE)));
  $("next").addEventListener("click", () => state.next && go(state.thread, state.next));
  $("goto-form").addEventListener("submit", (e) => { e.preventDefault(); const s = Number($("goto").value); if (s > 0) go(state.thread, 1, s); });
  $("key-button").addEventListener("click", askKey);
  window.addEventListener("hashchange", route);
  loadThreads(false);
  route();
});
