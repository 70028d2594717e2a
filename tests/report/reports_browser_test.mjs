// Every HTML report the CLI writes, opened in headless Chromium (Debian's chromium, driven by
// playwright-core from web/node_modules) at 1,280 x 800 (issue 37). The reports are made here, in
// a temporary directory, from small inputs: analyze (of a synthetic trace and of an agent's),
// fleet, eval, fleet-sim, sites-sim, a tiny diloco run (left out without etcd or a DiLoCo build),
// pilot plan and pilot report (pilot validate writes no report).
// Each report is checked for:
//   a. no horizontal overflow of the document;
//   b. every SVG chart's data shapes (descendants of g.data) inside its plot frame (rect.frame),
//      to 1.5 user units (a circle's centre inside; its radius may stick out); an svg without a
//      frame is a failure unless it has class "nochart";
//   c. every .legend inside the page;
//   d. a non-empty p.headline among the first elements after the h1;
//   e. no number in scientific notation in the visible text;
//   f. no table printed twice (two identical tables);
//   g. a table wider than the page scrolls in its own box (an ancestor with overflow-x auto or
//      scroll);
//   and no script error on the page.
//
// Usage: node reports_browser_test.mjs HEADROOM_BINARY REPO_ROOT OUT_DIR
// Exit 0: passed; 1: failed; 77: skipped (no chromium, unless HEADROOM_REQUIRE_BROWSER=1).
// Leaves OUT_DIR/report-NAME.png per report (full page). No sleeps: the reports are static files,
// checked once page.goto has seen them load.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";

import { launch, playwrightOrSkip } from "../support/browser.mjs";

const [headromArg, rootArg, outArg] = process.argv.slice(2);
if (!headromArg || !rootArg || !outArg) {
  console.log("usage: node reports_browser_test.mjs HEADROOM_BINARY REPO_ROOT OUT_DIR");
  process.exit(1);
}
const headroom = path.resolve(headromArg);
const root = path.resolve(rootArg);
const outDir = path.resolve(outArg);
const playwright = playwrightOrSkip("reports_browser_test", root);

// A report's failures, by name; a failure outside any report under "(test)".
const results = new Map();
function fail(name, what) {
  if (!results.has(name)) results.set(name, []);
  results.get(name).push(what);
  console.log(`FAIL: ${name}: ${what}`);
}

const dir = mkdtempSync(path.join(os.tmpdir(), "headroom_reports_"));
let browser;
// The guard: execFileSync blocks the event loop, so each command also has its own timeout.
const guard = setTimeout(async () => {
  console.log("FAIL: reports_browser_test timed out");
  console.log(`reports_browser_test: kept ${dir}`);
  process.exit(1);
}, 240_000);

// One CLI command in the temporary directory; its error, if any, word for word.
function run(args) {
  try {
    execFileSync(headroom, args, { cwd: dir, stdio: ["ignore", "pipe", "pipe"], timeout: 60_000,
                                   maxBuffer: 64 << 20 });
    return null;
  } catch (e) {
    const said = [e.stderr, e.stdout].map((b) => (b ? String(b).trim() : "")).find(Boolean);
    const why = e.signal ? `killed by ${e.signal}` : e.status !== null ? `exit ${e.status}` : e.message;
    return `\`headroom ${args.join(" ")}\` failed (${why}): ${said || "it printed nothing"}`;
  }
}

// Each report: its name, the commands that make it (in order), the file it writes.
const policies = path.join(root, "policies");
const sites = path.join(root, "examples", "sites");
const baselines = [1, 2, 3, 4].map((n) => `base/day${n}.csv`);
// pilot report's blocks: each 1,800 s baseline trace cut into six 300 s blocks, the arms
// alternating; days 1-2 are job-a, days 3-4 job-b (for the per-job breakdown).
const blocksCsv = ["block,arm,trace,job,start_s,end_s"];
for (let n = 1, k = 0; n <= 4; n++) {
  for (let b = 0; b < 6; b++, k++) {
    blocksCsv.push([`b${k}`, k % 2 === 0 ? "controlled" : "uncontrolled", `base/day${n}.csv`,
                    n <= 2 ? "job-a" : "job-b", b * 300, b * 300 + 300].join(","));
  }
}
const reports = [
  { name: "analyze", file: "analyze.html", commands: [
    ["synth", "--out", "run.csv", "--duration-s", "600"],
    ["analyze", "run.csv", "--budget-w", "330", "--report", "analyze.html"]] },
  { name: "fleet", file: "fleet.html", commands: [
    ["twin", "run", "--scenario", "a100-7b-tp1", "--steps", "20", "--out", "a7b.csv"],
    ["twin", "run", "--scenario", "a100-14b-tp2", "--steps", "20", "--out", "a14b.csv"],
    ["twin", "run", "--scenario", "a100-72b-tp4", "--steps", "20", "--out", "a72b.csv"],
    ["fleet", "a72b.csv:2", "a14b.csv:2", "a7b.csv:4", "--trials", "50", "--budget-fraction", "0.7",
     "--report", "fleet.html"]] },
  // An agent's trace (the twin's, with its concurrency and group_size columns): the report
  // draws the actuation too.
  { name: "analyze-agent", file: "agent-trace.html", needs: "fleet",
    contains: ["The agent's generation concurrency over time", "The agent's group size over time"],
    commands: [["analyze", "a7b.csv", "--budget-w", "300", "--report", "agent-trace.html"]] },
  { name: "eval", file: "eval.html", contains: ["Generation concurrency (seed 1)",
    "Group size (seed 1)", "Power limit in force per GPU", "Settings and the power limit in force"],
    commands: [
    ["eval", "--scenario", "a100-7b-tp1", "--policy", path.join(policies, "a100-7b-tp1.json"),
     "--seeds", "2", "--steps", "60", "--report", "eval.html"]] },
  { name: "fleet-sim", file: "fleet-sim.html", commands: [
    ["fleet-sim", "--site-budget-w", "3840", "--speed", "0", "--duration-s", "600",
     "--policies", policies, "--report", "fleet-sim.html"]] },
  { name: "sites-sim", file: "sites.html", commands: [
    ["sites-sim", "--site", `nuclear:${path.join(sites, "nuclear.csv")}:3840`,
     "--site", `solar:${path.join(sites, "solar.csv")}:3840`, "--duration-s", "7200",
     "--report", "sites.html"]] },
  // A tiny DiLoCo run (its own etcd, 2 workers, 2 rounds; a few seconds): its report.
  { name: "diloco", file: "dl/report.html",
    needsFiles: ["/usr/bin/etcd", path.join(path.dirname(headroom), "headroom-diloco")], commands: [
    ["diloco", "local", "--workers", "2", "--rounds", "2", "--inner-steps", "2", "--batch", "2",
     "--seq-len", "32", "--val-windows", "8", "--out", "dl"]] },
  { name: "pilot-plan", file: "plan.html", commands: [
    ...[1, 2, 3, 4].map((n) => ["synth", "--out", `base/day${n}.csv`, "--seed", String(n)]),
    ["pilot", "plan", "--baseline", ...baselines, "--effect", "10%", "--metric", "energy",
     "--block", "5min", "--report", "plan.html"]] },
  { name: "pilot-report", file: "pilot-report.html", needs: "pilot-plan", commands: [
    ["pilot", "report", "--blocks", "BLOCKS.csv", "--traces", ...baselines, "--budget-w", "330",
     "--bootstrap", "2000", "--permutations", "2000", "--report", "pilot-report.html"]] },
];

// What runs in the page: every check, each answer a list of failures (empty: passed).
function checkPage() {
  const doc = document.documentElement;
  const out = { a: [], b: [], c: [], d: [], e: [], f: [], g: [], charts: 0, shapes: 0 };
  const short = (s, n = 80) => (s.length > n ? s.slice(0, n) + "…" : s);

  // a. The document does not scroll sideways.
  if (doc.scrollWidth > doc.clientWidth) {
    out.a.push(`document ${doc.scrollWidth} px wide in a ${doc.clientWidth} px page`);
  }

  // b. Charts: data inside the frame, in the svg's own user units (through each element's CTM).
  const svgs = [...document.querySelectorAll("svg")].filter((s) => !s.parentElement.closest("svg"));
  const heading = (svg) => {
    const label = svg.getAttribute("aria-label") || svg.querySelector(":scope > title")?.textContent;
    if (label) return short(label.trim(), 60);
    // The nearest heading or caption before the chart.
    let el = svg;
    while (el && el !== document.body) {
      for (let p = el.previousElementSibling; p; p = p.previousElementSibling) {
        if (/^(H[1-6]|FIGCAPTION)$/.test(p.tagName)) return short(p.textContent.trim(), 60);
      }
      el = el.parentElement;
    }
    return "";
  };
  const boxIn = (el, svg) => {
    // el's bounding box mapped into svg's user space.
    const b = el.getBBox();
    const m = svg.getScreenCTM().inverse().multiply(el.getScreenCTM());
    const pts = [[b.x, b.y], [b.x + b.width, b.y], [b.x, b.y + b.height], [b.x + b.width, b.y + b.height]]
      .map(([x, y]) => new DOMPoint(x, y).matrixTransform(m));
    const xs = pts.map((p) => p.x), ys = pts.map((p) => p.y);
    return { x0: Math.min(...xs), x1: Math.max(...xs), y0: Math.min(...ys), y1: Math.max(...ys),
             empty: b.width === 0 && b.height === 0 && b.x === 0 && b.y === 0 };
  };
  const tol = 1.5;
  svgs.forEach((svg, i) => {
    if (svg.classList.contains("nochart")) return;
    out.charts++;
    const name = `chart ${i + 1}${heading(svg) ? ` ("${heading(svg)}")` : ""}`;
    const frames = [...svg.querySelectorAll("rect.frame")];
    if (frames.length === 0) {
      out.b.push(`${name}: chart without a frame (no rect.frame)`);
      return;
    }
    const groups = [...svg.querySelectorAll("g.data")];
    if (groups.length === 0) {
      out.b.push(`${name}: a frame but no g.data (its data shapes cannot be checked)`);
      return;
    }
    for (const g of groups) {
      // The frame of this data group: the nearest rect.frame among its ancestors' children.
      let frame = null;
      for (let p = g.parentElement; p && !frame; p = p === svg ? null : p.parentElement) {
        frame = p.querySelector(":scope > rect.frame");
      }
      frame = frame || frames[0];
      const f = boxIn(frame, svg);
      let outside = 0, total = 0, worst = null;
      for (const s of g.querySelectorAll("polyline, polygon, circle, rect, line, path")) {
        const b = boxIn(s, svg);
        if (b.empty) continue;
        total++;
        let by;
        if (s.tagName === "circle") {
          const cx = (b.x0 + b.x1) / 2, cy = (b.y0 + b.y1) / 2;
          by = Math.max(f.x0 - cx, cx - f.x1, f.y0 - cy, cy - f.y1);
        } else {
          by = Math.max(f.x0 - b.x0, b.x1 - f.x1, f.y0 - b.y0, b.y1 - f.y1);
        }
        if (by > tol) {
          outside++;
          if (!worst || by > worst.by) {
            worst = { by, what: `${s.tagName}${s.getAttribute("class") ? "." + s.getAttribute("class") : ""}`,
                      box: [b.x0, b.y0, b.x1, b.y1].map((v) => v.toFixed(1)).join(",") };
          }
        }
      }
      out.shapes += total;
      if (outside > 0) {
        const fb = [f.x0, f.y0, f.x1, f.y1].map((v) => v.toFixed(1)).join(",");
        out.b.push(`${name}: ${outside} of ${total} data shapes outside the frame [${fb}], worst ` +
                   `${worst.what} [${worst.box}] by ${worst.by.toFixed(1)} units`);
      }
    }
  });

  // c. Legends inside the page.
  document.querySelectorAll(".legend").forEach((el, i) => {
    const r = el.getBoundingClientRect();
    if (r.left < 0 || r.right > doc.clientWidth) {
      out.c.push(`legend ${i + 1} ("${short(el.textContent.trim(), 40)}") spans ` +
                 `${r.left.toFixed(0)}..${r.right.toFixed(0)} px of ${doc.clientWidth}`);
    }
  });

  // d. A headline: a non-empty p.headline among the first three elements after the h1 (or in
  // them).
  const h1 = document.querySelector("h1");
  if (!h1) {
    out.d.push("no h1");
  } else {
    let found = null;
    let el = h1.nextElementSibling;
    for (let k = 0; k < 3 && el && !found; k++, el = el.nextElementSibling) {
      found = el.matches("p.headline") ? el : el.querySelector("p.headline");
    }
    if (!found) {
      const anywhere = document.querySelector("p.headline");
      out.d.push(anywhere ? "p.headline is not among the first elements after the h1"
                          : "no p.headline after the h1");
    } else if (!found.textContent.trim()) {
      out.d.push("p.headline is empty");
    }
  }

  // e. No number in scientific notation in the visible text.
  const text = document.body.innerText;
  const sci = /\d\.?\d*e[+-]\d/g;
  const hits = [...text.matchAll(sci)];
  if (hits.length > 0) {
    const around = hits.slice(0, 3).map((m) => {
      const s = text.slice(Math.max(0, m.index - 20), m.index + m[0].length + 10);
      return `"${s.replace(/\s+/g, " ").trim()}"`;
    });
    out.e.push(`${hits.length} numbers in scientific notation, e.g. ${around.join(", ")}`);
  }

  // f. No table printed twice.
  const tables = [...document.querySelectorAll("table")];
  const seen = new Map();
  tables.forEach((t, i) => {
    const html = t.outerHTML;
    if (seen.has(html)) {
      out.f.push(`table ${i + 1} repeats table ${seen.get(html) + 1} ` +
                 `("${short(t.innerText.replace(/\s+/g, " ").trim(), 50)}")`);
    } else {
      seen.set(html, i);
    }
  });

  // g. A table wider than the page scrolls in its own box.
  tables.forEach((t, i) => {
    const width = Math.max(t.scrollWidth, t.getBoundingClientRect().width);
    if (width <= doc.clientWidth) return;
    let box = null;
    for (let p = t.parentElement; p && p !== doc && !box; p = p.parentElement) {
      if (/^(auto|scroll)$/.test(getComputedStyle(p).overflowX)) box = p;
    }
    if (!box) {
      out.g.push(`table ${i + 1} (${Math.round(width)} px, "${short(t.innerText.replace(/\s+/g, " ").trim(), 40)}") ` +
                 `is wider than the page and in no box with overflow-x auto or scroll`);
    }
  });
  return out;
}

const labels = { a: "a overflow", b: "b charts", c: "c legends", d: "d headline", e: "e sci-notation",
                 f: "f duplicate tables", g: "g wide tables", js: "page errors", gen: "generation",
                 open: "open" };
const summary = [];
try {
  // 1. The reports.
  writeFileSync(path.join(dir, "BLOCKS.csv"), blocksCsv.join("\n") + "\n");
  mkdirSync(path.join(dir, "base"));
  const t0 = Date.now();
  const made = new Set();
  for (const r of reports.slice()) {
    // A report whose programs this build lacks (no etcd, a build without DiLoCo) is left out.
    const absent = (r.needsFiles || []).filter((f) => !existsSync(f));
    if (absent.length > 0) {
      console.log(`reports_browser_test: ${r.name} left out (no ${absent.join(", ")})`);
      reports.splice(reports.indexOf(r), 1);
      continue;
    }
    const s = Date.now();
    let error = r.needs && !made.has(r.needs) ? `its inputs (${r.needs}) were not made` : null;
    for (const args of r.commands) {
      if (error) break;
      error = run(args);
    }
    r.seconds = (Date.now() - s) / 1000;
    if (!error && !existsSync(path.join(dir, r.file))) error = `no ${r.file} written`;
    if (error) {
      r.failed = [labels.gen];
      fail(r.name, error);
    } else {
      made.add(r.name);
    }
  }
  const generation = (Date.now() - t0) / 1000;
  console.log(`reports_browser_test: ${made.size} of ${reports.length} reports made in ` +
              `${generation.toFixed(1)} s (${reports.map((r) => `${r.name} ${r.seconds.toFixed(1)} s`).join(", ")})`);

  // 2. Each in Chromium.
  browser = await launch(playwright);
  mkdirSync(outDir, { recursive: true });
  for (const r of reports) {
    if (!made.has(r.name)) continue;
    r.failed = [];
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    const errors = [];
    page.on("pageerror", (e) => errors.push(String(e)));
    page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
    try {
      await page.goto(pathToFileURL(path.join(dir, r.file)).href, { waitUntil: "load", timeout: 30_000 });
      const out = await page.evaluate(checkPage);
      // What a report must show beyond the common checks.
      const text = await page.evaluate(() => document.body.innerText);
      for (const want of r.contains || []) {
        if (!text.includes(want)) out.d.push(`missing: "${want}"`);
      }
      for (const k of ["a", "b", "c", "d", "e", "f", "g"]) {
        if (out[k].length > 0) r.failed.push(labels[k]);
        for (const what of out[k]) fail(r.name, `${k}: ${what}`);
      }
      if (errors.length > 0) {
        r.failed.push(labels.js);
        fail(r.name, `page errors: ${errors.join("; ")}`);
      }
      r.charts = out.charts;
      r.shapes = out.shapes;
      await page.screenshot({ path: path.join(outDir, `report-${r.name}.png`), fullPage: true });
    } catch (e) {
      r.failed.push(labels.open);
      fail(r.name, `could not be opened and checked: ${e && e.stack || e}`);
    } finally {
      await page.close();
    }
  }
} catch (e) {
  fail("(test)", String(e && e.stack || e));
} finally {
  clearTimeout(guard);
  if (browser) await browser.close();
}

// 3. One line per report.
for (const r of reports) {
  const failed = r.failed || [labels.open];
  const charts = r.charts !== undefined ? ` [${r.charts} charts, ${r.shapes} data shapes]` : "";
  console.log(`${r.name.padEnd(13)} ${failed.length ? "FAIL" : "PASS"} ${r.file}${charts}` +
              (failed.length ? `: ${failed.join(", ")}` : ""));
}
const failedCount = [...results.values()].reduce((n, l) => n + l.length, 0);
if (failedCount === 0) {
  rmSync(dir, { recursive: true, force: true });
  console.log(`reports_browser_test: passed (screenshots in ${outDir})`);
  process.exit(0);
}
console.log(`reports_browser_test: ${failedCount} failed; inputs and reports kept in ${dir}; ` +
            `screenshots in ${outDir}`);
process.exit(1);
