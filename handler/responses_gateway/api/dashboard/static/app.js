// The admin dashboard: reads the admin routes with the admin key kept in sessionStorage.
// Every value is written with textContent (never as HTML); charts are inline SVG.
"use strict";

const API = location.pathname.replace(/dashboard\/?$/, "") + "v1";
const KEY = "gateway-admin-key";
const COLORS = ["#2f6fdd", "#e07b39", "#3b9e5c", "#a347ba", "#c23b4e", "#2aa5a0", "#8a6d3b",
  "#5b5fc7"];
const FOLD_CHARS = 600;  // text longer than this (or FOLD_LINES lines) is folded
const FOLD_LINES = 12;
const ROUTE = /^#\/responses\/([A-Za-z0-9_-]+)$/;  // a response's own view: #/responses/<id>
// ``generation`` counts "Forget key"s: an answer that arrives after one is dropped.
const state = { after: null, generation: 0 };

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
  const generation = state.generation;
  const url = new URL(API + path, location.href);
  for (const [name, value] of Object.entries(params || {})) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(name, value);
  }
  const answer = await fetch(url, { headers: { Authorization: "Bearer " + key },
    cache: "no-store" });
  const body = await answer.json().catch(() => ({}));
  if (generation !== state.generation) throw new Error("Key forgotten.");
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

function ms(value) {
  if (value === null || value === undefined) return "";
  return value < 1000 ? Math.round(value) + " ms" : (value / 1000).toFixed(2) + " s";
}

// A key as the page shows it: its name (GATEWAY_API_KEYS' JSON form) and its tenant id.
function keyLabel(row) {
  return row.api_key_name ? row.api_key_name + " (" + row.api_key_id + ")" : row.api_key_id;
}

function keyCell(row) {
  const td = el("td");
  if (row.api_key_name) td.append(el("strong", row.api_key_name), el("br"));
  td.append(el("small", row.api_key_id));
  return td;
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
    const tr = el("tr", null, { class: "row status-" + row.status, "data-id": row.id });
    const tools = Object.entries(row.tool_calls || {}).map(([k, n]) => k + "×" + n).join(" ");
    tr.append(el("td", when(row.created_at)), el("td", row.id), keyCell(row), el("td", row.model));
    tr.append(el("td", statusText(row, " · ")));
    tr.append(el("td", ms(row.timing && row.timing.duration_ms), { class: "num" }));
    tr.append(el("td", row.usage.input_tokens, { class: "num" }));
    tr.append(el("td", row.usage.output_tokens, { class: "num" }));
    tr.append(el("td", tools));
    tr.addEventListener("click", () => { location.hash = "#/responses/" + row.id; });
    body.append(tr);
  }
  state.after = page.after;
  $("#more-responses").hidden = !page.has_more;
  if (!page.data.length && !more) status("No responses in this range.");
}

// A status and, when it says more, the code of why it did not complete.
function statusText(row, between) {
  const code = row.error && row.error.code;
  if (!code || code === row.status) return row.status;
  return between === " · " ? row.status + " · " + code : row.status + " (" + code + ")";
}

// Text shown as it is when short; folded (its first line shown, the rest on a click) when long.
function textNode(text) {
  if (text.length <= FOLD_CHARS && text.split("\n").length <= FOLD_LINES) return el("pre", text);
  const box = el("details", null, { class: "fold" });
  box.append(el("summary", text.slice(0, 140).replace(/\s+/g, " ") + "… ("
    + text.length.toLocaleString() + " characters)"), el("pre", text));
  return box;
}

const IMAGE_TYPES = { iVBOR: "png", "/9j/": "jpeg", UklGR: "webp", R0lGO: "gif" };

function imageSource(base64, format) {
  const sniffed = Object.entries(IMAGE_TYPES).find(([head]) => base64.startsWith(head));
  return "data:image/" + (sniffed ? sniffed[1] : format || "png") + ";base64," + base64;
}

// An image: a thumbnail that opens full size (the lightbox) on a click.
function imageNode(source, label) {
  const img = el("img", null, { class: "thumb", src: source, alt: label || "image",
    title: "open full size" });
  img.addEventListener("click", () => {
    $("#lightbox-image").src = source;
    $("#lightbox").hidden = false;
  });
  return img;
}

// Long base64 strings out of any JSON the page prints (an image's, a file's).
function withoutBlobs(key, value) {
  if (typeof value === "string" && value.length > 256 && /^[A-Za-z0-9+/=\s]+$/.test(value)) {
    return "[base64, " + value.length.toLocaleString() + " characters]";
  }
  if (typeof value === "string" && value.startsWith("data:") && value.length > 256) {
    return value.slice(0, value.indexOf(",") + 1) + "[" + value.length.toLocaleString()
      + " characters]";
  }
  return value;
}

function itemNode(item) {
  const box = el("div", null, { class: "item" });
  const label = [item.type, item.role, item.server_label, item.name, item.status]
    .filter(Boolean).join(" · ");
  box.append(el("div", label, { class: "kind" }));
  const nodes = [];
  for (const part of typeof item.content === "string" ? [{ text: item.content }]
    : item.content || []) {
    if (part.text) nodes.push(textNode(part.text));
    else if (part.refusal) nodes.push(textNode("refusal: " + part.refusal));
    else if (part.type === "input_image" && typeof part.image_url === "string"
      && part.image_url.startsWith("data:image/")) nodes.push(imageNode(part.image_url, "input image"));
    else if (part.type === "input_image") nodes.push(el("pre", "image: "
      + (part.image_url || part.file_id || "")));
    else nodes.push(textNode(JSON.stringify(part, withoutBlobs, 2)));
  }
  for (const part of item.summary || []) if (part.text) nodes.push(textNode(part.text));
  if (item.type === "image_generation_call" && item.result) {
    nodes.push(imageNode(imageSource(item.result, item.output_format), "generated image"));
    if (item.revised_prompt) nodes.push(textNode(item.revised_prompt));
  }
  if (item.action) nodes.push(textNode(JSON.stringify(item.action, withoutBlobs, 2)));
  if (item.arguments) nodes.push(textNode(item.arguments));
  if (item.code) nodes.push(textNode(item.code));
  if (item.output !== undefined && item.output !== null) {
    nodes.push(textNode(typeof item.output === "string" ? item.output
      : JSON.stringify(item.output, withoutBlobs, 2)));
  }
  if (item.error) {
    nodes.push(el("pre", "error: " + (typeof item.error === "string" ? item.error
      : JSON.stringify(item.error)), { class: "failed" }));
  }
  if (!nodes.length) nodes.push(textNode(JSON.stringify(item, withoutBlobs, 2)));
  box.append(...nodes);
  return box;
}

function eventLines(detail) {
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

// Each model turn and tool call: its start and duration after the response began, a bar to
// scale, failures marked.
function stepsNode(timing) {
  const steps = (timing && timing.steps) || [];
  if (!steps.length) return el("p", timing ? "no step recorded" : "not recorded (an older row)");
  const total = Math.max(1, timing.duration_ms || 0,
    ...steps.map((s) => s.start_ms + (s.duration_ms || 0)));
  const list = el("ol", null, { class: "steps" });
  for (const step of steps) {
    const li = el("li", null, { class: "step" + (step.error ? " failed" : "") });
    const name = step.type === "model" ? "model turn · " + step.name
      : step.type === step.name ? step.type : step.type + " · " + step.name;
    li.append(el("span", name, { class: "step-name" }),
      el("span", "+" + ms(step.start_ms), { class: "step-start" }),
      el("span", ms(step.duration_ms), { class: "step-duration" }),
      el("span", !step.error ? "ok" : step.error === "cancelled" ? "cancelled"
        : "failed: " + step.error, { class: "step-outcome" }));
    const track = el("span", null, { class: "track" });
    const bar = el("span", null, { class: "bar" });
    bar.style.marginLeft = (100 * step.start_ms / total).toFixed(2) + "%";  // CSSOM: CSP-safe
    bar.style.width = Math.max(0.5, 100 * (step.duration_ms || 0) / total).toFixed(2) + "%";
    track.append(bar);
    li.append(track);
    list.append(li);
  }
  return list;
}

async function openResponse(id) {
  const detail = await api("/admin/responses/" + encodeURIComponent(id));
  const s = detail.summary;
  const response = detail.response || {};
  const timing = s.timing || null;
  $("#detail-title").textContent = id;
  $("#detail-link").href = "#/responses/" + id;
  const error = $("#detail-error");
  error.replaceChildren();
  error.hidden = !s.error;
  if (s.error) {
    error.append(el("strong", statusText(s, " ")), el("p", s.error.message));
  }
  const summary = $("#detail-summary");
  summary.replaceChildren();
  const usage = s.usage || {};
  const rows = [["status", statusText(s, " ")],
    ["created", when(s.created_at)], ["key", keyLabel(s)], ["model", s.model],
    ["duration", timing ? ms(timing.duration_ms) : "not recorded"],
    ["time to first output", timing ? ms(timing.first_output_ms) || "no output" : ""]];
  if (timing && s.background) {
    rows.push(["waited for its worker", ms(Math.max(0, timing.started_at - s.created_at) * 1000)]);
  }
  rows.push(["stored", s.stored ? "yes" : "no"], ["background", s.background ? "yes" : "no"],
    ["input tokens", usage.input_tokens], ["cached tokens", usage.cached_tokens],
    ["output tokens", usage.output_tokens], ["reasoning tokens", usage.reasoning_tokens]);
  for (const [name, value] of rows) summary.append(el("dt", name), el("dd", value));
  $("#detail-steps").replaceChildren(stepsNode(timing));
  $("#detail-input").replaceChildren(...(detail.input_items.length
    ? detail.input_items.map(itemNode) : [el("p", s.stored ? "none" : "not stored")]));
  const output = response.output || [];
  $("#detail-output").replaceChildren(...(output.length ? output.map(itemNode)
    : [el("p", s.stored ? "none" : "not stored")]));
  const lines = eventLines(detail);
  $("#detail-events-title").textContent = detail.events.length
    ? "Event log (" + lines.length + " events)" : "Milestones";
  $("#detail-events").replaceChildren(...lines.map((line) => el("li", line)));
  $("#response-detail").hidden = false;
  $("#response-detail").scrollIntoView({ block: "start" });
}

function closeResponse() {
  $("#response-detail").hidden = true;
  if (ROUTE.test(location.hash)) history.replaceState(null, "", location.pathname + location.search);
}

// The URL says which response is open: #/responses/<id> (shareable; back and forward work).
function route() {
  const match = ROUTE.exec(location.hash);
  if (!match) {
    $("#response-detail").hidden = true;
    return;
  }
  if ($("#responses").hidden) show("responses");
  guarded(openResponse)(match[1]);
}

// -- conversations ----------------------------------------------------------------------

async function loadConversations() {
  const page = await api("/admin/conversations", { limit: 100 });
  const body = $("#conversation-list tbody");
  body.replaceChildren();
  for (const row of page.data) {
    const tr = el("tr", null, { class: "row" });
    tr.append(el("td", when(row.created_at)), el("td", row.id), keyCell(row),
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

// A result's group as shown: its model, or its key's name and tenant id.
function groupOf(result, group) {
  if (group === "api_key_id" && result.api_key_id) return keyLabel(result);
  return result[group] || "all";
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
  const names = [...new Set(buckets.flatMap((b) => b.results.map((r) => groupOf(r, group))))];
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
      const color = COLORS[names.indexOf(groupOf(result, group)) % COLORS.length];
      const bar = svg("rect", { x: left + i * slot + 2, y, width: Math.max(1, slot - 4),
        height: h, fill: color, class: "bar" });
      bar.append(svg("title", {}, groupOf(result, group) + ": "
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
      const name = groupOf(r, group);
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
    tr.append(keyCell(key), el("td", key.configured ? "yes" : "default"),
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

// "Forget key": the key, and everything read with it, leave the page (rows, details, the
// chart, the limits, the open response's URL); answers still on their way are dropped.
function forget() {
  sessionStorage.removeItem(KEY);
  state.generation += 1;
  state.after = null;
  for (const body of document.querySelectorAll("tbody")) body.replaceChildren();
  for (const article of document.querySelectorAll("article")) article.hidden = true;
  for (const id of ["#detail-title", "#detail-error", "#detail-summary", "#detail-steps",
    "#detail-input", "#detail-output", "#detail-events", "#conversation-title",
    "#conversation-items", "#usage-chart", "#usage-legend", "#limits-default"]) {
    $(id).replaceChildren();
  }
  $("#more-responses").hidden = true;
  $("#lightbox").hidden = true;
  $("#lightbox-image").removeAttribute("src");
  if (location.hash) history.replaceState(null, "", location.pathname + location.search);
  status("Key forgotten: nothing is shown until an admin key is entered again.");
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
    if (ROUTE.test(location.hash)) route();
  });
  $("#logout").addEventListener("click", forget);
  $("#response-filters").addEventListener("submit", (event) => {
    event.preventDefault();
    guarded(loadResponses)(false);
  });
  $("#more-responses").addEventListener("click", guarded(() => loadResponses(true)));
  $("#usage-filters").addEventListener("submit", (event) => {
    event.preventDefault();
    guarded(loadUsage)();
  });
  $("#detail-close").addEventListener("click", closeResponse);
  $("#lightbox").addEventListener("click", () => { $("#lightbox").hidden = true; });
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape") $("#lightbox").hidden = true;
  });
  window.addEventListener("hashchange", route);
  show("responses");
  if (ROUTE.test(location.hash)) route();
});
