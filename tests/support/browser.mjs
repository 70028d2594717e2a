// What the browser tests share (the agent's dashboard, the site page, the reports): Debian's
// chromium driven by playwright-core from web/node_modules, headless, with nothing in it that
// reaches out; a test without chromium (or another program it needs) exits 77, skipped, unless
// HEADROOM_REQUIRE_BROWSER=1 makes that a failure.
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

export const chromiumPath = process.env.CHROMIUM || "/usr/bin/chromium";

// Playwright's chromium launcher; exits 77 (or 1) when chromium or one of `programs` is missing.
export function playwrightOrSkip(test, root, programs = []) {
  for (const need of [chromiumPath, ...programs]) {
    if (!existsSync(need)) {
      console.log(`${test}: ${need} not found (./scripts/setup.sh installs it)`);
      process.exit(process.env.HEADROOM_REQUIRE_BROWSER === "1" ? 1 : 77);
    }
  }
  const require = createRequire(path.resolve(root, "web", "package.json"));
  return require("playwright-core").chromium;
}

// Playwright gives Chromium a fresh, empty profile of its own.
export function launch(playwright) {
  return playwright.launch({
    executablePath: chromiumPath,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
}

// check(cond, what): a failed check is said at once and kept in `failures`.
export function checker() {
  const failures = [];
  return {
    failures,
    check(cond, what) {
      if (!cond) {
        failures.push(what);
        console.log("FAIL:", what);
      }
    },
  };
}
