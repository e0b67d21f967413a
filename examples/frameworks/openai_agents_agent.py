"""The OpenAI Agents SDK driving mongogate over MCP (stdio) with a deterministic model.

    make setup     # installs the frameworks extra (from a clone elsewhere: docs/operations.md, Install)
    python examples/frameworks/openai_agents_agent.py

The same story as pydantic_ai_agent.py: a whole turn (create_session, begin_turn, a
find_orders query whose ``$where`` filter mongogate rejects and the model corrects from the error
text, end_turn), then a retry of the same turn that gets the stored answer. No network, no API
key: ``ScriptedModel`` implements the SDK's ``Model`` interface with ``scripted.next_step``
(tracing, which would upload to OpenAI, is off). Drop ``model=`` to use a real OpenAI model.
Exits non-zero if anything differs from that story.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agents import Agent, Runner, set_tracing_disabled
from agents.items import ModelResponse, TResponseInputItem
from agents.mcp import MCPServerStdio
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scripted import (
    INIT_TIMEOUT_S,
    Call,
    Seen,
    looks_like_error,
    next_step,
    prompt,
    run_example,
    split_session,
)


def _field(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


def _output_text(output: Any) -> str:
    """A function_call_output as text: a string, or the text parts of a content list."""
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "".join(str(_field(p, "text") or "") for p in output)
    return json.dumps(output)


class ScriptedModel(Model):
    """The SDK's model interface answered by the script: tool calls and a final message."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        items: list[TResponseInputItem] = (
            [{"role": "user", "content": input}] if isinstance(input, str) else input
        )
        user = ""
        names: dict[str, str] = {}
        seen: list[Seen] = []
        for item in items:
            kind = _field(item, "type")
            if _field(item, "role") == "user" and isinstance(_field(item, "content"), str):
                user = _field(item, "content")
            elif kind == "function_call":
                names[_field(item, "call_id")] = _field(item, "name")
            elif kind == "function_call_output":
                text = _output_text(_field(item, "output"))
                # The SDK hands a refused call's `[code] message` to the model as the output text.
                seen.append(Seen(names[_field(item, "call_id")], text, error=looks_like_error(text)))
        step = next_step(user, seen)
        if isinstance(step, Call):
            self.calls.append(step.name)
            call_id = "call_" + uuid.uuid4().hex
            out: Any = ResponseFunctionToolCall(
                type="function_call",
                id="fc_" + uuid.uuid4().hex,
                call_id=call_id,
                name=step.name,
                arguments=json.dumps(step.args),
            )
        else:
            text = ResponseOutputText(type="output_text", text=step.text, annotations=[])
            out = ResponseOutputMessage(
                type="message",
                id="msg_" + uuid.uuid4().hex,
                role="assistant",
                status="completed",
                content=[text],
            )
        return ModelResponse(output=[out], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the examples do not stream")


def mongogate_stdio(data_dir: str) -> MCPServerStdio:
    """`mongogate serve --demo` over stdio, for tenant acme (as in examples/mcp_servers.json)."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", data_dir),
        "MONGOGATE_AUTH__MODE": "none",
        "MONGOGATE_AUTH__TENANT": "acme",
        "MONGOGATE_SERVER__DATA_DIR": data_dir,
    }
    return MCPServerStdio(
        {"command": sys.executable, "args": ["-m", "mongogate.cli", "serve", "--demo"], "env": env},
        name="mongogate",
        cache_tools_list=True,
        client_session_timeout_seconds=INIT_TIMEOUT_S,  # initialize and every request
    )


async def main(data_dir: str) -> int:
    set_tracing_disabled(True)
    model = ScriptedModel()
    turn_id = uuid.uuid4().hex[:12]
    async with mongogate_stdio(data_dir) as server:
        agent = Agent(
            name="orders", instructions="Answer from the caller's orders.", model=model, mcp_servers=[server]
        )
        first = await Runner.run(agent, prompt(turn_id, None), max_turns=10)
        reply, session_id = split_session(first.final_output)
        print("turn:", " -> ".join(model.calls))
        print("reply:", reply)
        expected = ["create_session", "begin_turn", "find_orders", "find_orders", "end_turn"]
        if model.calls != expected:
            print(f"expected {expected}", file=sys.stderr)
            return 1
        refused = [
            _output_text(_field(i, "output"))
            for i in first.to_input_list()
            if _field(i, "type") == "function_call_output"
            and looks_like_error(_output_text(_field(i, "output")))
        ]
        print("rejected filter, as the model saw it:", refused[0])

        model.calls.clear()
        retry = await Runner.run(agent, prompt(turn_id, session_id), max_turns=5)
        print("retry:", " -> ".join(model.calls), "->", retry.final_output)
        if model.calls != ["begin_turn"] or retry.final_output != reply:
            print("the retry did not return the stored answer", file=sys.stderr)
            return 1
    print("ok")
    return 0


if __name__ == "__main__":
    run_example(main, __doc__, prefix="mongogate-openai-agents-")
