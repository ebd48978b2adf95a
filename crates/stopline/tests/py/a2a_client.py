"""The official `a2a-sdk` client, through the gateway, for the gateway's A2A tests.

Usage: a2a_client.py GATEWAY_URL AGENT MODE [ARG]

The agent's stopline token comes from STOPLINE_TEST_TOKEN and rides on every request (the
client's httpx headers). The client resolves the card at GATEWAY_URL/a2a/AGENT (the SDK's card
resolver) and talks to whatever URL the card names. Modes:

- card: print the card as the SDK parsed it.
- send TEXT: send one message (not streamed); print the task.
- stream TEXT: send one message streamed; print one JSON line per event as it arrives, then
  {"end": "done"} or {"end": "error", "error": ...}.
- get ID, cancel ID: print the task, or the error.
- subscribe ID: as stream, for a task already open.

Every line printed is JSON; an error is {"ok": false, "error": str, "type": name}.
"""
import asyncio
import json
import sys
import uuid

import httpx
from google.protobuf.json_format import MessageToDict

from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
)

GATEWAY, AGENT, MODE = sys.argv[1], sys.argv[2], sys.argv[3]
ARG = sys.argv[4] if len(sys.argv) > 4 else None


def say(value):
    print(json.dumps(value), flush=True)


def message(text):
    return Message(
        message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)]
    )


async def main():
    import os

    token = os.environ["STOPLINE_TEST_TOKEN"]
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(headers=headers, timeout=60) as http:
        base = f"{GATEWAY}/a2a/{AGENT}"
        try:
            card = await A2ACardResolver(http, base).get_agent_card()
        except Exception as e:  # the card route's own refusal
            say({"ok": False, "error": str(e), "type": type(e).__name__})
            return
        if MODE == "card":
            say({"ok": True, "card": MessageToDict(card)})
            return
        streaming = MODE in ("stream", "subscribe")
        config = ClientConfig(streaming=streaming, httpx_client=http)
        client = ClientFactory(config).create(card)
        try:
            if MODE in ("send", "stream"):
                request = SendMessageRequest(message=message(ARG))
                async for event in client.send_message(request):
                    say({"event": MessageToDict(event)})
                if streaming:
                    say({"end": "done"})
            elif MODE == "subscribe":
                async for event in client.subscribe(SubscribeToTaskRequest(id=ARG)):
                    say({"event": MessageToDict(event)})
                say({"end": "done"})
            elif MODE == "get":
                task = await client.get_task(GetTaskRequest(id=ARG))
                say({"ok": True, "task": MessageToDict(task)})
            elif MODE == "cancel":
                task = await client.cancel_task(CancelTaskRequest(id=ARG))
                say({"ok": True, "task": MessageToDict(task)})
        except Exception as e:
            if streaming:
                say({"end": "error", "error": str(e), "type": type(e).__name__})
            else:
                say({"ok": False, "error": str(e), "type": type(e).__name__})


asyncio.run(main())
