"""The names a query tool may never take are exactly the names the built-in tool factories make.

`specs.RESERVED_TOOL_NAMES` is read by the configuration check (the base layer, before any tool
is built), so it cannot ask the factories; this pins it to them: a new built-in tool that is not
added to the list fails here, not in production as a query tool that shadows it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from mcp.server.mcpserver.tools import Tool

from mongogate.config import Settings, load_settings
from mongogate.errors import ConfigError
from mongogate.specs import MEMORY_TOOL_NAMES, RECALL_TOOL_NAMES, RESERVED_TOOL_NAMES, RUN_TOOL_NAMES
from mongogate.tools.memory_tools import memory_tools
from mongogate.tools.recall_tools import recall_tools
from mongogate.tools.registry import ToolRegistry
from mongogate.tools.run_tools import run_tools

FACTORIES: list[tuple[Callable[[Settings], list[Tool]], frozenset[str]]] = [
    (memory_tools, MEMORY_TOOL_NAMES),
    (run_tools, RUN_TOOL_NAMES),
    (recall_tools, RECALL_TOOL_NAMES),
]


@pytest.mark.parametrize(("factory", "names"), FACTORIES, ids=lambda x: getattr(x, "__name__", ""))
def test_each_factory_makes_exactly_its_listed_names(
    factory: Callable[[Settings], list[Tool]], names: frozenset[str]
) -> None:
    assert {t.name for t in factory(Settings())} == names


def test_the_reserved_names_are_every_built_in_tool_the_default_registry_builds() -> None:
    built = {t.name for t in ToolRegistry().build(Settings())}
    assert built == RESERVED_TOOL_NAMES  # no query tools registered: only built-in ones


@pytest.mark.parametrize("name", sorted(RESERVED_TOOL_NAMES))
def test_a_configured_query_tool_cannot_take_a_built_in_name(name: str, tmp_path: Path) -> None:
    cfg = tmp_path / "mongogate.toml"
    cfg.write_text(
        f'[[query_tools]]\nname = "{name}"\ndescription = "d"\ncollection = "orders"\n'
        'tenant_field = "userId"\nprojection = ["status"]\nfields = { status = "string" }\n'
    )
    with pytest.raises(ConfigError, match=f"clashes with the built-in tool '{name}'"):
        load_settings(cfg)
