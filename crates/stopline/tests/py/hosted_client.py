"""Ask a model provider, through the gateway, to act on the agent's behalf, with the official
`openai` and `anthropic` Python SDKs (SPEC §13.2: provider-side tools, background work).

Usage: hosted_client.py BASE_URL MODE [ARG]
BASE_URL is the gateway's root (the OpenAI client gets BASE_URL/v1). MODE:
  openai_plain | openai_mcp | openai_web_search | openai_code_interpreter | openai_background |
  openai_previous ID | openai_get ID | openai_cancel ID | openai_delete ID |
  chat_web_search | anthropic_mcp | anthropic_web_fetch
The token comes from STOPLINE_TEST_TOKEN. Prints one JSON line:
{"ok": true, "id": ..., "status": ...} or
{"ok": false, "status": HTTP status, "code": the stopline code, "error": text,
 "message": the error object's message}.
"""
import json
import os
import sys

import importlib

base_url, mode = sys.argv[1], sys.argv[2]
arg = sys.argv[3] if len(sys.argv) > 3 else None
token = os.environ["STOPLINE_TEST_TOKEN"]
# Only the SDK the mode uses is imported (each takes seconds to import on a loaded machine).
sdk = importlib.import_module("anthropic" if mode.startswith("anthropic") else "openai")
if mode.startswith("anthropic"):
    an = sdk.Anthropic(base_url=base_url, api_key=token, max_retries=0, timeout=30)
else:
    oa = sdk.OpenAI(base_url=base_url + "/v1", api_key=token, max_retries=0, timeout=30)
ATTACKER = "https://attacker.example/mcp"


def response(r):
    return {"ok": True, "id": r.id, "status": getattr(r, "status", None)}


try:
    if mode == "openai_mcp":
        out = response(oa.responses.create(model="gpt-test", input="hi", tools=[
            {"type": "function", "name": "f", "parameters": {"type": "object"}},
            {"type": "mcp", "server_label": "x", "server_url": ATTACKER,
             "require_approval": "never"}]))
    elif mode == "openai_web_search":
        out = response(oa.responses.create(model="gpt-test", input="hi",
                                           tools=[{"type": "web_search"}]))
    elif mode == "openai_code_interpreter":
        out = response(oa.responses.create(model="gpt-test", input="hi", tools=[
            {"type": "code_interpreter", "container": {"type": "auto"}}]))
    elif mode == "openai_background":
        out = response(oa.responses.create(model="gpt-test", input="hi", background=True))
    elif mode == "openai_plain":
        out = response(oa.responses.create(model="gpt-test", input="hi"))
    elif mode == "openai_previous":
        out = response(oa.responses.create(model="gpt-test", input="and then?",
                                           previous_response_id=arg))
    elif mode == "openai_get":
        out = response(oa.responses.retrieve(arg))
    elif mode == "openai_cancel":
        out = response(oa.responses.cancel(arg))
    elif mode == "openai_delete":
        oa.responses.delete(arg)
        out = {"ok": True, "id": arg, "status": "deleted"}
    elif mode == "chat_web_search":
        r = oa.chat.completions.create(model="gpt-test", max_tokens=16, web_search_options={},
                                       messages=[{"role": "user", "content": "hi"}])
        out = {"ok": True, "id": r.id, "status": None}
    elif mode == "anthropic_mcp":
        r = an.beta.messages.create(
            model="claude-test", max_tokens=10, betas=["mcp-client-2025-04-04"],
            messages=[{"role": "user", "content": "hi"}],
            mcp_servers=[{"type": "url", "url": ATTACKER, "name": "x"}])
        out = {"ok": True, "id": r.id, "status": None}
    elif mode == "anthropic_web_fetch":
        r = an.messages.create(
            model="claude-test", max_tokens=10, messages=[{"role": "user", "content": "hi"}],
            tools=[{"type": "web_fetch_20250910", "name": "web_fetch", "max_uses": 1}],
            extra_headers={"anthropic-beta": "web-fetch-2025-09-10"})
        out = {"ok": True, "id": r.id, "status": None}
    else:
        raise SystemExit("unknown mode " + mode)
except sdk.APIStatusError as e:
    try:
        error = e.response.json().get("error", {})
    except Exception:
        error = {}
    code = error.get("stopline_code") or error.get("code")
    out = {"ok": False, "status": e.status_code, "code": code, "error": str(e),
           "message": error.get("message")}
print(json.dumps(out))
