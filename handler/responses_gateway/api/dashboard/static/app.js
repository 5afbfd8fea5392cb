// The admin dashboard: reads the admin routes with the admin key kept in sessionStorage.
// Every value is written with textContent (never as HTML); charts are inline SVG.
"use strict";

const API = location.pathname.replace(/dashboard\/?$/, "") + "v1";
const KEY = "gateway-admin-key";
const COLORS = ["#2f6fdd", "#e07b39", "#3b9e5c", "#a347ba", "#c23b4e", "#2aa5a0", "#8a6d3b",
  "#5b5fc7"];
const state = { after: null };

const $ = (selector) => document.querySelector(selector);

function el(tag, text, attrs) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
  return node;
}

function status(text, error) {
  const node = $("#status");
  node.textContent = text || "";
  node.className = error ? "error" : "";
}

async function api(path, params) {
  const key = sessionStorage.getItem(KEY);
  if (!key) throw new Error("Enter an admin key (GATEWAY_ADMIN_KEYS) to read the gateway.");
  const url = new URL(API + path, location.href);
  for (const [name, value] of Object.entries(params || {})) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(name, value);
  }
  const answer = await fetch(url, { headers: { Authorization: "Bearer " + key } });
  const body = await answer.json().catch(() => ({}));
  if (!answer.ok) {
    const message = (body.error && body.error.message) || answer.statusText;
    throw new Error(answer.status + ": " + message);
  }
  return body;
}

function when(epoch) {
  return epoch ? new Date(epoch * 1000).toISOString().replace("T", " ").slice(0, 19) : "";
}

function epochOf(value) {
  return value ? Math.floor(new Date(value + "Z").getTime() / 1000) : "";
}

function guarded(fn) {
  return async (...args) => {
    try {
      status("");
      await fn(...args);
    } catch (error) {
      status(error.message, true);
    }
  };
}

// -- responses --------------------------------------------------------------------------

async function loadResponses(more) {
  const form = new FormData($("#response-filters"));
  const params = {
    model: form.get("model"), status: form.get("status"), api_key_id: form.get("api_key_id"),
    start_time: epochOf(form.get("start")), end_time: epochOf(form.get("end")), limit: 50,
    after: more ? state.after : null,
  };
  const page = await api("/admin/responses", params);
  const body = $("#response-list tbody");
  if (!more) body.replaceChildren();
  for (const row of page.data) {
    const tr = el("tr", null, { class: "row", "data-id": row.id });
    const tools = Object.entries(row.tool_calls || {}).map(([k, n]) => k + "×" + n).join(" ");
    for (const cell of [when(row.created_at), row.id, row.api_key_id, row.model, row.status]) {
      tr.append(el("td", cell));
    }
    tr.append(el("td", row.usage.input_tokens, { class: "num" }));
    tr.append(el("td", row.usage.output_tokens, { class: "num" }));
    tr.append(el("td", tools));
    tr.addEventListener("click", guarded(() => openResponse(row.id)));
    body.append(tr);
  }
  state.after = page.after;
  $("#more-responses").hidden = !page.has_more;
  if (!page.data.length && !more) status("No responses in this range.");
}

function itemNode(item) {
  const box = el("div", null, { class: "item" });
  const label = [item.type, item.role, item.name, item.status].filter(Boolean).join(" · ");
  box.append(el("div", label, { class: "kind" }));
  const texts = [];
  for (const part of item.content || []) {
    if (part.text) texts.push(part.text);
    else if (part.refusal) texts.push("refusal: " + part.refusal);
  }
  for (const part of item.summary || []) if (part.text) texts.push(part.text);
  if (item.arguments) texts.push(item.arguments);
  if (item.output !== undefined) texts.push(typeof item.output === "string" ? item.output
    : JSON.stringify(item.output, null, 2));
  if (!texts.length) texts.push(JSON.stringify(item, null, 2));
  for (const text of texts) box.append(el("pre", text));
  return box;
}

function timeline(detail) {
  if (detail.events.length) {
    return detail.events.map((e) => "#" + e.sequence_number + " " + e.type
      + (e.item && e.item.type ? " (" + e.item.type + ")" : "")
      + (e.delta ? " " + JSON.stringify(e.delta).slice(0, 60) : ""));
  }
  // A foreground response keeps no event log: its milestones, from the Response itself.
  const response = detail.response || {};
  const lines = ["response.created at " + when(response.created_at || detail.summary.created_at)];
  (response.output || []).forEach((item, i) => lines.push(
    "response.output_item.done #" + i + " (" + item.type + ")"));
  lines.push("response." + detail.summary.status
    + (response.completed_at ? " at " + when(response.completed_at) : ""));
  return lines;
}

async function openResponse(id) {
  const detail = await api("/admin/responses/" + encodeURIComponent(id));
  const s = detail.summary;
  $("#detail-title").textContent = id;
  const summary = $("#detail-summary");
  summary.replaceChildren();
  const usage = s.usage || {};
  for (const [name, value] of [["created", when(s.created_at)], ["key", s.api_key_id],
    ["model", s.model], ["status", s.status], ["stored", s.stored ? "yes" : "no"],
    ["input tokens", usage.input_tokens], ["cached tokens", usage.cached_tokens],
    ["output tokens", usage.output_tokens], ["reasoning tokens", usage.reasoning_tokens]]) {
    summary.append(el("dt", name), el("dd", value));
  }
  $("#detail-input").replaceChildren(...(detail.input_items.length
    ? detail.input_items.map(itemNode) : [el("p", s.stored ? "none" : "not stored")]));
  const output = (detail.response && detail.response.output) || [];
  $("#detail-output").replaceChildren(...(output.length ? output.map(itemNode)
    : [el("p", s.stored ? "none" : "not stored")]));
  $("#detail-events").replaceChildren(...timeline(detail).map((line) => el("li", line)));
  $("#response-detail").hidden = false;
}

// -- conversations ----------------------------------------------------------------------

async function loadConversations() {
  const page = await api("/admin/conversations", { limit: 100 });
  const body = $("#conversation-list tbody");
  body.replaceChildren();
  for (const row of page.data) {
    const tr = el("tr", null, { class: "row" });
    tr.append(el("td", when(row.created_at)), el("td", row.id), el("td", row.api_key_id),
      el("td", JSON.stringify(row.metadata)));
    tr.addEventListener("click", guarded(() => openConversation(row.id)));
    body.append(tr);
  }
  if (!page.data.length) status("No conversations.");
}

async function openConversation(id) {
  const page = await api("/admin/conversations/" + encodeURIComponent(id) + "/items");
  $("#conversation-title").textContent = id;
  $("#conversation-items").replaceChildren(...page.data.map(itemNode));
  $("#conversation-detail").hidden = false;
}

// -- usage ------------------------------------------------------------------------------

const SVG = "http://www.w3.org/2000/svg";

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

function measureOf(result, measure) {
  if (measure === "tokens") return result.input_tokens + result.output_tokens;
  if (measure === "cost") return (result.cost && result.cost.value) || 0;
  return result[measure] || 0;
}

function usd(value) {
  return "$" + (value >= 1 ? value.toFixed(2) : value.toPrecision(3).replace(/\.?0+$/, ""));
}

async function loadUsage() {
  const form = new FormData($("#usage-filters"));
  const days = Math.max(1, Math.min(31, Number(form.get("days")) || 7));
  const width = form.get("width");
  const group = form.get("group");
  const measure = form.get("measure");
  const now = Math.floor(Date.now() / 1000);
  const step = width === "1h" ? 3600 : 86400;
  const count = width === "1h" ? Math.min(168, days * 24) : days;
  const start = now - (now % step) - (count - 1) * step;
  const page = await api("/organization/usage/completions", {
    start_time: start, bucket_width: width, group_by: group, limit: count,
  });
  drawChart(page.data, group, measure, width);
  usageTable(page.data, group);
}

function drawChart(buckets, group, measure, width) {
  const chart = $("#usage-chart");
  chart.replaceChildren();
  const W = 900, H = 320, left = 60, bottom = 40, top = 10;
  const names = [...new Set(buckets.flatMap((b) => b.results.map((r) => r[group] || "all")))];
  const totals = buckets.map((b) => b.results.reduce((sum, r) => sum + measureOf(r, measure), 0));
  const max = Math.max(1, ...totals);
  const slot = (W - left - 10) / Math.max(1, buckets.length);
  const scale = (H - bottom - top) / max;
  chart.append(svg("line", { x1: left, y1: H - bottom, x2: W - 10, y2: H - bottom,
    stroke: "#999" }));
  for (const tick of [0, 0.5, 1]) {
    const y = H - bottom - tick * max * scale;
    chart.append(svg("text", { x: left - 6, y: y + 4, "text-anchor": "end" },
      measure === "cost" ? usd(tick * max) : String(Math.round(tick * max))));
  }
  buckets.forEach((bucket, i) => {
    let y = H - bottom;
    for (const result of bucket.results) {
      const value = measureOf(result, measure);
      if (!value) continue;
      const h = value * scale;
      y -= h;
      const color = COLORS[names.indexOf(result[group] || "all") % COLORS.length];
      const bar = svg("rect", { x: left + i * slot + 2, y, width: Math.max(1, slot - 4),
        height: h, fill: color, class: "bar" });
      bar.append(svg("title", {}, (result[group] || "all") + ": "
        + (measure === "cost" ? usd(value) : value)));
      chart.append(bar);
    }
    if (buckets.length <= 31 || i % Math.ceil(buckets.length / 31) === 0) {
      const label = when(bucket.start_time).slice(width === "1h" ? 11 : 5, width === "1h" ? 16 : 10);
      chart.append(svg("text", { x: left + i * slot + slot / 2, y: H - bottom + 14,
        "text-anchor": "middle" }, label));
    }
  });
  const legend = $("#usage-legend");
  legend.replaceChildren(...names.map((name, i) => {
    const swatch = el("i");
    swatch.style.background = COLORS[i % COLORS.length];  // CSSOM: allowed by the CSP
    const span = el("span");
    span.append(swatch, document.createTextNode(name));
    return span;
  }));
}

function usageTable(buckets, group) {
  const sums = new Map();
  for (const bucket of buckets) {
    for (const r of bucket.results) {
      const name = r[group] || "all";
      const s = sums.get(name) || { requests: 0, input: 0, cached: 0, output: 0, reasoning: 0,
        tools: 0, images: 0, cost: 0 };
      s.requests += r.num_model_requests; s.input += r.input_tokens;
      s.cached += r.input_cached_tokens; s.output += r.output_tokens;
      s.reasoning += r.output_reasoning_tokens || 0; s.images += r.image_generations || 0;
      s.cost += (r.cost && r.cost.value) || 0;
      s.tools += Object.values(r.tool_calls || {}).reduce((a, b) => a + b, 0);
      sums.set(name, s);
    }
  }
  const body = $("#usage-table tbody");
  body.replaceChildren();
  for (const [name, s] of sums) {
    const tr = el("tr");
    tr.append(el("td", name));
    for (const v of [s.requests, s.input, s.cached, s.output, s.reasoning, s.tools, s.images]) {
      tr.append(el("td", v, { class: "num" }));
    }
    tr.append(el("td", usd(s.cost), { class: "num cost" }));
    body.append(tr);
  }
}

// -- limits -----------------------------------------------------------------------------

async function loadLimits() {
  const limits = await api("/admin/limits");
  const dl = $("#limits-default");
  dl.replaceChildren();
  for (const [name, value] of Object.entries(limits.default)) {
    dl.append(el("dt", name.replaceAll("_", " ")), el("dd", value || "none"));
  }
  const body = $("#limits-keys tbody");
  body.replaceChildren();
  for (const key of limits.keys) {
    const tr = el("tr");
    const w = key.window;
    tr.append(el("td", key.api_key_id), el("td", key.configured ? "yes" : "default"),
      el("td", key.limits.requests_per_minute || "none"),
      el("td", key.limits.tokens_per_minute || "none"),
      el("td", key.limits.tokens_per_period
        ? key.limits.tokens_per_period + " / " + key.limits.period : "none"),
      el("td", w ? w.requests + " requests, " + w.tokens + " tokens, " + w.period_tokens
        + " this period" : ""));
    body.append(tr);
  }
}

// -- wiring -----------------------------------------------------------------------------

const LOADERS = { responses: () => loadResponses(false), conversations: loadConversations,
  usage: loadUsage, limits: loadLimits };

function show(tab) {
  for (const button of document.querySelectorAll("#tabs button")) {
    button.classList.toggle("active", button.dataset.tab === tab);
  }
  for (const section of document.querySelectorAll("section.tab")) {
    section.hidden = section.id !== tab;
  }
  return guarded(LOADERS[tab])();
}

document.addEventListener("DOMContentLoaded", () => {
  for (const button of document.querySelectorAll("#tabs button")) {
    button.addEventListener("click", () => show(button.dataset.tab));
  }
  $("#login").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(KEY, $("#key").value.trim());
    $("#key").value = "";
    show(document.querySelector("#tabs button.active").dataset.tab);
  });
  $("#logout").addEventListener("click", () => {
    sessionStorage.removeItem(KEY);
    status("Key forgotten.");
  });
  $("#response-filters").addEventListener("submit", (event) => {
    event.preventDefault();
    guarded(loadResponses)(false);
  });
  $("#more-responses").addEventListener("click", guarded(() => loadResponses(true)));
  $("#usage-filters").addEventListener("submit", (event) => {
    event.preventDefault();
    guarded(loadUsage)();
  });
  show("responses");
});
