// BlueDove dashboard: SVG time charts and per-dimension strips, the page's own code (no library).
// Everything is text into the DOM (textContent); ids and reasons are never parsed as markup.
"use strict";
(() => {  // one scope: only window.BDCharts is global

const SVG_NS = "http://www.w3.org/2000/svg";

// Okabe & Ito's palette: told apart with every common colour-vision deficiency.
const OI = {orange: "#E69F00", sky: "#56B4E9", green: "#009E73", yellow: "#F0E442", blue: "#0072B2",
            vermillion: "#D55E00", purple: "#CC79A7", black: "#000000", grey: "#6b6b6b"};

// Events drawn as vertical markers: colour, dash and a short label each.
const EVENT_STYLE = {
  scale_out: {colour: OI.blue, dash: "", short: e => `out→${e.matchers ?? "?"}`},
  scale_in: {colour: OI.sky, dash: "4 2", short: e => `in→${e.matchers ?? "?"}`},
  split: {colour: OI.green, dash: "2 2", short: () => "split"},
  merge: {colour: OI.purple, dash: "6 2 2 2", short: () => "merge"},
  takeover: {colour: OI.vermillion, dash: "", short: () => "takeover"},
};
function eventStyle(action) {
  return EVENT_STYLE[action] || {colour: OI.grey, dash: "1 2", short: () => String(action)};
}

// Load (λ/μ) to colour: ColorBrewer's YlGnBu sequential scale (colour-blind safe, monotone in
// lightness: an idle segment is pale, a hot one dark), saturating at 1 (a congestion element);
// black or white text by lightness.
const LOAD_STOPS = [[0, [255, 255, 217]], [0.25, [199, 233, 180]], [0.5, [65, 182, 196]],
                    [0.75, [34, 94, 168]], [1, [8, 29, 88]]];
function loadColour(x) {
  if (x === null || x === undefined || !Number.isFinite(x)) return "#d9d9d9";
  const v = Math.max(0, Math.min(1, x));
  for (let i = 1; i < LOAD_STOPS.length; i++) {
    const [b, cb] = LOAD_STOPS[i];
    if (v <= b) {
      const [a, ca] = LOAD_STOPS[i - 1];
      const f = (v - a) / (b - a);
      return `rgb(${ca.map((c, k) => Math.round(c + f * (cb[k] - c))).join(",")})`;
    }
  }
  return "rgb(8,29,88)";
}
function textOn(x) {
  return x !== null && x !== undefined && Number.isFinite(x) && x > 0.6 ? "#fff" : "#000";
}

function svgEl(tag, attrs, text) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = String(text);
  return e;
}

function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 4, 6, 8, 10]) if (m * p >= v) return m * p;  // quarters stay round
  return 10 * p;
}

function fmt(v) {
  if (v === null || v === undefined || !Number.isFinite(v)) return "–";
  const a = Math.abs(v);
  if (a >= 1e9) return (v / 1e9).toFixed(1) + "G";
  if (a >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (a >= 1e4) return (v / 1e3).toFixed(0) + "k";
  if (a >= 1e3) return (v / 1e3).toFixed(1) + "k";
  if (a >= 10 || Number.isInteger(v)) return v.toFixed(0);
  if (a >= 1) return v.toFixed(1);
  if (a >= 0.01) return v.toFixed(2);
  return v.toPrecision(2);
}

function clockOf(t) {
  const d = new Date(t * 1000);
  return d.toTimeString().slice(0, 8);
}

// One line chart: spec {name, title, series: [{key, label, colour, dash, axis: "left"|"right",
// span: join across nulls (sampled gauges), scale}], unit, rightUnit}. Drawn into `svg`
// (rebuilt each refresh: a handful of elements), events as vertical markers with the reason.
function drawChart(svg, spec, data, t0, t1, events) {
  const W = svg.clientWidth || 400, H = svg.clientHeight || 170;
  const m = {l: 44, r: spec.rightUnit ? 44 : 10, t: 18, b: 18};
  const pw = W - m.l - m.r, ph = H - m.t - m.b;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const ts = data.t;
  let i0 = 0;
  while (i0 < ts.length && ts[i0] < t0) i0++;
  const max = {left: 0, right: 0};
  for (const s of spec.series) {
    const col = data[s.key] || [];
    for (let i = i0; i < ts.length; i++) {
      const v = col[i];
      if (v !== null && v !== undefined) max[s.axis || "left"] = Math.max(max[s.axis || "left"], v * (s.scale || 1));
    }
  }
  const top = {left: spec.integer ? 4 * Math.max(1, Math.ceil((max.left + 1) / 4)) : niceMax(max.left),
               right: niceMax(max.right)};
  const x = t => m.l + ((t - t0) / (t1 - t0)) * pw;
  const y = (v, axis) => m.t + ph - (v / top[axis]) * ph;
  const parts = [];
  // Grid, axes and their labels.
  const grid = svgEl("g", {class: "grid"});
  for (let k = 0; k <= 4; k++) {
    const yy = m.t + (ph * k) / 4;
    grid.appendChild(svgEl("line", {x1: m.l, x2: m.l + pw, y1: yy, y2: yy}));
    grid.appendChild(svgEl("text", {x: m.l - 4, y: yy + 4, "text-anchor": "end"}, fmt(top.left * (1 - k / 4))));
    if (spec.rightUnit) {
      grid.appendChild(svgEl("text", {x: m.l + pw + 4, y: yy + 4, "text-anchor": "start"},
                             fmt(top.right * (1 - k / 4))));
    }
  }
  for (let k = 0; k <= 4; k++) {
    const tt = t0 + ((t1 - t0) * k) / 4;
    grid.appendChild(svgEl("text", {x: x(tt), y: H - 4, "text-anchor": k === 0 ? "start" : k === 4 ? "end" : "middle"},
                           clockOf(tt)));
  }
  grid.appendChild(svgEl("text", {x: 2, y: 11, class: "unit"}, spec.unit || ""));
  if (spec.rightUnit) grid.appendChild(svgEl("text", {x: W - 2, y: 11, class: "unit", "text-anchor": "end"}, spec.rightUnit));
  parts.push(grid);
  // The series.
  let points = 0;
  for (const s of spec.series) {
    const col = data[s.key] || [];
    const axis = s.axis || "left";
    let d = "", pen = false, last = null;
    for (let i = i0; i < ts.length; i++) {
      const v = col[i];
      if (v === null || v === undefined) {
        if (!s.span) pen = false;
        continue;
      }
      const px = x(ts[i]).toFixed(1), py = y(v * (s.scale || 1), axis).toFixed(1);
      if (s.step && pen && last !== null) d += `L${px},${last}`;
      d += (pen ? "L" : "M") + px + "," + py;
      pen = true;
      last = py;
      points++;
    }
    const path = svgEl("path", {d: d || "M0,0", class: "series", "data-series": s.key, stroke: s.colour,
                                "stroke-dasharray": s.dash || "", fill: "none"});
    parts.push(path);
  }
  // Event markers: a vertical line each, the reason as the tooltip, and a short label in the
  // first of three rows where it overlaps no other label: takeovers and scaling decisions
  // before splits and merges, the newest first; an event left without room keeps its tooltip.
  const marks = svgEl("g", {class: "markers"});
  const shown = events.filter(e => e.t >= t0 && e.t <= t1);
  const groups = new Map();
  for (const e of shown) {
    const st = eventStyle(e.action);
    const xx = x(e.t);
    const g = svgEl("g", {class: "event-marker", "data-action": e.action, "data-t": e.t});
    g.appendChild(svgEl("title", {}, `${clockOf(e.t)} ${e.action}${e.matchers != null ? " → " + e.matchers + " matchers" : ""}: ${e.reason || ""}`));
    g.appendChild(svgEl("line", {x1: xx, x2: xx, y1: m.t, y2: m.t + ph, stroke: st.colour, "stroke-dasharray": st.dash}));
    g.appendChild(svgEl("rect", {x: xx - 4, y: m.t, width: 8, height: ph, fill: "transparent"}));  // hover target
    marks.appendChild(g);
    groups.set(e, g);
  }
  const rank = a => (a === "split" || a === "merge" ? 1 : 0);
  const rows = [[], [], []];
  for (const e of [...shown].sort((a, b) => rank(a.action) - rank(b.action) || b.t - a.t)) {
    const st = eventStyle(e.action), label = st.short(e), w = 6 * label.length;
    const xx = x(e.t);
    const lx = xx + 2 + w <= m.l + pw ? xx + 2 : xx - 2 - w;
    const row = rows.findIndex(r => r.every(([p, q]) => lx + w + 3 < p || lx > q + 3));
    if (row < 0) continue;
    rows[row].push([lx, lx + w]);
    groups.get(e).appendChild(svgEl("text", {x: lx.toFixed(1), y: m.t + 9 + 11 * row, fill: st.colour, class: "mlabel"}, label));
  }
  parts.push(marks);
  svg.replaceChildren(...parts);
  svg.dataset.points = String(points);
  svg.dataset.markers = String(marks.childElementCount);
  return points;
}

// One dimension's strip: segments coloured by their owner's λ/μ on that dimension, owner
// labels where there is room (at most `maxLabels`), subscription density (line) and recent
// message density (area) over it. Rect elements are reused between refreshes.
function drawStrip(svg, dim, segments, density, maxLabels) {
  const W = svg.clientWidth || 800, H = svg.clientHeight || 54;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  let layer = svg.querySelector("g.segs"), over = svg.querySelector("g.over"), labels = svg.querySelector("g.labels");
  if (!layer) {
    layer = svgEl("g", {class: "segs"});
    over = svgEl("g", {class: "over"});
    labels = svgEl("g", {class: "labels"});
    svg.append(layer, over, labels);
  }
  const span = dim.max - dim.min;
  const x = v => ((v - dim.min) / span) * W;
  while (layer.childElementCount < segments.length) {
    const g = svgEl("g", {class: "segment"});
    g.append(svgEl("rect", {y: 0, height: H}), svgEl("title"));
    layer.appendChild(g);
  }
  while (layer.childElementCount > segments.length) layer.lastChild.remove();
  segments.forEach((s, i) => {
    const g = layer.children[i];
    const r = g.firstChild;
    const x0 = x(s.lo), w = Math.max(0.5, x(s.hi) - x0);
    r.setAttribute("x", x0.toFixed(1));
    r.setAttribute("width", w.toFixed(1));
    r.setAttribute("fill", loadColour(s.load));
    g.dataset.owner = s.owner;
    g.lastChild.textContent = `${s.owner}: ${s.range ?? `[${fmt(s.lo)}, ${fmt(s.hi)})`} λ/μ ${s.load === null ? "–" : s.load.toFixed(3)}` +
      ` · λ ${fmt(s.lambda)}/s · μ ${fmt(s.mu)}/s · q ${s.q ?? "–"} · ${s.subs ?? "–"} subscriptions`;
  });
  // Owner labels: the hottest few (so a hot spot names its owner even when narrow), then the
  // widest where the text fits; at most maxLabels.
  const hottest = segments.map((s, i) => [s.load ?? -1, i]).filter(([l]) => l > 0)
    .sort((a, b) => b[0] - a[0]).slice(0, 3).map(([, i]) => i);
  const widest = segments.map((s, i) => [x(s.hi) - x(s.lo), i]).filter(([w]) => w >= 34)
    .sort((a, b) => b[0] - a[0]).map(([, i]) => i);
  const chosen = [...new Set([...hottest, ...widest])].slice(0, maxLabels);
  const texts = chosen.map(i => {
    const s = segments[i];
    const w = x(s.hi) - x(s.lo);
    const cls = w >= 34 ? "" : "hot";  // a narrow one gets a halo: it overlaps its neighbours
    return svgEl("text", {x: (x(s.lo) + w / 2).toFixed(1), y: H - 5, "text-anchor": "middle",
                          fill: cls ? "#000" : textOn(s.load), class: cls}, s.owner);
  });
  labels.replaceChildren(...texts);
  // Densities: messages as an area, subscriptions as a line, each scaled to its own maximum.
  const parts = [];
  if (density) {
    const n = density.bins || (density.messages || []).length;
    const bw = ((density.hi - density.lo) / n);
    const bx = j => x(density.lo + (j + 0.5) * bw);
    const top = H - 16;
    const mmax = Math.max(1e-9, ...(density.messages || [0]));
    if (density.messages && density.messages.length) {
      let d = `M${x(density.lo).toFixed(1)},${top}`;
      density.messages.forEach((v, j) => { d += `L${bx(j).toFixed(1)},${(top - (v / mmax) * (top - 4)).toFixed(1)}`; });
      d += `L${x(density.hi).toFixed(1)},${top}Z`;
      parts.push(svgEl("path", {d, class: "msg-density"}));
    }
    const subs = density.subscriptions || [];
    const smax = Math.max(1e-9, ...subs.filter(v => v !== null));
    let d = "", pen = false;
    subs.forEach((v, j) => {
      if (v === null) { pen = false; return; }
      d += (pen ? "L" : "M") + bx(j).toFixed(1) + "," + (top - (v / smax) * (top - 4)).toFixed(1);
      pen = true;
    });
    if (d) parts.push(svgEl("path", {d, class: "sub-halo"}), svgEl("path", {d, class: "sub-density"}));
    svg.dataset.peakMessages = fmt(mmax);
    svg.dataset.peakSubscriptions = fmt(smax);
  }
  over.replaceChildren(...parts);
  svg.dataset.segments = String(segments.length);
}

window.BDCharts = {drawChart, drawStrip, loadColour, textOn, eventStyle, fmt, clockOf, OI};
})();
