#!/usr/bin/env python3
"""A stdio MCP server that records every line it receives, for stopline's tests.

Usage: recording_server.py LOG_FILE
Each line read on stdin is appended to LOG_FILE exactly as received, then answered: initialize,
tools/list (tools `allowed` and `forbidden`, no annotations) and tools/call (echoes the name).
Batches are answered as batches; notifications get no answer.
"""
import json
import sys

LOG = sys.argv[1]
TOOLS = [{"name": n, "inputSchema": {"type": "object"}} for n in ("allowed", "forbidden")]


def answer(message):
    if "id" not in message or "method" not in message:
        return None
    method = message["method"]
    if method == "initialize":
        result = {"protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}}, "serverInfo": {"name": "recording", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": "ran " + message["params"]["name"]}]}
    else:
        return {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "no such method"}}
    return {"jsonrpc": "2.0", "id": message["id"], "result": result}


for line in sys.stdin:
    with open(LOG, "a") as log:
        log.write(line if line.endswith("\n") else line + "\n")
    message = json.loads(line)
    if isinstance(message, list):
        replies = [r for r in map(answer, message) if r]
        reply = replies or None
    else:
        reply = answer(message)
    if reply is not None:
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
