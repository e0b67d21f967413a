"""A deterministic "model" for the framework examples: no network, no API key.

Each framework example plugs this into its own model interface (Pydantic AI's
``FunctionModel``, the OpenAI Agents SDK's ``Model``). Given the user's message and the tool
results the framework has shown the model so far, it picks the next tool call or the final
answer, the way a real model would follow mongogate's turn protocol:

1. ``create_session`` if the app has none yet, then ``begin_turn`` with the app's turn id;
2. if ``begin_turn`` says the turn was already answered (a retry), reply with the stored answer;
3. otherwise query ``find_orders``: first with a ``$where`` filter, which mongogate rejects,
   then corrected from the error text to a plain equality filter;
4. ``end_turn`` with the reply, and answer.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, NoReturn

import anyio

QUESTION = "Which of my orders are paid?"
#: seconds the framework's MCP client waits for `initialize` (Pydantic AI's default is 5 s). A stdio
#: `mongogate serve` answers it without waiting for the database (benchmarks/startup.py: about 1.1x
#: a bare SDK server), but a loaded machine was seen taking 4.4 to 6.4 s from spawn to answer, and
#: the first run on a data directory also starts its engine: 30 s fits, and still catches a hang.
INIT_TIMEOUT_S = 30.0
#: The first, naive filter: mongogate refuses `$where` (server-side code) with operator_not_allowed.
NAIVE_FILTER: dict[str, Any] = {"$where": "this.status == 'paid'"}


@dataclass(frozen=True)
class Call:
    name: str
    args: dict[str, Any]


@dataclass(frozen=True)
class Final:
    text: str


@dataclass(frozen=True)
class Seen:
    """One tool result as the framework showed it to the model (``error`` for a refused call)."""

    name: str
    result: Any
    error: bool


def prompt(turn_id: str, session_id: str | None, text: str = QUESTION) -> str:
    """What the app sends as the user message: the ids a real app would put in its system prompt."""
    return json.dumps({"session_id": session_id, "turn_id": turn_id, "text": text})


def as_dict(result: Any) -> dict[str, Any]:
    """Tool results arrive as dicts or as JSON text, depending on the framework."""
    if isinstance(result, dict):
        return result
    if isinstance(result, list) and len(result) == 1:
        return as_dict(result[0])
    if isinstance(result, str):
        try:
            value = json.loads(result)
        except json.JSONDecodeError:
            return {"text": result}
        return as_dict(value) if not isinstance(value, str) else {"text": value}
    text = getattr(result, "text", None)
    return as_dict(text) if isinstance(text, str) else {"value": result}


def looks_like_error(text: str) -> bool:
    """mongogate's tool errors read ``[code] message`` (``[code] retryable ...`` when worth retrying)."""
    return re.match(r"\[[a-z_]+\] ", text) is not None


def error_text(result: Any) -> str:
    return result if isinstance(result, str) else json.dumps(as_dict(result))


def next_step(user_message: str, seen: list[Seen]) -> Call | Final:
    """The next action for this point of the run (pure: the same history gives the same step)."""
    ask = json.loads(user_message)
    last = {s.name: s for s in seen}
    session_id = ask["session_id"]
    if session_id is None:
        if "create_session" not in last:
            return Call("create_session", {"title": "framework example"})
        session_id = as_dict(last["create_session"].result)["session_id"]
    if "begin_turn" not in last:
        return Call("begin_turn", {"session_id": session_id, "turn_id": ask["turn_id"], "text": ask["text"]})
    begin = as_dict(last["begin_turn"].result)
    if begin.get("answered"):
        return Final(str(begin["answer"]))  # a retried turn: the stored answer, no new work
    queries = [s for s in seen if s.name == "find_orders"]
    if not queries:
        return Call("find_orders", {"filter": NAIVE_FILTER, "limit": 5})
    if queries[-1].error:
        message = error_text(queries[-1].result)
        if len(queries) == 1 and re.search(r"operator_not_allowed|\$where", message):
            # Read the refusal and fix the filter: equality on the declared field instead of code.
            return Call("find_orders", {"filter": {"status": "paid"}, "limit": 5})
        return Final(f"I could not query your orders: {message}")
    found = as_dict(queries[-1].result)

    reply = f"You have {found['returned']} paid order(s) (showing at most 5)."
    if "end_turn" not in last:
        args = {"session_id": session_id, "turn_id": ask["turn_id"], "lease_id": begin["lease_id"]}
        return Call("end_turn", {**args, "reply": reply})
    return Final(f"{reply} [session {session_id}]")


def split_session(final: str) -> tuple[str, str]:
    """The reply and the session id from the first run's final text."""
    m = re.fullmatch(r"(.*) \[session (\S+)\]", final)
    if m is None:
        raise AssertionError(f"unexpected final answer: {final!r}")
    return m.group(1), m.group(2)


def _engine(data_dir: str, action: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MONGOGATE_SERVER__DATA_DIR": data_dir}
    env.pop("MONGOGATE_CONFIG", None)
    cmd = [sys.executable, "-m", "mongogate.cli", "engine", action]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, check=False)


def run_example(main: Callable[[str], Awaitable[int]], doc: str | None, prefix: str) -> NoReturn:
    """An example's command line: `--data-dir` (default: a temporary directory), then exit with
    ``main``'s status, having stopped the engine the example's server started."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", help="mongogate's data directory (default: a temporary one)")
    a = p.parse_args()
    with contextlib.ExitStack() as stack:
        data_dir = a.data_dir or stack.enter_context(tempfile.TemporaryDirectory(prefix=prefix))
        stack.enter_context(stops_its_engine(data_dir))  # leaves first: before the directory goes
        status = anyio.run(main, data_dir)
    sys.exit(status)


@contextlib.contextmanager
def stops_its_engine(data_dir: str) -> Iterator[None]:
    """Stop the embedded engine the example's server started in ``data_dir`` (it would otherwise
    idle for 5 minutes, on a temporary directory already deleted); one that was already running
    before the example (someone else's) is left alone."""
    already = _engine(data_dir, "status").returncode == 0
    try:
        yield
    finally:
        if not already:
            _engine(data_dir, "stop")
