#!/usr/bin/env python3
"""A minimal Streamable HTTP MCP server that counts the tool calls it executes.

Usage: counting_server.py PORT_FILE COUNT_FILE
Listens on 127.0.0.1 (an ephemeral port, written to PORT_FILE once listening). Offers one tool,
`count`, with no annotations (so it is not read-only): each execution appends its request id
to COUNT_FILE (under an exclusive lock) before answering. Answers JSON, never SSE; no sessions.
"""
import fcntl
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT_FILE, COUNT_FILE = sys.argv[1], sys.argv[2]
TOOL = {"name": "count", "description": "Counts one execution.", "inputSchema": {"type": "object", "properties": {}}}


def answer(message):
    method, rid = message.get("method"), message.get("id")
    if rid is None:
        return None
    if method == "initialize":
        version = message.get("params", {}).get("protocolVersion", "2025-06-18")
        result = {"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": {"name": "counting", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [TOOL]}
    elif method == "tools/call":
        with open(COUNT_FILE, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.write(f"{rid}\n")
            f.flush()
        time.sleep(0.05)
        result = {"content": [{"type": "text", "text": "counted"}], "isError": False}
    elif method == "ping":
        result = {}
    else:
        return {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no such method"}}
    return {"jsonrpc": "2.0", "id": rid, "result": result}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        self.send_response(405)
        self.end_headers()

    def do_DELETE(self):
        self.send_response(200)
        self.end_headers()

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) if self.headers.get("Content-Length") else self.read_chunked()
        message = json.loads(body)
        replies = [r for r in (answer(m) for m in (message if isinstance(message, list) else [message])) if r]
        if not replies:
            self.send_response(202)
            self.end_headers()
            return
        data = json.dumps(replies if isinstance(message, list) else replies[0]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def read_chunked(self):
        data = b""
        while True:
            size = int(self.rfile.readline().strip(), 16)
            if size == 0:
                self.rfile.readline()
                return data
            data += self.rfile.read(size)
            self.rfile.readline()


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(PORT_FILE + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
import os
os.rename(PORT_FILE + ".tmp", PORT_FILE)
server.serve_forever()
