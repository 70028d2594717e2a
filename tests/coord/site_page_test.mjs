// The coordinator's site page in headless Chromium (Debian's chromium, driven by playwright-core
// from web/node_modules): a real etcd, a coordinator and two twin-mode agents in a site, all
// started here on free loopback ports and stopped by PID, pass or fail. The page is opened late:
// it must draw the history the coordinator kept (GET /v1/history), then follow it; at 1,280 px
// nothing overflows the page, every legend stays inside it, every card names its unit.
//
// Usage: node site_page_test.mjs HEADROOM_BINARY REPO_ROOT OUT_DIR
// Exit 0: passed; 1: failed; 77: skipped (no chromium or etcd, unless
// HEADROOM_REQUIRE_BROWSER=1). Leaves OUT_DIR/site-page.png. Waits on state, never on sleeps.
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";

import { checker, launch, playwrightOrSkip } from "../support/browser.mjs";

const [headroom, root, outDir] = process.argv.slice(2);
const etcd = "/usr/bin/etcd";
const playwright = playwrightOrSkip("site_page_test", root, [etcd]);
const { check, failures } = checker();

// A free loopback port: bound, read, released (the child binds it next).
function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

const children = [];
function start(cmd, args, ready) {
  return new Promise((resolve, reject) => {
    const p = spawn(cmd, args, { stdio: ["ignore", "ignore", "pipe"] });
    children.push(p);
    let err = "";
    p.stderr.on("data", (d) => {
      err += d;
      const m = ready(err);
      if (m && !p.ready) {
        p.ready = m;
        resolve(p);
      }
    });
    p.on("exit", (code) => { if (!p.ready) reject(new Error(`${cmd} exited (${code}): ${err}`)); });
  });
}
function stopAll() {
  for (const p of children) if (p.exitCode === null) p.kill("SIGTERM");
}

const dir = mkdtempSync(path.join(os.tmpdir(), "headroom_site_page_"));
const guard = setTimeout(() => {
  console.log("FAIL: timed out");
  stopAll();
  process.exit(1);
}, 150_000);
let browser;
try {
  const [client, peer] = [await freePort(), await freePort()];
  const url = `http://127.0.0.1:${client}`;
  await start(etcd, ["--data-dir", path.join(dir, "etcd"), "--listen-client-urls", url,
                     "--advertise-client-urls", url, "--listen-peer-urls", `http://127.0.0.1:${peer}`],
              (err) => err.includes("ready to serve client requests"));
  const coordinator = await start(headroom, [
    "coordinator", "--etcd", url, "--site", "hall-a", "--site-budget-w", "1200", "--reserve-w", "50",
    "--period-s", "0.2", "--lease-ttl-s", "2", "--listen", "127.0.0.1:0"],
    (err) => (err.match(/listening on http:\/\/127\.0\.0\.1:(\d+)\//) || [])[1]);
  const base = `http://127.0.0.1:${coordinator.ready}`;
  for (const job of ["grpo-a", "grpo-b"]) {
    await start(headroom, ["agent", "--source", "twin", "--scenario", "a100-7b-tp1", "--controller",
                           "pid", "--speed", "5", "--listen", "127.0.0.1:0", "--site-etcd",
                           `etcd://127.0.0.1:${client}`, "--site", "hall-a", "--job", job,
                           "--node-overhead-w", "0"],
                (err) => err.includes("registered at site"));
  }
  // The page is opened late: the coordinator has kept at least 25 periods with both jobs.
  let kept = 0;
  while (kept < 25) {
    const h = await (await fetch(base + "/v1/history")).json();
    kept = h.points.filter((p) => Object.keys(p.jobs).length === 2 && p.power_w !== null).length;
    if (kept < 25) await new Promise((r) => setTimeout(r, 200)); // polling the API's own state
  }

  browser = await launch(playwright);
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  const consoleErrors = [];
  page.on("console", (m) => { if (m.type() === "error") consoleErrors.push(m.text()); });
  page.on("pageerror", (e) => consoleErrors.push(String(e)));
  const response = await page.goto(base + "/");
  check(response.status() === 200, "GET / answers 200");
  // Backfilled from the coordinator's history at once: more points than polls so far.
  await page.waitForFunction(() => Number(document.getElementById("points").dataset.count) >= 25,
                             null, { timeout: 30_000 });
  const first = Number(await page.getAttribute("#points", "data-count"));
  await page.waitForFunction((n) => Number(document.getElementById("points").dataset.count) > n,
                             first, { timeout: 30_000 });
  check(await page.getAttribute("#conn", "data-state") === "up", "connection shown live");

  const layout = await page.evaluate(() => {
    const doc = document.documentElement;
    const inside = (el) => { const r = el.getBoundingClientRect(); return r.left >= 0 && r.right <= doc.clientWidth; };
    return {
      overflow: doc.scrollWidth - doc.clientWidth,
      legends: [...document.querySelectorAll(".legend")].map(inside),
      legendText: document.getElementById("legend-grants").textContent,
      cards: [...document.querySelectorAll("#summary .label")].map((e) => e.textContent),
      titles: [...document.querySelectorAll("#summary .card")].map((e) => e.title.length > 0),
      budget: document.getElementById("stat-budget").textContent,
      power: document.getElementById("stat-power").textContent,
      rows: document.querySelectorAll("#jobs tbody tr").length,
    };
  });
  check(layout.overflow <= 0, `no horizontal overflow (${layout.overflow} px)`);
  check(layout.legends.length === 2 && layout.legends.every(Boolean), "legends inside the page");
  for (const name of ["grpo-a", "grpo-b", "site budget in force", "site power (Σ members)"]) {
    check(layout.legendText.includes(name), `grants legend names '${name}'`);
  }
  const unitless = layout.cards.filter((l) => l.startsWith("Σ") || l.includes("budget") || l === "reserve (W)"
    ? !l.endsWith("(W)") : false);
  check(unitless.length === 0, `every card in watts says so (${unitless})`);
  check(layout.titles.every(Boolean), "every card explains itself on hover");
  check(layout.budget === "1200", `site budget card (${layout.budget})`);
  check(Number(layout.power) > 0, `site power card (${layout.power})`);
  check(layout.rows === 2, `two jobs in the table (${layout.rows})`);
  // The grants chart is drawn: pixels of the site power line (near black) and of the budget.
  const pixels = await page.evaluate(() => {
    const c = document.getElementById("chart-grants");
    const img = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    let dark = 0, red = 0;
    for (let i = 0; i < img.length; i += 4) {
      if (img[i + 3] > 200 && img[i] < 40 && img[i + 1] < 40 && img[i + 2] < 40) dark++;
      if (img[i + 3] > 200 && Math.abs(img[i] - 0xd6) + Math.abs(img[i + 1] - 0x27) + Math.abs(img[i + 2] - 0x28) < 60) red++;
    }
    return { dark, red };
  });
  check(pixels.dark > 50, `site power line drawn (${pixels.dark} px)`);
  check(pixels.red > 50, `site budget line drawn (${pixels.red} px)`);
  check(consoleErrors.length === 0, `no console errors (${consoleErrors})`);
  mkdirSync(outDir, { recursive: true });
  await page.screenshot({ path: path.join(outDir, "site-page.png"), fullPage: true });
  console.log("site_page_test: screenshot", path.join(outDir, "site-page.png"));
} catch (e) {
  check(false, String(e && e.stack || e));
} finally {
  clearTimeout(guard);
  if (browser) await browser.close();
  stopAll();
  await Promise.all(children.map((p) => p.exitCode !== null ? null
    : new Promise((r) => p.on("exit", r))));
  if (failures.length === 0) rmSync(dir, { recursive: true, force: true });
}
console.log(failures.length === 0 ? "site_page_test: passed" : `site_page_test: ${failures.length} failed`);
process.exit(failures.length === 0 ? 0 : 1);
