/**
 * The dashboard's one HTML page: inline CSS and JavaScript, nothing loaded from elsewhere (the machines that run
 * it often have no internet, and a page that works offline cannot leak a request either).
 *
 * The script polls `/api/status` and `/api/moves` and redraws. It renders what it finds rather than a fixed list
 * of fields: the servers table gets a column for every field the status JSON carries (connections, replicas and
 * their lag, … as `cluster status` grows), the shard tooltip lists every field of the shard. Text always goes in
 * through `textContent`, never as HTML, so a server name or an error message cannot inject markup.
 *
 * The shard map is one canvas, one cell per logical shard coloured by its server, so 8192 shards stay a compact
 * picture (and cheap to redraw every second); a moving shard is drawn half in its source's colour and half in its
 * target's, with a dark border.
 */
export function dashboardPage(options: { refreshMs: number }): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>shardflake dashboard</title>
<style>
  :root { --fg: #1d2330; --muted: #6b7385; --line: #e3e6ec; --bg: #f7f8fa; --warn: #a15c00; --bad: #b3261e; }
  * { box-sizing: border-box; }
  body { margin: 0; font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); background: var(--bg); }
  header { display: flex; gap: 16px; align-items: baseline; padding: 12px 20px; background: #fff; border-bottom: 1px solid var(--line); }
  header h1 { font-size: 18px; margin: 0; }
  #summary { color: var(--muted); }
  #live { margin-left: auto; font-size: 12px; color: var(--muted); }
  #live.ok::before { content: "● "; color: #1e8e3e; }
  #live.stale::before { content: "● "; color: var(--bad); }
  main { padding: 16px 20px; display: grid; gap: 16px; }
  section { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 12px 16px; }
  h2 { font-size: 14px; margin: 0 0 8px; text-transform: uppercase; letter-spacing: .04em; color: var(--muted); }
  table { border-collapse: collapse; width: 100%; }
  th, td { text-align: left; padding: 4px 10px 4px 0; border-bottom: 1px solid var(--line); vertical-align: top; }
  th { font-weight: 600; font-size: 12px; color: var(--muted); }
  td.num { font-variant-numeric: tabular-nums; }
  .swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 6px; vertical-align: baseline; }
  .bad { color: var(--bad); font-weight: 600; }
  .muted { color: var(--muted); }
  tr.finished td { color: var(--muted); }
  .bar { width: 160px; height: 8px; background: var(--line); border-radius: 4px; overflow: hidden; display: inline-block; vertical-align: middle; margin-right: 6px; }
  .bar > span { display: block; height: 100%; background: #3b6fd8; }
  #error { background: #fdecea; color: var(--bad); padding: 8px 12px; border-radius: 6px; }
  #legend { display: flex; flex-wrap: wrap; gap: 14px; margin-bottom: 8px; }
  #map { display: block; max-width: 100%; }
  .swatch.moving { background: linear-gradient(135deg, #bbb 50%, #555 50%); outline: 1.5px solid #1d2330; }
  #map-caption { text-transform: none; letter-spacing: 0; font-weight: normal; }
  #tip { position: fixed; pointer-events: none; background: #1d2330; color: #fff; font-size: 12px; padding: 6px 8px; border-radius: 4px; white-space: pre; }
  ul#warnings { margin: 8px 0 0; padding-left: 18px; color: var(--warn); }
  code { font-size: 12px; }
</style>
</head>
<body>
<header><h1>shardflake</h1><span id="summary">loading…</span><span id="live">connecting…</span></header>
<main>
  <div id="error" hidden></div>
  <section><h2>Servers</h2><table id="servers"><thead></thead><tbody></tbody></table></section>
  <section id="adoption-section" hidden><h2>Adoption</h2><p id="adoption"></p></section>
  <section><h2>Moves</h2><p id="no-moves" class="muted">No move in progress.</p>
    <table id="moves" hidden><thead><tr><th>move</th><th>shard</th><th>from → to</th><th>phase</th><th>progress</th><th>time</th><th>error</th></tr></thead><tbody></tbody></table></section>
  <section><h2>Shard map <span id="map-caption" class="muted"></span> <select id="colour-by" hidden><option value="">colour: server</option></select></h2><div id="legend"></div><canvas id="map" width="0" height="0"></canvas></section>
  <section><h2>Schema versions</h2><div id="versions"></div><ul id="warnings"></ul></section>
  <section><h2>Transactions across servers</h2><p id="tx-summary" class="muted"></p>
    <table id="in-doubt" hidden><thead><tr><th>gid</th><th>server</th><th>age</th><th>decision</th></tr></thead><tbody></tbody></table></section>
  <section><h2>Backups</h2><p id="restore-point" class="muted"></p></section>
</main>
<div id="tip" hidden></div>
<script>
"use strict";
const REFRESH_MS = ${JSON.stringify(options.refreshMs)};
const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac", "#17becf", "#8c564b"];
const BASE_SERVER_FIELDS = ["name", "shards", "reachable", "url"];
const $ = (id) => document.getElementById(id);
let state = { status: null, moves: null, colours: new Map(), layout: null };

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else if (k === "style") node.style.cssText = v; else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(c === null || c === undefined ? "" : String(c)));
  return node;
}
function show(v) {
  if (v === null || v === undefined) return "—";
  // A list of objects (a server's replicas, say) reads better as "key value, …; …" than as JSON.
  if (Array.isArray(v) && v.every((x) => x && typeof x === "object" && !Array.isArray(x))) {
    return v.length === 0 ? "none" : v.map((x) => Object.entries(x).map(([k, y]) => label(k) + " " + show(y)).join(", ")).join("; ");
  }
  return typeof v === "object" ? JSON.stringify(v) : String(v);
}
const label = (key) => key.replace(/([a-z])([A-Z])/g, "$1 $2").toLowerCase();
function duration(ms) {
  if (!(ms >= 0)) return "";
  const s = ms / 1000;
  return s < 60 ? s.toFixed(1) + " s" : Math.floor(s / 60) + " min " + Math.round(s % 60) + " s";
}

async function getJson(path) {
  const res = await fetch(path, { cache: "no-store" });
  const body = await res.json();
  if (!res.ok) throw new Error(body && body.error ? body.error.code + ": " + body.error.message : res.status + " " + res.statusText);
  return body;
}

function renderAdoption(status) {
  const a = status.adoption;
  $("adoption-section").hidden = !a;
  if (!a) return;
  const behind = a.behindBytes === null ? "" : ", " + (a.behindBytes / 1e6).toFixed(1) + " MB behind";
  const pause = a.pauseMs === null ? "" : ", cutover paused writes " + Math.round(a.pauseMs) + " ms";
  $("adoption").textContent = "Adopting " + a.source + " (root " + a.root + "): " + a.phase + behind + pause +
    (a.phase === "copying" || a.phase === "streaming" ? "; routers serve every shard from the source until the switch" : "") +
    (a.lastError ? "; stopped: " + a.lastError : "");
}

function renderServers(status) {
  const servers = status.servers || [];
  servers.forEach((s, i) => { if (!state.colours.has(s.name)) state.colours.set(s.name, PALETTE[state.colours.size % PALETTE.length]); });
  const extra = [];
  for (const s of servers) for (const k of Object.keys(s)) if (!BASE_SERVER_FIELDS.includes(k) && !extra.includes(k)) extra.push(k);
  const head = el("tr", {}, ...["server", "shards", "reachable", "url", ...extra.map(label)].map((h) => el("th", {}, h)));
  $("servers").tHead.replaceChildren(head);
  $("servers").tBodies[0].replaceChildren(...servers.map((s) => el("tr", { "data-server": s.name },
    el("td", {}, el("span", { class: "swatch", style: "background:" + state.colours.get(s.name) }), s.name),
    el("td", { class: "num" }, show(s.shards)),
    el("td", s.reachable === false ? { class: "bad" } : {}, s.reachable === false ? "unreachable" : "yes"),
    el("td", {}, el("code", {}, show(s.url))),
    ...extra.map((k) => el("td", { class: /lag/i.test(k) ? "num" : "" }, show(s[k]))),
  )));
}

function renderMoves(view) {
  const moves = (view && view.moves) || [];
  const running = moves.filter((m) => !m.finished);
  const recent = moves.filter((m) => m.finished).slice(0, 5);
  $("no-moves").textContent = running.length === 0 ? "No move in progress." : running.length + " move" + (running.length === 1 ? "" : "s") + " in progress.";
  $("moves").hidden = running.length + recent.length === 0;
  const now = Date.now();
  $("moves").tBodies[0].replaceChildren(...[...running, ...recent].map((m) => {
    const started = Date.parse(m.startedAt), updated = Date.parse(m.updatedAt);
    const pct = m.progress === null ? null : Math.round(m.progress * 100);
    return el("tr", { "data-move-id": m.id, "data-phase": m.phase, "data-shard": String(m.shard), class: m.finished ? "finished" : "running" },
      // A set of shards moving together shares one stream; the catalog names the set by its first move's id.
      el("td", {}, "#" + m.id + (m.row && m.row.batch_id != null ? " (set #" + m.row.batch_id + ")" : "")),
      el("td", { class: "num" }, m.shard),
      el("td", {}, m.from + " → " + m.to),
      el("td", {}, m.phase),
      el("td", {}, pct === null ? "" : el("span", { class: "bar" }, el("span", { style: "width:" + pct + "%" })), pct === null ? "" : pct + "%"),
      el("td", { class: "num" }, duration((m.finished ? updated : now) - started)),
      el("td", { class: "bad" }, m.error || ""),
    );
  }));
}

function drawMap() {
  const status = state.status;
  if (!status) return;
  const shards = status.shards || [];
  const moving = new Map(((state.moves && state.moves.moves) || []).filter((m) => !m.finished).map((m) => [m.shard, m]));
  const n = shards.length;
  const cell = n <= 256 ? 16 : n <= 2048 ? 10 : 7;
  const gap = 1, step = cell + gap;
  const width = Math.max(step, Math.min($("map").parentElement.clientWidth - 32, 1400));
  // A power of two per row (as many as fit), so a shard's place is easy to read: row = shard / cols.
  const cols = Math.min(2 ** Math.floor(Math.log2(Math.max(1, Math.floor(width / step)))), Math.max(1, n));
  const rows = Math.ceil(n / cols);
  const canvas = $("map"), ratio = window.devicePixelRatio || 1;
  canvas.style.width = cols * step + "px"; canvas.style.height = rows * step + "px";
  canvas.width = Math.ceil(cols * step * ratio); canvas.height = Math.ceil(rows * step * ratio);
  canvas.dataset.shards = String(n);
  canvas.dataset.moving = String(shards.filter((s) => s.state === "moving").length);
  // Colour by a numeric shard field (rows, bytes, … when the status has them): light to dark on a log scale.
  const by = $("colour-by").value;
  const top = by ? Math.max(1, ...shards.map((s) => Number(s[by]) || 0)) : 1;
  const heat = (v) => "hsl(215, 60%, " + Math.round(92 - 62 * (Math.log1p(Math.max(0, Number(v) || 0)) / Math.log1p(top))) + "%)";
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, cols * step, rows * step);
  shards.forEach((s, i) => {
    const x = (i % cols) * step, y = Math.floor(i / cols) * step;
    ctx.fillStyle = by ? heat(s[by]) : state.colours.get(s.server) || "#999";
    ctx.fillRect(x, y, cell, cell);
    const move = moving.get(s.shard);
    if (s.state === "moving" || move) {
      // Half in the target's colour: the lower-right triangle.
      ctx.fillStyle = move ? state.colours.get(move.to) || "#fff" : "#fff";
      ctx.beginPath(); ctx.moveTo(x + cell, y); ctx.lineTo(x + cell, y + cell); ctx.lineTo(x, y + cell); ctx.closePath(); ctx.fill();
      ctx.strokeStyle = "#1d2330"; ctx.lineWidth = 1.5; ctx.strokeRect(x + 0.75, y + 0.75, cell - 1.5, cell - 1.5);
    }
  });
  state.layout = { cols, step, cell, shards, moving };
  $("map-caption").textContent = n + " logical shards" + (canvas.dataset.moving !== "0" ? ", " + canvas.dataset.moving + " moving" : "");
  const counts = new Map();
  for (const s of shards) counts.set(s.server, (counts.get(s.server) || 0) + 1);
  $("legend").replaceChildren(...[...state.colours.keys()].map((name) => el("span", { "data-server": name },
    el("span", { class: "swatch", style: "background:" + state.colours.get(name) }), name + " · " + (counts.get(name) || 0) + " shards")),
    el("span", { class: "muted" }, el("span", { class: "swatch moving" }), "moving: source | target colour, " + cols + " shards a row"));
}

$("map").addEventListener("mousemove", (e) => {
  const l = state.layout, tip = $("tip");
  if (!l) return;
  const box = e.target.getBoundingClientRect();
  const col = Math.floor((e.clientX - box.left) / l.step), row = Math.floor((e.clientY - box.top) / l.step);
  const s = col < l.cols ? l.shards[row * l.cols + col] : undefined;
  if (!s) { tip.hidden = true; return; }
  const lines = Object.entries(s).map(([k, v]) => label(k) + ": " + show(v));
  const move = l.moving.get(s.shard);
  if (move) lines.push("move #" + move.id + " to " + move.to + ": " + move.phase);
  tip.textContent = lines.join("\\n");
  tip.style.left = e.clientX + 14 + "px"; tip.style.top = e.clientY + 14 + "px"; tip.hidden = false;
});
$("map").addEventListener("mouseleave", () => { $("tip").hidden = true; });
window.addEventListener("resize", drawMap);

/** Offers colouring by every numeric shard field but the shard's number and schema version. */
function offerColourings(shards) {
  const select = $("colour-by");
  const keys = Object.keys(shards[0] || {}).filter((k) => !["shard", "schemaVersion"].includes(k) && shards.some((s) => typeof s[k] === "number"));
  const have = [...select.options].slice(1).map((o) => o.value);
  for (const k of keys) if (!have.includes(k)) select.append(el("option", { value: k }, "colour: " + label(k)));
  select.hidden = keys.length === 0;
}
$("colour-by").addEventListener("change", drawMap);

function renderStatus(status) {
  offerColourings(status.shards || []);
  $("summary").textContent = "map version " + status.version + " · " + status.mappedShards + " of " + status.logicalShards +
    " shards mapped · layout " + status.layout + " · target schema v" + status.targetSchemaVersion;
  renderServers(status);
  renderAdoption(status);
  $("versions").replaceChildren(...Object.entries(status.schemaVersions || {}).map(([v, n]) => el("div", {}, "v" + v + ": " + n + " shards")));
  $("warnings").replaceChildren(...(status.warnings || []).map((w) => el("li", {}, w)));
  renderTransactions(status.transactions);
  renderRestorePoint(status.lastRestorePoint);
}

/** The last restore point (docs/backups.md): a partial one is shown as a problem, never as one to restore to. */
function renderRestorePoint(point) {
  const p = $("restore-point");
  if (point === undefined) { p.textContent = ""; return; }
  p.className = point && point.state === "partial" ? "bad" : "muted";
  if (!point) { p.textContent = "No restore point yet (shardflake cluster restore-point)."; return; }
  const lsns = Object.entries(point.lsns || {}).map(([server, lsn]) => server + " " + lsn).join(", ");
  p.textContent = point.state === "taken"
    ? "Last restore point " + point.name + ", taken " + point.takenAt + " · " + lsns
    : point.state === "taking"
      ? "Last restore point " + point.name + ": being taken since " + point.startedAt + " (or this catalog was restored to it)"
      : "Last restore point " + point.name + " is PARTIAL (written on " + (lsns || "no server") + "): never restore to it";
}

/** In-doubt (prepared) transactions and the servers that cannot take part in transactions across servers. */
function renderTransactions(tx) {
  if (!tx) { $("tx-summary").textContent = ""; $("in-doubt").hidden = true; return; }
  const cannot = tx.cannotTakePart.length ? " · cannot take part (max_prepared_transactions = 0): " + tx.cannotTakePart.join(", ") : "";
  $("tx-summary").textContent = tx.inDoubt.length + " prepared transaction" + (tx.inDoubt.length === 1 ? "" : "s") + " in doubt" + cannot;
  $("in-doubt").hidden = tx.inDoubt.length === 0;
  $("in-doubt").tBodies[0].replaceChildren(...tx.inDoubt.map((g) =>
    el("tr", {}, el("td", {}, g.gid), el("td", {}, g.server), el("td", {}, (g.ageMs / 1000).toFixed(1) + " s"), el("td", {}, g.decision))));
}

async function tick() {
  try {
    const [status, moves] = await Promise.all([getJson("/api/status"), getJson("/api/moves")]);
    state.status = status; state.moves = moves;
    renderStatus(status); renderMoves(moves); drawMap();
    $("error").hidden = true;
    $("live").className = "ok"; $("live").textContent = "live · " + new Date().toLocaleTimeString();
  } catch (error) {
    $("error").hidden = false; $("error").textContent = String(error.message || error);
    $("live").className = "stale"; $("live").textContent = "not updating";
  } finally {
    setTimeout(tick, REFRESH_MS);
  }
}
tick();
</script>
</body>
</html>
`;
}
