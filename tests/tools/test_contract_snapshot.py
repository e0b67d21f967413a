"""The whole contract an agent sees, reviewed as one file: tests/snapshots/tools_demo.json.

Names, titles, descriptions, annotations, input and output schemas of every tool of the demo
configuration, and the server's instructions. Any change to what a model reads shows up as a
diff of that file in review.

Refresh it after an intended change, then review the diff:

    MONGOGATE_UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest -q tests/tools/test_contract_snapshot.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from mongogate.cli.common import registry_for
from mongogate.server.app import build_server
from tests.conftest import make_settings

pytestmark = pytest.mark.anyio

SNAPSHOT = Path(__file__).resolve().parents[1] / "snapshots" / "tools_demo.json"


async def current_contract(engine_uri: str, db_name: str, tmp_path: Path) -> dict[str, Any]:
    settings = make_settings(engine_uri, db_name, tmp_path)  # default limits: what `serve --demo` shows
    async with Client(build_server(settings, registry_for(settings, demo=True))) as c:
        tools = (await c.list_tools()).tools
        return {
            "instructions": c.instructions,
            "tools": [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools],
        }


async def test_tool_list_matches_the_snapshot(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    contract = json.dumps(
        await current_contract(engine_uri, db_name, tmp_path), indent=2, sort_keys=True, ensure_ascii=False
    )
    if os.environ.get("MONGOGATE_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOT.parent.mkdir(parents=True, exist_ok=True)
        SNAPSHOT.write_text(contract + "\n", encoding="utf-8")
    assert SNAPSHOT.exists(), f"no snapshot yet: run with MONGOGATE_UPDATE_SNAPSHOTS=1 ({__doc__})"
    expected = SNAPSHOT.read_text(encoding="utf-8").rstrip("\n")
    assert contract == expected, (
        "the tool list an agent sees changed; if intended, refresh tests/snapshots/tools_demo.json with "
        "MONGOGATE_UPDATE_SNAPSHOTS=1 and review the diff"
    )
