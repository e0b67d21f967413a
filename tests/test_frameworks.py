"""Real agent frameworks drive mongogate end to end: examples/frameworks/ run as a user runs them.

Each example starts ``mongogate serve --demo`` over stdio through the framework's own MCP client
and a deterministic model (no network, no API key), runs a whole turn with a rejected filter the
model corrects from the error text, then a retry that gets the stored answer; it exits non-zero
when anything differs. Both frameworks install next to our pinned ``mcp`` (the ``frameworks``
extra, installed by ``make setup``); without them the tests skip and say how to install.
"""

from __future__ import annotations

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
