"""The one JSON line a framework agent prints when its run ends, for frameworks.rs.

{"ok": true, "output": ...} or {"ok": false, "exception": class name, "module": its module,
"message": str(e), "causes": [class names along __cause__/__context__], "status": the HTTP
status a cause carries, "code": the stopline refusal code a cause carries (the model route's
`error.code`, the MCP route's JSON-RPC `error.data.code`, from the HTTP body or the MCP
client's McpError)}.
"""
import asyncio
import json


def _refusal(error):
    status = code = None
    seen, depth = error, 0
    while seen is not None and depth < 8:
        body = getattr(seen, "body", None)
        if code is None and isinstance(body, dict):
            code = body.get("code") or (body.get("error") or {}).get("code")
        error_data = getattr(seen, "error", None)  # an MCP client's McpError: its ErrorData
        if code is None and isinstance(getattr(error_data, "data", None), dict):
            code = error_data.data.get("code")
        response = getattr(seen, "response", None)
        if status is None:
            status = getattr(seen, "status_code", None) or getattr(response, "status_code", None)
        if code is None and response is not None:
            try:
                error_object = response.json().get("error") or {}
                code = (error_object.get("data") or {}).get("code") or error_object.get("code")
            except Exception:
                pass  # a streamed body that was never read has nothing to parse
        seen, depth = seen.__cause__ or seen.__context__, depth + 1
    return status, code


def describe(error):
    causes, seen = [], error
    while seen is not None and len(causes) < 8:
        causes.append(type(seen).__name__)
        seen = seen.__cause__ or seen.__context__
    status, code = _refusal(error)
    return {"ok": False, "exception": type(error).__name__, "module": type(error).__module__,
            "message": str(error), "causes": causes, "status": status, "code": code}


def report(main):
    """Run the coroutine function `main` and print how it ended."""
    try:
        out = {"ok": True, "output": asyncio.run(main())}
    except BaseException as error:  # the test wants the class of whatever ended the run
        while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
            error = error.exceptions[0]
        out = describe(error)
    print(json.dumps(out, default=str), flush=True)
