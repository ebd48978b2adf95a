"""A loopback OpenAI Responses API upstream that drives the Codex CLI through shell steps (real
sockets, real HTTP, server-sent events).

Usage: fake_codex_upstream.py PORT_FILE LOG_FILE

Binds 127.0.0.1:0, writes the port to PORT_FILE, and appends one JSON line per request it
*executes* to LOG_FILE (path, model, stream, the authorization header, whether the request offers
a shell tool, how many tool outputs its input carries).

`POST /v1/responses` (streamed, as Codex asks): a request that offers a shell tool (Codex's
`shell`, `shell_command`, `exec_command` or `local_shell`) in a conversation that asks to "Record
the steps" gets, while the input carries fewer than STEPS (40) tool outputs, a call of that tool
running `echo step-<n> >> steps.log`, and then a final text answer. Anything else: the text
"hello from upstream". Every response reports usage (100 input, 10 output tokens).
`GET /v1/models` answers an empty list.

With STUB_RELEASE=PATH and STUB_HOLD_AT=N in its environment, the shell-offering request whose
input carries exactly N tool outputs is answered only once PATH exists (at most 120 s); it is
logged as it arrives, with "held": true, so a test knows the caller waits on it.
"""
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT_FILE, LOG_FILE = sys.argv[1], sys.argv[2]
STEPS = 40
LOCK = threading.Lock()
HOLD_AT = int(os.environ["STUB_HOLD_AT"]) if os.environ.get("STUB_HOLD_AT") else None
RELEASE = os.environ.get("STUB_RELEASE")
SHELL_TOOLS = ("shell_command", "exec_command", "shell", "local_shell")
USAGE = {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0},
         "output_tokens": 10, "output_tokens_details": {"reasoning_tokens": 0},
         "total_tokens": 110}


def log(entry):
    with LOCK, open(LOG_FILE, "a") as f:
        f.write(json.dumps(entry) + "\n")


def tool_outputs(body):
    items = body.get("input") if isinstance(body.get("input"), list) else []
    return sum(1 for item in items if isinstance(item, dict)
               and str(item.get("type", "")).endswith("call_output"))


def shell_tool(body):
    """The name (or type) of the first shell tool the request offers, if any."""
    offered = {}
    for tool in body.get("tools") or []:
        if isinstance(tool, dict):
            offered[tool.get("name") or tool.get("type")] = tool
    for name in SHELL_TOOLS:
        if name in offered:
            return name
    return None


def wants_steps(body):
    return shell_tool(body) is not None and "Record the steps" in json.dumps(body.get("input"))


def call_item(tool, n):
    command = "echo step-%d >> steps.log" % n
    call_id = "call_%d" % n
    if tool == "local_shell":
        return {"type": "local_shell_call", "id": "lsc_%d" % n, "call_id": call_id,
                "status": "completed", "action": {"type": "exec",
                "command": ["/bin/sh", "-c", command]}}
    if tool == "shell":
        arguments = {"command": ["/bin/sh", "-c", command]}
    elif tool == "exec_command":
        arguments = {"cmd": command}
    else:
        arguments = {"command": command}
    return {"type": "function_call", "id": "fc_%d" % n, "call_id": call_id, "name": tool,
            "arguments": json.dumps(arguments), "status": "completed"}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send_json(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        log({"path": self.path, "get": True, "t": time.time()})
        if self.path.split("?")[0].endswith("/models"):
            return self.send_json(200, {"object": "list", "data": [], "models": []})
        return self.send_json(404, {"error": {"message": "no route " + self.path}})

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        model = body.get("model", "")
        outputs = tool_outputs(body)
        tool = shell_tool(body)
        held = bool(RELEASE) and HOLD_AT is not None and wants_steps(body) and outputs == HOLD_AT
        entry = {"path": self.path, "model": model, "stream": bool(body.get("stream")),
                 "authorization": self.headers.get("Authorization"),
                 "shell": tool is not None, "tool": tool, "tool_outputs": outputs,
                 "held": held, "t": time.time()}
        if os.environ.get("STUB_DUMP"):
            entry["body"] = body
        log(entry)
        if not self.path.split("?")[0].endswith("/responses"):
            return self.send_json(404, {"error": {"message": "no route " + self.path}})
        if held:
            deadline = time.time() + 120
            while not os.path.exists(RELEASE) and time.time() < deadline:
                time.sleep(0.02)
        rid = "resp_%d" % outputs
        if wants_steps(body) and outputs < STEPS:
            items = [call_item(tool, outputs + 1)]
        else:
            items = [{"type": "message", "id": "msg_%d" % outputs, "role": "assistant",
                      "status": "completed", "content": [{"type": "output_text",
                      "text": "hello from upstream", "annotations": []}]}]
        response = {"id": rid, "object": "response", "created_at": 0, "model": model,
                    "status": "completed", "output": items, "usage": USAGE}
        if not body.get("stream"):
            return self.send_json(200, response)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def event(obj):
            data = ("event: %s\ndata: %s\n\n" % (obj["type"], json.dumps(obj))).encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        try:
            event({"type": "response.created",
                   "response": dict(response, status="in_progress", output=[], usage=None)})
            for index, item in enumerate(items):
                event({"type": "response.output_item.added", "output_index": index,
                       "item": item})
                event({"type": "response.output_item.done", "output_index": index,
                       "item": item})
            event({"type": "response.completed", "response": response})
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            log({"path": self.path, "model": model, "cut": True, "t": time.time()})


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(PORT_FILE + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(PORT_FILE + ".tmp", PORT_FILE)
server.serve_forever()
