// The changeflow page: fetches the registered sections' JSON views and renders them.
// Generic sections are tables whose columns say how to show each value (human units);
// "schedules" has its own renderer with the state, statistics and actions.
"use strict";

const REFRESH_MS = 5000;
const state = { pipeline: null, sections: [], open: {}, busy: false, lastOk: null };

// ---- human units (the same rules as changeflow.cli.output) ----
function humanBytes(n) {
  if (n === null || n === undefined) return "-";
  let v = Number(n);
  for (const unit of ["B", "KiB", "MiB", "GiB", "TiB"]) {
    if (Math.abs(v) < 1024 || unit === "TiB") return unit === "B" ? `${Math.trunc(v)} B` : `${v.toFixed(1)} ${unit}`;
    v /= 1024;
  }
  return "-";
}
function humanDuration(s) {
  if (s === null || s === undefined || s === "") return "-";
  s = Number(s);
  if (s === 0) return "0 s";
  if (s < 10) return s >= 0.05 ? `${s.toFixed(1)} s` : `${Math.round(s * 1000)} ms`;
  if (s < 60) return `${Math.round(s)} s`;
  const r = Math.round(s);
  if (s < 3600) { const m = Math.floor(r / 60), x = r % 60; return x ? `${m} min ${x} s` : `${m} min`; }
  if (s < 86400) { const h = Math.floor(r / 3600), m = Math.floor((r % 3600) / 60); return m ? `${h} h ${m} min` : `${h} h`; }
  const d = Math.floor(r / 86400), h = Math.floor((r % 86400) / 3600);
  return h ? `${d} d ${h} h` : `${d} d`;
}
function relativeTime(t) {
  if (!t) return "-";
  const when = new Date(t);
  if (isNaN(when)) return String(t);
  const delta = (when - Date.now()) / 1000;
  if (Math.abs(delta) < 1) return "now";
  const words = humanDuration(Math.abs(Math.round(delta)));
  return delta > 0 ? `in ${words}` : `${words} ago`;
}
function humanCount(n) {
  if (n === null || n === undefined || n === "") return "-";
  const v = Number(n);
  return Number.isInteger(v) ? v.toLocaleString("en-US") : v.toLocaleString("en-US", { maximumFractionDigits: 2 });
}
const FORMAT = {
  text: (v) => (v === null || v === undefined || v === "" ? "-" : String(v)),
  count: humanCount, bytes: humanBytes, duration: humanDuration, time: relativeTime,
  bool: (v) => (v === null || v === undefined ? "-" : v ? "yes" : "no"),
  state: (v) => (v === null || v === undefined ? "-" : String(v)),
};
const NUMERIC = new Set(["count", "bytes", "duration"]);

// ---- DOM helpers ----
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}
function showError(text) {
  const box = document.getElementById("error");
  box.textContent = text || "";
  box.hidden = !text;
}
function flash(text) {
  const box = document.getElementById("flash");
  box.textContent = text;
  box.hidden = !text;
  clearTimeout(flash.timer);
  flash.timer = setTimeout(() => { box.hidden = true; }, 15000);
}
async function api(path, options = {}) {
  const resp = await fetch(path, { credentials: "same-origin", headers: { "Content-Type": "application/json" }, ...options });
  let body = null;
  try { body = await resp.json(); } catch (e) { body = null; }
  if (!resp.ok) {
    const detail = body && body.detail ? (typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail)) : resp.statusText;
    throw new Error(`${resp.status}: ${detail}`);
  }
  return body;
}
const q = () => `pipeline=${encodeURIComponent(state.pipeline || "")}`;

// ---- schedules ----
function stat(k, v, testid) {
  return el("div", { class: "stat" }, el("div", { class: "k" }, k), el("div", { class: "v", "data-testid": testid }, v));
}
async function act(name, action, body, button) {
  if (button) button.disabled = true;
  try {
    const out = await api(`api/schedules/${encodeURIComponent(name)}/${action}?${q()}`, { method: "POST", body: JSON.stringify(body || {}) });
    flash(out.message);
    showError("");
    state.open = {};
    await refresh();
  } catch (e) {
    showError(`${action} ${name} failed: ${e.message}`);
  } finally {
    if (button) button.disabled = false;
  }
}
function alterForm(r) {
  const dur = el("input", { type: "number", min: "1", step: "any", name: "duration", value: r.duration ?? "", placeholder: "infinite" });
  const nxt = el("input", { type: "number", min: "1", step: "any", name: "next_time", value: r.next_time ?? "", placeholder: "back to back" });
  const lat = el("input", { type: "number", min: "0", step: "any", name: "latency", value: r.latency ?? 3 });
  const inf = el("input", { type: "checkbox", name: "infinite", checked: r.duration === null });
  const save = el("button", { class: "btn", "data-action": "save-alter" }, "Save");
  save.addEventListener("click", () => act(r.propagation, "alter", {
    duration: inf.checked ? null : (dur.value === "" ? null : Number(dur.value)),
    infinite: inf.checked, next_time: nxt.value === "" ? null : Number(nxt.value),
    latency: Number(lat.value) }, save));
  return el("div", { class: "form", "data-testid": "alter-form" },
    el("label", {}, "window (s)", dur), el("label", {}, el("span", {}, "infinite"), inf),
    el("label", {}, "every (s)", nxt), el("label", {}, "latency (s)", lat), save);
}
function backfillForm(r) {
  const now = new Date();
  const iso = (d) => d.toISOString().slice(0, 16);
  const from = el("input", { type: "datetime-local", name: "from", value: iso(new Date(now - 3 * 3600e3)) });
  const to = el("input", { type: "datetime-local", name: "to", value: iso(new Date(now - 3600e3)) });
  const go = el("button", { class: "btn", "data-action": "run-backfill" }, "Backfill");
  go.addEventListener("click", () => act(r.propagation, "backfill", { from: from.value + "Z", to: to.value + "Z" }, go));
  return el("div", { class: "form", "data-testid": "backfill-form" },
    el("label", {}, "from (UTC)", from), el("label", {}, "to (UTC)", to), go,
    el("span", { class: "muted" }, "one run per window starting in the range; failed windows run again"));
}
function scheduleCard(r) {
  const name = r.propagation;
  const off = r.disabled || r.dag_paused;
  const toggle = off
    ? el("button", { class: "btn", "data-action": "enable" }, "Enable")
    : el("button", { class: "btn danger", "data-action": "disable" }, "Disable");
  toggle.addEventListener("click", () => act(name, off ? "enable" : "disable", {}, toggle));
  const trig = el("button", { class: "btn ghost", "data-action": "trigger" }, "Trigger now");
  trig.addEventListener("click", () => act(name, "trigger", {}, trig));
  const formBtn = (key, label) => {
    const b = el("button", { class: "btn ghost", "data-action": key }, label);
    b.addEventListener("click", () => { state.open[name] = state.open[name] === key ? null : key; render(); });
    return b;
  };
  const dagLink = r.dag_id ? el("a", { href: `/dags/${encodeURIComponent(r.dag_id)}`, target: "_top" }, r.dag_id) : "-";
  let dag = "-";
  if (r.dag_error) dag = `unknown (${r.dag_error})`;
  else if (r.dag_known === false) dag = "not parsed yet";
  else if (r.dag_known) dag = `${r.dag_paused ? "paused" : "active"}, ${r.runs_in_flight} run(s) in flight`;
  const lines = [];
  if (r.state === "auto-disabled") lines.push(el("div", { class: "alertline", "data-testid": "reason" }, `Disabled automatically after ${r.failures} consecutive failures. Fix the cause, then enable. Last error: ${r.last_error_msg || "-"}`));
  else if (r.state === "paused") lines.push(el("div", { class: "note", "data-testid": "reason" }, "The schedule is enabled but its DAG is paused in Airflow: no window runs. Enable unpauses it."));
  else if (r.state === "disabled") lines.push(el("div", { class: "note", "data-testid": "reason" }, `Disabled (${r.disabled_reason || "user"}): no new windows.`));
  if (r.failures && r.state !== "auto-disabled") lines.push(el("div", { class: "alertline", "data-testid": "failing" }, `${r.failures} consecutive failure(s); next retry ${relativeTime(r.next_retry)}. Last error ${relativeTime(r.last_error_time)}: ${r.last_error_msg}`));
  if (r.stale_process_cleared) lines.push(el("div", { class: "note" }, `A stale process entry (${r.stale_process_cleared}) was cleared: that window job is gone.`));
  if (r.disabled && r.dag_paused === false && r.runs_in_flight) lines.push(el("div", { class: "note" }, "The DAG is paused as soon as its runs in flight end."));
  const open = state.open[name];
  return el("div", { class: "sched", "data-testid": `schedule-${name}` },
    el("div", { class: "sched-head" },
      el("span", { class: "sched-name" }, name),
      el("span", { class: `badge ${r.state}`, "data-testid": "state" }, r.state),
      el("span", { class: "muted", "data-testid": "summary" }, r.summary),
      el("span", { class: "route" }, `${r.source_queue} → ${r.destination_queue}`)),
    lines,
    el("div", { class: "stats" },
      stat("messages propagated", humanCount(r.total_number), "total_number"),
      stat("bytes propagated", humanBytes(r.total_bytes), "total_bytes"),
      stat("time propagating", humanDuration(r.total_time), "total_time"),
      stat("windows", humanCount(r.windows), "windows"),
      stat("avg time per message", humanDuration(r.avg_time), "avg_time"),
      stat("avg messages per window", humanCount(r.avg_number), "avg_number"),
      stat("avg message size", humanBytes(r.avg_size), "avg_size"),
      stat("max per window", `${humanCount(r.max_number)} msgs, ${humanBytes(r.max_bytes)}`, "max"),
      stat("last run", relativeTime(r.last_run), "last_run"),
      stat("next window", r.disabled ? "-" : relativeTime(r.next_run), "next_run"),
      stat("failures", humanCount(r.failures), "failures"),
      stat("process", r.process || "-", "process"),
      stat("DAG", dag, "dag"),
      stat("DAG id", dagLink, "dag_id")),
    el("div", { class: "actions" }, toggle, trig, formBtn("alter", "Alter window…"), formBtn("backfill", "Backfill…")),
    open === "alter" ? alterForm(r) : null,
    open === "backfill" ? backfillForm(r) : null);
}
function renderSchedules(rows) {
  if (!rows.length) return el("p", { class: "empty" }, "This pipeline has no propagation.");
  return el("div", {}, rows.map(scheduleCard));
}

// ---- generic table ----
async function rowAction(section, a, row, button) {
  if (a.danger && !window.confirm(`${a.label}: ${a.keys.map((k) => `${k} ${row[k]}`).join(", ")}?`)) return;
  button.disabled = true;
  try {
    const body = Object.fromEntries(a.keys.map((k) => [k, row[k]]));
    const out = await api(`api/views/${encodeURIComponent(section.id)}/${encodeURIComponent(a.name)}?${q()}`, { method: "POST", body: JSON.stringify(body) });
    flash(out.message);
    showError("");
    await refresh();
  } catch (e) {
    showError(`${a.label} failed: ${e.message}`);
  } finally {
    button.disabled = false;
  }
}
function actionCell(section, row) {
  const shown = (section.actions || []).filter((a) => Object.entries(a.when || {}).every(([k, v]) => row[k] === v));
  return el("td", { class: "rowactions" }, shown.map((a) => {
    const b = el("button", { class: a.danger ? "btn danger" : "btn ghost", "data-action": a.name }, a.label);
    b.addEventListener("click", () => rowAction(section, a, row, b));
    return b;
  }));
}
function renderTable(rows, columns, section) {
  if (!Array.isArray(rows)) rows = rows ? [rows] : [];
  if (!rows.length) return el("p", { class: "empty" }, "(none)");
  const cols = columns.length ? columns : Object.keys(rows[0]).map((k) => ({ key: k, kind: "text", header: k }));
  const acts = section && (section.actions || []).length;
  return el("div", { class: "tablewrap" }, el("table", {},
    el("thead", {}, el("tr", {}, cols.map((c) => el("th", {}, c.header)), acts ? el("th", {}, "") : null)),
    el("tbody", {}, rows.map((r) => el("tr", {}, cols.map((c) => {
      const text = (FORMAT[c.kind] || FORMAT.text)(r[c.key]);
      if (c.kind === "state") return el("td", {}, el("span", { class: `badge ${text}` }, text));
      return el("td", { class: NUMERIC.has(c.kind) ? "num" : null }, text);
    }), acts ? actionCell(section, r) : null)))));
}
const RENDERERS = { schedules: (rows) => renderSchedules(rows), table: renderTable };

// ---- page ----
function render() {
  const main = document.getElementById("sections");
  main.replaceChildren(...state.sections.map((s) => {
    const body = s.error ? el("div", { class: "alertline" }, s.error)
      : (RENDERERS[s.renderer] || renderTable)(s.rows || [], s.columns || [], s);
    return el("section", { class: "card", "data-testid": `section-${s.id}` },
      el("div", { class: "section-head" }, el("h2", {}, s.title), s.description ? el("div", { class: "muted" }, s.description) : null),
      body);
  }));
}
async function refresh() {
  if (state.busy) return;
  state.busy = true;
  try {
    const sections = await api("api/sections");
    const errors = [];
    await Promise.all(sections.map(async (s) => {
      try { s.rows = (await api(`api/views/${s.id}?${q()}`)).rows; } catch (e) { s.error = e.message; errors.push(`${s.title}: ${e.message}`); }
    }));
    state.sections = sections;
    render();
    showError(errors.join("\n"));
    state.lastOk = Date.now();
  } catch (e) {
    showError(`cannot load the page's data: ${e.message}`);
  } finally {
    state.busy = false;
  }
}
async function start() {
  try {
    const pipes = await api("api/pipelines");
    const select = document.getElementById("pipeline");
    const wanted = new URLSearchParams(location.search).get("pipeline");
    select.replaceChildren(...pipes.map((p) => el("option", { value: p.name, title: p.config }, p.name)));
    state.pipeline = pipes.some((p) => p.name === wanted) ? wanted : (pipes[0] || {}).name;
    select.value = state.pipeline || "";
    select.addEventListener("change", () => { state.pipeline = select.value; state.open = {}; refresh(); });
    if (!pipes.length) { showError("no pipeline configured: set CHANGEFLOW_PIPELINES or CHANGEFLOW_CONFIG in the API server's environment"); return; }
  } catch (e) {
    showError(`cannot list pipelines: ${e.message}`);
    return;
  }
  document.getElementById("refresh").addEventListener("click", refresh);
  await refresh();
  setInterval(() => { if (!Object.values(state.open).some(Boolean)) refresh(); }, REFRESH_MS);
  setInterval(() => {
    document.getElementById("updated").textContent = state.lastOk ? `updated ${relativeTime(new Date(state.lastOk).toISOString())}` : "";
  }, 1000);
}
start();
