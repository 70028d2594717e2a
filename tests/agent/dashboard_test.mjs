// The agent's live dashboard in headless Chromium (Debian's chromium, driven by playwright-core
// from web/node_modules): the page loads from a twin-mode agent, receives live data and draws it.
//
// Usage: node dashboard_test.mjs HEADROOM_BINARY REPO_ROOT OUT_DIR
// Exit 0: passed; 1: failed; 77: skipped (no chromium, unless HEADROOM_REQUIRE_BROWSER=1).
// Leaves OUT_DIR/dashboard.png. Waits on page state (waitForFunction), never on fixed sleeps.
import { spawn } from "node:child_process";
import { mkdirSync } from "node:fs";
import path from "node:path";

import { checker, launch, playwrightOrSkip } from "../support/browser.mjs";

const [headroom, root, outDir] = process.argv.slice(2);
const playwright = playwrightOrSkip("dashboard_test", root);
const { check, failures } = checker();

// A 4-GPU tensor-parallel job in the twin, 20x faster than real time.
function startAgent(extra = [], env = {}) {
  return new Promise((resolve, reject) => {
    const p = spawn(headroom, ["agent", "--source", "twin", "--scenario", "h100-70b-tp4",
                               "--controller", "pid", "--speed", "20", "--listen", "127.0.0.1:0",
                               ...extra],
                    { stdio: ["ignore", "ignore", "pipe"], env: { ...process.env, ...env } });
    let err = "";
    p.stderr.on("data", (d) => {
      err += d;
      const m = err.match(/listening on 127\.0\.0\.1:(\d+)/);
      if (m && !p.port) {
        p.port = Number(m[1]);
        resolve(p);
      }
    });
    p.on("exit", (code) => reject(new Error(`agent exited (${code}): ${err}`)));
  });
}

const agent = await startAgent();
const guard = setTimeout(() => {
  console.log("FAIL: timed out");
  agent.kill("SIGKILL");
  process.exit(1);
}, 120_000);
const base = `http://127.0.0.1:${agent.port}`;
// Playwright gives Chromium a fresh, empty profile of its own.
let browser;
try {
  browser = await launch(playwright);
} catch (e) {
  agent.kill("SIGTERM");
  throw e;
}
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const consoleErrors = [];
  const foreign = [];
  page.on("console", (m) => { if (m.type() === "error") consoleErrors.push(m.text()); });
  page.on("pageerror", (e) => consoleErrors.push(String(e)));
  page.on("request", (r) => { if (!r.url().startsWith(base)) foreign.push(r.url()); });

  const response = await page.goto(base + "/");
  check(response.status() === 200, "GET / answers 200");
  check((response.headers()["content-security-policy"] || "").includes("connect-src 'self'"),
        "the page is served with a Content-Security-Policy");
  check((await page.title()) === "headroom agent", "title");

  // Live data: at least 10 decisions drawn (DASHBOARD_MIN_SAMPLES: more, for a fuller
  // screenshot), then 5 more.
  const minSamples = Number(process.env.DASHBOARD_MIN_SAMPLES || 10);
  await page.waitForFunction((n) => Number(document.getElementById("samples").dataset.count) >= n,
                             minSamples, { timeout: 90_000 });
  const first = Number(await page.getAttribute("#samples", "data-count"));
  await page.waitForFunction((n) => Number(document.getElementById("samples").dataset.count) >= n,
                             first + 5, { timeout: 60_000 });
  check(await page.getAttribute("#conn", "data-state") === "live", "connection shown live");

  // What the page shows agrees with the agent's own API.
  const status = await (await fetch(base + "/v1/status")).json();
  check(status.power_w.length === 4, "the agent has 4 GPUs");
  check(await page.textContent("#stat-budget") === `${status.budget_w.toFixed(1)} W`,
        "budget card shows the agent's budget");
  const legend = await page.$$eval("#chart-power .u-legend .u-label", (els) => els.map((e) => e.textContent));
  for (const name of ["GPU 0", "GPU 1", "GPU 2", "GPU 3", "budget", "power limit"]) {
    check(legend.includes(name), `power chart has series '${name}' (legend: ${legend})`);
  }
  const actLegend = await page.$$eval("#chart-actuation .u-legend .u-label", (els) => els.map((e) => e.textContent));
  check(actLegend.includes("concurrency") && actLegend.includes("group size"), "actuation chart series");
  check(await page.locator(".uplot").count() === 3, "three charts");
  // Read in one go (a poll between two reads could close a window): a number where a window of
  // that length has closed, a dash (not a false 0 %) where none has.
  const rows = await page.$$eval("#violations tbody tr", (els) => els.map((e) => [
    e.querySelector(".fraction").textContent, Number(e.querySelector(".count").textContent)]));
  const fractions = rows.map((r) => r[0]);
  const counts = rows.map((r) => r[1]);
  check(rows.length === 3 && rows.every(([f, n]) => n > 0 ? /^\d+\.\d\d %$/.test(f) : f === "–"),
        `violation fractions shown (${fractions}; windows ${counts})`);
  check(counts[0] >= 10, `0.5 s windows counted (${counts})`);

  // The data behind the charts: times strictly increasing, budget flat at the agent's budget,
  // concurrency inside the scenario's range.
  const data = await page.evaluate(() => {
    const s = window.headroomDashboard;
    return { t: s.t, budget: s.budget, power: s.power, concurrency: s.concurrency };
  });
  check(data.t.every((t, i) => i === 0 || t > data.t[i - 1]), "agent times increase");
  // The agent runs at 20x, the page polls every 0.5 s wall: still every decision is drawn.
  check(data.t.every((t, i) => i === 0 || Math.abs(t - data.t[i - 1] - 0.5) < 1e-9),
        "every 0.5 s decision drawn, none skipped");
  check(data.t.length >= 40, `history backfilled and followed (${data.t.length} points)`);
  check(data.budget.every((b) => b === status.budget_w), "budget series flat");
  check(data.power.length === 4 && data.power.every((p) => p.length === data.t.length && p.every((w) => w > 0)),
        "a power series per GPU, every point positive");
  check(data.concurrency.every((c) => Number.isInteger(c) && c >= 1), "concurrency series integral");
  // Issue 37: the power limit in force drawn (the twin's: its nameplate, or the controller's),
  // the x axis on the wall clock (agent time in the legend), the trainer's phase under it, and
  // no site card for an agent that is not in a site.
  const more = await page.evaluate(() => {
    const s = window.headroomDashboard;
    // Read in one go with the agent times: a poll between two reads adds points.
    return { t: s.t.slice(), wall: s.wall, limit: s.limit, phase: s.phase, useWall: s.useWall,
             siteHidden: document.getElementById("site").hidden,
             limitCard: document.getElementById("stat-limit").textContent,
             xLabel: document.querySelector("#chart-power .u-legend .u-series:first-child .u-label").textContent };
  });
  check(more.useWall === true && more.xLabel === "time", `x axis on the wall clock (${more.xLabel})`);
  check(more.wall.length === more.t.length && more.wall.every((w, i) => i === 0 || w >= more.wall[i - 1]),
        "wall-clock times kept and non-decreasing");
  const now = Date.now() / 1000;
  check(Math.abs(more.wall[more.wall.length - 1] - now) < 120, `wall clock is now (${more.wall.at(-1)} vs ${now})`);
  check(more.limit.length === more.t.length && more.limit.every((w) => typeof w === "number" && w > 0),
        `power limit series (${more.limit.slice(-3)})`);
  check(/^\d+( ?–\d+)? W$/.test(more.limitCard), `power limit card (${more.limitCard})`);
  check(more.phase.some((p) => p === "rollout") && more.phase.every((p) => p === null || typeof p === "string"),
        `phases kept (${[...new Set(more.phase)]})`);
  check(more.siteHidden === true, "no site card outside a site");

  // A budget posted now: the budget line steps down at one decision and stays there.
  const lowered = Math.round(status.budget_w * 0.8 * 10) / 10;
  const posted = await fetch(base + "/v1/budget", {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ budget_per_gpu_w: lowered }) });
  check(posted.status === 200, `POST /v1/budget answers 200 (${posted.status})`);
  await page.waitForFunction((w) => {
    const b = window.headroomDashboard.budget;
    return b.length > 0 && b[b.length - 1] === w;
  }, lowered, { timeout: 60_000 });
  const stepped = await page.evaluate(() => window.headroomDashboard.budget.slice());
  const changes = stepped.filter((b, i) => i > 0 && b !== stepped[i - 1]).length;
  check(changes === 1 && stepped[0] === status.budget_w, `the budget line steps once (${changes} changes)`);
  await page.waitForFunction((text) => document.getElementById("stat-budget").textContent === text,
                             `${lowered.toFixed(1)} W`, { timeout: 30_000 });

  // And it is drawn: the power canvas holds pixels of the GPUs' colours (the four lines run close
  // together, so any may lie on top) and of the budget's.
  const pixels = await page.evaluate(() => {
    const canvas = document.querySelector("#chart-power canvas");
    const ctx = canvas.getContext("2d");
    const img = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
    const near = (i, [r, g, b]) => Math.abs(img[i] - r) + Math.abs(img[i + 1] - g) + Math.abs(img[i + 2] - b) < 60 && img[i + 3] > 200;
    const gpuColours = [[0x1f, 0x77, 0xb4], [0xff, 0x7f, 0x0e], [0x2c, 0xa0, 0x2c], [0x94, 0x67, 0xbd]];
    let gpus = 0, budget = 0;
    for (let i = 0; i < img.length; i += 4) {
      if (gpuColours.some((c) => near(i, c))) gpus++;
      if (near(i, [0xd6, 0x27, 0x28])) budget++;
    }
    return { gpus, budget, width: canvas.width, height: canvas.height };
  });
  check(pixels.width > 300 && pixels.height > 100, `power canvas sized (${pixels.width}x${pixels.height})`);
  check(pixels.gpus > 100, `GPU lines drawn (${pixels.gpus} px)`);
  check(pixels.budget > 50, `budget line drawn (${pixels.budget} px)`);

  check(consoleErrors.length === 0, `no console errors (${consoleErrors})`);
  check(foreign.length === 0, `no request leaves the agent (${foreign})`);

  mkdirSync(outDir, { recursive: true });
  const shot = path.join(outDir, "dashboard.png");
  await page.screenshot({ path: shot, fullPage: true });
  console.log("dashboard_test: screenshot", shot);

  // The agent goes away: the page says so (and keeps what it drew).
  agent.kill("SIGTERM");
  await page.waitForFunction(() => document.getElementById("conn").dataset.state === "down", null,
                             { timeout: 30_000 });
  check(await page.textContent("#conn") === "agent not answering", "a lost agent is shown");
  check(await page.evaluate(() => window.headroomDashboard.t.length) >= data.t.length,
        "what was drawn stays");

  // --token-on-reads: the page (static) loads without the token; its data needs it, which the
  // address's #token= fragment gives the page and the page alone (it is never sent in a URL).
  const secured = await startAgent(["--token-on-reads"], { HEADROOM_TOKEN: "dash-t0ken" });
  try {
    const sbase = `http://127.0.0.1:${secured.port}`;
    const urls = [];
    const p2 = await browser.newPage();
    p2.on("request", (r) => urls.push(r.url()));
    await p2.goto(sbase + "/");
    await p2.waitForFunction(() => document.getElementById("conn").dataset.state === "down", null,
                             { timeout: 30_000 });
    check(true, "without the token the page says the agent is not answering");
    await p2.goto(sbase + "/#token=dash-t0ken");
    await p2.reload();
    await p2.waitForFunction(() => Number(document.getElementById("samples").dataset.count) >= 3,
                             null, { timeout: 60_000 });
    check(await p2.getAttribute("#conn", "data-state") === "live", "with #token= the page is live");
    check(urls.every((u) => !u.includes("dash-t0ken") || u.endsWith("#token=dash-t0ken")),
          `the token is sent in no request's URL (${urls.filter((u) => u.includes("t0ken"))})`);
    await p2.close();
  } finally {
    secured.kill("SIGTERM");
  }
} catch (e) {
  check(false, String(e && e.stack || e));
} finally {
  await browser.close();
  agent.kill("SIGTERM");
  clearTimeout(guard);
}
console.log("dashboard_test:", failures.length ? "FAILED" : "ok");
process.exit(failures.length ? 1 : 0);
