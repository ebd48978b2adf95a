#!/usr/bin/env python3
"""Drive one MCP session with the official Python `mcp` client, for stopline's tests.

Usage:  mcp_driver.py http URL TOKEN      (Streamable HTTP, token sent as a bearer)
        mcp_driver.py stdio CMD [ARG...]  (stdio: the client starts CMD itself)

Reads one JSON command per line on stdin and prints one JSON result per line on stdout:
  {"op":"list"}                                  -> {"ok":true,"tools":[names]}
  {"op":"call","tool":T,"args":{...}}            -> {"ok":true,"is_error":b,"text":[...],"structured":...}
  {"op":"burst","tool":T,"n":N,"args":{...}}     -> {"ok":true,"results":[<call results>]} (N at once)
  {"op":"quit"}
A refused call is {"ok":false,"code":<json-rpc code>,"message":...,"data":<error.data>}.
"""
import asyncio
import json
import os
import sys

from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError


async def call(session, tool, args, timeout):
    try:
        result = await asyncio.wait_for(session.call_tool(tool, args), timeout)
        texts = [c.text for c in result.content if getattr(c, "text", None) is not None]
        return {"ok": True, "is_error": bool(result.is_error), "text": texts, "structured": result.structured_content}
    except MCPError as error:
        return {"ok": False, "code": error.error.code, "message": error.error.message, "data": error.error.data}
    except Exception as error:  # a test wants to see every failure, not a traceback
        return {"ok": False, "exception": repr(error)}


async def serve_commands(session):
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        command = json.loads(line)
        op, timeout = command["op"], command.get("timeout", 20)
        if op == "quit":
            print(json.dumps({"ok": True}), flush=True)
            return
        if op == "list":
            try:
                tools = await asyncio.wait_for(session.list_tools(), timeout)
                out = {"ok": True, "tools": [t.name for t in tools.tools]}
            except MCPError as error:
                out = {"ok": False, "code": error.error.code, "message": error.error.message, "data": error.error.data}
        elif op == "call":
            out = await call(session, command["tool"], command.get("args", {}), timeout)
        elif op == "burst":
            calls = [call(session, command["tool"], command.get("args", {}), timeout) for _ in range(command["n"])]
            out = {"ok": True, "results": await asyncio.gather(*calls)}
        else:
            out = {"ok": False, "exception": f"unknown op {op}"}
        print(json.dumps(out), flush=True)


async def main():
    mode = sys.argv[1]
    if mode == "http":
        url, token = sys.argv[2], sys.argv[3]
        async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http:
            async with streamable_http_client(url, http_client=http) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    print(json.dumps({"ok": True, "ready": True}), flush=True)
                    await serve_commands(session)
    elif mode == "stdio":
        params = StdioServerParameters(command=sys.argv[2], args=sys.argv[3:], env=dict(os.environ))
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                print(json.dumps({"ok": True, "ready": True}), flush=True)
                await serve_commands(session)
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    asyncio.run(main())
