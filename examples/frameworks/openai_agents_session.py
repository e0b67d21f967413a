"""An OpenAI Agents SDK agent whose conversation lives in mongogate (`MongogateSession`).

    make setup     # installs the openai-agents extra (from a clone elsewhere: docs/operations.md, Install)
    python examples/frameworks/openai_agents_session.py

The model here is FAKE: no LLM is reachable from where this runs (no network, no API key), so
``EchoMemoryModel`` implements the SDK's ``Model`` interface and answers from the history the
SDK hands it, which the SDK read from the session. Two runs of the agent on one session: the
first tells it a name, the second asks for it back, through a second `MongogateSession`
object (as another process would), and the history is then popped and cleared. Pass
``model="gpt-4.1"`` (and set OPENAI_API_KEY) to use a real model instead. Exits non-zero if
anything differs from that story.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agents import Agent, Runner, set_tracing_disabled
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

from mongogate import load_settings
from mongogate.openai_agents import MongogateSession

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scripted import run_example


def _field(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


class EchoMemoryModel(Model):
    """A fake model (no LLM here): it remembers a name only if the history the SDK passes holds it."""

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        said = [str(_field(i, "content")) for i in items if _field(i, "role") == "user"]
        names = [s.removeprefix("My name is ").rstrip(".") for s in said if s.startswith("My name is ")]
        reply = f"Your name is {names[-1]}." if said[-1].startswith("What") and names else "Noted."
        text = ResponseOutputText(type="output_text", text=reply, annotations=[])
        out = ResponseOutputMessage(
            type="message", id="msg_" + uuid.uuid4().hex, role="assistant", status="completed", content=[text]
        )
        return ModelResponse(output=[out], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("this example does not stream")


async def main(data_dir: str) -> int:
    set_tracing_disabled(True)  # tracing would upload to OpenAI
    settings = load_settings(None, server={"data_dir": data_dir})  # the embedded engine of data_dir
    agent = Agent(name="assistant", instructions="Be brief.", model=EchoMemoryModel())
    chat = f"chat-{uuid.uuid4().hex[:8]}"
    async with MongogateSession(chat, tenant="acme", config=settings) as session:
        first = await Runner.run(agent, "My name is Ana.", session=session)
        print("first:", first.final_output)
    async with MongogateSession(chat, tenant="acme", config=settings) as again:  # a new connection
        second = await Runner.run(agent, "What is my name?", session=again)
        print("second:", second.final_output)
        items = await again.get_items()
        print("stored items:", len(items))
        last = await again.pop_item()
        await again.clear_session()
        left = await again.get_items()
    async with MongogateSession(chat, tenant="globex", config=settings) as other:
        theirs = await other.get_items()  # another tenant's session of the same name: empty
    ok = (
        first.final_output == "Noted."
        and second.final_output == "Your name is Ana."
        and len(items) == 4
        and _field(last, "role") == "assistant"
        and left == []
        and theirs == []
    )
    print("ok" if ok else "unexpected", file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    run_example(main, __doc__, prefix="mongogate-openai-session-")
