"""A loopback MCP Streamable HTTP upstream (JSON responses) that records every tool call it
executes. Usage: fake_mcp_upstream.py PORT_FILE LOG_FILE

Tools: `write` (not read-only: a destination operation) and `echo` (readOnlyHint: true). A call
whose arguments carry `hold_s` is answered that many seconds after it was recorded.
"""
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT_FILE, LOG_FILE = sys.argv[1], sys.argv[2]
LOCK = threading.Lock()
TOOLS = [
    {"name": "write", "description": "an effect", "inputSchema": {"type": "object"}},
    {"name": "echo", "description": "read only", "inputSchema": {"type": "object"},
     "annotations": {"readOnlyHint": True}},
]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body=None, headers=()):
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        msg = json.loads(self.rfile.read(length) or b"{}")
        method, mid = msg.get("method"), msg.get("id")
        if mid is None:
            return self.reply(202)
        if method == "initialize":
            result = {"protocolVersion": msg["params"].get("protocolVersion", "2025-06-18"),
                      "capabilities": {"tools": {}}, "serverInfo": {"name": "fake", "version": "1"}}
            return self.reply(200, {"jsonrpc": "2.0", "id": mid, "result": result},
                              [("Mcp-Session-Id", "fake-session")])
        if method == "tools/list":
            return self.reply(200, {"jsonrpc": "2.0", "id": mid, "result": {"tools": TOOLS}})
        if method == "tools/call":
            name = msg["params"]["name"]
            with LOCK, open(LOG_FILE, "a") as f:
                f.write(json.dumps({"tool": name, "id": mid, "t": time.time()}) + "\n")
            time.sleep(float((msg["params"].get("arguments") or {}).get("hold_s", 0.02)))
            return self.reply(200, {"jsonrpc": "2.0", "id": mid, "result": {
                "content": [{"type": "text", "text": "done " + name}]}})
        return self.reply(200, {"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no"}})

    def do_DELETE(self):
        self.reply(200)


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(PORT_FILE + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(PORT_FILE + ".tmp", PORT_FILE)
server.serve_forever()
