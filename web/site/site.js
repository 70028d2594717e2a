// The coordinator's site page (web/site/index.html): polls this replica's /v1/status and
// /v1/history, draws with <canvas>. Inlined into the page at build time (cmake/EmbedPage.cmake).
"use strict";
(function () {
  const POLL_MS = 1000;
  const KEEP = 3600; // points: the coordinator's last hour at 1 s periods (GET /v1/history)
  // The jobs' colours; the budget lines' are none of them.
  const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                  "#bcbd22", "#17becf", "#aec7e8"];
  const BUDGET_COLOR = "#d62728";
  const RESERVE_COLOR = "#7b3294";
  const TARGET_COLOR = "#8a94a6";
  const POWER_COLOR = "#111111";

  const token = new URLSearchParams(location.hash.slice(1)).get("token");
  const auth = token ? { Authorization: "Bearer " + token } : {};
  const $ = (id) => document.getElementById(id);
  const fmt = (x, digits) => (x === null || x === undefined || !isFinite(x)) ? "–" : x.toFixed(digits);
  const watts = (x) => fmt(x, 0);

  // The history, one point per coordinator period (GET /v1/history: the last hour in pages, then
  // what came after the last point): t (Unix s), budget, target, reserve, the site's power, and per job
  // its grant and power.
  const points = [];
  let lastUnix = null;
  const colorOf = {};
  let nextColor = 0;
  function color(job) {
    if (!(job in colorOf)) colorOf[job] = COLORS[nextColor++ % COLORS.length];
    return colorOf[job];
  }

  function setText(id, text) { $(id).textContent = text; }

  function record(h) {
    for (const q of h.points) {
      if (lastUnix !== null && q.unix_s <= lastUnix) continue;
      lastUnix = q.unix_s;
      const p = { t: q.unix_s, budget: q.site_budget_w, target: q.target_site_budget_w,
                  reserve: q.reserve_w, site: q.power_w, grant: {}, power: {} };
      for (const [job, j] of Object.entries(q.jobs)) {
        if (j.grant_w !== null) p.grant[job] = j.grant_w;
        if (j.power_w !== null) p.power[job] = j.power_w;
      }
      points.push(p);
    }
    if (points.length > KEEP) points.splice(0, points.length - KEEP);
    $("points").dataset.count = String(points.length);
    setText("points", String(points.length));
  }

  function jobsIn(key) {
    const set = new Set();
    for (const p of points) for (const j of Object.keys(p[key])) set.add(j);
    return Array.from(set).sort();
  }

  // A canvas sized to its box at the device's pixel ratio; returns its 2D context and size.
  function prepare(canvas) {
    const ratio = window.devicePixelRatio || 1;
    const w = Math.max(300, canvas.clientWidth), h = Math.max(160, canvas.clientHeight);
    if (canvas.width !== Math.round(w * ratio) || canvas.height !== Math.round(h * ratio)) {
      canvas.width = Math.round(w * ratio);
      canvas.height = Math.round(h * ratio);
    }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, w, h);
    return { ctx, w, h };
  }

  function niceStep(range, ticks) {
    const raw = range / Math.max(1, ticks);
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * mag >= raw) return m * mag;
    return 10 * mag;
  }

  // Axes for t in [t0, t1] (Unix s, labelled with the wall-clock time) and y in [0, yMax];
  // returns the mapping functions.
  function axes(ctx, w, h, t0, t1, yMax) {
    const left = 56, right = 12, top = 10, bottom = 26;
    const x = (t) => left + (t1 === t0 ? 0 : (t - t0) / (t1 - t0)) * (w - left - right);
    const y = (v) => h - bottom - (v / yMax) * (h - top - bottom);
    ctx.strokeStyle = "#dde1e7"; ctx.fillStyle = "#5b6578"; ctx.lineWidth = 1;
    ctx.font = "11px system-ui, sans-serif";
    const step = niceStep(yMax, 5);
    ctx.textAlign = "right"; ctx.textBaseline = "middle";
    for (let v = 0; v <= yMax + 1e-9; v += step) {
      ctx.beginPath(); ctx.moveTo(left, y(v)); ctx.lineTo(w - right, y(v)); ctx.stroke();
      ctx.fillText(step >= 1 ? String(Math.round(v)) : v.toFixed(2), left - 6, y(v));
    }
    ctx.textAlign = "center"; ctx.textBaseline = "top";
    const span = Math.max(1, t1 - t0), tstep = Math.max(1, niceStep(span, 5));
    const clock = (t) => new Date(t * 1000).toLocaleTimeString([], span < 600
      ? { hour: "2-digit", minute: "2-digit", second: "2-digit" } : { hour: "2-digit", minute: "2-digit" });
    for (let t = Math.ceil(t0 / tstep) * tstep; t <= t1 + 1e-9; t += tstep) {
      if (x(t) < left + 20 || x(t) > w - right - 20) continue; // labels stay inside the frame
      ctx.fillText(clock(t), x(t), h - bottom + 6);
    }
    return { x, y };
  }

  function line(ctx, map, key, stroke, dash) {
    ctx.save(); ctx.strokeStyle = stroke; ctx.lineWidth = 2; ctx.setLineDash(dash || []);
    ctx.beginPath();
    let lastY = null;
    for (const p of points) {
      const v = typeof key === "function" ? key(p) : p[key];
      if (v === null || v === undefined || !isFinite(v)) { lastY = null; continue; }
      // Stepped: a budget holds until it changes.
      const X = map.x(p.t), Y = map.y(v);
      if (lastY === null) ctx.moveTo(X, Y); else { ctx.lineTo(X, lastY); ctx.lineTo(X, Y); }
      lastY = Y;
    }
    ctx.stroke(); ctx.restore();
  }

  function legend(id, items) {
    const el = $(id);
    el.textContent = "";
    for (const [label, c] of items) {
      const span = document.createElement("span");
      const sw = document.createElement("i");
      sw.style.background = c;
      span.appendChild(sw);
      span.appendChild(document.createTextNode(label));
      el.appendChild(span);
    }
  }

  // Nothing to draw yet (or here: a replica that does not lead has no current ledger).
  function empty(ctx, w, h) {
    ctx.fillStyle = "#5b6578"; ctx.font = "13px system-ui, sans-serif";
    ctx.textAlign = "center"; ctx.textBaseline = "middle";
    ctx.fillText("no ledger here yet: the leading replica's page draws the site", w / 2, h / 2);
  }

  function drawGrants() {
    const { ctx, w, h } = prepare($("chart-grants"));
    const jobs = jobsIn("grant");
    if (!points.some((p) => p.budget !== null)) return empty(ctx, w, h);
    let yMax = 1;
    for (const p of points) {
      let sum = 0;
      for (const j of jobs) sum += p.grant[j] || 0;
      yMax = Math.max(yMax, sum, p.budget || 0, p.target || 0, p.site || 0);
    }
    yMax *= 1.08;
    const t0 = points[0].t, t1 = points[points.length - 1].t;
    const map = axes(ctx, w, h, t0, t1, yMax);
    // Stacked areas, bottom to top in job order.
    const base = points.map(() => 0);
    for (const j of jobs) {
      const top = points.map((p, i) => base[i] + (p.grant[j] || 0));
      ctx.beginPath();
      points.forEach((p, i) => { const X = map.x(p.t), Y = map.y(top[i]); i ? ctx.lineTo(X, Y) : ctx.moveTo(X, Y); });
      for (let i = points.length - 1; i >= 0; i--) ctx.lineTo(map.x(points[i].t), map.y(base[i]));
      ctx.closePath();
      ctx.globalAlpha = 0.55; ctx.fillStyle = color(j); ctx.fill();
      ctx.globalAlpha = 1; ctx.strokeStyle = color(j); ctx.lineWidth = 1; ctx.stroke();
      for (let i = 0; i < base.length; i++) base[i] = top[i];
    }
    line(ctx, map, "budget", BUDGET_COLOR, [8, 4]);
    line(ctx, map, (p) => (p.budget === null ? null : p.budget - p.reserve), RESERVE_COLOR, [3, 3]);
    line(ctx, map, "target", TARGET_COLOR, [2, 4]);
    line(ctx, map, "site", POWER_COLOR, []);
    legend("legend-grants", jobs.map((j) => [j, color(j)]).concat([
      ["site budget in force", BUDGET_COLOR], ["budget − reserve", RESERVE_COLOR],
      ["target site budget", TARGET_COLOR], ["site power (Σ members)", POWER_COLOR]]));
  }

  function drawPower() {
    const { ctx, w, h } = prepare($("chart-power"));
    const jobs = jobsIn("power");
    if (jobs.length === 0) return empty(ctx, w, h);
    let yMax = 1;
    for (const p of points) for (const j of jobs) yMax = Math.max(yMax, p.power[j] || 0, p.grant[j] || 0);
    yMax *= 1.08;
    const map = axes(ctx, w, h, points[0].t, points[points.length - 1].t, yMax);
    for (const j of jobs) {
      ctx.save(); ctx.strokeStyle = color(j); ctx.lineWidth = 1.5; ctx.beginPath();
      let started = false;
      for (const p of points) {
        const v = p.power[j];
        if (v === undefined) { started = false; continue; }
        started ? ctx.lineTo(map.x(p.t), map.y(v)) : ctx.moveTo(map.x(p.t), map.y(v));
        started = true;
      }
      ctx.stroke(); ctx.restore();
    }
    legend("legend-power", jobs.map((j) => [j, color(j)]));
  }

  function cell(tr, text, cls) {
    const td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    tr.appendChild(td);
  }

  function table(s) {
    const body = $("jobs").querySelector("tbody");
    body.textContent = "";
    for (const j of s.jobs) {
      const tr = document.createElement("tr");
      tr.dataset.job = j.job;
      cell(tr, j.job + (j.domain ? " (domain)" : "") + (j.admitted ? "" : " (not admitted)"));
      cell(tr, watts(j.grant_w)); cell(tr, watts(j.held_w)); cell(tr, watts(j.floor_w));
      cell(tr, watts(j.demand_w)); cell(tr, watts(j.budget_w)); cell(tr, watts(j.power_w));
      cell(tr, j.phase === null ? "–" : j.phase, "text");
      cell(tr, fmt(j.value_tokens_per_j, 4)); cell(tr, j.lease === null ? "–" : j.lease, "text");
      body.appendChild(tr);
    }
  }

  function show(s) {
    setText("site", "— site " + s.site);
    const role = $("role");
    role.textContent = s.role; role.className = "pill " + s.role;
    setText("stat-budget", watts(s.site_budget_w));
    setText("stat-target", watts(s.target_site_budget_w));
    setText("stat-reserve", watts(s.reserve_w));
    setText("stat-grants", watts(s.sum_grants_w));
    setText("stat-held", watts(s.sum_held_w));
    setText("stat-floors", watts(s.sum_floors_w));
    let power = null;
    for (const j of s.jobs) if (j.power_w !== null) power = (power || 0) + j.power_w;
    setText("stat-power", watts(power));
    setText("stat-term", String(s.term));
    setText("stat-writes", String(s.ledger_writes));
    setText("stat-reassign", s.reassignments === null ? "–" : String(s.reassignments));
    const leader = $("leader");
    leader.textContent = "";
    if (s.role === "leader") {
      leader.textContent = "this replica (" + s.id + ") leads term " + s.term;
    } else if (s.leader) {
      leader.appendChild(document.createTextNode("this replica does not lead; the leader is " + s.leader));
      if (s.leader_listen) {
        leader.appendChild(document.createTextNode(" at "));
        const a = document.createElement("a");
        a.href = "http://" + s.leader_listen + "/";
        a.textContent = s.leader_listen;
        leader.appendChild(a);
      }
    } else {
      leader.textContent = "no leader known yet";
    }
    // A domain: its place under its parent site; its budget is set there, not here.
    const parent = $("parent");
    parent.hidden = !s.parent;
    $("budget-form").hidden = !!s.parent;
    if (s.parent) {
      const p = s.parent;
      parent.className = "note" + (p.state === "fenced" ? " bad" : "");
      parent.textContent = "a domain of site " + p.site + " (etcd " + p.etcd + "): " + p.state +
        (p.state === "granted" ? ", its grant " + watts(p.job_budget_w) + " W" : "") +
        (p.pending_w > 0 ? ", lower grant " + watts(p.pending_w) + " W waiting for its jobs" : "") +
        ", floor declared " + watts(p.floor_w) + " W";
    }
    $("conflict").hidden = !s.conflict; setText("conflict", s.conflict || "");
    $("error").hidden = !s.last_error; setText("error", s.last_error ? "last error: " + s.last_error : "");
    const refused = $("refused");
    refused.textContent = "";
    for (const r of s.refused) {
      const p = document.createElement("p");
      p.className = "note bad"; p.textContent = "refused: " + r;
      refused.appendChild(p);
    }
    table(s);
  }

  function setConn(up, text) {
    const c = $("conn");
    c.className = "pill " + (up ? "up" : "down");
    c.dataset.state = up ? "up" : "down";
    c.textContent = text;
  }

  // The history after the last point, in pages (GET /v1/history answers at most 1 MiB, oldest
  // first, with `more` while points remain): a few pages a poll, so a page opened late on a large
  // site catches up without holding the coordinator's one history thread. Returns whether the
  // coordinator let us read it (a token for writes guards it too).
  async function pullHistory() {
    for (let page = 0; page < 8; page++) {
      const query = lastUnix === null ? "" : "?after=" + lastUnix;
      const hr = await fetch("/v1/history" + query, { cache: "no-store", headers: auth });
      if (hr.status === 401) return false;
      if (!hr.ok) throw new Error("HTTP " + hr.status);
      const h = await hr.json();
      record(h);
      if (!h.more) break;
    }
    return true;
  }

  async function poll() {
    try {
      const r = await fetch("/v1/status", { cache: "no-store", headers: auth });
      if (!r.ok) throw new Error("HTTP " + r.status);
      const s = await r.json();
      show(s);
      const history = await pullHistory();
      setConn(true, history ? "live" : "live (history: open the page with #token=T)");
      drawGrants();
      drawPower();
    } catch (e) {
      setConn(false, "disconnected: " + e.message);
    } finally {
      setTimeout(poll, POLL_MS);
    }
  }

  $("budget-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const w = Number($("budget-input").value);
    const out = $("budget-result");
    try {
      const r = await fetch("/v1/site-budget", {
        method: "POST", cache: "no-store",
        headers: Object.assign({ "Content-Type": "application/json" }, auth),
        body: JSON.stringify({ site_budget_w: w }),
      });
      const body = await r.json().catch(() => ({}));
      out.textContent = r.ok ? "asked " + watts(body.site_budget_w) + " W (in force now " +
          watts(body.in_force_w) + " W)" : "HTTP " + r.status + ": " + (body.error || "");
    } catch (e) {
      out.textContent = "failed: " + e.message;
    }
  });
  window.addEventListener("resize", () => { drawGrants(); drawPower(); });
  poll();
})();
