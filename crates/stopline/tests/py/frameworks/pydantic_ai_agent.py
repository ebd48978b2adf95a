"""A pydantic-ai agent wired through stopline, as docs/wiring-agents.md shows it.

Usage: pydantic_ai_agent.py   (env: STOPLINE_GATEWAY, e.g. http://127.0.0.1:7077, and
STOPLINE_TOKEN, the agent's token). Runs the agent until it ends and prints how
(outcome.py).
"""
import os

from openai import AsyncOpenAI
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from outcome import report

# --- wiring (docs/wiring-agents.md, "pydantic-ai") ---
gateway, token = os.environ["STOPLINE_GATEWAY"], os.environ["STOPLINE_TOKEN"]
model = OpenAIChatModel(
    "gpt-test",
    provider=OpenAIProvider(
        openai_client=AsyncOpenAI(base_url=f"{gateway}/v1", api_key=token, max_retries=0)),
)
tools = MCPToolset(
    f"{gateway}/mcp/everything",
    headers={"Authorization": f"Bearer {token}"},
    tool_error_behavior="error",  # a refused tool call raises instead of a ModelRetry
)
agent = Agent(model, toolsets=[tools], instructions="Use the tools.")
# --- end of wiring ---


async def main():
    async with agent:
        result = await agent.run("Echo until told to stop.")
        return result.output


report(main)
