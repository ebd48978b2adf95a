"""A loopback OpenAI-compatible upstream for the gateway tests (real sockets, real HTTP).

Usage: fake_openai_upstream.py PORT_FILE LOG_FILE

Binds 127.0.0.1:0, writes the port to PORT_FILE, and appends one JSON line per request it
*executes* to LOG_FILE (path, model, stream, stream_options, authorization header). It reports
usage in every response: prompt_tokens = PROMPT (default 100), completion_tokens = COMPLETION
(default 10), or as `input_tokens`/`output_tokens` for /v1/responses. Model "slow-stream" streams
one chunk every 100 ms for 10 s (for cut tests). With STUB_RELEASE=PATH in its environment, model
"held" answers a whole (non-streamed) reply only once PATH exists, and "held-stream" streams one
chunk every 100 ms until PATH exists (each at most 120 s): a test that creates PATH only after it
saw its answer knows the model had not finished, however slow the machine. When a slow or held
model has sent its last byte it logs {"done": true, "model": ..., "t": ...} (a line
`executed()` leaves out).

/v1/responses: every response gets its own id (`resp_<n>`), streamed as server-sent events when
the request asks (`stream: true`); the request's tool types,
`background` and `previous_response_id` are logged. A background response is answered
`queued` and kept: `GET /v1/responses/<id>` answers it, `POST /v1/responses/<id>/cancel` makes
it `cancelled` (logged as {"path": ..., "cancel": id}), `DELETE` forgets it (logged as
{"path": ..., "delete": id}); an id it does not hold is a 404. With STUB_CANCEL_FAILS=1 every cancel is logged and answered
500 (the response keeps running).
"""
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT_FILE, LOG_FILE = sys.argv[1], sys.argv[2]
PROMPT, COMPLETION = 100, 10
LOCK = threading.Lock()
RESPONSES = {}
RESPONSE_COUNT = [0]
RELEASE = os.environ.get("STUB_RELEASE")
HOLD_LIMIT_S = 120


def released(since):
    """True once the release file exists (or the hold has lasted HOLD_LIMIT_S)."""
    return (RELEASE is not None and os.path.exists(RELEASE)) or time.time() - since > HOLD_LIMIT_S


def log(entry):
    with LOCK, open(LOG_FILE, "a") as f:
        f.write(json.dumps(entry) + "\n")


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
        if self.path.endswith("/cancel"):
            rid = self.path.split("/")[-2]
            log({"path": self.path, "cancel": rid,
                 "authorization": self.headers.get("Authorization"), "t": time.time()})
            if rid not in RESPONSES:
                return self.send_json(404, {"error": {"message": "no such response"}})
            if os.environ.get("STUB_CANCEL_FAILS"):
                return self.send_json(500, {"error": {"message": "cancel failed"}})
            RESPONSES[rid]["status"] = "cancelled"
            return self.send_json(200, RESPONSES[rid])
        log({"path": self.path, "model": model, "stream": stream,
             "stream_options": body.get("stream_options"),
             "tools": [t.get("type") for t in body.get("tools") or []],
             "background": body.get("background"),
             "previous_response_id": body.get("previous_response_id"),
             "web_search_options": body.get("web_search_options"),
             "authorization": self.headers.get("Authorization"), "t": time.time()})
        usage = {"prompt_tokens": PROMPT, "completion_tokens": COMPLETION,
                 "total_tokens": PROMPT + COMPLETION}
        if self.path.endswith("/embeddings"):
            return self.send_json(200, {"object": "list", "model": model, "data": [
                {"object": "embedding", "index": 0, "embedding": [0.1, 0.2]}],
                "usage": {"prompt_tokens": PROMPT, "total_tokens": PROMPT}})
        if self.path.endswith("/responses"):
            with LOCK:
                RESPONSE_COUNT[0] += 1
                rid = "resp_%d" % RESPONSE_COUNT[0]
            if body.get("background"):
                RESPONSES[rid] = {"id": rid, "object": "response", "created_at": 0,
                                  "model": model, "status": "queued", "background": True,
                                  "output": []}
                return self.send_json(200, RESPONSES[rid])
            response = {"id": rid, "object": "response", "created_at": 0,
                "model": model, "status": "completed", "output": [{"type": "message", "id": "m1",
                "role": "assistant", "status": "completed", "content": [{"type": "output_text",
                "text": "hello from upstream", "annotations": []}]}],
                "usage": {"input_tokens": PROMPT, "output_tokens": COMPLETION,
                          "total_tokens": PROMPT + COMPLETION}}
            if not stream:
                return self.send_json(200, response)
            # Streamed as the Responses API streams (the Codex CLI asks for it).
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for event in [{"type": "response.created",
                           "response": dict(response, status="in_progress", output=[])},
                          {"type": "response.output_item.done", "output_index": 0,
                           "item": response["output"][0]},
                          {"type": "response.completed", "response": response}]:
                data = ("event: %s\ndata: %s\n\n" % (event["type"], json.dumps(event))).encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            return
        if not stream:
            if model == "held":
                since = time.time()
                while not released(since):
                    time.sleep(0.02)
            reply = self.send_json(200, {"id": "chatcmpl-1", "object": "chat.completion",
                "created": 0, "model": model, "choices": [{"index": 0, "finish_reason": "stop",
                "message": {"role": "assistant", "content": "hello from upstream"}}],
                "usage": usage})
            if model == "held":
                log({"done": True, "model": model, "t": time.time()})
            return reply
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def chunk(obj):
            data = ("data: " + (obj if isinstance(obj, str) else json.dumps(obj)) + "\n\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        words = ["hello", " from", " upstream"]
        delay = 0.0
        if model == "slow-stream":
            words, delay = ["tick "] * 100, 0.1
        if model == "held-stream":
            since = time.time()
            words, delay = iter(lambda: None if released(since) else "tick ", None), 0.1
        try:
            for word in words:
                chunk({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0,
                       "model": model, "choices": [{"index": 0, "delta": {"content": word},
                       "finish_reason": None}]})
                time.sleep(delay)
            if (body.get("stream_options") or {}).get("include_usage"):
                chunk({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0,
                       "model": model, "choices": [], "usage": usage})
            chunk("[DONE]")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            if delay:
                log({"done": True, "model": model, "t": time.time()})
        except (BrokenPipeError, ConnectionResetError):
            log({"path": self.path, "model": model, "cut": True, "t": time.time()})


    def do_GET(self):
        rid = self.path.split("?")[0].split("/")[-1]
        log({"path": self.path, "get": rid, "t": time.time()})
        if rid not in RESPONSES:
            return self.send_json(404, {"error": {"message": "no such response"}})
        return self.send_json(200, RESPONSES[rid])

    def do_DELETE(self):
        rid = self.path.split("/")[-1]
        log({"path": self.path, "delete": rid, "t": time.time()})
        if RESPONSES.pop(rid, None) is None:
            return self.send_json(404, {"error": {"message": "no such response"}})
        return self.send_json(200, {"id": rid, "object": "response.deleted", "deleted": True})


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(PORT_FILE + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
import os
os.rename(PORT_FILE + ".tmp", PORT_FILE)
server.serve_forever()
