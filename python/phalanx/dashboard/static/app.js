// The dashboard page: asks /api/snapshot every 2 s and draws it (no other
// code is loaded: the page works without the internet).
"use strict";
const $ = (id) => document.getElementById(id);
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
const mib = (b) => (b >= 1 << 30 ? (b / (1 << 30)).toFixed(2) + " GiB" : b >= 1 << 20 ? (b / (1 << 20)).toFixed(1) + " MiB"
  : b >= 1024 ? (b / 1024).toFixed(1) + " KiB" : b + " B");
const short = (id) => String(id || "").slice(0, 12);
const bar = (used, total) => {
  const f = total > 0 ? Math.min(1, used / total) : 0;
  return `<span class="bar"><i style="width:${(100 * f).toFixed(0)}%"></i></span>`;
};
const COLORS = ["#3b82f6", "#10b981", "#f59e0b", "#ef4444", "#8b5cf6", "#14b8a6", "#ec4899", "#84cc16"];
const color = (s) => { let h = 0; for (const c of String(s)) h = (h * 31 + c.charCodeAt(0)) >>> 0; return COLORS[h % COLORS.length]; };

function table(el, head, rows) {
  el.innerHTML = "<tr>" + head.map((h) => `<th>${h}</th>`).join("") + "</tr>" +
    (rows.length ? rows.join("") : `<tr><td colspan="${head.length}">(none)</td></tr>`);
}

function drawNodes(s) {
  table($("nodes"), ["node", "address", "state", "CPU", "GPU", "store", "tasks running / queued", "workers", "heartbeat"],
    s.nodes.map((n) => {
      const t = n.resources_total, a = n.resources_available;
      const cpu = t.CPU || 0, gpu = t.GPU || 0, store = t.object_store_memory || 0;
      const usedCpu = cpu - (a.CPU ?? cpu), usedGpu = gpu - (a.GPU ?? gpu);
      return `<tr data-node="${esc(n.node_id)}"><td>${esc(short(n.node_id))}</td><td>${esc(n.address)}</td>` +
        `<td class="${n.alive ? "alive" : "dead"}">${n.alive ? "alive" : "dead"}</td>` +
        `<td>${bar(usedCpu, cpu)}${usedCpu.toFixed(1)} / ${cpu}</td>` +
        `<td>${gpu ? bar(usedGpu, gpu) + usedGpu.toFixed(1) + " / " + gpu : "-"}</td>` +
        `<td>${bar(n.store_used, store)}${mib(n.store_used)} / ${mib(store)}</td>` +
        `<td class="num">${n.tasks_running} / ${n.tasks_queued}</td><td class="num">${n.workers}</td>` +
        `<td class="num">${n.alive ? n.heartbeat_age_s.toFixed(1) + " s ago" : "-"}</td></tr>`;
    }));
}

function drawActors(s) {
  table($("actors"), ["actor", "class", "name", "state", "node", "pid", "restarts", "why it died"],
    s.actors.map((a) => `<tr><td>${esc(short(a.actor_id))}</td><td>${esc(a.class_name)}</td><td>${esc(a.name || "")}</td>` +
      `<td class="${esc(a.state)}">${esc(a.state)}</td><td>${esc(short(a.node_id))}</td><td class="num">${a.pid || ""}</td>` +
      `<td class="num">${a.restarts}</td><td>${esc(a.death_cause || "")}</td></tr>`));
}

function drawTasks(s) {
  table($("tasks"), ["name", "running", "queued", "finished", "failed", "mean run time"],
    s.tasks.slice(0, 30).map((t) => {
      const n = t.finished + t.failed;
      return `<tr><td>${esc(t.name)}</td><td class="num">${t.running}</td><td class="num">${t.queued}</td>` +
        `<td class="num">${t.finished}</td><td class="num ${t.failed ? "failed" : ""}">${t.failed}</td>` +
        `<td class="num">${n ? (1000 * t.seconds / n).toFixed(1) + " ms" : "-"}</td></tr>`;
    }).concat([`<tr><td><b>all nodes now</b></td><td colspan="5">${s.tasks_running} running, ${s.tasks_queued} queued</td></tr>`]));
}

function drawCounters(s) {
  const keys = ["tasks_finished", "tasks_failed", "tasks_retried", "tasks_spilled", "tasks_reconstructed", "workers",
    "store_objects", "spilled_objects", "reduce_chains", "reduce_steps", "allreduce_sliced", "streams", "lineage_specs"];
  const nodes = Object.keys(s.node_stats || {}).sort();
  table($("counters"), ["counter", "cluster"].concat(nodes.map((n) => esc(n.slice(0, 6)))),
    keys.filter((k) => k in s.stats).map((k) => `<tr><td>${k}</td><td class="num">${s.stats[k]}</td>` +
      nodes.map((n) => `<td class="num">${s.node_stats[n][k] ?? "-"}</td>`).join("") + "</tr>"));
}

function drawObjects(s) {
  table($("objects"), ["object", "node", "size", "where", "refs", "kept by"],
    s.objects.slice(0, 30).map((o) => o.error ? `<tr><td colspan="6" class="error">${esc(o.error)}</td></tr>` :
      `<tr><td>${esc(o.object_id.slice(0, 24))}</td><td>${esc(o.node)}</td><td class="num">${mib(o.size)}</td>` +
      `<td>${esc(o.where === "remote" ? "on " + short(o.remote_node) : o.where)}</td><td class="num">${o.refs}</td>` +
      `<td class="holders">${o.holders.map(([k, w, c]) => esc(`${k}: ${w}${c > 1 ? " x" + c : ""}`)).join("; ")}</td></tr>`));
}

function drawSteps(s) {
  const when = (x) => x.in_flight ? `<b>running ${(s.now - x.start).toFixed(1)} s</b>` : (s.now - x.start).toFixed(0) + " s ago";
  const state = (x) => x.failed ? "failed" : x.in_flight ? "inflight" : "";
  table($("collectives"), ["when", "node", "what", "bytes", "took"],
    s.collectives.slice(0, 15).map((c) => `<tr class="${state(c)}"><td>${when(c)}</td><td>${esc(c.node)}</td>` +
      `<td class="what ${c.failed ? "failed" : ""}">${esc(c.what)}: ${esc(c.name)}</td><td class="num">${mib(c.bytes)}</td>` +
      `<td class="num">${c.in_flight ? "-" : (1000 * (c.end - c.start)).toFixed(1) + " ms"}</td></tr>`));
  table($("copies"), ["when", "from", "to", "bytes", "MB/s"],
    s.copies.slice(0, 15).map((c) => `<tr class="${state(c)}"><td>${when(c)}</td><td>${esc(c.from)}</td><td>${esc(c.to)}</td>` +
      `<td class="num">${c.in_flight ? mib(c.bytes_here) + " of " : ""}${mib(c.bytes)}</td><td class="num ${c.failed ? "failed" : ""}">` +
      `${(c.bytes_here / Math.max(c.end - c.start, 1e-9) / 1e6).toFixed(1)}</td></tr>`));
}

function drawLinks(s) {
  const svg = $("links"), w = svg.clientWidth || 800, h = 180, pad = 40;
  const series = Object.entries(s.links.series);
  let max = 1;
  for (const [, v] of series) for (const x of v) max = Math.max(max, x / 1e6);
  let out = `<line x1="${pad}" y1="${h - 20}" x2="${w}" y2="${h - 20}" stroke="#ccd"/>` +
    `<text x="2" y="12">${max.toFixed(0)} MB/s</text><text x="2" y="${h - 22}">0</text>` +
    `<text x="${pad}" y="${h - 4}">-${s.window_s.toFixed(0)} s</text><text x="${w - 30}" y="${h - 4}">now</text>`;
  const legend = [];
  for (const [j, [key, v]] of series.entries()) {
    const c = COLORS[j % COLORS.length], n = v.length;
    const pts = v.map((x, i) => `${(pad + (w - pad) * (i + 0.5) / n).toFixed(1)},${(h - 20 - (h - 30) * (x / 1e6) / max).toFixed(1)}`);
    out += `<polyline fill="none" stroke="${c}" stroke-width="2" points="${pts.join(" ")}"/>`;
    legend.push(`<span style="color:${c}">&#9632; ${esc(key)}</span>`);
  }
  if (!series.length) out += `<text x="${pad + 10}" y="40">no copies between nodes in this window</text>`;
  svg.innerHTML = out;
  $("links-legend").innerHTML = legend.join(" &nbsp; ");
}

function drawTimeline(s) {
  const svg = $("timeline"), w = svg.clientWidth || 800, label = 200, rowH = 16;
  const rows = [...new Set(s.timeline.spans.map((x) => x.row))].sort();
  const h = Math.max(40, rows.length * rowH + 24);
  svg.setAttribute("height", h);
  const t0 = s.timeline.start, t1 = s.timeline.end, k = (w - label) / Math.max(t1 - t0, 1e-9);
  let out = `<text x="${label}" y="${h - 4}">-${(t1 - t0).toFixed(0)} s</text><text x="${w - 30}" y="${h - 4}">now</text>`;
  rows.forEach((r, i) => { out += `<text x="2" y="${i * rowH + 12}">${esc(r)}</text>`; });
  for (const x of s.timeline.spans) {
    const i = rows.indexOf(x.row), x0 = label + (Math.max(x.start, t0) - t0) * k;
    const width = Math.max(1, (x.end - Math.max(x.start, t0)) * k);
    out += `<rect x="${x0.toFixed(1)}" y="${i * rowH + 2}" width="${width.toFixed(1)}" height="${rowH - 4}" ` +
      `fill="${x.failed ? "#c0392b" : color(x.name)}"><title>${esc(x.name)}: ${(1000 * (x.end - x.start)).toFixed(2)} ms</title></rect>`;
  }
  if (!rows.length) out += `<text x="${label}" y="20">nothing ran in the last minute</text>`;
  svg.innerHTML = out;
}

async function refresh() {
  try {
    const r = await fetch("/api/snapshot", { cache: "no-store" });
    const s = await r.json();
    if (s.error) throw new Error(s.error);
    $("summary").textContent = `${s.alive} of ${s.nodes.length} nodes alive, ${s.actors.filter((a) => a.state !== "DEAD").length} actors, ` +
      `${s.tasks_running} tasks running, ${s.tasks_queued} queued`;
    $("updated").textContent = "updated " + new Date(s.now * 1000).toLocaleTimeString();
    drawNodes(s); drawActors(s); drawTasks(s); drawCounters(s); drawObjects(s); drawSteps(s); drawLinks(s); drawTimeline(s);
  } catch (e) {
    $("summary").innerHTML = `<span class="error">${esc(e.message || e)}</span>`;
  }
}
refresh();
setInterval(refresh, 2000);
