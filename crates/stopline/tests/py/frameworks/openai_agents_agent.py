"""An OpenAI Agents SDK agent wired through stopline, as docs/wiring-agents.md shows it.

Usage: openai_agents_agent.py   (env: STOPLINE_GATEWAY, e.g. http://127.0.0.1:7077, and
STOPLINE_TOKEN, the agent's token). Runs the agent until it ends and prints how
(outcome.py).
"""
import os

from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from agents.mcp import MCPServerStreamableHttp
from openai import AsyncOpenAI

from outcome import report

# --- wiring (docs/wiring-agents.md, "OpenAI Agents SDK") ---
set_tracing_disabled(True)  # else traces go to the vendor, with the stopline token as the key
gateway, token = os.environ["STOPLINE_GATEWAY"], os.environ["STOPLINE_TOKEN"]
model = OpenAIChatCompletionsModel(
    model="gpt-test",
    openai_client=AsyncOpenAI(base_url=f"{gateway}/v1", api_key=token, max_retries=0),
)
tools = MCPServerStreamableHttp(
    name="everything",
    params={"url": f"{gateway}/mcp/everything", "headers": {"Authorization": f"Bearer {token}"}},
    failure_error_function=None,  # a refused tool call raises instead of "please try again"
)
# --- end of wiring ---


async def main():
    async with tools:
        agent = Agent(name="assistant", instructions="Use the tools.", model=model,
                      mcp_servers=[tools])
        result = await Runner.run(agent, "Echo until told to stop.", max_turns=50)
        return result.final_output


report(main)
