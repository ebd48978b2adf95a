"""A remote A2A agent for the gateway's A2A tests, served by the official `a2a-sdk` (JSON-RPC, A2A 1.0
and 0.3 through the SDK's compatibility layer).

Usage: a2a_remote_agent.py PORT_FILE LOG_FILE

Binds 127.0.0.1:0, writes the port to PORT_FILE, and appends one JSON line per event to LOG_FILE:
{"executed": TEXT, "task": ID, "t": T} for every message it executes (before doing anything
else), {"artifact": N, "task": ID, "t": T} for every artifact of a long task,
{"cancel": ID, "t": T} for every cancel it receives, {"card": true} for every card read and
{"auth": VALUE} for the Authorization header of every request.

A message whose text starts with "long" opens a task that produces one artifact every 50 ms until
it is cancelled (at most 120 s); any other message opens a task that completes at once with the
artifact "echo: TEXT". With STUB_IGNORE_CANCEL=1 a cancel is logged and never answered (it waits
120 s): the task keeps producing, as a remote that ignores a cancel would.
"""
import asyncio
import json
import os
import socket
import sys
import threading
import time

import uvicorn
from starlette.applications import Starlette
from starlette.middleware.base import BaseHTTPMiddleware

from a2a.helpers.proto_helpers import new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
)

PORT_FILE, LOG_FILE = sys.argv[1], sys.argv[2]
IGNORE_CANCEL = os.environ.get("STUB_IGNORE_CANCEL") == "1"
LOCK = threading.Lock()


def log(**line):
    line["t"] = time.time()
    with LOCK, open(LOG_FILE, "a") as f:
        f.write(json.dumps(line) + "\n")
        f.flush()


class Remote(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = context.get_user_input()
        task = context.current_task
        if task is None:
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        log(executed=text, task=task.id)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        if not text.startswith("long"):
            await updater.add_artifact([new_text_part(f"echo: {text}")], name="echo")
            await updater.complete()
            return
        await updater.start_work()
        n = 0
        deadline = time.time() + 120
        while time.time() < deadline:
            n += 1
            await updater.add_artifact([new_text_part(f"part {n}")], name=f"part-{n}")
            log(artifact=n, task=task.id)
            await asyncio.sleep(0.05)
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        log(cancel=context.task_id)
        if IGNORE_CANCEL:
            await asyncio.sleep(120)
            return
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel()


async def record(request, call_next):
    log(auth=request.headers.get("authorization"), path=request.url.path)
    if request.url.path.endswith("agent-card.json"):
        log(card=True)
    return await call_next(request)


def main():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/rpc"
    card = AgentCard(
        name="remote",
        description="counts every message it executes",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0"),
            AgentInterface(url=f"http://127.0.0.1:{port}/grpc", protocol_binding="GRPC", protocol_version="1.0"),
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text"],
        default_output_modes=["text"],
        skills=[AgentSkill(id="echo", name="echo", description="echo", tags=["test"])],
    )
    handler = DefaultRequestHandler(
        agent_executor=Remote(), task_store=InMemoryTaskStore(), agent_card=card
    )
    routes = create_jsonrpc_routes(handler, "/rpc", enable_v0_3_compat=True)
    routes += create_agent_card_routes(card, card_url="/rpc/.well-known/agent-card.json")
    app = Starlette(routes=routes)
    app.add_middleware(BaseHTTPMiddleware, dispatch=record)

    config = uvicorn.Config(app, log_level="warning")
    server = uvicorn.Server(config)
    with open(PORT_FILE + ".tmp", "w") as f:
        f.write(str(port))
    os.rename(PORT_FILE + ".tmp", PORT_FILE)
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
