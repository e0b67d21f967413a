"""The public Python API (docs/API.md): `from mongogate import ...` gives every name in
`__all__`, and `import mongogate` alone stays cheap (no mcp, no pymongo)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys

import pytest

import mongogate
import mongogate.specs
from tests.helpers import ROOT


@pytest.mark.parametrize("name", mongogate.__all__)
def test_every_public_name_resolves(name: str) -> None:
    value = getattr(mongogate, name)
    assert value is not None
    assert name in dir(mongogate)


def test_the_lazy_table_and_all_name_the_same_names() -> None:
    assert set(mongogate.__all__) == {*mongogate._LAZY, "__version__"}


def test_from_import_gives_the_real_objects() -> None:
    from mongogate import QueryToolSpec, Settings, ToolRegistry, build_server, load_settings
    from mongogate.config import Settings as RealSettings
    from mongogate.server.app import build_server as real_build_server

    assert Settings is RealSettings and build_server is real_build_server
    assert QueryToolSpec is mongogate.specs.QueryToolSpec
    assert callable(load_settings) and ToolRegistry.__name__ == "ToolRegistry"


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = mongogate.nope
    with pytest.raises(ImportError):
        exec("from mongogate import nope", {})


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"import sys\n{code}\nprint('\\n'.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {m.split(".")[0] for m in out.split()}


def test_import_mongogate_imports_neither_mcp_nor_pymongo() -> None:
    """Every command imports the package root first: it must not pay for the SDK or the driver."""
    loaded = _modules_after("import mongogate; mongogate.__version__")
    assert not loaded & {"mcp", "pymongo", "pydantic", "anyio"}, loaded


def test_a_name_loads_only_what_it_needs() -> None:
    loaded = _modules_after("from mongogate import Settings, StartupChecks")
    assert "pydantic" in loaded and "mcp" not in loaded


#: the package root, and the framework adapters (optional extras, public by docs/API.md)
PUBLIC_MODULES = {"mongogate", "mongogate.langgraph", "mongogate.openai_agents"}

EXAMPLES = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "examples").rglob("*.py"))


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_example_imports_only_the_package_root(example: str) -> None:
    """Examples are what users copy: they use the public API, never a private submodule."""
    tree = ast.parse((ROOT / example).read_text())
    imported = [
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    ]
    ours = [m for m in imported if m and m.split(".")[0] == "mongogate"]
    assert all(m in PUBLIC_MODULES for m in ours), ours
    if example in ("examples/embed.py", "examples/agents.py"):
        assert ours


def test_what_a_tick_is_handed_is_public() -> None:
    """A scheduled agent needs no private import: the types of every TickContext field, the
    errors its runs raise and a clock for tests all come from the package root."""
    import dataclasses
    import typing

    from mongogate import Agent, AgentRegistry, LeaseBusy, LeaseLost, ManualClock, MongogateError, TickContext

    hints = typing.get_type_hints(TickContext)
    public = {getattr(mongogate, n) for n in mongogate.__all__ if n != "__version__"}
    for f in dataclasses.fields(TickContext):
        hint = hints[f.name]
        if getattr(hint, "__module__", "").startswith("mongogate"):
            assert hint in public, f"TickContext.{f.name}: {hint} is not exported"
    assert issubclass(LeaseBusy, MongogateError) and issubclass(LeaseLost, MongogateError)

    async def tick(ctx: TickContext) -> None:
        return None

    registry = AgentRegistry([Agent("a", tick, 60)])
    assert registry.keys() == ["a"] and ManualClock().now().tzinfo is not None


def test_the_api_page_shows_the_example_as_it_is_and_every_public_name() -> None:
    """docs/API.md's complete example is examples/embed.py (which tests/test_examples.py runs)."""
    page = (ROOT / "docs" / "API.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.DOTALL)
    assert (ROOT / "examples" / "embed.py").read_text() in blocks
    shown = {n.strip() for n in blocks[0].split("(", 1)[1].split(")")[0].replace("\n", " ").split(",")}
    assert shown - {""} == set(mongogate.__all__) - {"__version__"}
    for name in mongogate.__all__:
        assert f"`{name}" in page, name
