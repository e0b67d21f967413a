"""The tools' schemas are read from tools/schemas.json at start, not generated (issue 38.6).

Old code generated every input and output schema with pydantic at every start (40-60 ms of CPU
before `tools/list`, benchmarks/startup.py). The stored file must be exactly what the models
generate: when a model changes, rewrite it with ``python -m mongogate.tools.write_schemas``."""

from __future__ import annotations

import json
import subprocess
import sys

from mongogate.tools import stored_schemas, write_schemas

#: a fresh interpreter builds a default server and says what it generated from a model
BUILD = """
import json
from mongogate.config import load_settings
from mongogate.server.app import build_server
from mongogate.tools import stored_schemas

stored_schemas.GENERATED = {}
settings = load_settings(None, auth={"mode": "none", "tenant": "acme"})
server = build_server(settings)
print(json.dumps(stored_schemas.GENERATED))
"""


def test_the_stored_schemas_are_what_the_models_generate() -> None:
    on_file = json.loads(stored_schemas.PATH.read_text(encoding="utf-8"))
    assert on_file == write_schemas.generate(), (
        "tools/schemas.json is out of date: run `python -m mongogate.tools.write_schemas`"
    )
    assert len(on_file["input"]) >= 20 and len(on_file["output"]) >= 20


def test_a_default_server_generates_no_schema_at_start() -> None:
    run = subprocess.run([sys.executable, "-c", BUILD], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.strip().splitlines()[-1]) == {}


def test_a_tool_whose_model_is_not_stored_still_gets_its_schema() -> None:
    """An application's own tool (its model is not in the file) is generated as before."""
    from pydantic import Field

    from mongogate.tools.base import ToolInput, make_tool

    class Mine(ToolInput):
        word: str = Field(max_length=5, description="a short word")

    async def handler(call: object, args: object) -> dict[str, str]:
        return {}

    tool = make_tool(name="mine", description="mine", input_model=Mine, handler=handler)
    assert tool.parameters["properties"]["word"]["maxLength"] == 5
    assert tool.parameters["additionalProperties"] is False
