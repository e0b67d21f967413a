"""Command-line and input edges (issue 28): options before or after a subcommand's action, the
embedded engine's no-roles warning said once at most, field names with control or bidirectional
characters, booleans that are never integers, and `try --args` too deep to read."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from mongogate.cli import build_parser
from mongogate.cli.spec import suggest
from mongogate.errors import ConfigError
from mongogate.server.app import build_server
from mongogate.specs import QueryToolSpec
from tests.conftest import Cli, make_settings

NO_ROLES = "enforces no roles"
BAD_NAMES = ["line\nbreak", "esc\x1b[31m", "bidi\u202eevil", "zero\u200bwidth"]


@pytest.mark.parametrize(
    "argv",
    [
        ["schedule", "--config", "F", "list"],
        ["schedule", "list", "--config", "F"],
        ["schedule", "--config", "F", "remove", "agent", "--force"],
        ["check", "--config", "F", "-v"],
    ],
)
def test_config_and_verbose_before_or_after_the_action(argv: list[str]) -> None:
    args = build_parser(argv).parse_args(argv)
    assert args.config == "F"
    assert args.verbose is ("-v" in argv)


def test_the_no_roles_warning_is_said_once_at_most(cli: Cli, data: Path) -> None:
    """`check` reports it in its own words (not a second time as a log line); `schedule list`
    reads no query tool's data: it has nothing new to say there."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONGOGATE_")}
    env["MONGOGATE_SERVER__DATA_DIR"] = str(data)
    checked = cli(["check", "--config", "examples/mongogate.toml"], env)
    assert checked.returncode == 0, checked.stderr
    assert (checked.stdout + checked.stderr).count(NO_ROLES) == 1, checked.stderr
    listed = cli(["schedule", "list", "--config", "examples/mongogate.toml"], env)
    assert listed.returncode == 0, listed.stderr
    assert NO_ROLES not in listed.stdout + listed.stderr


def _spec(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "t",
        "description": "d",
        "collection": "c",
        "tenant_field": "tenant",
        "projection": ["ok"],
        "fields": {"ok": "string"},
    }
    return base | changes


@pytest.mark.parametrize("name", BAD_NAMES)
def test_the_spec_loader_refuses_hidden_characters_in_field_names(name: str) -> None:
    for spec in (
        _spec(fields={"ok": "string", name: "string"}),
        _spec(projection=["ok", name], fields={"ok": "string", name: "string"}),
        _spec(tenant_field=name),
    ):
        with pytest.raises(ConfigError, match="control or bidirectional characters"):
            QueryToolSpec(**spec)


def test_spec_suggest_leaves_hidden_names_out_and_lists_them() -> None:
    docs = [{"tenant": "a", "ok": "x", **dict.fromkeys(BAD_NAMES, "v")} for _ in range(3)]
    block, spec = suggest("c", "tenant", docs, 3)
    assert list(spec.fields) == ["ok"]
    [comment] = [line for line in block.splitlines() if "control or bidirectional" in line]
    for escaped in ("\\u000a", "\\u001b", "\\u202e", "\\u200b"):
        assert escaped in comment
    assert block.isascii() or all(c.isprintable() for c in block.replace("\n", ""))


def test_tools_escapes_what_it_prints(cli: Cli, tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '[auth]\nmode = "none"\ntenant = "acme"\n[[query_tools]]\nname = "t"\n'
        'description = "orders \\u001b[2J\\u202e of the caller"\ncollection = "c"\n'
        'tenant_field = "tenant"\nprojection = ["a"]\nfields = { a = "string" }\n'
    )
    r = cli(["tools", "--config", str(cfg)])
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout and "\u202e" not in r.stdout
    assert "orders \\u001b[2J\\u202e of the caller" in r.stdout


def test_try_args_too_deep_is_one_line(cli: Cli) -> None:
    deep = "[" * 50_000 + "]" * 50_000
    r = cli(["try", "find_orders", "--demo", "--tenant", "acme", "--args", deep])
    assert r.returncode != 0
    assert r.stderr.strip().splitlines() == [
        "mongogate: --args is nested too deeply to read; a tool call may nest at most 32 levels "
        "(limits.max_argument_depth)"
    ]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def demo_client(
    engine_uri: str, module_db: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Client]:
    from mongogate.cli.common import registry_for

    settings = make_settings(engine_uri, module_db, tmp_path_factory.mktemp("bools"))
    async with Client(build_server(settings, registry_for(settings, demo=True))) as c:
        yield c


def _numeric(prop: dict[str, Any]) -> bool:
    kinds = {prop.get("type")} | {b.get("type") for b in prop.get("anyOf") or []}
    kinds -= {None, "null"}
    return bool(kinds) and kinds <= {"integer", "number"}


@pytest.mark.anyio
async def test_a_json_boolean_is_never_an_integer_for_any_tool(demo_client: Client) -> None:
    """Every tool, every argument that takes only numbers: `true` is refused, naming it."""
    tried = []
    for tool in (await demo_client.list_tools()).tools:
        for name, prop in (tool.input_schema.get("properties") or {}).items():
            if not _numeric(prop):
                continue
            for value in (True, False):
                result = await demo_client.call_tool(tool.name, {name: value})
                text = result.content[0].text if result.content else ""  # type: ignore[union-attr]
                assert result.is_error, f"{tool.name}({name}={value}) was accepted"
                # query tools answer in their policy's own, audited words ([limit_invalid])
                named = text.startswith("[invalid_input]") and repr(name) in text
                assert named or text.startswith(f"[{name}_invalid]"), (tool.name, text)
                tried.append(f"{tool.name}.{name}")
    assert {"load_context.limit", "recall.limit", "remember.ttl_days"} <= set(tried), tried
