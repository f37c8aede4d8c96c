// cdc-sink status page: polls status.json and redraws; no dependencies.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const fmt = (n) => Number(n).toLocaleString("en-US");
  const ago = (t) => {
    if (!t) return "–";
    const s = Math.round((Date.now() - Date.parse(t)) / 1000);
    return s < 60 ? s + " s ago" : s < 3600 ? Math.round(s / 60) + " min ago" : new Date(t).toISOString();
  };
  function cell(row, text, cls, test) {
    const td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    if (test) td.dataset.test = test;
    row.appendChild(td);
    return td;
  }
  function rows(tbody, items, fill) {
    tbody.replaceChildren();
    for (const it of items) {
      const tr = document.createElement("tr");
      fill(tr, it);
      tbody.appendChild(tr);
    }
  }
  const NS = "http://www.w3.org/2000/svg";
  function el(name, attrs) {
    const e = document.createElementNS(NS, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    return e;
  }
  // human prints a chart value with its unit (seconds become min/h).
  function human(v, unit) {
    if (unit === "s" && v >= 3600) return (v / 3600).toPrecision(3) + " h";
    if (unit === "s" && v >= 120) return (v / 60).toPrecision(3) + " min";
    return (v >= 100 ? Math.round(v) : v.toPrecision(2)) + " " + unit;
  }
  // chart draws series (arrays of [time ms, value]) over the last hour, or
  // over the last minutes when the data is younger (a fresh sink).
  function chart(svg, series, unit) {
    svg.replaceChildren();
    const W = 600, H = 160, L = 56, B = 18, now = Date.now();
    let top = 0, first = now;
    for (const s of series) for (const p of s) { top = Math.max(top, p[1]); first = Math.min(first, p[0]); }
    top = top > 0 ? top * 1.1 : 1;
    const span = Math.min(3600e3, Math.max(300e3, Math.ceil((now - first) / 300e3) * 300e3)), from = now - span;
    const x = (t) => L + ((t - from) / span) * (W - L - 4);
    const y = (v) => H - B - (v / top) * (H - B - 6);
    svg.appendChild(el("line", { x1: L, y1: H - B, x2: W - 4, y2: H - B, class: "axis" }));
    svg.appendChild(el("line", { x1: L, y1: 6, x2: L, y2: H - B, class: "axis" }));
    const lab = (tx, ty, s, anchor) => { const t = el("text", { x: tx, y: ty, "text-anchor": anchor || "end" }); t.textContent = s; svg.appendChild(t); };
    lab(L - 4, 12, human(top, unit));
    lab(L - 4, H - B, "0");
    lab(L, H - 4, "-" + span / 60e3 + " min", "start");
    lab(W - 4, H - 4, "now");
    series.forEach((s, i) => {
      if (!s.length) return;
      const pts = s.map((p) => x(p[0]).toFixed(1) + "," + y(p[1]).toFixed(1)).join(" ");
      svg.appendChild(el(s.length > 1 ? "polyline" : "circle", s.length > 1 ? { points: pts, class: "s" + i } :
        { cx: x(s[0][0]), cy: y(s[0][1]), r: 3, class: "s" + i }));
    });
  }
  function render(st) {
    $("sink").textContent = st.sink;
    $("updated").textContent = new Date(st.now).toISOString().replace("T", " ").slice(0, 19) + " UTC";
    const h = st.health, pill = $("health");
    pill.className = "pill " + (h.consecutiveFailures > 0 ? (h.consecutiveFailures >= 3 ? "bad" : "warn") : h.ready ? "ok" : "");
    pill.textContent = h.consecutiveFailures > 0 ? "retrying (" + h.consecutiveFailures + ")" : h.ready ? "ready" : "not ready";
    $("error-box").hidden = !h.lastError;
    $("last-error").textContent = h.lastError || "";
    $("failures").textContent = h.consecutiveFailures;
    $("error-at").textContent = ago(h.lastErrorAt);
    $("total-records").textContent = fmt(st.totals.records);
    $("total-batches").textContent = fmt(st.totals.batches);
    $("total-quarantined").textContent = fmt(st.totals.quarantined);
    $("last-batch-id").textContent = st.lastBatch ? st.lastBatch.batchId : "–";
    rows($("tables"), st.tables, (tr, t) => {
      tr.dataset.table = t.name;
      cell(tr, t.name, "", "table-name");
      cell(tr, t.version, "num", "table-version");
      cell(tr, t.batchId, "num", "table-batch");
      cell(tr, fmt(t.live), "num", "table-live");
      cell(tr, fmt(t.deleted), "num", "table-deleted");
      cell(tr, ago(t.lastCommit), "", "table-last-commit");
    });
    rows($("partitions"), st.partitions, (tr, p) => {
      tr.dataset.partition = p.topic + "/" + p.partition;
      cell(tr, p.topic);
      cell(tr, p.partition, "num");
      cell(tr, p.offset < 0 ? "–" : fmt(p.offset), "num", "partition-offset");
      cell(tr, p.lag < 0 ? "–" : fmt(p.lag), "num", "partition-lag");
    });
    const reasons = Object.entries(st.quarantine.byReason).sort((a, b) => b[1] - a[1]);
    rows($("reasons"), reasons, (tr, r) => { tr.dataset.reason = r[0]; cell(tr, r[0]); cell(tr, fmt(r[1]), "num", "reason-count"); });
    const rules = Object.entries(st.quarantine.byRule || {}).sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
    rows($("rules"), rules, (tr, r) => { tr.dataset.rule = r[0]; cell(tr, r[0]); cell(tr, fmt(r[1]), "num", "rule-count"); });
    rows($("newest"), st.quarantine.newest, (tr, e) => {
      cell(tr, ago(e.time)); cell(tr, e.rule ? e.reason + " (" + e.rule + ")" : e.reason);
      cell(tr, e.topic + "/" + e.partition + "@" + e.offset);
      cell(tr, e.message + (e.value !== undefined ? "  value: " + e.value : ""));
    });
    const ser = (f) => st.series.map((p) => [Date.parse(p.t), f(p)]);
    chart($("chart-throughput"), [ser((p) => p.recordsPerSec)], "rec/s");
    chart($("chart-batch"), [ser((p) => p.batchMsP50), ser((p) => p.batchMsP95)], "ms");
    const lat = st.series.filter((p) => p.latencyP99 > 0);
    const ls = (f) => lat.map((p) => [Date.parse(p.t), f(p)]);
    chart($("chart-latency"), [ls((p) => p.latencyP50), ls((p) => p.latencyP95), ls((p) => p.latencyP99)], "s");
    document.body.dataset.loaded = "true";
  }
  async function tick() {
    try {
      const r = await fetch("status.json", { cache: "no-store" });
      if (!r.ok) throw new Error("status.json: HTTP " + r.status);
      render(await r.json());
    } catch (e) {
      const pill = $("health");
      pill.className = "pill bad";
      pill.textContent = "unreachable";
    }
    setTimeout(tick, 2000);
  }
  tick();
})();
