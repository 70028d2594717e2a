// The agent's live dashboard: every 0.5 s it asks this agent for the decisions it has not drawn
// yet (/v1/history?after=T: every interval, however fast the agent runs; the last five minutes
// on first load) and for its status (/v1/status: cards, violation table), and draws them with
// uPlot. No other address is contacted.
"use strict";
(function () {
  const POLL_MS = 500;
  const KEEP = 600; // points: 5 min at 0.5 s
  const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                  "#bcbd22", "#17becf", "#d62728"];
  const WINDOWS = ["0.5s", "30s", "5min"];

  // Phases as the trainer reports them (docs/AGENT.md), each with its colour in the band under
  // the power chart.
  const PHASES = { idle: "#e8e8e8", startup: "#dadaeb", rollout: "#9ecae1", logprob: "#c6dbef",
                   train: "#fdae6b", sync: "#a1d99b", checkpoint: "#bdbdbd", stopped: "#969696" };
  // t: agent time; wall: the wall clock of each decision (Unix s; the charts' x axis when the
  // agent stamps it, agent time in the legend); limit: the lowest power limit in force over the
  // GPUs (null where the source does not say); phase: the trainer's, null without a report.
  const state = { t: [], wall: [], power: [], budget: [], limit: [], phase: [], concurrency: [],
                  group: [], tokens: [], gpus: -1, lastT: null, samples: 0, errors: 0,
                  useWall: null }; // samples: decisions received
  let charts = null;

  // An agent that needs its token on reads (--token-on-reads) is opened as .../#token=T: the
  // fragment never leaves the browser, and the page sends it as a bearer token.
  const token = new URLSearchParams(location.hash.slice(1)).get("token");
  const request = { cache: "no-store", headers: token ? { Authorization: "Bearer " + token } : {} };

  const $ = (id) => document.getElementById(id);
  const fmt = (x, digits) => (x === null || x === undefined || !isFinite(x)) ? "–" : x.toFixed(digits);

  function widthOf(el) { return Math.max(300, el.clientWidth - 8); }

  // The x legend: the wall-clock time and, beside it, the agent's time of that decision.
  function xValue(u, v, si, idx) {
    if (!state.useWall) return fmt(v, 1) + " s";
    const i = idx === null || idx === undefined ? state.t.length - 1 : idx;
    const agent = i >= 0 && i < state.t.length ? " (agent t = " + fmt(state.t[i], 1) + " s)" : "";
    return v === null || v === undefined ? "–" : new Date(v * 1000).toLocaleTimeString() + agent;
  }

  // The phase band: a strip along the bottom of the power chart, one colour per phase.
  function drawPhases(u) {
    const xs = u.data[0];
    if (!xs || xs.length === 0) return;
    const ctx = u.ctx;
    const h = Math.round(10 * devicePixelRatio);
    const top = u.bbox.top + u.bbox.height - h;
    ctx.save();
    for (let i = 0; i < xs.length; i++) {
      const phase = state.phase[i];
      if (!phase || !PHASES[phase]) continue;
      const x0 = Math.round(u.valToPos(xs[i], "x", true));
      const next = i + 1 < xs.length ? xs[i + 1] : xs[i];
      const x1 = Math.max(x0 + 1, Math.round(u.valToPos(next, "x", true)));
      const left = Math.max(x0, u.bbox.left), right = Math.min(x1, u.bbox.left + u.bbox.width);
      if (right <= left) continue;
      ctx.fillStyle = PHASES[phase];
      ctx.fillRect(left, top, right - left, h);
    }
    ctx.restore();
  }

  function makeChart(el, series, yLabel, height, extraAxes, hooks) {
    const wall = state.useWall === true;
    const opts = {
      width: widthOf(el), height: height,
      scales: { x: { time: wall } },
      series: [{ label: wall ? "time" : "agent time (s)", value: xValue }].concat(series),
      axes: [{ label: wall ? "wall-clock time" : "agent time (s)" }, { label: yLabel }]
        .concat(extraAxes || []),
      legend: { live: true },
      hooks: hooks || {},
    };
    return new uPlot(opts, [[]].concat(series.map(() => [])), el);
  }

  function buildCharts(gpus) {
    for (const id of ["chart-power", "chart-actuation", "chart-tokens"]) $(id).textContent = "";
    const powerSeries = [];
    for (let g = 0; g < gpus; g++) {
      powerSeries.push({ label: "GPU " + g, stroke: COLORS[g % COLORS.length], width: 1.5,
                         value: (u, v) => fmt(v, 1) });
    }
    const stepped = uPlot.paths && uPlot.paths.stepped ? uPlot.paths.stepped({ align: 1 }) : undefined;
    // The budget in force at each decision: a line that steps when it moves.
    powerSeries.push({ label: "budget", stroke: "#d62728", width: 2, dash: [8, 4], paths: stepped,
                       value: (u, v) => fmt(v, 1) });
    // The power limit in force (the lowest over the GPUs): the hardware cap the GPUs run under.
    powerSeries.push({ label: "power limit", stroke: "#444444", width: 1.5, dash: [2, 3],
                       paths: stepped, value: (u, v) => fmt(v, 0) });
    charts = {
      power: makeChart($("chart-power"), powerSeries, "W", 260, [], { draw: [drawPhases] }),
      actuation: makeChart($("chart-actuation"), [
        { label: "concurrency", stroke: "#1f77b4", width: 2, paths: stepped },
        { label: "group size", stroke: "#ff7f0e", width: 2, paths: stepped, scale: "group" },
      ], "concurrency", 200, [{ scale: "group", side: 1, label: "group size", grid: { show: false } }]),
      tokens: makeChart($("chart-tokens"), [
        { label: "tokens/s", stroke: "#2ca02c", width: 2, fill: "rgba(44,160,44,0.08)",
          value: (u, v) => fmt(v, 0) },
      ], "tokens/s", 200),
    };
  }

  function trim(a) { if (a.length > KEEP) a.splice(0, a.length - KEEP); }

  function reset(gpus) {
    state.gpus = gpus;
    state.t = []; state.wall = []; state.budget = []; state.limit = []; state.phase = [];
    state.concurrency = []; state.group = []; state.tokens = [];
    state.power = Array.from({ length: gpus }, () => []);
    buildCharts(gpus);
  }

  // Appends the decisions of a /v1/history answer; returns how many were new.
  function add(h) {
    let added = 0;
    for (const p of h.points) {
      if (state.lastT !== null && p.t_s <= state.lastT) continue;
      if (state.useWall === null) state.useWall = typeof p.unix_s === "number";
      if (p.power_w !== null && p.power_w.length !== state.gpus) reset(p.power_w.length);
      if (state.gpus < 0) continue; // nothing to draw against until a good sample
      state.lastT = p.t_s;
      state.t.push(p.t_s);
      state.wall.push(typeof p.unix_s === "number" ? p.unix_s : null);
      const limits = (p.power_limit_w || []).filter((w) => typeof w === "number");
      state.limit.push(limits.length > 0 ? Math.min(...limits) : null);
      state.phase.push(typeof p.phase === "string" ? p.phase : null);
      for (let g = 0; g < state.gpus; g++) state.power[g].push(p.power_w === null ? null : p.power_w[g]);
      state.budget.push(typeof p.budget_w === "number" ? p.budget_w : h.budget_w);
      state.concurrency.push(p.concurrency);
      state.group.push(p.group_size);
      state.tokens.push(p.tokens_per_s);
      added += 1;
    }
    for (const a of [state.t, state.wall, state.budget, state.limit, state.phase, state.concurrency,
                     state.group, state.tokens].concat(state.power)) trim(a);
    state.samples += added;
    return added;
  }

  function drawCharts() {
    const x = state.useWall ? state.wall : state.t;
    charts.power.setData([x].concat(state.power, [state.budget, state.limit]));
    charts.actuation.setData([x, state.concurrency, state.group]);
    charts.tokens.setData([x, state.tokens]);
    const samples = $("samples");
    samples.textContent = String(state.samples);
    samples.dataset.count = String(state.samples);
  }

  function drawStatus(s) {
    $("stat-budget").textContent = fmt(s.budget_w, 1) + " W";
    $("stat-budget").title = "from " + (s.budget_from || "?");
    const power = $("stat-power");
    power.textContent = fmt(s.job_power_w, 1) + " W";
    power.classList.toggle("over", s.job_power_w > s.budget_w);
    $("stat-concurrency").textContent = s.actuation.concurrency;
    $("stat-group").textContent = s.actuation.group_size;
    $("stat-tokens").textContent = fmt(s.tokens_per_s, 0);
    $("stat-decisions").textContent = s.decisions;
    $("stat-errors").textContent = s.telemetry_errors;
    const limits = (s.power_limit_w || []).filter((w) => typeof w === "number");
    $("stat-limit").textContent = limits.length === 0 ? "–"
      : Math.min(...limits) === Math.max(...limits) ? fmt(limits[0], 0) + " W"
      : fmt(Math.min(...limits), 0) + "–" + fmt(Math.max(...limits), 0) + " W";
    $("stat-limit").title = s.actuation.power_limit_w > 0
      ? "the controller asks " + fmt(s.actuation.power_limit_w, 0) + " W per GPU"
      : "the controller asks for no power limit";
    // The site card: shown only for an agent in a site (--site-etcd).
    const site = s.site;
    $("site").hidden = !site;
    if (site) {
      $("site-name").textContent = site.site + " / " + site.job;
      $("site-state").textContent = site.state;
      $("site-state").dataset.state = site.state;
      $("site-grant").textContent = fmt(site.job_budget_w, 1) + " W";
      $("site-lease").textContent = site.lease;
      $("site-term").textContent = String(site.term);
    }
    $("reason").textContent = "t = " + fmt(s.t_s, 1) + " s · " + s.actuation.reason;
    for (const w of WINDOWS) {
      const row = document.querySelector('tr[data-window="' + w + '"]');
      const f = s.violation_fraction[w]; // null until the first window of that length closes
      row.querySelector(".fraction").textContent = f === null || f === undefined ? "–" : fmt(100 * f, 2) + " %";
      row.querySelector(".count").textContent = s.windows ? s.windows[w] : "–";
    }
  }

  function setConnection(up, text) {
    const c = $("conn");
    c.textContent = text;
    c.dataset.state = up ? "live" : "down";
    c.classList.toggle("up", up);
    c.classList.toggle("down", !up);
  }

  async function poll() {
    try {
      const query = state.lastT === null ? "" : "?after=" + state.lastT;
      const [hr, sr] = await Promise.all([fetch("/v1/history" + query, request),
                                          fetch("/v1/status", request)]);
      if (!hr.ok || !sr.ok) throw new Error("HTTP " + (hr.ok ? sr.status : hr.status));
      const [h, s] = await Promise.all([hr.json(), sr.json()]);
      if (add(h) > 0 && charts) drawCharts();
      drawStatus(s);
      setConnection(true, "live");
    } catch (e) {
      state.errors += 1;
      setConnection(false, "agent not answering");
    }
    setTimeout(poll, POLL_MS);
  }

  window.addEventListener("resize", () => {
    if (!charts) return;
    for (const [id, c] of [["chart-power", charts.power], ["chart-actuation", charts.actuation],
                           ["chart-tokens", charts.tokens]]) {
      c.setSize({ width: widthOf($(id)), height: c.height });
    }
  });
  window.headroomDashboard = state; // for tests and the curious
  poll();
})();
