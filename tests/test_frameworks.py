"""Real agent frameworks drive mongogate end to end: examples/frameworks/ run as a user runs them.

Each example starts ``mongogate serve --demo`` over stdio through the framework's own MCP client
and a deterministic model (no network, no API key), runs a whole turn with a rejected filter the
model corrects from the error text, then a retry that gets the stored answer; it exits non-zero
when anything differs. Both frameworks install next to our pinned ``mcp`` (the ``frameworks``
extra, installed by ``make setup``); without them the tests skip and say how to install.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import ROOT

FRAMEWORKS = ROOT / "examples" / "frameworks"

CASES = [
    pytest.param("pydantic_ai_agent.py", "pydantic_ai", "pydantic-ai-slim[mcp]", id="pydantic-ai"),
    pytest.param("openai_agents_agent.py", "agents", "openai-agents", id="openai-agents"),
]


@pytest.mark.embedded_engine  # the examples serve --demo on the engine of their data directory
@pytest.mark.slow
@pytest.mark.parametrize(("script", "module", "package"), CASES)
def test_framework_runs_a_turn_a_correction_and_a_retry(
    script: str, module: str, package: str, tmp_path: Path
) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{package} is not installed: pip install -e '.[frameworks]' (make setup does)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MONGOGATE_", "OPENAI_"))}
    proc = subprocess.run(
        [sys.executable, str(FRAMEWORKS / script), "--data-dir", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout.splitlines()
    assert out[0] == "turn: create_session -> begin_turn -> find_orders -> find_orders -> end_turn"
    assert out[1].startswith("reply: You have ") and "paid order(s)" in out[1]
    assert out[2].startswith("rejected filter, as the model saw it: [operator_not_allowed] ")
    assert "$where" in out[2]
    assert out[3] == "retry: begin_turn -> " + out[1].removeprefix("reply: ")
    assert out[-1] == "ok"
    # the audit log has the rejected filter, once
    events = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert [e["reason"] for e in events if e["event"] == "filter_rejected"] == ["operator_not_allowed"]
    # issue 20.6: the example stops the engine its server started (it idled on for 5 minutes)
    from mongogate.engine import client as engine_client

    assert engine_client.status(tmp_path) is None, "the example left its embedded engine running"


@pytest.mark.slow
@pytest.mark.parametrize(("script", "module", "package"), CASES)
def test_framework_example_sets_an_initialize_timeout_that_fits(
    script: str, module: str, package: str
) -> None:
    """Pydantic AI's default is 5 s: a loaded machine took 4.4 to 6.4 s from spawn to answer."""
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{package} is not installed: pip install -e '.[frameworks]' (make setup does)")
    sys.path.insert(0, str(FRAMEWORKS))
    try:
        example = importlib.import_module(script.removesuffix(".py"))
    finally:
        sys.path.remove(str(FRAMEWORKS))
    if module == "pydantic_ai":
        # no public getter: the options the toolset will give its client
        timeout = example.mongogate_toolset("/nonexistent")._client_options["init_timeout"]
    else:
        timeout = example.mongogate_stdio("/nonexistent").client_session_timeout_seconds
    assert timeout == example.INIT_TIMEOUT_S >= 30


@pytest.mark.embedded_engine  # the example opens the embedded engine of its data directory
@pytest.mark.slow
def test_the_openai_agents_session_example_remembers_across_runs(tmp_path: Path) -> None:
    if importlib.util.find_spec("agents") is None:
        pytest.skip("openai-agents is not installed: pip install -e '.[openai-agents]' (make setup does)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MONGOGATE_", "OPENAI_"))}
    proc = subprocess.run(
        [sys.executable, str(FRAMEWORKS / "openai_agents_session.py"), "--data-dir", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == [
        "first: Noted.",
        "second: Your name is Ana.",
        "stored items: 4",
        "ok",
    ]
    from mongogate.engine import client as engine_client

    assert engine_client.status(tmp_path) is None, "the example left its embedded engine running"


def test_the_package_imports_no_framework_and_the_adapters_import_theirs_only() -> None:
    """`import mongogate` (and the bridge under both adapters) never load langgraph or the Agents SDK:
    the package stays importable without the extras."""
    code = (
        "import sys, mongogate, mongogate.bridge\n"
        "assert not {'langgraph', 'agents'} & set(sys.modules), sorted(sys.modules)\n"
        "import mongogate.openai_agents\n"
        "assert 'langgraph' not in sys.modules and 'agents' not in sys.modules\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
