"""A loopback MCP Streamable HTTP upstream (JSON answers) that records every frame it receives.

Usage: frame_counting_upstream.py PORT_FILE LOG_FILE

Each POST body is logged as it arrived, before anything else: {"frame": <the parsed body>,
"t": unix seconds}. Batches are answered as batches (a server that accepts them). Tools, none
annotated: `count` (answers at once) and `slow` (answers after `arguments.seconds`, default 3,
then logs {"done": <request id>, "t": ...}). `ping` answers {}. Notifications get 202.
"""
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT_FILE, LOG_FILE = sys.argv[1], sys.argv[2]
LOCK = threading.Lock()
TOOLS = [{"name": n, "description": n, "inputSchema": {"type": "object"}} for n in ("count", "slow")]


def log(entry):
    with LOCK, open(LOG_FILE, "a") as f:
        f.write(json.dumps(entry) + "\n")


def answer(message):
    method, mid = message.get("method"), message.get("id")
    if mid is None or method is None:
        return None
    if method == "initialize":
        result = {"protocolVersion": message.get("params", {}).get("protocolVersion", "2025-06-18"),
                  "capabilities": {"tools": {}}, "serverInfo": {"name": "frames", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "ping":
        result = {}
    elif method == "tools/call":
        params = message.get("params", {})
        if params.get("name") == "slow":
            time.sleep(float(params.get("arguments", {}).get("seconds", 3)))
            log({"done": mid, "t": time.time()})
        result = {"content": [{"type": "text", "text": "done " + str(params.get("name"))}]}
    else:
        return {"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no such method"}}
    return {"jsonrpc": "2.0", "id": mid, "result": result}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        frame = json.loads(self.rfile.read(length) or b"null")
        log({"frame": frame, "t": time.time()})
        messages = frame if isinstance(frame, list) else [frame]
        replies = [r for r in map(answer, messages) if r]
        if not replies:
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = json.dumps(replies if isinstance(frame, list) else replies[0]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_DELETE(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(PORT_FILE + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(PORT_FILE + ".tmp", PORT_FILE)
server.serve_forever()
