"""Drive the gateway's model proxy with the real `openai` Python client.

Usage: openai_client.py BASE_URL MODE [MODEL]
MODE: chat | stream | responses | embeddings | completions
The token comes from OPENAI_API_KEY (the agent's stopline token). Prints one JSON line:
{"ok": true, "content": ..., "chunks": N, "usage": {...}} or
{"ok": false, "status": HTTP status, "code": refusal code, "error": text}; each with "t", the
unix time the answer arrived.
"""
import json
import sys
import time

import openai

base_url, mode = sys.argv[1], sys.argv[2]
model = sys.argv[3] if len(sys.argv) > 3 else "gpt-test"
client = openai.OpenAI(base_url=base_url, max_retries=0, timeout=30)
try:
    if mode == "chat":
        r = client.chat.completions.create(model=model, max_tokens=16,
                                           messages=[{"role": "user", "content": "hi"}])
        out = {"ok": True, "content": r.choices[0].message.content,
               "usage": r.usage.model_dump() if r.usage else None}
    elif mode == "stream":
        parts, usage, chunks = [], None, 0
        with client.chat.completions.create(model=model, max_tokens=16, stream=True,
                                            messages=[{"role": "user", "content": "hi"}]) as s:
            for c in s:
                chunks += 1
                if c.choices and c.choices[0].delta.content:
                    parts.append(c.choices[0].delta.content)
                if c.usage:
                    usage = c.usage.model_dump()
        out = {"ok": True, "content": "".join(parts), "chunks": chunks, "usage": usage}
    elif mode == "responses":
        r = client.responses.create(model=model, input="hi", max_output_tokens=16)
        out = {"ok": True, "content": r.output_text, "usage": r.usage.model_dump()}
    elif mode == "embeddings":
        r = client.embeddings.create(model=model, input="hi")
        out = {"ok": True, "content": len(r.data[0].embedding), "usage": r.usage.model_dump()}
    elif mode == "completions":
        r = client.completions.create(model=model, prompt="hi", max_tokens=8)
        out = {"ok": True, "usage": r.usage.model_dump() if r.usage else None}
    else:
        raise SystemExit("unknown mode " + mode)
except openai.APIStatusError as e:
    try:
        error = e.response.json().get("error", {})
    except Exception:
        error = {}
    out = {"ok": False, "status": e.status_code, "code": error.get("code"), "error": str(e)}
except openai.APIError as e:
    # An error event inside a stream (e.g. a stop's refusal) carries its object in e.body.
    body = e.body if isinstance(e.body, dict) else {}
    out = {"ok": False, "status": None, "code": body.get("code") or "transport", "error": str(e)}
out["t"] = time.time()  # when the answer (or the refusal) arrived, unix seconds
print(json.dumps(out))
