"""Every file in examples/ runs, as a user would run it (real processes, the SDK's stdio client).

Where each example is exercised:
- embed.py: here, over stdio with one tool call;
- mcp_servers.json: here, each entry launched by the SDK's stdio client (paths mapped to this checkout);
  it is what `mongogate client-config claude-desktop` prints (tests/test_cli_client_config.py);
- agents.py: here, a short `mongogate worker` run, then `worker --status`; its ticks in
  tests/scheduler/test_agents.py;
- http_client.py: tests/test_cli.py, against `serve --http --demo` (what `make run` starts);
- long_term_memory.py: here, run as a user runs it (two stdio server processes in a row);
- long_conversation.py: here, 200 turns over stdio, compacted every 50 (context bytes stay flat);
- mongogate.toml: tests/test_cli.py (`check`, `tools`, `serve`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from mongogate.config import load_settings
from mongogate.config_memory import LongTermSettings
from tests.conftest import Cli
from tests.helpers import EXE, ROOT

EXAMPLES = ROOT / "examples"
#: top-level example files and the test that runs each (examples/frameworks/ has its own tests)
COVERED = {
    "agents.py": "test_agents_example_runs_in_a_worker",
    "embed.py": "test_embed_example_serves_its_tool_over_stdio",
    "http_client.py": "tests/test_cli.py::test_serve_http_demo_runs_the_example_client",
    "long_term_memory.py": "test_long_term_memory_example_recalls_in_a_new_session",
    "long_conversation.py": "test_long_conversation_example_keeps_the_context_flat",
    "mcp_servers.json": "test_mcp_servers_json_entries_start_and_answer",
    "mongogate.toml": "tests/test_cli.py::test_check_reports_and_exits_zero",
}


@pytest.fixture
def env(tmp_path: Path, engine_uri: str, db_name: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("MONGOGATE_")}
    return e | {
        "MONGOGATE_SERVER__DATA_DIR": str(tmp_path / "data"),
        "MONGOGATE_DATABASE__URI": engine_uri,
        "MONGOGATE_DATABASE__NAME": db_name,
    }


def test_every_example_file_has_a_test() -> None:
    files = sorted(p.name for p in EXAMPLES.iterdir() if p.is_file())
    assert files == sorted(COVERED), "a new example needs a test here (and an entry in COVERED)"


def text_of(result: Any) -> str:
    return str(result.content[0].text) if result.content else ""


@pytest.mark.anyio
async def test_embed_example_serves_its_tool_over_stdio(env: dict[str, str]) -> None:
    """`python examples/embed.py` crashed at once on its own spec (projection field not declared)."""
    params = StdioServerParameters(
        command=sys.executable, args=[str(EXAMPLES / "embed.py")], env=env, cwd=str(ROOT)
    )
    async with Client(params) as c:
        names = {t.name for t in (await c.list_tools()).tools}
        assert "recent_big_orders" in names
        r = await c.call_tool("recent_big_orders", {"filter": {"total": {"$gt": 100}}})
        assert not r.is_error, text_of(r)
        docs = (r.structured_content or {})["documents"]
        assert docs and all(d["total"] > 100 and d["number"].startswith("AC-") for d in docs)


def servers() -> dict[str, dict[str, Any]]:
    data = json.loads((EXAMPLES / "mcp_servers.json").read_text())
    return dict(data["mcpServers"])


@pytest.mark.anyio
@pytest.mark.parametrize("name", ["mongogate"])
async def test_mcp_servers_json_entries_start_and_answer(name: str, env: dict[str, str]) -> None:
    """Each entry as a desktop client launches it: `mongogate` is this venv's, paths are this checkout
    (the file is what `mongogate client-config claude-desktop` prints: tests/test_cli_client_config.py)."""
    entry = servers()[name]
    command = entry["command"]
    command = str(Path(sys.executable).parent / "mongogate") if command == "mongogate" else command
    command = command.replace("/path/to/mongogate/.venv/bin/", str(Path(sys.executable).parent) + "/")
    args = [a.replace("/path/to/mongogate", str(ROOT)) for a in entry["args"]]
    entry_env = {k: v for k, v in entry["env"].items() if k != "MONGOGATE_SERVER__DATA_DIR"}
    params = StdioServerParameters(command=command, args=args, env=env | entry_env)
    async with Client(params) as c:
        names = {t.name for t in (await c.list_tools()).tools}
        r = await c.call_tool("create_session", {"title": name})
        assert not r.is_error, text_of(r)
        if "find_orders" in names:
            r = await c.call_tool("find_orders", {"filter": {"status": "paid"}, "limit": 3})
            assert not r.is_error, text_of(r)
            docs = (r.structured_content or {})["documents"]
            assert all(d["number"].startswith("AC-") for d in docs)  # tenant acme, from the entry
            assert docs or "--demo" not in args  # demo data only with --demo


def test_agents_example_runs_in_a_worker(env: dict[str, str], cli: Cli) -> None:
    """A short `mongogate worker` run with the example agents, then `worker --status` lists them
    (in-process: what it prints is under test)."""
    env = env | {"MONGOGATE_SCHEDULER__JITTER_MAX_S": "0"}
    run = subprocess.run(
        [*EXE, "worker", "--agents", "examples/agents.py:agents", "--no-entry-points", "--duration", "1"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    status = cli(["worker", "--agents", "examples/agents.py:agents", "--status", "--json"], env)
    assert status.returncode == 0, status.stderr
    keys = sorted(json.loads(line)["agent_key"] for line in status.stdout.splitlines())
    assert keys == ["heartbeat", "message-digest", "stale-runs"]


def test_long_term_memory_example_recalls_in_a_new_session(env: dict[str, str]) -> None:
    """Remembered by one server process, recalled by the next: by meaning and by exact identifier."""
    run = subprocess.run(
        [sys.executable, str(EXAMPLES / "long_term_memory.py")],
        env=env | {"MONGOGATE_AUTH__TENANT": "acme"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stderr + run.stdout
    out = run.stdout
    assert "remember home_city: created (version 1)" in out
    assert "recall 'Which city does the user live in?': The user lives in Lisbon since March." in out
    assert "recall 'SN-48213-QX': The user's laptop has serial number SN-48213-QX." in out
    assert "search_messages 'Lisbon': ['I moved to Lisbon.']" in out


def test_long_conversation_example_keeps_the_context_flat(env: dict[str, str]) -> None:
    """200 turns compacted every 50: the session keeps all 400 messages, while what begin_turn
    returns after the first compaction is never more than 10% above its size before it."""
    run = subprocess.run(
        [sys.executable, str(EXAMPLES / "long_conversation.py")],
        env=env | {"MONGOGATE_AUTH__TENANT": "acme"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert "stored messages: 400" in lines
    assert sum(line.startswith("compacted through seq") and line.endswith("inserted") for line in lines) == 4
    assert "turn 200: " in run.stdout and "summary through 300" in run.stdout
    first, after = (
        int(x) for x in lines[-1].removeprefix("context bytes: first 50 turns max ").split(", after max ")
    )
    assert after <= first * 1.1, lines[-1]


def test_the_example_config_recalls_with_the_documented_floor() -> None:
    """Issue 40: examples/mongogate.toml (what `make run` serves) set min_score = 0.25 while the
    README gave the default, 0.125, without saying the demo differs; the demo now recalls as
    documented."""
    default = LongTermSettings.model_fields["min_score"].default
    example = load_settings(EXAMPLES / "mongogate.toml").memory.long_term.min_score
    [stated] = re.findall(r"`min_score` \(default ([0-9.]+)\)", (ROOT / "README.md").read_text())
    assert example == default == float(stated)
