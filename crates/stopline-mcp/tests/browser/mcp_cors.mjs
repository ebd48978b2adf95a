// A browser-based MCP client's first request to the gateway, in real headless Chromium
// (playwright-core, the system's /usr/bin/chromium): a page served from ORIGIN_HOST posts an
// MCP `initialize` with the agent's token, which makes Chromium send a CORS preflight first.
// Prints one JSON object: {origin, ok, status, session, error}. `session` is the
// Mcp-Session-Id the page could read (only an exposed header is readable).
//
// Usage: node mcp_cors.mjs MCP_URL TOKEN ORIGIN_HOST USER_DATA_DIR
import { chromium } from "playwright-core";
import { createServer } from "node:http";

const [mcpUrl, token, originHost, userDataDir] = process.argv.slice(2);
if (!userDataDir) {
  console.error("usage: mcp_cors.mjs MCP_URL TOKEN ORIGIN_HOST USER_DATA_DIR");
  process.exit(2);
}
const server = createServer((_, res) => {
  res.writeHead(200, { "content-type": "text/html" });
  res.end("<!doctype html><title>client</title>");
});
await new Promise((resolve) => server.listen(0, originHost, resolve));
const origin = `http://${originHost}:${server.address().port}`;
const context = await chromium.launchPersistentContext(userDataDir, {
  executablePath: "/usr/bin/chromium",
  headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-proxy-server", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-dev-shm-usage"],
});
let result = { origin };
try {
  const page = context.pages()[0] || (await context.newPage());
  await page.goto(origin + "/");
  result = {
    origin,
    ...(await page.evaluate(async ({ mcpUrl, token }) => {
      try {
        const response = await fetch(mcpUrl, {
          method: "POST",
          headers: {
            authorization: `Bearer ${token}`,
            "content-type": "application/json",
            accept: "application/json, text/event-stream",
          },
          body: JSON.stringify({
            jsonrpc: "2.0", id: 1, method: "initialize",
            params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "page", version: "1" } },
          }),
        });
        return { ok: true, status: response.status, session: response.headers.get("mcp-session-id") };
      } catch (error) {
        return { ok: false, error: String(error) };
      }
    }, { mcpUrl, token })),
  };
} finally {
  await context.close();
  server.close();
}
console.log(JSON.stringify(result));
