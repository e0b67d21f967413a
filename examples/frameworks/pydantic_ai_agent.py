"""Pydantic AI driving mongogate over MCP (stdio) with a deterministic FunctionModel.

    make setup     # installs the frameworks extra (from a clone elsewhere: docs/operations.md, Install)
    python examples/frameworks/pydantic_ai_agent.py

The agent runs a whole turn (create_session, begin_turn, a find_orders query whose ``$where``
filter mongogate rejects and the model corrects from the error text, end_turn), then retries the
same turn and gets the stored answer without querying again. No network, no API key: the model
is ``scripted.next_step``; swap ``FunctionModel(...)`` for ``"openai:gpt-5"`` or any model name
to use a real one. Exits non-zero if anything differs from that story.
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path
from typing import Any

from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scripted import INIT_TIMEOUT_S, Call, Seen, next_step, prompt, run_example, split_session


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Translate Pydantic AI's history into ``Seen`` results and ask the script for the next step."""
    del info
    user = ""
    seen: list[Seen] = []
    for message in messages:
        if not isinstance(message, ModelRequest):
            continue
        for part in message.parts:
            if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                user = part.content
            elif isinstance(part, ToolReturnPart):
                # A refused call (mongogate's `[code] message`) comes back with outcome "retried":
                # the model sees the error text and may call again.
                seen.append(Seen(part.tool_name, part.content, error=part.outcome != "success"))
            elif isinstance(part, RetryPromptPart) and part.tool_name:  # older Pydantic AI releases
                text = part.content if isinstance(part.content, str) else str(part.content)
                seen.append(Seen(part.tool_name, text, error=True))
    step = next_step(user, seen)
    if isinstance(step, Call):
        return ModelResponse(parts=[ToolCallPart(step.name, step.args, tool_call_id=uuid.uuid4().hex)])
    return ModelResponse(parts=[TextPart(step.text)])


def tool_calls(messages: list[ModelMessage]) -> list[str]:
    return [
        p.tool_name
        for m in messages
        if isinstance(m, ModelResponse)
        for p in m.parts
        if p.part_kind == "tool-call"
    ]


def mongogate_stdio(data_dir: str) -> StdioTransport:
    """`mongogate serve --demo` over stdio, for tenant acme (as in examples/mcp_servers.json)."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", data_dir),
        "MONGOGATE_AUTH__MODE": "none",
        "MONGOGATE_AUTH__TENANT": "acme",
        "MONGOGATE_SERVER__DATA_DIR": data_dir,
    }
    return StdioTransport(
        sys.executable, ["-m", "mongogate.cli", "serve", "--demo"], env=env, keep_alive=False
    )


def mongogate_toolset(data_dir: str) -> MCPToolset[Any]:
    """The toolset, with an initialize timeout that fits a loaded machine (the default is 5 s)."""
    # the first call may wait for the embedded engine to start and the demo data to be seeded
    return MCPToolset(mongogate_stdio(data_dir), max_retries=2, init_timeout=INIT_TIMEOUT_S, read_timeout=120)


async def main(data_dir: str) -> int:
    toolset = mongogate_toolset(data_dir)
    agent = Agent(FunctionModel(model), toolsets=[toolset])
    turn_id = uuid.uuid4().hex[:12]
    async with agent:
        first = await agent.run(prompt(turn_id, None))
        reply, session_id = split_session(first.output)
        calls = tool_calls(first.all_messages())
        print("turn:", " -> ".join(calls))
        print("reply:", reply)
        expected = ["create_session", "begin_turn", "find_orders", "find_orders", "end_turn"]
        if calls != expected:
            print(f"expected {expected}", file=sys.stderr)
            return 1
        rejected = [
            p.content
            for m in first.all_messages()
            for p in getattr(m, "parts", [])
            if isinstance(p, ToolReturnPart | RetryPromptPart) and getattr(p, "outcome", "") != "success"
        ]
        print("rejected filter, as the model saw it:", rejected[0])

        retry = await agent.run(prompt(turn_id, session_id))
        retry_calls = tool_calls(retry.all_messages())
        print("retry:", " -> ".join(retry_calls), "->", retry.output)
        if retry_calls != ["begin_turn"] or retry.output != reply:
            print("the retry did not return the stored answer", file=sys.stderr)
            return 1
    print("ok")
    return 0


if __name__ == "__main__":
    run_example(main, __doc__, prefix="mongogate-pydantic-ai-")
