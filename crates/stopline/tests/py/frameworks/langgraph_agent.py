"""A LangGraph agent with langchain-mcp-adapters wired through stopline, as
docs/wiring-agents.md shows it.

Usage: langgraph_agent.py   (env: STOPLINE_GATEWAY, e.g. http://127.0.0.1:7077, and
STOPLINE_TOKEN, the agent's token). Runs the agent until it ends and prints how
(outcome.py).
"""
import os

from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent

from outcome import report

# --- wiring (docs/wiring-agents.md, "LangGraph") ---
gateway, token = os.environ["STOPLINE_GATEWAY"], os.environ["STOPLINE_TOKEN"]
model = ChatOpenAI(model="gpt-test", base_url=f"{gateway}/v1", api_key=token, max_retries=0)
mcp = MultiServerMCPClient({
    "everything": {
        "transport": "streamable_http",
        "url": f"{gateway}/mcp/everything",
        "headers": {"Authorization": f"Bearer {token}"},
    },
})
# --- end of wiring ---


async def main():
    tools = await mcp.get_tools()
    agent = create_react_agent(model, tools)
    result = await agent.ainvoke({"messages": [("user", "Echo until told to stop.")]},
                                 {"recursion_limit": 100})
    return result["messages"][-1].content


report(main)
