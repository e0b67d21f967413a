"""Every tool schema a client lists passes the MCP Inspector's portability check, `--strict`:
0 errors and 0 warnings (issue 40: 34 warnings across 11 tools, type lists in output schemas).

Run two ways: the Inspector itself from the npm registry (tests/npm_clients.py) on the stdio line
`client-config inspector` prints, with `--strict` (skipped, with the reason, when npm is out of
reach); and its rules in Python (tests/schema_lint.py) on the in-process tool list, which needs
no network, so the check never goes unrun.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Cli
from tests.npm_clients import client_env, npm_clients
from tests.schema_lint import Finding, lint_tools
from tests.tools.test_contract_snapshot import current_contract


@pytest.mark.anyio
async def test_the_demo_tool_list_has_no_portability_finding(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    tools = (await current_contract(engine_uri, db_name, tmp_path))["tools"]
    assert len(tools) >= 20 and any("outputSchema" in t for t in tools)
    assert lint_tools(tools) == []


def test_the_inspector_strict_check_passes_on_the_served_tool_list(
    cli: Cli, engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    conf = tmp_path / "mongogate.toml"
    conf.write_text(f'[database]\nuri = "{engine_uri}"\nname = "{db_name}"\n[server]\ndata_dir = "data"\n')
    r = cli(["client-config", "inspector", "--config", str(conf), "--tenant", "acme", "--demo"], {})
    assert r.returncode == 0, r.stderr
    words = shlex.split(r.stdout)
    words.insert(words.index("--cli") + 1, "--strict")
    # run through npx in the install prefix, as printed: the installed Inspector answers
    done = subprocess.run(
        words, env=client_env(tmp_path), cwd=npm_clients(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Warning:" not in done.stderr and "Error:" not in done.stderr, done.stderr[-3000:]
    assert "Schema portability" not in done.stderr, done.stderr[-3000:]
    listed: list[dict[str, Any]] = json.loads(done.stdout)["tools"]
    assert {"recall", "find_orders", "order_stats"} <= {t["name"] for t in listed}
    assert lint_tools(listed) == []  # the Python rules agree on the same list


@pytest.mark.parametrize(
    ("schema", "rule", "severity", "path"),
    [
        (
            {"type": "object", "properties": {"a": {"type": ["string", "null"]}}},
            "type-union",
            "warning",
            ".a",
        ),
        (
            {"type": "object", "properties": {"a": {"$ref": "https://x/s.json"}}},
            "remote-ref",
            "warning",
            ".a",
        ),
        (
            {"type": "object", "properties": {"a": {"description": "anything"}}},
            "untyped-schema",
            "warning",
            ".a",
        ),
        ({"type": "object", "properties": {"a": True}}, "boolean-schema", "error", ".a"),
    ],
)
def test_the_python_rules_find_what_the_inspector_finds(
    schema: dict[str, Any], rule: str, severity: str, path: str
) -> None:
    """Each rule, on the shape the Inspector's source names; what stays quiet stays quiet."""
    found = lint_tools([{"name": "t", "inputSchema": {"type": "object"}, "outputSchema": schema}])
    assert found == [Finding("t", rule, severity, f"outputSchema.properties{path}")]
    quiet: dict[str, Any] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"a": {"anyOf": [{"type": "string"}, {"type": "null"}]}, "b": {"not": {}}},
    }
    assert lint_tools([{"name": "t", "inputSchema": quiet}]) == []
