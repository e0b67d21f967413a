"""`mongogate client-config CLIENT`: each printed stdio configuration, parsed as its client reads
it, starts a server the SDK's stdio client lists and calls; each HTTP output has the client's
shape, the URL and the token header. examples/mcp_servers.json is what the command prints."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from mongogate.cli.client_config import CLIENTS
from tests.conftest import Cli
from tests.helpers import ROOT

URL = "http://127.0.0.1:8000/mcp"


@pytest.fixture
def config(tmp_path: Path, engine_uri: str, db_name: str) -> Path:
    """A user's config: the database (the session engine here) and a relative data directory."""
    path = tmp_path / "conf" / "mongogate.toml"
    path.parent.mkdir()
    path.write_text(f'[database]\nuri = "{engine_uri}"\nname = "{db_name}"\n[server]\ndata_dir = "data"\n')
    return path


def launch_of(client: str, out: str) -> tuple[str, list[str], dict[str, str]]:
    """The command, arguments and environment, read from the output as the client reads it."""
    if client in ("claude-desktop", "cursor", "vscode"):
        data = json.loads(out)
        [(name, entry)] = data["servers" if client == "vscode" else "mcpServers"].items()
        assert name == "mongogate" and set(data) == {"servers" if client == "vscode" else "mcpServers"}
        if client == "vscode":
            assert entry.pop("type") == "stdio"
        return entry["command"], entry["args"], entry["env"]
    words = shlex.split(out)
    prefix = (
        ["claude", "mcp", "add"] if client == "claude-code" else ["npx", "@modelcontextprotocol/inspector"]
    )
    assert words[: len(prefix)] == prefix, out
    cut = words.index("--")
    options, (command, *args) = words[len(prefix) : cut], words[cut + 1 :]
    flag = "--env" if client == "claude-code" else "-e"
    env = dict(options[i + 1].split("=", 1) for i, w in enumerate(options) if w == flag)
    if client == "claude-code":
        assert options[:2] == ["--transport", "stdio"] and options[-1] == "mongogate"
    return command, args, env


@pytest.mark.anyio
@pytest.mark.parametrize("client", CLIENTS)
async def test_each_printed_stdio_config_starts_a_server_the_sdk_lists_and_calls(
    client: str, cli: Cli, config: Path, tmp_path: Path
) -> None:
    r = cli(["client-config", client, "--config", str(config), "--tenant", "acme", "--demo"])
    assert r.returncode == 0, r.stderr
    command, args, env = launch_of(client, r.stdout)
    assert Path(command).is_absolute() and Path(command).name == "mongogate"
    assert args[:3] == ["serve", "--config", str(config)] and args[3:] == ["--demo"]
    assert env["MONGOGATE_SERVER__DATA_DIR"] == str(config.parent / "data")
    assert env["MONGOGATE_AUTH__TENANT"] == "acme"
    assert "lives" in r.stderr or "paste" in r.stderr or "run it" in r.stderr
    # the client starts it from elsewhere, with only what it was told (the SDK passes HOME, PATH...)
    params = StdioServerParameters(command=command, args=args, env=env, cwd=str(tmp_path))
    async with Client(params) as c:
        names = {t.name for t in (await c.list_tools()).tools}
        assert {"create_session", "find_orders"} <= names
        made = await c.call_tool("create_session", {"title": client})
        assert not made.is_error, made.content
        found = await c.call_tool("find_orders", {"filter": {"status": "paid"}, "limit": 3})
        assert not found.is_error, found.content
        docs = (found.structured_content or {})["documents"]
        assert docs and all(d["number"].startswith("AC-") for d in docs)  # tenant acme


@pytest.mark.parametrize("client", CLIENTS)
def test_each_http_output_names_the_url_and_the_token_header(client: str, cli: Cli) -> None:
    r = cli(["client-config", client, "--http", URL])
    assert r.returncode == 0, r.stderr
    out = r.stdout
    if client in ("cursor", "vscode"):
        data: dict[str, Any] = json.loads(out)
        entry = data["servers" if client == "vscode" else "mcpServers"]["mongogate"]
        assert entry["url"] == URL and entry["headers"] == {"Authorization": "Bearer ${env:MONGOGATE_TOKEN}"}
        assert entry.get("type", "http") == "http"
    elif client == "claude-desktop":
        entry = json.loads(out)["mcpServers"]["mongogate"]
        assert entry["command"] == "npx" and entry["args"][:3] == ["-y", "mcp-remote", URL]
        assert entry["env"]["AUTH_HEADER"].startswith("Bearer ")
    else:
        words = shlex.split(out)
        assert URL in words and words[words.index("--transport") + 1] == "http"
        assert words[words.index("--header") + 1] == "Authorization: Bearer $MONGOGATE_TOKEN"
    assert "MONGOGATE_TOKEN" in r.stderr  # how to get the token
    with_token = cli(["client-config", client, "--http", URL, "--token", "tok123"])
    assert "Bearer tok123" in with_token.stdout


def test_a_stdio_config_needs_a_tenant(cli: Cli, config: Path) -> None:
    r = cli(["client-config", "cursor", "--config", str(config)])
    assert r.returncode == 2 and "--tenant" in r.stderr


def test_the_example_file_is_what_the_command_prints(cli: Cli) -> None:
    """examples/mcp_servers.json: `mongogate client-config claude-desktop --config
    examples/mongogate.toml --tenant acme --demo`, with this checkout's path as /path/to/mongogate."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONGOGATE_")}
    argv = [
        "client-config",
        "claude-desktop",
        "--config",
        "examples/mongogate.toml",
        "--tenant",
        "acme",
        "--demo",
    ]
    r = cli(argv, env)
    assert r.returncode == 0, r.stderr
    out = r.stdout.replace(str(Path(sys.executable).parent), "/path/to/mongogate/.venv/bin")
    printed = json.loads(out.replace(str(ROOT), "/path/to/mongogate"))
    assert json.loads((ROOT / "examples" / "mcp_servers.json").read_text()) == printed
