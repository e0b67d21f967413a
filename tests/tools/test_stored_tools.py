"""mongogate's own tools are listed from their stored declarations; their modules are imported at
the first call of one of them (tools/stored_tools.py, issue 38.6).

Old code imported the memory, run and long-term memory tools' modules and built them at every
start, about 18 ms of `serve`'s imports and building (quiet machine). What a client lists and
what a call does must not change: every tool listed from its declaration equals, field by field,
the one its family's module builds, for the default settings and for settings that change the
filled-in limits and the scopes; and a call runs the module's own tool."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from mongogate.config import Settings, load_settings
from mongogate.server.app import build_server
from mongogate.tools import output_schema
from mongogate.tools.stored_tools import FAMILIES, family_tools
from tests.conftest import make_settings
from tests.helpers import failure, ok

VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "memory limits": {
        "memory": {
            "max_id_length": 40,
            "max_message_bytes": 5000,
            "max_context_limit": 33,
            "default_context_limit": 7,
            "max_lease_ms": 90_000,
            "long_term": {"max_text_bytes": 900, "required_scopes": ["memory:rw"], "max_recall_limit": 9},
        }
    },
    "argument bounds": {"limits": {"max_argument_chars": 3000, "metadata_max_keys": 17}},
}


def _settings(overrides: dict[str, Any]) -> Settings:
    return load_settings(None, auth={"mode": "none", "tenant": "acme"}, **overrides)


def _listed(tool: Any) -> dict[str, Any]:
    """What a client sees of a tool, and what the SDK checks a call against."""
    return {
        "name": tool.name,
        "title": tool.title,
        "description": tool.description,
        "parameters": tool.parameters,
        "output_schema": tool.output_schema,
        "annotations": tool.annotations,
        "context_kwarg": tool.context_kwarg,
        "is_async": tool.is_async,
        "arguments": tool.fn_metadata.arg_model,
    }


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_a_tool_listed_from_its_declaration_is_the_one_its_module_builds(family: str, variant: str) -> None:
    settings = _settings(VARIANTS[variant])
    declared = family_tools(family, settings)
    built = family_tools(family, settings, declared=False)
    assert [_listed(t) for t in declared] == [_listed(t) for t in built]
    assert all(a.fn is not b.fn for a, b in zip(declared, built, strict=True))  # really from the file


@pytest.mark.parametrize("family", list(FAMILIES))
def test_with_pydantics_output_schemas_the_listed_tools_publish_them_too(
    family: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`output_schema.LEAN = False` (how benchmarks/recall_index.py and recall_call_path.py build
    the server of the code before the lean schemas) reaches the listed tools too: the stored
    declarations hold the lean form only, so the family is built from its module."""
    monkeypatch.setattr(output_schema, "LEAN", False)
    settings = _settings({})
    declared = family_tools(family, settings)
    built = family_tools(family, settings, declared=False)
    assert [_listed(t) for t in declared] == [_listed(t) for t in built]


def test_the_variants_change_what_is_filled_in() -> None:
    """The comparison above is not vacuous: the settings reach the schemas."""
    plain = {t.name: t for t in family_tools("memory", _settings({}))}
    changed = {t.name: t for t in family_tools("memory", _settings(VARIANTS["memory limits"]))}
    assert plain["load_context"].parameters != changed["load_context"].parameters
    assert '"maxLength": 40' in str(changed["load_context"].parameters).replace("'", '"')


@pytest.mark.anyio
async def test_a_call_runs_the_modules_own_tool(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    """Checks, errors and answers are the built tool's: a refusal in its words, a turn stored."""
    server = build_server(make_settings(engine_uri, db_name, tmp_path))
    async with Client(server) as c:
        assert (await failure(c, "create_session", title=7)).startswith("[invalid_input] argument 'title'")
        sid = (await ok(c, "create_session", title="t"))["session_id"]
        began = await ok(c, "begin_turn", session_id=sid, turn_id="t1", text="hello")
        assert began["answered"] is False and [m["content"] for m in began["messages"]] == ["hello"]
        assert (await ok(c, "acquire_run", run_id="r1"))["version"] == 0


@pytest.mark.anyio
async def test_a_family_whose_module_fails_to_load_answers_an_internal_error_and_serving_goes_on(
    engine_uri: str, db_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool whose module cannot be built at its first call (broken code) fails in the one shape
    every tool failure has, not marked retryable (a retry fails the same way), and the other
    tools still serve."""
    monkeypatch.setitem(FAMILIES, "runs", "mongogate.tools.no_such_module:run_tools")
    server = build_server(make_settings(engine_uri, db_name, tmp_path))
    async with Client(server) as c:
        said = await failure(c, "acquire_run", run_id="r1")
        # not "(retryable)": the same module fails to load at every try, until the server is mended
        assert said.startswith("[internal] acquire_run cannot run: its code failed to load in this server")
        assert (await ok(c, "create_session", title="t"))["session_id"]
