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

  const state = { t: [], power: [], budget: [], concurrency: [], group: [], tokens: [],
                  gpus: -1, lastT: null, samples: 0, errors: 0 }; // samples: decisions received
  let charts = null;

  // An agent that needs its token on reads (--token-on-reads) is opened as .../#token=T: the
  // fragment never leaves the browser, and the page sends it as a bearer token.
  const token = new URLSearchParams(location.hash.slice(1)).get("token");
  const request = { cache: "no-store", headers: token ? { Authorization: "Bearer " + token } : {} };

  const $ = (id) => document.getElementById(id);
  const fmt = (x, digits) => (x === null || x === undefined || !isFinite(x)) ? "–" : x.toFixed(digits);

  function widthOf(el) { return Math.max(300, el.clientWidth - 8); }

  function makeChart(el, series, yLabel, height, extraAxes) {
    const opts = {
      width: widthOf(el), height: height,
      scales: { x: { time: false } },
      series: [{ label: "agent time (s)", value: (u, v) => fmt(v, 1) }].concat(series),
      axes: [{ label: "agent time (s)" }, { label: yLabel }].concat(extraAxes || []),
      legend: { live: true },
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
    charts = {
      power: makeChart($("chart-power"), powerSeries, "W", 260),
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
    state.t = []; state.budget = []; state.concurrency = []; state.group = []; state.tokens = [];
    state.power = Array.from({ length: gpus }, () => []);
    buildCharts(gpus);
  }

  // Appends the decisions of a /v1/history answer; returns how many were new.
  function add(h) {
    let added = 0;
    for (const p of h.points) {
      if (state.lastT !== null && p.t_s <= state.lastT) continue;
      if (p.power_w !== null && p.power_w.length !== state.gpus) reset(p.power_w.length);
      if (state.gpus < 0) continue; // nothing to draw against until a good sample
      state.lastT = p.t_s;
      state.t.push(p.t_s);
      for (let g = 0; g < state.gpus; g++) state.power[g].push(p.power_w === null ? null : p.power_w[g]);
      state.budget.push(typeof p.budget_w === "number" ? p.budget_w : h.budget_w);
      state.concurrency.push(p.concurrency);
      state.group.push(p.group_size);
      state.tokens.push(p.tokens_per_s);
      added += 1;
    }
    for (const a of [state.t, state.budget, state.concurrency, state.group, state.tokens].concat(state.power)) trim(a);
    state.samples += added;
    return added;
  }

  function drawCharts() {
    charts.power.setData([state.t].concat(state.power, [state.budget]));
    charts.actuation.setData([state.t, state.concurrency, state.group]);
    charts.tokens.setData([state.t, state.tokens]);
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
