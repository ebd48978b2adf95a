// The official TypeScript MCP SDK client through the gateway: initialize, print {"ready":true},
// wait for one line on stdin, then one tool call. Prints one JSON object: {ok, class, code,
// message, data} for the call's error (class is the SDK's: McpError for a protocol error,
// StreamableHTTPError for a transport one), or {ok:true}.
//
// Usage: node ts_client.mjs MCP_URL TOKEN
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, token] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
const client = new Client({ name: "stopline-test", version: "1" });
await client.connect(transport);
console.log(JSON.stringify({ ready: true }));
await new Promise((resolve) => process.stdin.once("data", resolve));
process.stdin.pause();
let out;
try {
  await client.callTool({ name: "work", arguments: {} });
  out = { ok: true };
} catch (error) {
  out = { ok: false, class: error.constructor.name, code: error.code, message: error.message, data: error.data };
}
await client.close();
console.log(JSON.stringify(out));
