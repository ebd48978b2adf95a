"""A loopback Anthropic Messages API upstream for the gateway tests (real sockets, real HTTP).

Usage: fake_anthropic_upstream.py PORT_FILE LOG_FILE

Binds 127.0.0.1:0, writes the port to PORT_FILE, and appends one JSON line per request it
*executes* to LOG_FILE (path, model, stream, max_tokens, the x-api-key, authorization,
anthropic-version and anthropic-beta headers, how many tool results the conversation carries).
Every message reports usage: input_tokens = 100, cache_creation_input_tokens = 20,
cache_read_input_tokens = 30 (in message_start), output_tokens = 10 (in message_delta).

Models:
- "slow-stream" streams one text delta every 100 ms for 10 s (for cut tests).
- a request that offers a "Bash" tool (Claude Code) in a conversation that asks to "Record the
  steps" gets, while the conversation carries fewer than STEPS (40) tool results, a tool_use of
  Bash running `echo step-<n> >> steps.log` after a pause of STEP_DELAY_S (0.3 s), and then a
  final text answer.
- anything else: the text "hello from upstream".
`POST /v1/messages/count_tokens` answers {"input_tokens": 100}.

With STUB_RELEASE=PATH in its environment, a request for model "held" is answered only once
PATH exists (at most 120 s); with STUB_HOLD_AT=N as well, so is the Bash-offering request whose
conversation carries exactly N tool results. A held request is logged as it arrives, with
"held": true, so a test knows the caller is waiting on it and can stop it there.
"""
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT_FILE, LOG_FILE = sys.argv[1], sys.argv[2]
USAGE_START = {"input_tokens": 100, "output_tokens": 1,
               "cache_creation_input_tokens": 20, "cache_read_input_tokens": 30}
OUTPUT = 10
STEPS = 40
STEP_DELAY_S = 0.3
LOCK = threading.Lock()
HOLD_AT = int(os.environ["STUB_HOLD_AT"]) if os.environ.get("STUB_HOLD_AT") else None
RELEASE = os.environ.get("STUB_RELEASE")


def log(entry):
    with LOCK, open(LOG_FILE, "a") as f:
        f.write(json.dumps(entry) + "\n")


def tool_results(body):
    count = 0
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, list):
            count += sum(1 for block in content
                         if isinstance(block, dict) and block.get("type") == "tool_result")
    return count


def offers_bash(body):
    return any(isinstance(t, dict) and t.get("name") == "Bash" for t in body.get("tools") or [])


def wants_steps(body):
    return offers_bash(body) and "Record the steps" in json.dumps(body.get("messages", []))


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

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        model = body.get("model", "")
        stream = bool(body.get("stream"))
        results = tool_results(body)
        log({"path": self.path, "model": model, "stream": stream,
             "max_tokens": body.get("max_tokens"),
             "x_api_key": self.headers.get("x-api-key"),
             "authorization": self.headers.get("Authorization"),
             "anthropic_version": self.headers.get("anthropic-version"),
             "anthropic_beta": self.headers.get("anthropic-beta"),
             "bash": offers_bash(body), "tool_results": results,
             "held": bool(RELEASE) and (model == "held"
                                        or (wants_steps(body) and results == HOLD_AT)),
             "t": time.time()})
        if self.path.startswith("/v1/messages/count_tokens"):
            return self.send_json(200, {"input_tokens": 100})
        if not self.path.startswith("/v1/messages"):
            return self.send_json(404, {"type": "error", "error": {
                "type": "not_found_error", "message": "no route " + self.path}})
        if RELEASE and (model == "held" or (wants_steps(body) and results == HOLD_AT)):
            deadline = time.time() + 120
            while not os.path.exists(RELEASE) and time.time() < deadline:
                time.sleep(0.02)
        if wants_steps(body) and results < STEPS:
            time.sleep(STEP_DELAY_S)
            command = "echo step-%d >> steps.log" % (results + 1)
            blocks = [{"type": "tool_use", "id": "toolu_%d" % (results + 1), "name": "Bash",
                       "input": {"command": command, "description": "record a step"}}]
            stop_reason = "tool_use"
        else:
            blocks = [{"type": "text", "text": "hello from upstream"}]
            stop_reason = "end_turn"
        message = {"id": "msg_%d" % results, "type": "message", "role": "assistant",
                   "model": model, "content": [], "stop_reason": None, "stop_sequence": None,
                   "usage": dict(USAGE_START)}
        if not stream:
            message.update(content=blocks, stop_reason=stop_reason,
                           usage=dict(USAGE_START, output_tokens=OUTPUT))
            return self.send_json(200, message)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def event(name, obj):
            data = ("event: %s\ndata: %s\n\n" % (name, json.dumps(obj))).encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        try:
            event("message_start", {"type": "message_start", "message": message})
            event("ping", {"type": "ping"})
            for index, block in enumerate(blocks):
                if block["type"] == "text":
                    event("content_block_start", {"type": "content_block_start", "index": index,
                                                  "content_block": {"type": "text", "text": ""}})
                    words = ["hello", " from", " upstream"]
                    delay = 0.0
                    if model == "slow-stream":
                        words, delay = ["tick "] * 100, 0.1
                    for word in words:
                        event("content_block_delta", {"type": "content_block_delta",
                              "index": index, "delta": {"type": "text_delta", "text": word}})
                        time.sleep(delay)
                else:
                    event("content_block_start", {"type": "content_block_start", "index": index,
                          "content_block": dict(block, input={})})
                    event("content_block_delta", {"type": "content_block_delta", "index": index,
                          "delta": {"type": "input_json_delta",
                                    "partial_json": json.dumps(block["input"])}})
                event("content_block_stop", {"type": "content_block_stop", "index": index})
            event("message_delta", {"type": "message_delta",
                  "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                  "usage": {"output_tokens": OUTPUT}})
            event("message_stop", {"type": "message_stop"})
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            log({"path": self.path, "model": model, "cut": True, "t": time.time()})


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(PORT_FILE + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(PORT_FILE + ".tmp", PORT_FILE)
server.serve_forever()
