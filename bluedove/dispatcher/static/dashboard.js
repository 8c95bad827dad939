// BlueDove dashboard: reads GET v1/cluster and GET v1/stats?since=<last second> once a second,
// keeps the last hour of the series here, and draws the charts, strips, matchers and events.
// The space picked (?space= in the page's address; `default` unless given) chooses the
// segments, matchers' load and events shown; the charts are the whole cluster's.
// Text only into the DOM (textContent): ids and reasons are never parsed as markup.
"use strict";
(() => {  // one scope: only window.bdDashboard is global

const {drawChart, drawStrip, loadColour, textOn, eventStyle, fmt, clockOf, OI} = window.BDCharts;

const PERIOD_MS = 1000;
const KEEP_S = 3600;          // the series kept here: the last hour
const OVERLAP_S = 5;          // seconds asked again each time (their counts may still grow)
const MAX_STRIP_LABELS = 24;  // owner labels per strip, the widest segments first
const MAX_EVENTS = 300;       // events kept in the log

const CHARTS = [
  {name: "throughput", title: "Published and delivered, messages/s", unit: "/s", series: [
    {key: "published", label: "published/s", colour: OI.blue},
    {key: "delivered", label: "delivered/s", colour: OI.orange, dash: "5 2"}]},
  {name: "autoscaler", title: "Autoscaler input (busy λ/μ per matcher) and its thresholds", unit: "λ/μ", series: [
    {key: "autoscaler_input", label: "input", colour: OI.blue},
    {key: "autoscaler_out", label: "scale-out above", colour: OI.vermillion, dash: "6 3"},
    {key: "autoscaler_in", label: "scale-in below", colour: OI.green, dash: "2 3"}]},
  {name: "matchers", title: "Matchers: desired (autoscaler) and actual (owning segments)", unit: "matchers",
   integer: true, series: [
    {key: "matchers_desired", label: "desired", colour: OI.orange, dash: "5 2", step: true},
    {key: "matchers_actual", label: "actual", colour: OI.blue, step: true}]},
  {name: "latency", title: "Latency by hop, ms: accepted → stored, stored → answered", unit: "ms", series: [
    {key: "latency_p50_s", label: "stored p50", colour: OI.blue, scale: 1000},
    {key: "latency_p99_s", label: "stored p99", colour: OI.blue, dash: "5 2", scale: 1000},
    {key: "answered_p50_s", label: "answered p50", colour: OI.vermillion, scale: 1000},
    {key: "answered_p99_s", label: "answered p99", colour: OI.vermillion, dash: "5 2", scale: 1000}]},
  {name: "queues", title: "Queued deliveries (left) and redeliveries/s (right)", unit: "deliveries",
   rightUnit: "/s", series: [
    {key: "undelivered", label: "undelivered", colour: OI.blue, span: true},
    {key: "unacked", label: "unacked", colour: OI.orange, dash: "5 2", span: true},
    {key: "redelivered", label: "redeliveries/s", colour: OI.purple, dash: "2 2", axis: "right"}]},
];
const SERIES_KEYS = ["published", "delivered", "redelivered", "latency_p50_s", "latency_p99_s", "answered_p50_s",
                     "answered_p99_s", "undelivered",
                     "unacked", "matchers_actual", "matchers_desired", "autoscaler_input", "autoscaler_out",
                     "autoscaler_in"];

const state = {
  series: {t: []},      // parallel arrays, ascending t
  events: [],           // oldest first, deduplicated
  eventKeys: new Set(),
  density: {},
  cluster: null,
  space: new URLSearchParams(location.search).get("space") || "default",  // the space shown
  lastT: null,          // the newest second held
  serverNow: null,
  windowS: 300,         // the charts' span
  renders: 0, lastRenderMs: 0, maxRenderMs: 0, sumRenderMs: 0,
};
for (const k of SERIES_KEYS) state.series[k] = [];

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}
function setText(node, text) {
  const s = String(text);
  if (node.textContent !== s) node.textContent = s;
}

// -- data ---------------------------------------------------------------------------------
function mergeStats(s) {
  state.serverNow = s.now;
  const ser = state.series, inc = s.series || {};
  const ts = inc.t || [];
  if (ts.length) {
    // Drop what the answer covers again (the overlap), then append it: one array per key.
    let cut = ser.t.length;
    while (cut > 0 && ser.t[cut - 1] >= ts[0]) cut--;
    for (const k of ["t", ...SERIES_KEYS]) {
      ser[k].length = Math.min(ser[k].length, cut);
      const col = k === "t" ? ts : (inc[k] || []);
      for (let i = 0; i < ts.length; i++) ser[k].push(col[i] === undefined ? null : col[i]);
    }
    state.lastT = ser.t[ser.t.length - 1];
  }
  // Keep the last hour.
  const keepFrom = (s.now || state.lastT || 0) - KEEP_S;
  let drop = 0;
  while (drop < ser.t.length && ser.t[drop] < keepFrom) drop++;
  if (drop) for (const k of ["t", ...SERIES_KEYS]) ser[k].splice(0, drop);
  for (const e of s.events || []) {
    const key = `${e.t}|${e.action}|${e.reason}`;
    if (state.eventKeys.has(key)) continue;
    state.eventKeys.add(key);
    state.events.push(e);
  }
  state.events.sort((a, b) => a.t - b.t);
  while (state.events.length > MAX_EVENTS || (state.events.length && state.events[0].t < keepFrom)) {
    const e = state.events.shift();
    state.eventKeys.delete(`${e.t}|${e.action}|${e.reason}`);
  }
  if (s.density) state.density = s.density;
}

async function getJSON(path) {
  const r = await fetch(path, {cache: "no-store"});
  if (!r.ok) throw new Error(`GET /${path.split("?")[0]} answered ${r.status}`);
  return r.json();
}

// -- render ---------------------------------------------------------------------------------
function renderCharts() {
  const t1 = state.serverNow ?? (state.lastT ?? Date.now() / 1000);
  // A young cluster's charts start where its data does (at least a minute shown).
  const ser = state.series;
  const first = ser.t.findIndex((_, i) => SERIES_KEYS.some(k => ser[k][i] !== null));
  const since = first < 0 ? t1 : ser.t[first];
  const t0 = Math.max(t1 - state.windowS, Math.min(since - 5, t1 - 60));
  for (const spec of CHARTS) {
    const svg = document.querySelector(`svg[data-chart="${spec.name}"]`);
    drawChart(svg, spec, state.series, t0, t1, state.events);
    // The legend's latest values.
    for (const s of spec.series) {
      const col = state.series[s.key];
      let v = null;
      for (let i = col.length - 1; i >= 0 && v === null; i--) v = col[i];
      const out = document.querySelector(`[data-latest="${s.key}"]`);
      if (out) setText(out, v === null ? "–" : fmt(v * (s.scale || 1)));
    }
  }
}

// A segment's range: on a string dimension the strings it runs between (GET /v1/cluster's
// `labels`, escaped for showing between quotes; null is the dimension's end), else its numbers.
function rangeText(bounds, labels) {
  if (!labels) return `[${fmt(bounds[0])}, ${fmt(bounds[1])})`;
  const end = v => v === null || v === undefined ? "end" : `"${v}"`;
  return `${end(labels[0])} – ${end(labels[1])}`;
}

function memberFigures(m) {
  const loads = Object.values(m.load || {});
  const lam = loads.reduce((a, l) => a + (l.lambda || 0), 0);
  const mus = loads.map(l => l.mu).filter(v => v > 0);
  const q = loads.reduce((a, l) => a + (l.q || 0), 0);
  let cong = null;
  for (const l of loads) {
    const c = l.congestion !== undefined ? l.congestion : (l.mu > 0 ? l.lambda / l.mu : null);
    if (c !== null && c !== undefined) cong = (cong || 0) + c;
  }
  const subs = Object.values(m.subscriptions || {}).reduce((a, v) => a + v, 0);
  return {lam, mu: mus.length ? mus.reduce((a, v) => a + v, 0) / mus.length : null, q, cong, subs,
          segs: Object.keys(m.segments || {}).length};
}

const rows = new Map();  // matcher id -> {tr, cells}
const COLS = ["id", "status", "segments", "subscriptions", "lambda", "mu", "q", "congestion", "cpu", "rss"];

function renderMembers(c) {
  const body = document.querySelector("#members tbody");
  const seen = new Set();
  c.members.forEach((m, idx) => {
    seen.add(m.id);
    let r = rows.get(m.id);
    if (!r) {
      const tr = el("tr");
      tr.dataset.matcher = m.id;
      const cells = {};
      for (const k of COLS) {
        const td = el("td", undefined, k === "id" || k === "status" ? "" : "num");
        td.dataset.col = k;
        cells[k] = td;
        tr.appendChild(td);
      }
      cells.status.appendChild(el("span", "", "status"));
      setText(cells.id, m.id);
      r = {tr, cells};
      rows.set(m.id, r);
    }
    const f = memberFigures(m);
    const status = m.status + (m.idle ? " (idle)" : "");
    if (r.tr.dataset.status !== m.status) {
      r.tr.dataset.status = m.status;
      r.cells.status.firstChild.className = `status ${m.status}`;
    }
    setText(r.cells.status.firstChild, status);
    setText(r.cells.segments, f.segs);
    r.cells.segments.title = Object.entries(m.segments || {})
      .map(([d, s]) => `${d} ${rangeText(s, (m.labels || {})[d])}`).join("\n");
    setText(r.cells.subscriptions, fmt(f.subs));
    r.cells.subscriptions.title = Object.entries(m.subscriptions || {}).map(([d, v]) => `${d}: ${v}`).join("\n");
    setText(r.cells.lambda, fmt(f.lam));
    setText(r.cells.mu, fmt(f.mu));
    setText(r.cells.q, fmt(f.q));
    setText(r.cells.congestion, f.cong === null ? "–" : f.cong.toFixed(3));
    r.cells.congestion.style.background = loadColour(f.cong);
    r.cells.congestion.style.color = textOn(f.cong);
    r.cells.congestion.title = Object.entries(m.load || {}).map(([d, l]) =>
      `${d}: λ ${fmt(l.lambda)}/s μ ${fmt(l.mu)}/s q ${l.q} λ/μ ${l.congestion ?? "–"}`).join("\n");
    const live = m.status !== "dead";  // a dead matcher's last CPU and RSS are stale
    const cpu = !live || m.cpu === null || m.cpu === undefined ? "–" : `${(100 * m.cpu).toFixed(0)}%`;
    const lim = live && m.cpu_limit ? m.cpu_limit : null;  // under a CPU limit: its share used
    setText(r.cells.cpu, lim ? `${cpu} · ${(100 * lim.used).toFixed(0)}% of ${lim.cores}` : cpu);
    r.cells.cpu.title = lim ? `CPU limit ${lim.cores} cores: ${(100 * lim.used).toFixed(0)}% used, ` +
      `throttled in ${(100 * lim.throttled).toFixed(0)}% of its periods` : "";
    setText(r.cells.rss, live && m.rss_bytes ? `${(m.rss_bytes / 1048576).toFixed(0)} MiB` : "–");
    if (body.children[idx] !== r.tr) body.insertBefore(r.tr, body.children[idx] || null);
  });
  for (const [id, r] of rows) if (!seen.has(id)) { r.tr.remove(); rows.delete(id); }
}

const strips = new Map();  // dimension -> svg
function renderStrips(c) {
  const box = document.getElementById("strips");
  for (const d of c.space.dimensions) {
    let svg = strips.get(d.name);
    if (!svg) {
      const line = el("div", undefined, "strip");
      const attr = (c.space.attributes || []).find(a => a.name === d.name);
      const whole = attr && attr.type === "string" ? '(strings, "" – end)' : `[${fmt(d.min)}, ${fmt(d.max)})`;
      line.appendChild(el("div", `${d.name} ${whole}`, "strip-name"));
      svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
      svg.dataset.strip = d.name;
      svg.setAttribute("role", "img");
      svg.setAttribute("aria-label", `segments of ${d.name}, coloured by load`);
      line.appendChild(svg);
      box.appendChild(line);
      strips.set(d.name, svg);
    }
    const segs = [];
    for (const m of c.members) {
      const s = (m.segments || {})[d.name];
      if (!s) continue;
      const l = (m.load || {})[d.name] || {};
      const load = l.congestion !== undefined && l.congestion !== null ? l.congestion : (l.mu > 0 ? l.lambda / l.mu : null);
      segs.push({lo: s[0], hi: s[1], range: rangeText(s, (m.labels || {})[d.name]), owner: m.id, load,
                 lambda: l.lambda, mu: l.mu, q: l.q,
                 subs: (m.subscriptions || {})[d.name]});
    }
    segs.sort((a, b) => a.lo - b.lo);
    drawStrip(svg, d, segs, state.density[d.name], MAX_STRIP_LABELS);
  }
}

const eventRows = new Map();  // key -> tr
function renderEvents() {
  const body = document.querySelector("#events tbody");
  const want = state.events.filter(e => (e.space || "default") === state.space).reverse();
  const keys = new Set();
  want.forEach((e, idx) => {
    const key = `${e.t}|${e.action}|${e.reason}`;
    keys.add(key);
    let tr = eventRows.get(key);
    if (!tr) {
      tr = el("tr");
      tr.dataset.action = e.action;
      const at = el("td", e.at ? e.at.replace("T", " ").slice(0, 23) : clockOf(e.t));
      const act = el("td");
      const tag = el("span", e.action, "action");
      tag.style.borderColor = eventStyle(e.action).colour;
      act.appendChild(tag);
      tr.append(at, act, el("td", e.matchers ?? "–", "num"), el("td", e.reason || "", "reason"));
      eventRows.set(key, tr);
    }
    if (body.children[idx] !== tr) body.insertBefore(tr, body.children[idx] || null);
  });
  for (const [k, tr] of eventRows) if (!keys.has(k)) { tr.remove(); eventRows.delete(k); }
}

function renderSummary(c) {
  const alive = c.members.filter(m => m.status === "alive").length;
  const owners = c.members.filter(m => !m.idle && m.status !== "dead").length;
  const a = c.autoscaler || {};
  const auto = a.enabled ? `autoscaler ${a.min}–${a.max} matchers${a.backend ? " (" + a.backend + ")" : ""}` : "autoscaler off";
  const s = document.getElementById("summary");
  const log = c.log ? `log ${c.log.chunks} chunks, ${c.log.replays} replay(s) under way · ` : "";
  setText(s, `space ${c.space_name || "default"} · epoch ${c.epoch} · ${log}${c.members.length} matchers (${alive} alive, ${owners} owning segments) · ` +
    `${(c.dispatchers || []).length} dispatcher(s) · ${auto} · policy ${c.policy || "?"} · ` +
    `updated ${new Date().toLocaleTimeString()}`);
  s.className = "muted";
}

// The space picker: the cluster's spaces (GET v1/cluster's `spaces`), the one shown chosen.
function renderSpaces(c) {
  const pick = document.getElementById("space");
  const names = c.spaces || ["default"];
  if (pick.dataset.names !== names.join("\n")) {
    pick.dataset.names = names.join("\n");
    pick.replaceChildren(...names.map(n => { const o = el("option", n); o.value = n; return o; }));
  }
  if (pick.value !== state.space) pick.value = state.space;
}

function showSpace(name) {
  state.space = name;
  state.cluster = null;  // another space's table and dimensions: the strips and rows start again
  strips.clear();
  document.getElementById("strips").replaceChildren();
  for (const r of rows.values()) r.tr.remove();
  rows.clear();
  const url = new URL(location.href);
  if (name === "default") url.searchParams.delete("space"); else url.searchParams.set("space", name);
  history.replaceState(null, "", url);
  render();
  tick().catch(err => console.error(err));
}

function render() {
  const t0 = performance.now();
  if (state.cluster) {
    renderSpaces(state.cluster);
    renderSummary(state.cluster);
    renderMembers(state.cluster);
    renderStrips(state.cluster);
  }
  renderCharts();
  renderEvents();
  const ms = performance.now() - t0;
  state.renders++;
  state.lastRenderMs = ms;
  state.maxRenderMs = Math.max(state.maxRenderMs, ms);
  state.sumRenderMs += ms;
  const out = document.getElementById("render-ms");
  out.dataset.renders = String(state.renders);
  out.dataset.last = ms.toFixed(2);
  out.dataset.max = state.maxRenderMs.toFixed(2);
  setText(out, `render ${ms.toFixed(1)} ms`);
}

// -- loop -------------------------------------------------------------------------------
function showError(err) {
  const s = document.getElementById("summary");
  s.textContent = `cannot reach the cluster: ${err.message} (retrying)`;
  s.className = "err";
}

async function tick() {
  const since = state.lastT === null ? 0 : state.lastT - OVERLAP_S;  // 0: the server clamps to the last hour
  const space = state.space;
  const path = space === "default" ? "v1/cluster" : `v1/cluster?space=${encodeURIComponent(space)}`;
  const [c, s] = await Promise.allSettled([getJSON(path), getJSON(`v1/stats?since=${since}`)]);
  // (an answer for the space shown before a pick is dropped)
  if (c.status === "fulfilled" && space === state.space) state.cluster = c.value;
  if (s.status === "fulfilled") mergeStats(s.value);
  try {
    render();
  } catch (err) {
    showError(err);
    throw err;
  }
  const failed = [c, s].find(r => r.status === "rejected");
  if (failed) showError(failed.reason);
  document.body.dataset.ticks = String(Number(document.body.dataset.ticks || 0) + 1);
}

async function loop() {
  const started = performance.now();
  try {
    await tick();
  } catch (err) {
    console.error(err);
  }
  setTimeout(loop, Math.max(0, PERIOD_MS - (performance.now() - started)));
}

function setup() {
  const box = document.getElementById("charts");
  for (const spec of CHARTS) {
    const fig = el("figure", undefined, "chart");
    fig.appendChild(el("figcaption", spec.title));
    const legend = el("div", undefined, "legend");
    for (const s of spec.series) {
      const item = el("span", undefined, "key");
      const sw = el("span", undefined, "swatch");
      sw.style.borderTopColor = s.colour;
      sw.style.borderTopStyle = s.dash ? "dashed" : "solid";
      item.append(sw, el("span", s.label + " "), el("b"));
      item.lastChild.dataset.latest = s.key;
      legend.appendChild(item);
    }
    fig.appendChild(legend);
    const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    svg.dataset.chart = spec.name;
    svg.dataset.points = "0";
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", spec.title);
    fig.appendChild(svg);
    box.appendChild(fig);
  }
  const keys = document.getElementById("event-keys");
  for (const action of ["scale_out", "scale_in", "split", "merge", "takeover"]) {
    const k = el("span", action, "action");
    k.style.borderColor = eventStyle(action).colour;
    keys.appendChild(k);
  }
  for (const b of document.querySelectorAll("#window button")) {
    b.addEventListener("click", () => {
      state.windowS = Number(b.dataset.window);
      for (const o of document.querySelectorAll("#window button")) o.setAttribute("aria-pressed", String(o === b));
      render();
    });
  }
  document.getElementById("space").addEventListener("change", e => showSpace(e.target.value));
  window.addEventListener("resize", render);
  window.bdDashboard = state;  // for tests and the curious: the series held, the render times
  loop();
}
setup();
})();
