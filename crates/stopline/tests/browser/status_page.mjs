// Drives the gateway's status page in real headless Chromium (playwright-core, the system's
// /usr/bin/chromium): loads the shell, enters the operator's token, engages a stop through the
// form, waits for the latch to appear on the page, and takes a full-page screenshot. Prints one
// JSON object with what it saw; exits non-zero on any failure, console error or CSP violation.
//
// Usage: node status_page.mjs URL TOKEN_FILE SCREENSHOT USER_DATA_DIR SCOPE LEVEL REASON
import { chromium } from "playwright-core";
import { readFileSync } from "node:fs";

const [url, tokenFile, screenshot, userDataDir, scope, level, reason] = process.argv.slice(2);
if (!reason) {
  console.error("usage: status_page.mjs URL TOKEN_FILE SCREENSHOT USER_DATA_DIR SCOPE LEVEL REASON");
  process.exit(2);
}
const token = readFileSync(tokenFile, "utf8").trim();

const context = await chromium.launchPersistentContext(userDataDir, {
  executablePath: "/usr/bin/chromium",
  headless: true,
  viewport: { width: 1280, height: 900 },
  args: [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
  ],
});
const problems = [];
const result = { problems };
try {
  const page = context.pages()[0] || (await context.newPage());
  page.on("console", (m) => {
    if (m.type() === "error") problems.push("console: " + m.text());
  });
  page.on("pageerror", (e) => problems.push("page error: " + e.message));
  const requests = [];
  page.on("request", (r) => requests.push(r.method() + " " + new URL(r.url()).pathname));

  const response = await page.goto(url, { waitUntil: "load" });
  result.shell_status = response.status();
  result.phase_without_token = (await page.textContent("#phase")).trim();

  await page.fill("#token", token);
  await page.click("#token-use");
  await page.waitForFunction(() => document.querySelector("#phase").dataset.phase !== "", null, { timeout: 15000 });
  result.phase_before = await page.getAttribute("#phase", "data-phase");
  result.connection = (await page.textContent("#conn")).trim();
  result.token_in_session_storage = await page.evaluate(() => sessionStorage.getItem("stopline.token") !== null);

  await page.fill("#stop-scope", scope);
  await page.selectOption("#stop-level", level);
  await page.fill("#stop-reason", reason);
  await page.click("#stop-button");
  await page.waitForSelector("#stop-receipt.ok", { timeout: 15000 });
  result.receipt = (await page.textContent("#stop-receipt")).trim();

  const rowSelector = `#latches tbody tr[data-scope="${scope}"]`;
  await page.waitForSelector(rowSelector, { timeout: 15000 });
  result.latch_row = await page.$$eval(`${rowSelector} td`, (cells) => cells.map((c) => c.textContent.trim()));
  // Let one more poll land so the screenshot shows the settled phase and the drills.
  await page.waitForFunction(() => document.querySelector("#phase").dataset.phase !== "RUNNING", null, { timeout: 15000 });
  await page.waitForTimeout(1500);
  result.phase_after = await page.getAttribute("#phase", "data-phase");
  result.recovery_commands = (await page.textContent("#recovery-commands")).trim();
  result.agents = await page.$$eval("#agents .agent", (nodes) => nodes.map((n) => n.dataset.agent));
  result.budget_bars = await page.$$eval("#agents .bar-row", (rows) => rows.map((r) => r.textContent.trim()));
  result.drills = await page.$$eval("#drills tbody tr", (rows) => rows.map((r) => r.textContent.trim()));
  result.buttons = await page.$$eval("button", (b) => b.map((x) => x.textContent.trim()));
  result.forms_posting = requests.filter((r) => r.startsWith("POST"));
  await page.screenshot({ path: screenshot, fullPage: true });
} catch (error) {
  problems.push("failed: " + (error && error.stack ? error.stack : String(error)));
} finally {
  await context.close();
}
console.log(JSON.stringify(result));
process.exit(problems.length ? 1 : 0);
