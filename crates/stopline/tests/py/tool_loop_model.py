"""A loopback OpenAI-compatible model that never stops calling a tool, for the framework tests.

Usage: tool_loop_model.py PORT_FILE LOG_FILE

Binds 127.0.0.1:0, writes the port to PORT_FILE (atomically), and answers every
POST …/chat/completions (plain or streamed) that offers tools with a call of the tool STUB_TOOL
(default `echo`) with arguments {"message": "step N"}, so an agent framework loops: model, tool,
model, tool… It appends one JSON line per request to LOG_FILE *when the request arrives*, before
answering: {"n": N, "path", "model", "stream", "tools": [names], "last_role": the role of the
last message (`tool` once a tool result came back), "t"}.

The STUB_HOLD_AT-th request (1-based) is held: after logging it, the stub writes the file
STUB_HELD and answers only once the file STUB_RELEASE exists (a test engages a stop in between).
A held answer whose client is gone is logged as {"n": N, "cut": true}.
"""
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT_FILE, LOG_FILE = sys.argv[1], sys.argv[2]
TOOL = os.environ.get("STUB_TOOL", "echo")
HOLD_AT = int(os.environ.get("STUB_HOLD_AT", "0"))
HELD, RELEASE = os.environ.get("STUB_HELD"), os.environ.get("STUB_RELEASE")
LOCK = threading.Lock()
COUNT = [0]


def log(entry):
    with LOCK, open(LOG_FILE, "a") as f:
        f.write(json.dumps(entry) + "\n")
        f.flush()
        os.fsync(f.fileno())


def tool_names(body):
    names = []
    for tool in body.get("tools") or []:
        function = tool.get("function") or {}
        names.append(function.get("name") or tool.get("name"))
    return names


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
        self.wfile.flush()

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        if not self.path.endswith("/chat/completions"):
            return self.send_json(404, {"error": {"message": "only chat completions here",
                                                  "type": "invalid_request_error"}})
        with LOCK:
            COUNT[0] += 1
            n = COUNT[0]
        model, stream, tools = body.get("model", ""), bool(body.get("stream")), tool_names(body)
        messages = body.get("messages") or [{}]
        log({"n": n, "path": self.path, "model": model, "stream": stream, "tools": tools,
             "last_role": messages[-1].get("role"), "t": time.time()})
        if n == HOLD_AT:
            with open(HELD + ".tmp", "w") as f:
                f.write(str(n))
            os.rename(HELD + ".tmp", HELD)
            while not os.path.exists(RELEASE):
                time.sleep(0.01)
        usage = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
        if TOOL in tools:
            call = {"id": f"call_{n}", "type": "function",
                    "function": {"name": TOOL, "arguments": json.dumps({"message": f"step {n}"})}}
            message, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
        else:
            message, finish = {"role": "assistant", "content": f"answer {n}"}, "stop"
        try:
            if not stream:
                return self.send_json(200, {"id": f"chatcmpl-{n}", "object": "chat.completion",
                                            "created": int(time.time()), "model": model,
                                            "choices": [{"index": 0, "finish_reason": finish,
                                                         "message": message}],
                                            "usage": usage})
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            delta = dict(message)
            if "tool_calls" in delta:
                delta["tool_calls"] = [dict(c, index=0) for c in delta["tool_calls"]]
            chunks = [{"id": f"chatcmpl-{n}", "object": "chat.completion.chunk", "created": 0,
                       "model": model, "choices": [{"index": 0, "delta": delta,
                                                    "finish_reason": finish}]}]
            if (body.get("stream_options") or {}).get("include_usage"):
                chunks.append({"id": f"chatcmpl-{n}", "object": "chat.completion.chunk",
                               "created": 0, "model": model, "choices": [], "usage": usage})
            for obj in chunks + ["[DONE]"]:
                data = ("data: " + (obj if isinstance(obj, str) else json.dumps(obj)) + "\n\n").encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            log({"n": n, "cut": True, "t": time.time()})


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(PORT_FILE + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(PORT_FILE + ".tmp", PORT_FILE)
server.serve_forever()
