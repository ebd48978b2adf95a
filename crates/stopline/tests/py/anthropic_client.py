"""Drive the gateway's Messages API proxy with the official `anthropic` Python SDK.

Usage: anthropic_client.py BASE_URL MODE [MODEL] [N]
MODE: message | stream | count | bearer (the token as an auth token: Authorization: Bearer) |
      concurrent (N messages at once, one thread each; prints a JSON list)
The token comes from STOPLINE_TEST_TOKEN (the agent's stopline token). Every request sends the
headers `anthropic-beta: stopline-test-beta` and `anthropic-version: 2023-06-01`. Prints one JSON line:
{"ok": true, "content": ..., "usage": {...}, "events": [...]} or
{"ok": false, "exception": SDK exception class, "status": HTTP status, "type": error type,
 "code": error.stopline_code, "error": text}.
"""
import json
import os
import sys
import threading

import anthropic

base_url, mode = sys.argv[1], sys.argv[2]
model = sys.argv[3] if len(sys.argv) > 3 else "claude-test"
count = int(sys.argv[4]) if len(sys.argv) > 4 else 32
token = os.environ["STOPLINE_TEST_TOKEN"]
BETA = {"anthropic-beta": "stopline-test-beta", "anthropic-version": "2023-06-01"}
MESSAGES = [{"role": "user", "content": "x" * 400}]


def client(as_bearer=False):
    if as_bearer:
        return anthropic.Anthropic(base_url=base_url, auth_token=token, api_key=None,
                                   max_retries=0, timeout=30)
    return anthropic.Anthropic(base_url=base_url, api_key=token, max_retries=0, timeout=30)


def failure(e):
    body = getattr(e, "body", None)
    error = body.get("error", {}) if isinstance(body, dict) else {}
    return {"ok": False, "exception": type(e).__name__, "status": getattr(e, "status_code", None),
            "type": error.get("type"), "code": error.get("stopline_code"), "error": str(e)}


def one(as_bearer=False):
    try:
        r = client(as_bearer).messages.create(model=model, max_tokens=10, messages=MESSAGES,
                                              extra_headers=BETA)
        return {"ok": True, "content": "".join(b.text for b in r.content if b.type == "text"),
                "usage": r.usage.model_dump()}
    except anthropic.APIError as e:
        return failure(e)


try:
    if mode in ("message", "bearer"):
        out = one(as_bearer=mode == "bearer")
    elif mode == "stream":
        events, parts = [], []
        try:
            with client().messages.stream(model=model, max_tokens=10, messages=MESSAGES,
                                          extra_headers=BETA) as s:
                for event in s:
                    events.append(event.type)
                    if event.type == "text":
                        parts.append(event.text)
                final = s.get_final_message()
            out = {"ok": True, "content": "".join(parts), "usage": final.usage.model_dump(),
                   "events": sorted(set(events))}
        except anthropic.APIError as e:
            out = dict(failure(e), events=sorted(set(events)), content="".join(parts))
    elif mode == "count":
        r = client().messages.count_tokens(model=model, messages=MESSAGES, extra_headers=BETA)
        out = {"ok": True, "input_tokens": r.input_tokens}
    elif mode == "concurrent":
        results = [None] * count
        barrier = threading.Barrier(count)

        def worker(i):
            barrier.wait()
            results[i] = one()

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(count)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        out = results
    else:
        raise SystemExit("unknown mode " + mode)
except anthropic.APIError as e:
    out = failure(e)
print(json.dumps(out))
